// `.fibril/config.toml` mistakes through the real `fibril` executable: what the user reads.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Path } from "effect"
import { fibril } from "./run.ts"

/** A temp workspace whose `.fibril/config.toml` holds `toml`; returns the workspace and the file. */
const configured = (toml: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const dir = yield* fs.makeTempDirectoryScoped()
    yield* fs.makeDirectory(path.join(dir, ".fibril"))
    const file = path.join(dir, ".fibril", "config.toml")
    yield* fs.writeFileString(file, toml)
    return { dir, file }
  })

describe("fibril and a wrong .fibril/config.toml", () => {
  it.live("an unknown table is an error naming the file, the line and the table meant; --no-strict only warns", () =>
    Effect.gen(function*() {
      const { dir, file } = yield* configured(`[agent]\nmax_steps = 5\n\n[permisions]\ndeny = ["shell"]\n`)
      const strict = yield* fibril(["config"], { cwd: dir })
      assert.strictEqual(strict.exitCode, 2)
      assert.include(strict.stderr, `${file}, line 4: unknown table [permisions]; did you mean [permissions]?`)
      assert.include(strict.stderr, "--no-strict")
      const lax = yield* fibril(["config", "--no-strict"], { cwd: dir })
      assert.strictEqual(lax.exitCode, 0, lax.stderr)
      assert.include(lax.stderr, "unknown table [permisions]; did you mean [permissions]?")
      assert.include(lax.stdout, "max_steps = 5")
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("a wrong type names the file, line and key; a denial of a Claude Code tool name suggests Fibril's", () =>
    Effect.gen(function*() {
      const typed = yield* configured(`[subagents]\n# cap\nmax_concurrent = "many"\n`)
      const bad = yield* fibril(["config"], { cwd: typed.dir })
      assert.strictEqual(bad.exitCode, 2)
      assert.include(bad.stderr, `Invalid config value for subagents.max_concurrent (${typed.file}, line 3)`)
      assert.notInclude(bad.stderr, "FIBRIL_SUBAGENTS_MAX_CONCURRENT")
      const denied = yield* configured(`[permissions]\ndeny = ["Bash"]\n`)
      const run = yield* fibril(["run", "go", "--model", "scripted:none.json", "--no-strict"], { cwd: denied.dir })
      assert.strictEqual(run.exitCode, 2)
      assert.include(
        run.stderr,
        `permissions.deny (${denied.file}, line 2) names an unknown tool: "Bash" (did you mean "shell"?)`
      )
      assert.include(run.stderr, "Known tools: read_file")
    }).pipe(Effect.provide(NodeServices.layer)))
})
