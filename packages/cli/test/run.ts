// Runs the real `fibril` executable (on this Node) as a subprocess.
import { Effect, FileSystem, Path, Stream } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { fileURLToPath } from "node:url"
import { inject } from "vitest"

/** `fibril`: the bundle of this checkout's sources made for this test run (scripts/test-bundle.ts). */
export const bin = inject("fibrilBin")
/** `fibril` from its TypeScript sources (with `sourceCondition`), for a test about the modules it loads. */
export const sourceBin = fileURLToPath(new URL("../src/bin.ts", import.meta.url))
/**
 * Node's flag that resolves the @fibril packages to their sources (see vitest.config.ts); `bin`
 * needs it not (it is bundled) but takes it.
 */
export const sourceCondition = "--conditions=@fibril/source"
export const repoRoot = fileURLToPath(new URL("../../..", import.meta.url))

/** Polls `check` every 50 ms, at most `bound` times (real processes, real time): did it hold? */
export const until = (check: Effect.Effect<boolean>, bound = 200) =>
  Effect.gen(function*() {
    for (let i = 0; i < bound; i++) {
      if (yield* check) return true
      yield* Effect.sleep("50 millis")
    }
    return false
  })

const text = (stream: Stream.Stream<Uint8Array, unknown>) => stream.pipe(Stream.decodeText(), Stream.mkString)

export const fibril = Effect.fn("test.fibril")(function*(
  args: ReadonlyArray<string>,
  options: { readonly cwd?: string; readonly env?: Record<string, string | undefined>; readonly stdin?: string } = {}
) {
  const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
  const handle = yield* spawner.spawn(ChildProcess.make(process.execPath, [sourceCondition, bin, ...args], {
    cwd: options.cwd ?? repoRoot,
    // No API key from the developer's shell leaks into a test.
    env: { OPENAI_API_KEY: undefined, OPENAI_BASE_URL: undefined, FIBRIL_MODEL: undefined, ...options.env },
    extendEnv: true,
    ...(options.stdin === undefined ? {} : { stdin: Stream.make(new TextEncoder().encode(options.stdin)) })
  }))
  const [stdout, stderr, exitCode] = yield* Effect.all(
    [text(handle.stdout), text(handle.stderr), handle.exitCode],
    { concurrency: "unbounded" }
  )
  return { stdout, stderr, exitCode: Number(exitCode) }
}, Effect.scoped)

/** A fresh workspace (its real path) holding `script` as script.json, for `--model scripted:script.json`. */
export const scriptedWorkspace = (script: unknown) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const dir = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
    yield* fs.writeFileString(path.join(dir, "script.json"), JSON.stringify(script))
    return dir
  })
