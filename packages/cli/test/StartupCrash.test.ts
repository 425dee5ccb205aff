// A crash at start (a defect, not a reported error) is told on stderr: stdout is `fibril mcp`'s
// JSON-RPC channel (and `--json`'s event stream), so a client reading it must never get a
// stack trace there. The crash is planted for real in the child process: a preloaded module
// makes `URL.canParse`, which the model selection calls before the server starts, throw.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Path, Stream } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { bin, sourceCondition } from "./run.ts"

const text = (stream: Stream.Stream<Uint8Array, unknown>) => stream.pipe(Stream.decodeText(), Stream.mkString)
const planted = `data:text/javascript,URL.canParse = () => { throw new Error("planted start-up crash") }`

describe("a start-up crash", () => {
  it.live("of fibril mcp goes to stderr, exit 2, and stdout stays empty", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = yield* fs.makeTempDirectoryScoped()
      yield* fs.makeDirectory(path.join(dir, ".git"))
      const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
      const handle = yield* spawner.spawn(ChildProcess.make(
        process.execPath,
        [sourceCondition, "--import", planted, bin, "mcp", "--model", "m", "--base-url", "http://127.0.0.1:9/v1"],
        {
          cwd: dir,
          env: { OPENAI_API_KEY: "sk-crash", HOME: dir, FIBRIL_MODEL: undefined, OPENAI_BASE_URL: undefined },
          extendEnv: true
        }
      ))
      const [stdout, stderr, exitCode] = yield* Effect.all(
        [text(handle.stdout), text(handle.stderr), handle.exitCode],
        {
          concurrency: "unbounded"
        }
      )
      assert.strictEqual(Number(exitCode), 2, stdout + stderr)
      assert.strictEqual(stdout, "")
      assert.include(stderr, "planted start-up crash")
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 30_000)
})
