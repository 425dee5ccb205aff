import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, FileSystem, Schedule } from "effect"
import type * as Shell from "../../src/tools/Shell.ts"
import { isAlive, provide, setup as setupSandboxed } from "./harness.ts"

// Process handling without a sandbox: these tests read pids with `$$`, which inside the
// sandbox's pid namespace are not host pids. Sandbox.test.ts runs the sandboxed shell.
const setup = (options: Parameters<typeof setupSandboxed>[0] = {}) =>
  setupSandboxed({ ...options, sandbox: { mode: "off" } })

type Harness = Effect.Success<ReturnType<typeof setup>>

const shell = (h: Harness, args: { readonly command: string; readonly timeout_ms?: number }) =>
  Effect.map(h.call("shell", args), (out) => out as Shell.Result)

/** The pid a command wrote to `file` (relative to the workspace), once it exists. */
const pidFrom = (h: Harness, file: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const text = yield* fs.readFileString(h.path.join(h.root, file))
    const pid = Number(text.trim())
    return Number.isInteger(pid) && pid > 0 ? pid : yield* Effect.fail("pid not written yet")
  }).pipe(Effect.retry({ schedule: Schedule.spaced("20 millis"), times: 250 }))

describe("shell", () => {
  it.live("returns stdout and exit code 0, running in the workspace root", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      assert.deepStrictEqual(yield* shell(h, { command: "echo hello; pwd" }), {
        exit_code: 0,
        stdout: `hello\n${h.root}\n`,
        stderr: "",
        timed_out: false,
        sandbox: "none"
      })
    }).pipe(provide))

  it.live("a non-zero exit and stderr are a normal result", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      assert.deepStrictEqual(yield* shell(h, { command: "echo out; echo oops >&2; exit 3" }), {
        exit_code: 3,
        stdout: "out\n",
        stderr: "oops\n",
        timed_out: false,
        sandbox: "none"
      })
    }).pipe(provide))

  it.live("stdin is empty, so a command reading it does not hang", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const result = yield* shell(h, { command: "cat; echo done" })
      assert.strictEqual(result.stdout, "done\n")
      assert.strictEqual(result.exit_code, 0)
    }).pipe(provide))

  it.live("a process killed by a signal has a null exit code", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const result = yield* shell(h, { command: "echo before; kill -9 $$" })
      assert.strictEqual(result.exit_code, null)
      assert.strictEqual(result.stdout, "before\n")
      assert.isFalse(result.timed_out)
    }).pipe(provide))

  it.live("caps output, keeping head and tail around a marker", () =>
    Effect.gen(function*() {
      const h = yield* setup({ maxOutputChars: 100 })
      const result = yield* shell(h, {
        command: "printf 'START'; head -c 100000 /dev/zero | tr '\\0' a; printf 'END'; printf 'e%.0s' $(seq 1 150) >&2"
      })
      assert.strictEqual(result.exit_code, 0)
      assert.strictEqual(result.stdout, `START${"a".repeat(45)}\n[... 99908 chars omitted ...]\n${"a".repeat(47)}END`)
      assert.strictEqual(result.stderr, `${"e".repeat(50)}\n[... 50 chars omitted ...]\n${"e".repeat(50)}`)
    }).pipe(provide))

  it.live("output below the cap is untouched", () =>
    Effect.gen(function*() {
      const h = yield* setup({ maxOutputChars: 100 })
      const result = yield* shell(h, { command: "printf 'x%.0s' $(seq 1 100)" })
      assert.strictEqual(result.stdout, "x".repeat(100))
    }).pipe(provide))

  it.live("times out, returns the partial output and leaves no process behind", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const started = Date.now()
      const result = yield* shell(h, { command: "echo $$ > pid; echo started; exec sleep 30", timeout_ms: 300 })
      assert.isBelow(Date.now() - started, 5_000)
      assert.deepStrictEqual(result, {
        exit_code: null,
        stdout: "started\n",
        stderr: "",
        timed_out: true,
        sandbox: "none"
      })
      const pid = yield* pidFrom(h, "pid")
      assert.isFalse(isAlive(pid), `process ${pid} still alive`)
    }).pipe(provide))

  it.live("the default timeout comes from the options", () =>
    Effect.gen(function*() {
      const h = yield* setup({ shellTimeoutSecs: 0.3 })
      const result = yield* shell(h, { command: "echo $$ > pid; exec sleep 30" })
      assert.isTrue(result.timed_out)
      assert.isFalse(isAlive(yield* pidFrom(h, "pid")))
    }).pipe(provide))

  it.live("interrupting the call kills the process", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const fiber = yield* Effect.forkChild(shell(h, { command: "echo $$ > pid; exec sleep 30" }))
      const pid = yield* pidFrom(h, "pid")
      assert.isTrue(isAlive(pid))
      yield* Fiber.interrupt(fiber)
      assert.isFalse(isAlive(pid), `process ${pid} still alive after interrupt`)
    }).pipe(provide))

  it.live("a command that ignores SIGTERM is still gone within a second of an interruption", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const fiber = yield* Effect.forkChild(
        shell(h, { command: "trap '' TERM; echo $$ > pid; while :; do sleep 0.05; done" })
      )
      const pid = yield* pidFrom(h, "pid")
      const started = Date.now()
      yield* Fiber.interrupt(fiber)
      assert.isBelow(Date.now() - started, 1_000, "interrupting took a second or more")
      assert.isFalse(isAlive(pid), `process ${pid} still alive after interrupt`)
    }).pipe(provide))

  it.live("interrupting the call kills grandchildren through the process group", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const fiber = yield* Effect.forkChild(shell(h, { command: "echo $$ > pid; sleep 30 & echo $! > pid2; wait" }))
      const pid = yield* pidFrom(h, "pid")
      const grandchild = yield* pidFrom(h, "pid2")
      assert.isTrue(isAlive(grandchild))
      yield* Fiber.interrupt(fiber)
      assert.isFalse(isAlive(pid), `shell ${pid} still alive`)
      assert.isFalse(isAlive(grandchild), `grandchild ${grandchild} still alive`)
    }).pipe(provide))

  it.live("background processes do not outlive a finished command", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const result = yield* shell(h, { command: "sleep 30 & echo $! > pid2; echo launched" })
      assert.strictEqual(result.exit_code, 0)
      assert.strictEqual(result.stdout, "launched\n")
      assert.isFalse(result.timed_out)
      const grandchild = yield* pidFrom(h, "pid2")
      assert.isFalse(isAlive(grandchild), `background ${grandchild} still alive`)
    }).pipe(provide))

  it.live("timeout_ms must be a positive integer", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const error = yield* h.failure("shell", { command: "true", timeout_ms: 0 })
      assert.strictEqual(error._tag, "SchemaError")
    }).pipe(provide))
})
