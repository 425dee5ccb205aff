// The CLI's messages point at docs/script-format.md; an installed `fibril` has no repository
// beside it, so the package carries the page (dist/docs/, copied by the build) and the
// message names that copy.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { existsSync, readFileSync } from "node:fs"
import { repoRoot } from "./run.ts"

const run = (command: string, args: ReadonlyArray<string>, env: Record<string, string | undefined> = {}) =>
  Effect.gen(function*() {
    const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
    const handle = yield* spawner.spawn(
      ChildProcess.make(command, [...args], { cwd: repoRoot, env, extendEnv: true })
    )
    const text = (stream: Stream.Stream<Uint8Array, unknown>) => stream.pipe(Stream.decodeText(), Stream.mkString)
    const [stdout, stderr, exitCode] = yield* Effect.all([text(handle.stdout), text(handle.stderr), handle.exitCode], {
      concurrency: "unbounded"
    })
    return { stdout, stderr, exitCode: Number(exitCode) }
  }).pipe(Effect.scoped)

describe("docs/script-format.md in the installed CLI", () => {
  it.live("the package ships it, and the built CLI's message names that file", () =>
    Effect.gen(function*() {
      const page = readFileSync(`${repoRoot}/docs/script-format.md`, "utf8")
      // What `npm pack` would put in @fibril/cli's tarball (its prepack builds; up to date, skipped).
      const packed = yield* run("npm", ["pack", "--dry-run", "--json", "-w", "packages/cli"])
      assert.strictEqual(packed.exitCode, 0, packed.stderr)
      const files = (JSON.parse(packed.stdout) as Array<{ files: Array<{ path: string }> }>)[0]!.files
      assert.include(files.map((file) => file.path), "dist/docs/script-format.md")
      // The built CLI, as installed (no @fibril/source condition), with no key.
      const { exitCode, stderr } = yield* run(
        process.execPath,
        [`${repoRoot}/packages/cli/bin/fibril.js`, "run", "hi"],
        {
          NODE_OPTIONS: "",
          OPENAI_API_KEY: undefined,
          FIBRIL_MODEL: undefined
        }
      )
      assert.strictEqual(exitCode, 2, stderr)
      const named = /\(see (\S+script-format\.md)\)/.exec(stderr)?.[1]
      // The command runs the bundle (scripts/bundle.ts), which carries the page beside it.
      assert.include(files.map((file) => file.path), "bundle/docs/script-format.md")
      assert.strictEqual(named, `${repoRoot}packages/cli/bundle/docs/script-format.md`)
      assert.isTrue(existsSync(named!))
      assert.strictEqual(readFileSync(named!, "utf8"), page)
    }).pipe(Effect.provide(NodeServices.layer)))
})
