// Issue 29 at the level of the process: a real `fibril run` whose agent reads files that another
// process keeps swapping for FIFOs. Every read must come back (an error for a FIFO), so the
// agent goes on to its next tool call, a long shell command; SIGTERM then ends the process
// within 5 s. (Before the fix, the reads blocked libuv's thread pool for good: the shell call
// never started, and the process outlived SIGTERM.)
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Clock, Effect } from "effect"
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import * as nodeFs from "node:fs"
import * as nodePath from "node:path"
import { pidsWith, storedRecords } from "./inspect.ts"
import { bin, sourceCondition } from "./run.ts"

const shutdownModule = new URL("../src/Shutdown.ts", import.meta.url).href

/** Swaps `<dir>/<name>` with `<name>.fifo` (a FIFO) and back, in a tight loop, until killed. */
const swapperSource = String.raw`
const fs = require("node:fs")
const [dir, ...names] = process.argv.slice(1)
process.chdir(dir)
const tryIt = (f) => { try { f() } catch {} }
process.stdout.write("go\n")
for (;;) {
  for (const name of names) {
    tryIt(() => fs.renameSync(name, name + ".reg"))
    tryIt(() => fs.renameSync(name + ".fifo", name))
  }
  for (const name of names) {
    tryIt(() => fs.renameSync(name, name + ".fifo"))
    tryIt(() => fs.renameSync(name + ".reg", name))
  }
}
`

const started = <A>(child: ChildProcess, value: A) =>
  Effect.callback<A>((resume) => void child.stdout?.once("data", () => resume(Effect.succeed(value))))

/** A spawned process, killed (SIGKILL) when the scope ends if it is still there. */
const spawned = (args: ReadonlyArray<string>, cwd: string, env: Record<string, string> = {}) =>
  Effect.acquireRelease(
    Effect.sync(() =>
      spawn(process.execPath, [...args], {
        cwd,
        env: { ...process.env, OPENAI_API_KEY: "", ...env },
        stdio: ["ignore", "pipe", "pipe"]
      })
    ),
    (child) => Effect.sync(() => void (child.exitCode === null && child.signalCode === null && child.kill("SIGKILL")))
  )

const exited = (child: ChildProcess) =>
  Effect.callback<number | string>((resume) => {
    if (child.exitCode !== null || child.signalCode !== null) {
      resume(Effect.succeed(child.exitCode ?? child.signalCode ?? "?"))
      return
    }
    child.once("exit", (code, signal) => resume(Effect.succeed(code ?? signal ?? "?")))
  })

describe("fibril run and SIGTERM", () => {
  it.live(
    "reads of files swapped for FIFOs come back, and SIGTERM during a long shell call ends the process within 5 s",
    () =>
      Effect.gen(function*() {
        const dir = nodeFs.realpathSync(nodeFs.mkdtempSync(nodePath.join(process.env.TMPDIR ?? "/tmp", "fibril-fifo-")))
        yield* Effect.addFinalizer(() => Effect.sync(() => nodeFs.rmSync(dir, { recursive: true, force: true })))
        nodeFs.mkdirSync(nodePath.join(dir, ".git"))
        const names = Array.from({ length: 6 }, (_, i) => `f${i}.txt`)
        for (const name of names) {
          nodeFs.writeFileSync(nodePath.join(dir, name), "content\n")
          execFileSync("mkfifo", [nodePath.join(dir, `${name}.fifo`)])
        }
        const marker = String(500_000 + Math.floor(Math.random() * 100_000))
        const reads = names.flatMap((name) => [1, 2, 3].map(() => ({ name: "read_file", args: { path: name } })))
        nodeFs.writeFileSync(
          nodePath.join(dir, "script.json"),
          JSON.stringify({
            rules: [
              {
                match: { role: "implementer" },
                turns: [
                  { tool_calls: reads },
                  { tool_calls: reads },
                  { tool_calls: reads },
                  { tool_calls: [{ name: "shell", args: { command: `exec sleep ${marker}` } }] },
                  { text: "never" }
                ]
              },
              {
                match: { depth: 0 },
                turns: [{
                  tool_calls: [{
                    name: "task",
                    args: { description: "reader", prompt: "read them", subagent_type: "implementer" }
                  }]
                }, { text: "never" }]
              }
            ]
          })
        )

        const swapper = yield* spawned(["-e", swapperSource, dir, ...names], dir)
        yield* started(swapper, undefined)
        const run = yield* spawned(
          [sourceCondition, bin, "run", "go", "--model", "scripted:script.json"],
          dir,
          // One libuv thread: a single blocked open would stop every file operation.
          { UV_THREADPOOL_SIZE: "1" }
        )
        let stderr = ""
        run.stderr?.on("data", (chunk: Buffer) => void (stderr += chunk.toString()))

        // The shell call starts only once all 54 reads came back.
        let pids: Array<number> = []
        for (let i = 0; i < 300 && pids.length === 0; i++) {
          pids = pidsWith(marker)
          if (pids.length === 0) yield* Effect.sleep("100 millis")
        }
        const reachedShell = pids.length > 0

        const sent = yield* Clock.currentTimeMillis
        run.kill("SIGTERM")
        const code = yield* exited(run).pipe(
          Effect.timeoutOrElse({ duration: "10 seconds", orElse: () => Effect.succeed("alive") })
        )
        const elapsed = (yield* Clock.currentTimeMillis) - sent
        assert.isBelow(elapsed, 5_000, `ended ${elapsed} ms after SIGTERM (${code})`)
        assert.isTrue(reachedShell, `every read came back and the shell call started; stderr: ${stderr}`)
        assert.strictEqual(code, 143, "128 + SIGTERM")
        assert.deepStrictEqual(pidsWith(marker), [], "the shell's process group was killed")
        for (const row of storedRecords<{ status: string }>(dir)) assert.notInclude(["running", "pending"], row.status)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    90_000
  )

  it.live(
    "a process whose shutdown never completes still ends within 5 s of SIGTERM (the bound of Shutdown.ts)",
    () =>
      Effect.gen(function*() {
        // bin.ts's wiring, with a shutdown that never finishes: the listener replaces Node's
        // default exit, and the interval keeps the event loop alive, as a stuck finalizer does.
        const source = [
          `import * as Shutdown from ${JSON.stringify(shutdownModule)}`,
          `process.on("SIGTERM", () => Shutdown.signalled(143, "SIGTERM"))`,
          `setInterval(() => {}, 1000)`,
          `process.stdout.write("go\\n")`
        ].join("\n")
        const child = yield* spawned(["--input-type=module", "-e", source], process.cwd())
        let stderr = ""
        child.stderr?.on("data", (chunk: Buffer) => void (stderr += chunk.toString()))
        yield* started(child, undefined)
        const sent = yield* Clock.currentTimeMillis
        child.kill("SIGTERM")
        const code = yield* exited(child).pipe(
          Effect.timeoutOrElse({ duration: "10 seconds", orElse: () => Effect.succeed("alive") })
        )
        const elapsed = (yield* Clock.currentTimeMillis) - sent
        assert.strictEqual(code, 143)
        assert.isBelow(elapsed, 5_000)
        assert.include(stderr, "still running 3 s after SIGTERM; stopping now")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    30_000
  )
})
