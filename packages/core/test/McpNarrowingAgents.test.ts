// The MCP servers an agent may use, from its sources (McpNarrowing): a Claude Code agent file's
// `mcpServers` naming one configured server of two (two real @modelcontextprotocol/server-everything
// processes over stdio), and a role's `[roles.<name>] mcp_servers` read from a real config file.
import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Effect, Schema } from "effect"
import type * as Prompt from "effect/ai/Prompt"
import * as FibrilConfig from "../src/FibrilConfig.ts"
import type * as McpServers from "../src/McpServers.ts"
import * as Permission from "../src/Permission.ts"
import { Session } from "../src/Session.ts"
import * as SubAgentManager from "../src/SubAgentManager.ts"
import * as ToolRegistry from "../src/ToolRegistry.ts"
import { everything, running } from "./everything.ts"
import { provideNode, report, setup } from "./support.ts"

const serverNamed = (name: string): McpServers.StdioServer =>
  everything(name, { marker: `fibril-mcp-narrow-${name}-${process.pid}` })

const toolResults = (messages: ReadonlyArray<Prompt.Message>) =>
  messages.flatMap((message) =>
    message.role === "tool" ? message.content.filter((part) => part.type === "tool-result") : []
  )

const call = (name: string) => ({ name, args: { message: "agent file" } })

/** A child that notes the MCP tools it is offered, then calls those tools by name. */
const calling = (
  offered: Array<string>,
  [first, ...rest]: readonly [string, ...Array<string>]
): ScriptedModel.ScriptInput => ({
  rules: [{
    respond: (conversation) => {
      if (conversation.turn === 0) offered.push(...conversation.tools.filter((name) => name.startsWith("mcp__")))
      return conversation.turn === 0
        ? { tool_calls: [call(first), ...rest.map(call)] }
        : { text: report("called") }
    }
  }]
})

/** The agent `request` asks for, run by the manager for a caller outside any agent (a Toolkit, `fibril mcp`). */
const runChild = (
  get: Effect.Success<ReturnType<typeof setup>>["get"],
  request: SubAgentManager.SpawnRequest
) =>
  Effect.gen(function*() {
    const agent = yield* get(SubAgentManager.SubAgentManager).run(undefined, request)
    return toolResults(yield* get(Session).transcript(agent.agent_id)).map((part) => ({
      name: part.name,
      failed: part.isFailure,
      text: JSON.stringify(part.result)
    }))
  })

describe("MCP servers per agent", () => {
  it.live(
    "a Claude Code agent file whose mcpServers names one configured server of two sees only its tools; the other never starts",
    () =>
      Effect.gen(function*() {
        const configured = serverNamed("everything")
        const other = serverNamed("other")
        const offered: Array<string> = []
        const seen = yield* Effect.scoped(Effect.gen(function*() {
          const { fs, path, root } = yield* setup({ rules: [] })
          yield* fs.makeDirectory(path.join(root, ".claude", "agents"), { recursive: true })
          // As Claude Code writes it: the server named, configured elsewhere (here: the runtime's).
          yield* fs.writeFileString(
            path.join(root, ".claude", "agents", "echoer.md"),
            "---\nname: echoer\ndescription: Echoes through one server\nmcpServers:\n  - everything\n---\nEcho.\n"
          )
          const { get } = yield* setup(calling(offered, ["mcp__other__echo", "mcp__everything__echo"]), {}, {
            root,
            mcpServers: [configured, other]
          })
          const results = yield* runChild(get, { prompt: "echo", role: "echoer" })
          return { results, everything: running(configured), other: running(other) }
        }))
        assert.isTrue(offered.includes("mcp__everything__echo"), offered.join(", "))
        assert.deepStrictEqual(offered.filter((name) => name.startsWith("mcp__other__")), [])
        const [denied, echoed] = seen.results
        assert.isTrue(denied!.failed, denied!.text)
        assert.include(denied!.text, "is denied for the echoer sub-agent", denied!.text)
        assert.isFalse(echoed!.failed, echoed!.text)
        assert.include(echoed!.text, "Echo: agent file")
        // Only the agent's own server ran: a server it may not use is never started for it.
        assert.lengthOf(seen.everything, 1)
        assert.deepStrictEqual(seen.other, [])
      }).pipe(provideNode),
    30_000
  )

  it.effect("[roles.<name>] mcp_servers in the config file narrows that role's agents", () =>
    Effect.gen(function*() {
      const offered: Array<string> = []
      const { fs, path, root } = yield* setup({ rules: [] })
      yield* fs.makeDirectory(path.join(root, ".fibril"))
      yield* fs.writeFileString(
        path.join(root, ".fibril", "config.toml"),
        `[roles.Explore]\nmcp_servers = ["alpha"]\n`
      )
      const resolved = yield* FibrilConfig.load({ cwd: root, home: path.join(root, "no-home"), env: {} })
      assert.deepStrictEqual(resolved.settings.roles, { explore: { mcpServers: ["alpha"] } })
      // One role's list from the environment, comma-separated, over the file's.
      const fromEnv = yield* FibrilConfig.load({
        cwd: root,
        home: path.join(root, "no-home"),
        env: { FIBRIL_ROLES_EXPLORE_MCP_SERVERS: "alpha, beta" }
      })
      assert.deepStrictEqual(fromEnv.settings.roles["explore"], { mcpServers: ["alpha", "beta"] })
      const { get } = yield* setup(calling(offered, ["mcp__beta__echo"]), {}, {
        root,
        subagents: SubAgentManager.optionsFrom(resolved.settings)
      })
      // Tools named as a server's are that server's for the rules.
      for (const server of ["alpha", "beta"]) {
        yield* get(ToolRegistry.ToolRegistry).register(ToolRegistry.define({
          name: `mcp__${server}__echo`,
          description: `echo on ${server}`,
          parameters: Schema.Struct({ message: Schema.String }),
          posture: "read",
          handler: ({ message }) => Effect.succeed(`${server}: ${message}`)
        }))
      }
      const results = yield* runChild(get, { prompt: "look", role: "explore" })
      assert.deepStrictEqual(offered, ["mcp__alpha__echo"])
      assert.isTrue(results[0]!.failed, results[0]!.text)
      // Another role is not narrowed by it.
      offered.length = 0
      const general = yield* get(SubAgentManager.SubAgentManager).run(undefined, { prompt: "look", role: "general" })
      assert.deepStrictEqual(offered, ["mcp__alpha__echo", "mcp__beta__echo"])
      // Reassigned to the role, an agent is narrowed to the role's servers (agent_assign).
      yield* get(SubAgentManager.SubAgentManager).assign(general.agent_id, { role: "explore" })
      const rules = (yield* get(Session).info(general.agent_id)).rules
      assert.isTrue(Permission.allowsTool(rules, "mcp__alpha__echo", "read"))
      assert.isFalse(Permission.allowsTool(rules, "mcp__beta__echo", "read"))
      // A role's server that is not configured here is refused at spawn, naming those there are.
      const refused = yield* runChild(get, { prompt: "look", role: "explore", mcpServers: ["gamma"] }).pipe(Effect.flip)
      assert.strictEqual(refused._tag, "McpServersRefused")
      assert.include(refused.message, `"gamma" is not configured here (configured: alpha, beta)`)
    }).pipe(provideNode))
})
