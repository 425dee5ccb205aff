// A key written into the base URL, through the real `fibril` executable against the fake
// OpenAI-compatible server: it must appear in no output and in nothing recorded.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { FakeOpenAiServer } from "@fibril/testkit"
import { Effect, FileSystem, Path, Stream } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { bin, fibril } from "./run.ts"

const secret = "SECRETKEY"

/** Every file under `dir`, as text (records, transcripts, the database and its journal). */
const everything = (dir: string): Effect.Effect<string, unknown, FileSystem.FileSystem | Path.Path> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    if (!(yield* fs.exists(dir))) return ""
    const names = yield* fs.readDirectory(dir, { recursive: true })
    const texts = yield* Effect.forEach(
      names,
      (name) =>
        Effect.flatMap(fs.stat(path.join(dir, name)), (info) =>
          info.type === "File"
            ? Effect.map(fs.readFile(path.join(dir, name)), (bytes) => Buffer.from(bytes).toString("latin1"))
            : Effect.succeed(""))
    )
    return texts.join("\n")
  })

/** `fibril mcp` with stdin at end of file: it logs how it serves, then stops. */
const mcpOnce = (args: ReadonlyArray<string>, cwd: string, env: Record<string, string>) =>
  Effect.gen(function*() {
    const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
    const handle = yield* spawner.spawn(ChildProcess.make(process.execPath, [bin, "mcp", ...args], {
      cwd,
      env: { OPENAI_BASE_URL: undefined, ...env },
      extendEnv: true,
      stdin: "ignore"
    }))
    const text = (stream: Stream.Stream<Uint8Array, unknown>) => stream.pipe(Stream.decodeText(), Stream.mkString)
    const [stdout, stderr] = yield* Effect.all([text(handle.stdout), text(handle.stderr)], { concurrency: "unbounded" })
    yield* handle.exitCode
    return `${stdout}\n${stderr}`
  }).pipe(Effect.scoped)

describe("a key in the base URL", () => {
  it.live(
    "appears in no output (stderr, --json, fibril config, the MCP log line) and in no record",
    () =>
      Effect.gen(function*() {
        const server = yield* FakeOpenAiServer.start({
          script: { rules: [{ turns: [{ error: { kind: "fatal", message: "the model refused" } }] }] },
          models: ["fake-model"]
        })
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* fs.makeTempDirectoryScoped()
        const env = { OPENAI_API_KEY: "sk-test", FIBRIL_AGENT_MAX_RETRIES: "0" }
        const host = server.url.replace(/^http:\/\//, "")
        const inUserinfo = `http://user:${secret}@${host}`
        const inQuery = `${server.url}?api_key=${secret}`

        // user:password@ cannot be sent by fetch: refused up front, the URL shown redacted.
        const refused = yield* fibril(["run", "hello", "--model", "fake-model", "--base-url", inUserinfo], {
          cwd: dir,
          env
        })
        assert.strictEqual(refused.exitCode, 2)
        assert.include(refused.stderr, `http://***@${host}`)
        // A key in the query reaches the server; the failed call's error quotes the URL, redacted.
        const failed = yield* fibril(["run", "hello", "--model", "fake-model", "--base-url", inQuery, "--json"], {
          cwd: dir,
          env
        })
        assert.strictEqual(failed.exitCode, 1, failed.stderr)
        assert.include(failed.stdout, "api_key=***")
        assert.include(failed.stdout, "the model refused")
        const config = yield* fibril(["config", "--json"], { cwd: dir, env: { ...env, OPENAI_BASE_URL: inQuery } })
        assert.include(config.stdout, `gpt-4.1-mini at ${server.url}?api_key=*** (OPENAI_API_KEY set)`)
        const mcp = yield* mcpOnce(["--model", "fake-model", "--base-url", inQuery], dir, env)
        assert.include(mcp, `fake-model at ${server.url}?api_key=***`)

        for (
          const output of [
            refused.stdout,
            refused.stderr,
            failed.stdout,
            failed.stderr,
            config.stdout,
            config.stderr,
            mcp
          ]
        ) {
          assert.notInclude(output, secret)
        }
        // The failed root agent's record keeps the reason, URL included: redacted.
        const recorded = yield* everything(path.join(dir, ".fibril"))
        assert.include(recorded, "api_key=***")
        assert.notInclude(recorded, secret)
      }).pipe(Effect.provide(NodeServices.layer)),
    60_000
  )
})
