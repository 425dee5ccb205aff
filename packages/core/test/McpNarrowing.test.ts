// The MCP servers an agent may use (McpNarrowing): a meet down the tree. Property: whatever the
// configuration denies and whatever each level asks for, an agent's servers are within its
// parent's (and exactly what it asked for, when it was not refused), its rules judge every MCP
// tool at most as its parent's do, and its stored rules (what a process child is started with)
// keep the same servers.
import { assert, describe, it } from "@effect/vitest"
import { Exit, Schema } from "effect"
import * as McpNarrowing from "../src/McpNarrowing.ts"
import * as Permission from "../src/Permission.ts"
import * as Roles from "../src/Roles.ts"

const serverNames = ["alpha", "beta", "gamma", "delta"] as const
const Server = Schema.Literals(serverNames)
// A name no server has here: a request may carry a typo.
const Requested = Schema.Literals([...serverNames, "typo"])

const Level = Schema.Struct({
  role: Roles.RoleName,
  /** Absent: its parent's servers. */
  mcpServers: Schema.optionalKey(Schema.Array(Requested)),
  allowedTools: Schema.optionalKey(Schema.Array(Schema.Literals(["read_file", "mcp__alpha__echo", "mcp__beta__echo"])))
})
const Tree = Schema.Struct({
  universe: Schema.Array(Server),
  configDeny: Schema.Array(Server),
  levels: Schema.Array(Level).check(Schema.isMinLength(1), Schema.isMaxLength(5))
})

const subset = (inner: ReadonlyArray<string>, outer: ReadonlyArray<string>) =>
  inner.every((name) => outer.includes(name))

describe("McpNarrowing", () => {
  it.prop(
    "a child's servers are within its parent's, at every depth; a refused request named one outside them",
    [Tree],
    ([tree]) => {
      const universe = [...new Set(tree.universe)]
      const tools = universe.flatMap((server) => [
        [`mcp__${server}__echo`, "read"] as const,
        [`mcp__${server}__write`, "write"] as const
      ])
      let parent = Permission.derive(Permission.allowAll, { deny: tree.configDeny.map((server) => `mcp__${server}`) })
      tree.levels.forEach((level, depth) => {
        const before = McpNarrowing.usable(parent, universe)
        const granted = McpNarrowing.grant(level.role, parent, universe, level.mcpServers)
        if (Exit.isFailure(granted)) {
          const refused = level.mcpServers ?? []
          assert.isTrue(refused.some((name) => !before.includes(name)), "refused a request within the parent's servers")
          return
        }
        const child = Permission.effective(
          parent,
          Permission.grantFor(depth, 5, Roles.roles[level.role], {
            allowedTools: level.allowedTools,
            servers: granted.value
          })
        )
        const after = McpNarrowing.usable(child, universe)
        assert.isTrue(subset(after, before), `depth ${depth}: ${after} not within its parent's ${before}`)
        if (level.mcpServers !== undefined) assert.isTrue(subset(after, level.mcpServers), "beyond what it asked")
        // Only the ceilings narrow: with every tool allowed, it gets exactly what it asked for.
        if (level.allowedTools === undefined) {
          assert.deepStrictEqual(
            after,
            level.mcpServers === undefined
              ? before
              : before.filter((server) => (level.mcpServers as ReadonlyArray<string>).includes(server))
          )
        }
        assert.isTrue(Permission.narrows(parent, child, { tools, paths: [""] }), `depth ${depth} widened a tool`)
        // As stored (a process child's Start, a record a resume rebuilds from): the same servers.
        const stored = Permission.derive(Permission.allowAll, Permission.ceilingFromJson(Permission.toJson(child)))
        assert.deepStrictEqual(McpNarrowing.usable(stored, universe), after)
        parent = child
      })
    },
    { arbitrary: { runs: 300 } }
  )

  it("the refusal names what was refused, why, and what may be given", () => {
    const parent = Permission.derive(Permission.allowAll, { deny: ["mcp__beta"] })
    const refused = McpNarrowing.grant("explore", parent, ["alpha", "beta"], ["beta", "gamma"])
    assert.isTrue(Exit.isFailure(refused))
    if (Exit.isFailure(refused)) {
      const error = refused.cause.reasons[0]
      assert.strictEqual(error?._tag, "Fail")
      const message = error?._tag === "Fail" ? (error.error as McpNarrowing.McpServersRefused).message : ""
      assert.include(message, `its parent may not use "beta"`)
      assert.include(message, `"gamma" is not configured here (configured: alpha, beta)`)
      assert.include(message, "It may be given alpha")
    }
  })
})
