import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, PubSub } from "effect"
import type { Prompt } from "effect/ai"
import { TestClock } from "effect/testing"
import { AgentEvents } from "../src/AgentEvents.ts"
import { Session } from "../src/Session.ts"
import type { TaskResult } from "../src/tools/Task.ts"
import { alive, provideNode, report, setup } from "./support.ts"
import { pidsWith } from "./tools/harness.ts"

const toolResults = (messages: ReadonlyArray<Prompt.Message>) =>
  messages.flatMap((m) => m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [p] : []) : [])

const failureOf = (part: { readonly result: unknown }) =>
  part.result as { readonly error: string; readonly message: string }

describe("the agent loop", () => {
  it.effect("malformed tool arguments become tool-result errors the model corrects", () =>
    Effect.gen(function*() {
      const { get, fs, path, root } = yield* setup({
        rules: [{
          turns: [
            { tool_calls: [{ name: "read_file", args: "{not json" }] },
            { tool_calls: [{ name: "read_file", args: { path: 42 } }] },
            { tool_calls: [{ name: "read_file", args: { path: "a.txt", bogus: true } }] },
            { tool_calls: [{ name: "no_such_tool", args: {} }] },
            { tool_calls: [{ name: "read_file", args: { path: "a.txt" } }] },
            { text: "read it" }
          ]
        }]
      })
      yield* fs.writeFileString(path.join(root, "a.txt"), "hello")
      const session = get(Session)
      const agent = yield* session.create()
      const result = yield* session.prompt(agent.id, "read a.txt")
      assert.strictEqual(result.text, "read it")
      assert.strictEqual(result.steps, 6)
      const parts = toolResults(yield* session.transcript(agent.id))
      assert.deepStrictEqual(parts.map((p) => p.isFailure), [true, true, true, true, false])
      assert.strictEqual(failureOf(parts[0]!).error, "InvalidArguments")
      assert.include(failureOf(parts[0]!).message, "not valid JSON")
      assert.strictEqual(failureOf(parts[1]!).error, "InvalidArguments")
      assert.include(failureOf(parts[1]!).message, "Expected string")
      assert.strictEqual(failureOf(parts[2]!).error, "InvalidArguments")
      // The refusal of an undeclared argument names it and what the tool accepts.
      assert.include(failureOf(parts[2]!).message, "(unexpected: bogus; accepted: path, ")
      assert.strictEqual(failureOf(parts[3]!).error, "UnknownTool")
      assert.include(failureOf(parts[3]!).message, "available tools: read_file, list_dir, grep, glob")
      assert.include(String(parts[4]!.result), "hello")
    }).pipe(provideNode))

  it.effect("max_steps ends a prompt with a typed error", () =>
    Effect.gen(function*() {
      const { get } = yield* setup(
        { rules: [{ turns: [{ tool_calls: [{ name: "list_dir", args: {} }] }], repeat_last: true }] },
        { maxSteps: 3 }
      )
      const session = get(Session)
      const agent = yield* session.create()
      const error = yield* Effect.flip(session.prompt(agent.id, "loop forever"))
      assert.strictEqual(error._tag, "BudgetExceeded")
      assert.strictEqual(error._tag === "BudgetExceeded" ? error.budget : "", "max_steps")
      assert.include(error.message, "max_steps=3")
      assert.strictEqual((yield* session.info(agent.id)).steps, 3)
    }).pipe(provideNode))

  it.effect("a model step past api_timeout_secs is timed out and retried (TestClock)", () =>
    Effect.gen(function*() {
      const { get } = yield* setup(
        { rules: [{ turns: [{ hang: { times: 2 }, text: "answered on the third attempt" }] }] },
        { apiTimeoutSecs: 5, maxRetries: 3, retryBaseMs: 1000, retryMaxMs: 30_000 }
      )
      const session = get(Session)
      const subscription = yield* get(AgentEvents).subscribe
      const agent = yield* session.create()
      const fiber = yield* Effect.forkChild(session.prompt(agent.id, "hi"))
      yield* TestClock.adjust("4999 millis")
      assert.isUndefined(fiber.pollUnsafe(), "still inside the first attempt")
      // First timeout at 5 s, backoff <= 1 s, second attempt times out 5 s later, backoff <= 2 s.
      yield* TestClock.adjust("1 millis")
      yield* TestClock.adjust("1 second")
      yield* TestClock.adjust("5 seconds")
      yield* TestClock.adjust("2 seconds")
      const result = yield* Fiber.join(fiber)
      assert.strictEqual(result.text, "answered on the third attempt")
      const retries = (yield* PubSub.takeAll(subscription)).filter((e) => e.type === "retry")
      assert.strictEqual(retries.length, 2)
      assert.include(retries[0]!.reason!, "api_timeout_secs=5")
    }).pipe(provideNode))

  // On Effect's live clock the per-attempt timeout is a plain timer, not a racing fiber: the same
  // behaviour, checked on the real clock with a 50 ms timeout (the one real wait in this file).
  it.live("on the live clock, a hung attempt is timed out, retried, and leaves no timer behind", () =>
    Effect.gen(function*() {
      const { get } = yield* setup(
        { rules: [{ turns: [{ hang: { times: 1 }, text: "answered on the second attempt" }] }] },
        { apiTimeoutSecs: 0.05, maxRetries: 2, retryBaseMs: 1, retryMaxMs: 1 }
      )
      const session = get(Session)
      const subscription = yield* get(AgentEvents).subscribe
      const agent = yield* session.create()
      const timers = () => process.getActiveResourcesInfo().filter((kind) => kind === "Timeout").length
      const before = timers()
      const result = yield* session.prompt(agent.id, "hi")
      assert.strictEqual(result.text, "answered on the second attempt")
      const retries = (yield* PubSub.takeAll(subscription)).filter((e) => e.type === "retry")
      assert.strictEqual(retries.length, 1)
      assert.include(retries[0]!.reason!, "api_timeout_secs=0.05")
      // The answered attempt's timer was cleared when it answered (a tick for interrupted work to settle).
      yield* Effect.promise(() => new Promise((resolve) => setImmediate(resolve)))
      assert.isAtMost(timers(), before)
    }).pipe(provideNode))

  it.effect("retries stop after max_retries; fatal errors are not retried", () =>
    Effect.gen(function*() {
      const { get } = yield* setup(
        {
          rules: [
            { match: { prompt: "always hangs" }, turns: [{ hang: true }] },
            { match: { prompt: "fatal" }, turns: [{ error: { kind: "fatal", message: "bad request" } }] },
            {
              match: { prompt: "rate limited" },
              turns: [{
                error: { kind: "retryable", message: "slow down", retry_after_ms: 20_000, times: 1 },
                text: "ok"
              }]
            }
          ]
        },
        { apiTimeoutSecs: 1, maxRetries: 2, retryBaseMs: 100, retryMaxMs: 1000 }
      )
      const session = get(Session)
      const a = yield* session.create()
      const hanging = yield* Effect.forkChild(Effect.flip(session.prompt(a.id, "always hangs")))
      yield* TestClock.adjust("10 seconds")
      const error = yield* Fiber.join(hanging)
      assert.strictEqual(error._tag, "ModelCallFailed")
      assert.include(error.message, "after 3 attempts")

      const b = yield* session.create()
      const fatal = yield* Effect.flip(session.prompt(b.id, "fatal"))
      assert.strictEqual(fatal._tag, "ModelCallFailed")
      assert.include(fatal.message, "not retryable")

      // Retry-After wins over a shorter backoff: nothing before 20 s.
      const c = yield* session.create()
      const limited = yield* Effect.forkChild(session.prompt(c.id, "rate limited"))
      yield* TestClock.adjust("19 seconds")
      assert.isUndefined(limited.pollUnsafe())
      yield* TestClock.adjust("1 second")
      assert.strictEqual((yield* Fiber.join(limited)).text, "ok")
    }).pipe(provideNode))

  it.effect("a failing child is a `failed` task result, not a failure of the parent", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({
        rules: [
          { match: { role: "explore" }, turns: [{ error: { kind: "fatal", message: "model exploded" } }] },
          {
            match: { depth: 0 },
            turns: [
              { tool_calls: [{ name: "task", args: { description: "d", prompt: "p", subagent_type: "explore" } }] },
              { tool_calls: [{ name: "task", args: { description: "d", prompt: "p", subagent_type: "wizard" } }] },
              { text: "coped" }
            ]
          }
        ]
      })
      const session = get(Session)
      const parent = yield* session.create()
      assert.strictEqual((yield* session.prompt(parent.id, "go")).text, "coped")
      const [failed, unknown] = toolResults(yield* session.transcript(parent.id))
      const task = failed!.result as TaskResult
      assert.strictEqual(task.status, "failed")
      assert.include(task.summary, "model exploded")
      assert.isTrue(unknown!.isFailure)
      assert.strictEqual(failureOf(unknown!).error, "UnknownRole")
      assert.include(failureOf(unknown!).message, "Accepted (case-insensitive): general (worker")
    }).pipe(provideNode))

  it.live("interrupting the parent while a child runs a long shell command kills the process", () =>
    Effect.gen(function*() {
      // The verifier's shell is sandboxed (read-only, its own pid namespace): its process is
      // found on the host by a unique argument rather than by `$$`.
      const marker = String(400_000 + Math.floor(Math.random() * 100_000))
      const { get } = yield* setup({
        rules: [
          {
            match: { role: "verifier" },
            turns: [{ tool_calls: [{ name: "shell", args: { command: `exec sleep ${marker}` } }] }, {
              text: report("slept")
            }]
          },
          {
            match: { depth: 0 },
            turns: [
              {
                tool_calls: [{ name: "task", args: { description: "d", prompt: "run it", subagent_type: "verifier" } }]
              },
              { text: "never" }
            ]
          }
        ]
      })
      const session = get(Session)
      const subscription = yield* get(AgentEvents).subscribe
      const parent = yield* session.create()
      const fiber = yield* Effect.forkChild(session.prompt(parent.id, "go"))
      let pid = 0
      for (let i = 0; i < 200 && pid === 0; i++) {
        pid = pidsWith(marker)[0] ?? 0
        if (pid === 0) yield* Effect.sleep("25 millis")
      }
      assert.isAbove(pid, 0, "the shell command started")
      assert.isTrue(alive(pid))
      yield* Fiber.interrupt(fiber)
      for (let i = 0; i < 40 && alive(pid); i++) yield* Effect.sleep("25 millis")
      assert.isFalse(alive(pid), "the child's process is gone")
      const events = yield* PubSub.takeAll(subscription)
      const interrupted = events.filter((e) => e.type === "interrupted").map((e) => e.agent.depth).sort()
      assert.deepStrictEqual(interrupted, [0, 1])
    }).pipe(provideNode))
})
