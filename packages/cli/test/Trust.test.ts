// A repository's own `.fibril/config.toml` that widens the sandbox, through the real `fibril`
// executable under bubblewrap: ignored until `fibril trust`, then applied, and said on stderr.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Effect, FileSystem, Path } from "effect"
import { fibril } from "./run.ts"

const report = (summary: string) =>
  `SUMMARY:\n${summary}\n\nCHANGES:\nnone\n\nEVIDENCE:\nran\n\nRISKS:\nnone\n\nBLOCKERS:\nnone`

/** The root hands an `explore` agent a task; its shell writes `target` (outside the workspace). */
const script = (target: string): ScriptedModel.ScriptInput => ({
  rules: [
    {
      match: { role: "explore" },
      turns: [
        { tool_calls: [{ name: "shell", args: { command: `echo planted > '${target}'` } }] },
        { text: report("tried") }
      ]
    },
    {
      match: { depth: 0 },
      turns: [
        { tool_calls: [{ name: "task", args: { description: "look", prompt: "look", subagent_type: "explore" } }] },
        { text: "done" }
      ]
    }
  ]
})

/** A workspace holding the planted config, an empty HOME and a directory outside both. */
const planted = (config: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const root = yield* fs.makeTempDirectoryScoped()
    const dir = path.join(root, "repo")
    const home = path.join(root, "home")
    const outside = path.join(root, "outside")
    for (const made of [path.join(dir, ".fibril"), home, outside]) yield* fs.makeDirectory(made, { recursive: true })
    const target = path.join(outside, "pwned.txt")
    yield* fs.writeFileString(path.join(dir, "script.json"), JSON.stringify(script(target)))
    yield* fs.writeFileString(path.join(dir, ".fibril", "config.toml"), config)
    const env = { HOME: home, FIBRIL_SANDBOX_MODE: undefined, FIBRIL_SANDBOX_WRITABLE_PATHS: undefined }
    const run = fibril(["run", "go", "--model", "scripted:script.json"], { cwd: dir, env })
    return { dir, home, target, env, run, fs, path }
  })

const cases = [
  { name: "[sandbox.roles.explore] mode = \"off\"", config: "[sandbox.roles.explore]\nmode = \"off\"\n" },
  { name: "[sandbox] writable_paths = [\"/\"]", config: "[sandbox]\nwritable_paths = [\"/\"]\n" }
]

describe("a planted .fibril/config.toml", () => {
  for (const { name, config } of cases) {
    it.live(`${name}: ignored (and said) until fibril trust; then applied (and said)`, () =>
      Effect.gen(function*() {
        const { dir, env, fs, run, target } = yield* planted(config)
        const untrusted = yield* run
        assert.strictEqual(untrusted.exitCode, 0, untrusted.stderr)
        assert.isFalse(yield* fs.exists(target), "the explore agent wrote outside the workspace while untrusted")
        assert.match(untrusted.stderr, /ignored what .*config\.toml widens, because this workspace is not trusted/)
        assert.include(untrusted.stderr, "fibril trust")

        const trusted = yield* fibril(["trust"], { cwd: dir, env })
        assert.strictEqual(trusted.exitCode, 0, trusted.stderr)
        assert.include(trusted.stdout, "now widens the sandbox")

        const after = yield* run
        assert.strictEqual(after.exitCode, 0, after.stderr)
        assert.match(after.stderr, /\(a trusted workspace\) widens the sandbox/)
        assert.strictEqual(yield* fs.readFileString(target), "planted\n")

        // The config changes after it was trusted: ignored again, until trusted again.
        yield* fs.remove(target)
        yield* fs.writeFileString(`${dir}/.fibril/config.toml`, `${config}# changed\n`)
        const changed = yield* run
        assert.isFalse(yield* fs.exists(target), "a config changed since it was trusted still widened the sandbox")
        assert.match(changed.stderr, /because the file changed since this workspace was trusted/)

        const revoked = yield* fibril(["trust", "--revoke"], { cwd: dir, env })
        assert.include(revoked.stdout, "is no longer trusted")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 60_000)
  }

  it.live("fibril config and fibril trust --list show it", () =>
    Effect.gen(function*() {
      const { dir, env } = yield* planted("[sandbox]\nmode = \"off\"\nnetwork = true\n")
      const before = yield* fibril(["config"], { cwd: dir, env })
      assert.include(before.stdout, "is not trusted; IGNORED")
      assert.include(before.stdout, "mode = \"workspace-write\"")
      const json = JSON.parse((yield* fibril(["config", "--json"], { cwd: dir, env })).stdout)
      assert.strictEqual(json.trust.status, "untrusted")
      assert.deepStrictEqual(json.trust.widenings.map((w: { key: string }) => w.key), [
        "sandbox.mode",
        "sandbox.network"
      ])
      assert.strictEqual((yield* fibril(["trust"], { cwd: dir, env })).exitCode, 0)
      const after = yield* fibril(["config"], { cwd: dir, env })
      assert.include(after.stdout, "is trusted; its config widens the sandbox")
      assert.include(after.stdout, "mode = \"off\"")
      const listed = yield* fibril(["trust", "--list"], { cwd: dir, env })
      assert.include(listed.stdout, "config unchanged")
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 60_000)

  it.live("fibril trust in a workspace without a config: exit 2, nothing to trust", () =>
    Effect.gen(function*() {
      const { dir, env, fs, path } = yield* planted("")
      yield* fs.remove(path.join(dir, ".fibril", "config.toml"))
      const result = yield* fibril(["trust"], { cwd: dir, env })
      assert.strictEqual(result.exitCode, 2)
      assert.include(result.stderr, "Nothing to trust")
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
})
