// `fibril config` says which shell sandbox is active and what each role's shell can do,
// including the unconfined fallback where no sandbox works.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import * as Trust from "@fibril/core/Trust"
import { Effect, FileSystem, Path } from "effect"
import { readFileSync } from "node:fs"
import { fibril, repoRoot } from "./run.ts"

/** A workspace holding `toml`, trusted (its sandbox settings apply) under a HOME of its own. */
const configIn = (toml: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const dir = yield* fs.makeTempDirectoryScoped()
    const home = yield* fs.makeTempDirectoryScoped()
    yield* fs.makeDirectory(path.join(dir, ".fibril"))
    yield* fs.writeFileString(path.join(dir, ".fibril", "config.toml"), toml)
    yield* Trust.trust({ workspace: dir, home, now: new Date(0) })
    return { cwd: dir, env: { HOME: home } }
  })

describe("fibril config: the shell sandbox", () => {
  it.live("no sandbox: read-only roles get no shell, writers run unconfined, and it says so", () =>
    Effect.gen(function*() {
      const dir = yield* configIn(
        `[sandbox]\nbwrap_path = "/nonexistent/bwrap"\nwritable_paths = ["cache"]\n\n[sandbox.roles.verifier]\nmode = "off"\n` +
          `\n[roles.Explore]\nmcp_servers = ["github"]\n`
      )
      const { exitCode, stdout, stderr } = yield* fibril(["config"], dir)
      assert.strictEqual(exitCode, 0, stderr)
      assert.include(stdout, "# shell sandbox: NONE available (/nonexistent/bwrap could not be started: not found)")
      assert.include(stdout, "roles that may write run shell commands UNCONFINED")
      assert.include(stdout, "#   explore: no shell (no sandbox available)")
      assert.include(stdout, "#   implementer: unconfined (no sandbox available)")
      assert.include(stdout, "#   verifier: unconfined (sandbox mode off)")
      assert.include(stdout, "#   review: no shell (role)")
      const file = `${dir.cwd}/.fibril/config.toml`
      assert.include(
        stdout,
        `[sandbox]\nmode = "workspace-write"\nnetwork = false\nwritable_paths = ["cache"]   # from ${file}, line 3`
      )
      assert.include(stdout, `[sandbox.roles.verifier]\nmode = "off"`)
      // A role's MCP servers (McpNarrowing), under its name in lower case.
      assert.include(stdout, `[roles.explore]\nmcp_servers = ["github"]`)

      const json = yield* fibril(["config", "--json"], dir)
      const parsed = JSON.parse(json.stdout) as Record<string, any>
      assert.isFalse(parsed["sandbox_status"].available)
      assert.strictEqual(parsed["sandbox_roles"].explore, "no shell (no sandbox available)")
      assert.strictEqual(parsed["settings"].sandbox.bwrap_path, "/nonexistent/bwrap")
      assert.deepStrictEqual(parsed["settings"].roles, { explore: { mcp_servers: ["github"] } })
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live.skipIf(process.platform !== "linux")("with bubblewrap: each role's mode", () =>
    Effect.gen(function*() {
      const dir = yield* configIn(`[sandbox.roles.explore]\nnetwork = true\n`)
      const { exitCode, stdout, stderr } = yield* fibril(["config"], dir)
      assert.strictEqual(exitCode, 0, stderr)
      assert.include(stdout, "# shell sandbox: bubblewrap (bwrap)")
      assert.include(stdout, "#   explore: read-only, network")
      assert.include(stdout, "#   verifier: read-only, no network")
      assert.include(stdout, "#   plan: read-only, no network, also writable: .fibril/plans")
      assert.include(stdout, "#   implementer: workspace-write, no network")
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("a mode that is not one of the three is refused, naming the key and the accepted values", () =>
    Effect.gen(function*() {
      const bad = yield* fibril(["config"], yield* configIn(`[sandbox.roles.explore]\nmode = "ro"\n`))
      assert.notStrictEqual(bad.exitCode, 0)
      assert.include(bad.stderr, "sandbox.roles")
      assert.include(bad.stderr, `"read-only" | "workspace-write" | "off"`)
    }).pipe(Effect.provide(NodeServices.layer)))
})

describe("fibril config: the seed's configuration", () => {
  const seed = (name: string) => readFileSync(`${repoRoot}/packages/core/test/fixtures/seed/${name}`, "utf8")

  it.live("the seed's [subagents] blocks load as written; each value says where it came from", () =>
    Effect.gen(function*() {
      // The seed's per-role models block, then its timeout block's key under the same table.
      const timeout = seed("api-timeout.toml").split("\n")[1]!
      const models = seed("models.toml").split("\n")
      const dir = (yield* configIn([...models.slice(0, 7), timeout, ...models.slice(7)].join("\n"))).cwd
      const file = `${dir}/.fibril/config.toml`
      const { exitCode, stdout, stderr } = yield* fibril(["config"], { cwd: dir, env: { HOME: dir } })
      assert.strictEqual(exitCode, 0, stderr)
      assert.notInclude(stderr, "unknown")
      for (
        const line of [
          `api_timeout_secs = 900   # from subagents.api_timeout_secs in ${file}, line 8 (alias of agent.api_timeout_secs)`,
          `heartbeat_timeout_secs = 930   # clamped: 300 given, 930 used`,
          `default_model = "deepseek-v4-flash"   # from ${file}, line 2`,
          `worker_model = "deepseek-v4-pro"   # from ${file}, line 3`,
          `explorer_model = "deepseek-v4-flash"   # from ${file}, line 4`,
          `awaiter_model = "deepseek-v4-flash"   # from ${file}, line 5`,
          `review_model = "deepseek-v4-pro"   # from ${file}, line 6`,
          `custom_model = "deepseek-v4-pro"   # from ${file}, line 7`,
          `implementation = "deepseek-v4-pro"   # from ${file}, line 12`,
          // A default says nothing.
          "max_concurrent = 10\n"
        ]
      ) assert.include(stdout, line)
      const json = yield* fibril(["config", "--json"], { cwd: dir, env: { HOME: dir } })
      const origins = (JSON.parse(json.stdout) as { origins: Record<string, string> }).origins
      assert.strictEqual(
        origins["agent.api_timeout_secs"],
        `subagents.api_timeout_secs in ${file}, line 8 (alias of agent.api_timeout_secs)`
      )
      assert.strictEqual(origins["subagents.models.implementation"], `${file}, line 12`)
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
})
