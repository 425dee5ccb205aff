/**
 * The loop's steps driven one at a time (tests from the mutation run of `src/loop/`): the model
 * call with its retries and timeouts against the ScriptedModel, a response resolved into a turn,
 * and a turn's tool calls run against the real registry, permissions and events of a Fibril layer.
 */
import { assert, describe, it } from "@effect/vitest"
import { ScriptedModel } from "@fibril/testkit"
import { Clock, Effect, Exit, Fiber, Option, PubSub, Schema } from "effect"
import { AiError, LanguageModel, Prompt, Response } from "effect/ai"
import { TestClock } from "effect/testing"
import { type AgentEvent, AgentEvents } from "../src/AgentEvents.ts"
import { backoffMs, callModel, ModelCallFailed, type RetryPolicy } from "../src/loop/CallModel.ts"
import { resolveTurn } from "../src/loop/ResolveTurn.ts"
import { eventOf, type SessionState, snapshot } from "../src/loop/State.ts"
import { InvalidArguments, runTools, UnknownTool } from "../src/loop/ToolStep.ts"
import * as Permission from "../src/Permission.ts"
import * as ToolRegistry from "../src/ToolRegistry.ts"
import { provideNode, setup } from "./support.ts"

const policy: RetryPolicy = { apiTimeoutSecs: 5, maxRetries: 2, retryBaseMs: 1000, retryMaxMs: 30_000 }

const emptyToolkit = Effect.map(ToolRegistry.make, (registry) => registry.view(Permission.allowAll).toolkit)

/** The model call on a script, with every retry it reports. */
const call = (script: ScriptedModel.ScriptInput, retryPolicy: RetryPolicy = policy) =>
  Effect.gen(function*() {
    const model = yield* ScriptedModel.make(script)
    const toolkit = yield* emptyToolkit
    const retries: Array<readonly [number, string, number]> = []
    const attempts: Array<Fiber.Fiber<unknown, unknown>> = []
    const fiber = yield* Effect.forkChild(
      callModel(
        model,
        Prompt.make("hi"),
        toolkit,
        retryPolicy,
        (attempt, reason, delayMs) => Effect.sync(() => void retries.push([attempt, reason, delayMs])),
        (attempt) => void attempts.push(attempt)
      ),
      { startImmediately: true }
    )
    return { fiber, retries, attempts }
  })

describe("loop/CallModel", () => {
  it("backoff doubles from the base, is capped at the max, and jitter scales it into [0.5, 1]", () => {
    assert.strictEqual(backoffMs(policy, 1, 0), 500)
    assert.strictEqual(backoffMs(policy, 1, 1), 1000)
    assert.strictEqual(backoffMs(policy, 2, 0.5), 1500)
    assert.strictEqual(backoffMs(policy, 3, 1), 4000)
    assert.strictEqual(backoffMs(policy, 6, 1), 30_000)
    assert.strictEqual(backoffMs(policy, 20, 0), 15_000)
  })

  it("ModelCallFailed says how many attempts, or that it was not retryable", () => {
    assert.strictEqual(
      new ModelCallFailed({ attempts: 3, retryable: true, reason: "boom" }).message,
      "model call failed after 3 attempts: boom"
    )
    assert.strictEqual(
      new ModelCallFailed({ attempts: 1, retryable: false, reason: "bad" }).message,
      "model call failed (not retryable): bad"
    )
  })

  it.effect("streamed: the same turn as a whole answer, the text handed on as it arrives; a hung stream times out and is retried whole (TestClock)", () =>
    Effect.gen(function*() {
      const turn = {
        text: "Reading the file.",
        tool_calls: [{ name: "read_file", args: { path: "a.txt" } }],
        hang: { times: 1 }
      } as const
      const model = yield* ScriptedModel.make({ rules: [{ turns: [turn] }] })
      const toolkit = yield* emptyToolkit
      const deltas: Array<string> = []
      const retries: Array<string> = []
      const streamed = yield* Effect.forkChild(
        callModel(
          model,
          Prompt.make("hi"),
          toolkit,
          policy,
          (_, reason) => Effect.sync(() => void retries.push(reason)),
          undefined,
          (delta) => void deltas.push(delta)
        ),
        { startImmediately: true }
      )
      yield* TestClock.adjust("4 seconds")
      assert.deepStrictEqual([retries, deltas], [[], []], "the first attempt hangs within its timeout")
      yield* TestClock.adjust("1 minute")
      const response = yield* Fiber.join(streamed)
      assert.deepStrictEqual(retries, ["no answer within api_timeout_secs=5"])
      assert.deepStrictEqual(deltas, ["Reading the file."])
      // What the loop reads of it is what it reads of the same answer not streamed.
      const whole = yield* Effect.forkChild(
        callModel(model, Prompt.make("hi"), toolkit, policy, () => Effect.void),
        { startImmediately: true }
      )
      yield* TestClock.adjust("1 minute")
      const expected = resolveTurn(yield* Fiber.join(whole))
      const got = resolveTurn(response)
      assert.deepStrictEqual(
        [got.text, got.toolCalls, got.usage, got.assistant.content],
        [expected.text, expected.toolCalls, expected.usage, expected.assistant.content]
      )
      assert.strictEqual(got.toolCalls[0]?.name, "read_file")
    }))

  it.effect("a retryable error is retried after the backoff; the answer of the next attempt is the call's", () =>
    Effect.gen(function*() {
      const { attempts, fiber, retries } = yield* call({
        rules: [{ turns: [{ error: { kind: "retryable", message: "overloaded", times: 2 }, text: "third time" }] }]
      })
      yield* TestClock.adjust("1 minute")
      const response = yield* Fiber.join(fiber)
      assert.strictEqual(response.text, "third time")
      assert.strictEqual(attempts.length, 3, "each attempt is handed over")
      assert.deepStrictEqual(retries.map(([attempt]) => attempt), [1, 2])
      assert.match(retries[0]![1], /overloaded/)
      // Within the jittered backoff: [500, 1000] ms, then [1000, 2000] ms.
      assert.isTrue(retries[0]![2] >= 500 && retries[0]![2] <= 1000, String(retries[0]![2]))
      assert.isTrue(retries[1]![2] >= 1000 && retries[1]![2] <= 2000, String(retries[1]![2]))
    }))

  it.effect("a Retry-After longer than the backoff is the delay, and nothing is sent before it", () =>
    Effect.gen(function*() {
      const { attempts, fiber, retries } = yield* call({
        rules: [{
          turns: [{ error: { kind: "retryable", message: "slow down", retry_after_ms: 7000, times: 1 }, text: "ok" }]
        }]
      })
      yield* TestClock.adjust("6999 millis")
      assert.strictEqual(attempts.length, 1)
      assert.isUndefined(fiber.pollUnsafe())
      yield* TestClock.adjust("1 millis")
      assert.strictEqual((yield* Fiber.join(fiber)).text, "ok")
      assert.deepStrictEqual(retries.map(([attempt, , delay]) => [attempt, delay]), [[1, 7000]])
    }))

  it.effect("a fatal error fails at once: one attempt, not retryable", () =>
    Effect.gen(function*() {
      const { attempts, fiber, retries } = yield* call({
        rules: [{ turns: [{ error: { kind: "fatal", message: "bad request" } }] }]
      })
      const error = yield* Effect.flip(Fiber.join(fiber))
      assert.strictEqual(error.attempts, 1)
      assert.isFalse(error.retryable)
      assert.match(error.reason, /bad request/)
      assert.deepStrictEqual([attempts.length, retries.length], [1, 0])
    }))

  it.effect("retries stop after max_retries: max_retries + 1 attempts, the last reason kept", () =>
    Effect.gen(function*() {
      const { attempts, fiber, retries } = yield* call({
        rules: [{ turns: [{ error: { kind: "retryable", message: "overloaded" } }] }]
      })
      yield* TestClock.adjust("1 minute")
      const error = yield* Effect.flip(Fiber.join(fiber))
      assert.strictEqual(error.attempts, 3)
      assert.isTrue(error.retryable)
      assert.match(error.message, /^model call failed after 3 attempts: .*overloaded/)
      assert.deepStrictEqual([attempts.length, retries.length], [3, 2])
    }))

  it.effect("an attempt past api_timeout_secs is interrupted and retried; the timeout is the reason", () =>
    Effect.gen(function*() {
      const { attempts, fiber, retries } = yield* call(
        { rules: [{ turns: [{ hang: { times: 1 }, text: "late but fine" }] }] },
        { ...policy, apiTimeoutSecs: 3 }
      )
      yield* TestClock.adjust("2999 millis")
      assert.deepStrictEqual([attempts.length, retries.length], [1, 0])
      yield* TestClock.adjust("1 millis")
      assert.strictEqual(retries.length, 1)
      assert.strictEqual(retries[0]![1], "no answer within api_timeout_secs=3")
      // The hung attempt was interrupted, not left running.
      assert.isDefined(attempts[0]!.pollUnsafe())
      yield* TestClock.adjust("1 second")
      assert.strictEqual((yield* Fiber.join(fiber)).text, "late but fine")
    }))

  // On the live clock the per-attempt timeout is one timer: it must go when the call is cut short.
  // The timer is recognised by its delay (api_timeout_secs), not by a count of the process's
  // timers, which another timer ending at the same moment would make wrong.
  it.live("on the live clock, interrupting a waiting call clears its timer and interrupts the attempt", () => {
    const set = globalThis.setTimeout
    const clear = globalThis.clearTimeout
    const started: Array<unknown> = []
    const cleared = new Set<unknown>()
    return Effect.gen(function*() {
      globalThis.setTimeout = ((...args: Parameters<typeof set>) => {
        const timer = set(...args)
        if (args[1] === 600_000) started.push(timer)
        return timer
      }) as typeof setTimeout
      globalThis.clearTimeout = ((timer: Parameters<typeof clearTimeout>[0]) => {
        cleared.add(timer)
        clear(timer)
      }) as typeof clearTimeout
      const { attempts, fiber } = yield* call(
        { rules: [{ turns: [{ hang: true }] }] },
        { ...policy, apiTimeoutSecs: 600 }
      )
      yield* Effect.yieldNow
      assert.strictEqual(attempts.length, 1)
      assert.strictEqual(started.length, 1, "the attempt's timer runs")
      yield* Fiber.interrupt(fiber)
      assert.isDefined(attempts[0]!.pollUnsafe(), "the attempt is interrupted with its caller")
      yield* Effect.promise(() => new Promise((resolve) => setImmediate(resolve)))
      assert.isTrue(cleared.has(started[0]), "its timer is cleared")
    }).pipe(Effect.ensuring(Effect.sync(() => {
      globalThis.setTimeout = set
      globalThis.clearTimeout = clear
    })))
  })

  it.effect("the request leaves tool calls to the loop: they come back unresolved, their params undecoded", () =>
    Effect.gen(function*() {
      const { fiber } = yield* call({
        rules: [{ turns: [{ tool_calls: [{ name: "no_such_tool", args: { x: 1 }, id: "c1" }] }] }]
      })
      const response = yield* Fiber.join(fiber)
      const calls = response.content.filter((part) => part.type === "tool-call")
      assert.deepStrictEqual(calls.map((part) => [part.id, part.name, part.params]), [["c1", "no_such_tool", {
        x: 1
      }]])
      assert.isFalse(response.content.some((part) => part.type === "tool-result"))
    }))
})

const usage = (input: number | undefined, output: number | undefined, cached?: number) =>
  new Response.Usage({
    inputTokens: { uncached: undefined, total: input, cacheRead: cached, cacheWrite: undefined },
    outputTokens: { total: output, text: undefined, reasoning: undefined }
  })

const finish = (u: Response.Usage) => Response.makePart("finish", { reason: "stop", usage: u, response: undefined })

const responseOf = (content: ReadonlyArray<Response.AnyPart>) =>
  new LanguageModel.GenerateTextResponse(content as Array<never>) as unknown as Parameters<typeof resolveTurn>[0]

describe("loop/CallModel: the waiter takes its call down", () => {
  it.effect("interrupting the caller ends the model call it waits for (TestClock)", () =>
    Effect.gen(function*() {
      const { attempts, fiber } = yield* call({ rules: [{ turns: [{ hang: true }] }] })
      yield* Effect.yieldNow
      assert.strictEqual(attempts.length, 1)
      assert.isUndefined(attempts[0]!.pollUnsafe(), "the call hangs")
      yield* Fiber.interrupt(fiber)
      const exit = attempts[0]!.pollUnsafe()
      assert.isDefined(exit, "the call has ended with its caller")
      assert.isTrue(Exit.hasInterrupts(exit!))
    }))

  it.live("interrupting the caller ends the model call it waits for (the live clock)", () =>
    Effect.gen(function*() {
      const { attempts, fiber } = yield* call({ rules: [{ turns: [{ hang: true }] }] })
      yield* Effect.yieldNow
      assert.strictEqual(attempts.length, 1)
      yield* Fiber.interrupt(fiber)
      const exit = attempts[0]!.pollUnsafe()
      assert.isDefined(exit, "the call has ended with its caller")
      assert.isTrue(Exit.hasInterrupts(exit!))
    }))
})

describe("loop/ResolveTurn", () => {
  it("text parts are joined, reasoning is kept, calls the provider ran are left out, usage is the finish part's", () => {
    const turn = resolveTurn(responseOf([
      Response.makePart("reasoning", { text: "thinking" }),
      Response.makePart("text", { text: "Hello, " }),
      Response.makePart("tool-call", { id: "c1", name: "grep", params: { pattern: "x" }, providerExecuted: false }),
      Response.makePart("tool-call", { id: "c2", name: "web_search", params: {}, providerExecuted: true }),
      Response.makePart("text", { text: "world" }),
      finish(usage(10, 5, 3))
    ]))
    assert.strictEqual(turn.text, "Hello, world")
    assert.deepStrictEqual(turn.toolCalls, [{ id: "c1", name: "grep", params: { pattern: "x" } }])
    assert.deepStrictEqual(turn.usage, { input: 10, output: 5, cached: 3 })
    assert.isTrue(turn.usageReported)
    assert.strictEqual(turn.assistant.role, "assistant")
    assert.deepStrictEqual(
      turn.assistant.content.map((part) =>
        part.type === "tool-call"
          ? [part.type, part.id, part.name, part.params, part.providerExecuted]
          : [part.type, "text" in part ? part.text : undefined]
      ),
      [
        ["reasoning", "thinking"],
        ["text", "Hello, "],
        ["tool-call", "c1", "grep", { pattern: "x" }, false],
        ["text", "world"]
      ]
    )
  })

  it("usage is reported when the provider gave input or output tokens; without a finish part it is zero", () => {
    assert.isTrue(resolveTurn(responseOf([finish(usage(7, undefined))])).usageReported)
    assert.isTrue(resolveTurn(responseOf([finish(usage(undefined, 4))])).usageReported)
    const unreported = resolveTurn(responseOf([finish(usage(undefined, undefined))]))
    assert.isFalse(unreported.usageReported)
    assert.deepStrictEqual(unreported.usage, { input: 0, output: 0, cached: 0 })
    const none = resolveTurn(responseOf([Response.makePart("text", { text: "hi" })]))
    assert.deepStrictEqual([none.usage, none.usageReported], [{ input: 0, output: 0, cached: 0 }, false])
    assert.deepStrictEqual(none.toolCalls, [])
  })
})

describe("loop/ToolStep", () => {
  const Echo = Schema.Struct({ path: Schema.String })

  /** A registry with the real tools of a Fibril layer plus `echo` (writes) and `fail`, and a state over it. */
  const harness = (rules: Permission.Rules = Permission.allowAll) =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [] })
      const registry = get(ToolRegistry.ToolRegistry)
      yield* registry.register(ToolRegistry.define({
        name: "echo",
        description: "echoes the path and the caller",
        parameters: Echo,
        posture: "write",
        paths: (params) => [params.path],
        handler: (params, context) =>
          Effect.succeed({
            path: params.path,
            ...context,
            rules: context.rules === rules,
            progress: typeof context.progress
          })
      }))
      yield* registry.register(ToolRegistry.define({
        name: "fail",
        description: "always fails",
        parameters: Schema.Struct({ why: Schema.optionalKey(Schema.String) }),
        posture: "read",
        handler: () => Effect.fail(new ToolRegistry.ToolFailure({ tool: "fail", reason: "as designed" }))
      }))
      const events = get(AgentEvents)
      const subscription = yield* events.subscribe
      const state = {
        id: "agent-1",
        parent: undefined,
        depth: 2,
        role: "worker",
        model: "m",
        description: "d",
        messages: [],
        rules,
        view: registry.view(rules),
        treeUsage: { input: 1, output: 2, cached: 0 },
        steps: 4,
        toolCalls: 0,
        lastTool: undefined,
        clock: yield* Clock.Clock
      } as unknown as SessionState
      const deps = { registry, permission: get(Permission.Permission), events, onResult: undefined, onEvent: undefined }
      return { state, deps, subscription }
    })

  const resultOf = (message: Prompt.ToolMessage, index: number) => message.content[index]! as Prompt.ToolResultPart

  it.effect("a call runs its handler with the caller's context; results and events say what happened", () =>
    Effect.gen(function*() {
      const { deps, state, subscription } = yield* harness()
      const seen: Array<AgentEvent["type"]> = []
      const message = yield* runTools(
        { ...deps, onEvent: (event) => void seen.push(event.type) },
        state,
        [{ id: "c1", name: "echo", params: `{"path":"notes.md"}` }]
      )
      assert.strictEqual(message.role, "tool")
      const part = resultOf(message, 0)
      assert.deepStrictEqual([part.id, part.name, part.isFailure], ["c1", "echo", false])
      assert.deepStrictEqual(part.result, {
        path: "notes.md",
        sessionId: "agent-1",
        callId: "c1",
        role: "worker",
        depth: 2,
        rules: true,
        // The loop hands every call a progress reporter (its updates are tool_progress events).
        progress: "function"
      })
      assert.deepStrictEqual([state.toolCalls, state.lastTool], [1, "echo"])
      const events = yield* PubSub.takeAll(subscription)
      assert.deepStrictEqual(events.map((e) => e.type), ["tool_call", "tool_result"])
      assert.deepStrictEqual(seen, ["tool_call", "tool_result"])
      const [called, landed] = events
      assert.strictEqual(called!.tool, "echo")
      assert.deepStrictEqual(
        [landed!.tool, landed!.isFailure, landed!.reason, landed!.changed],
        ["echo", false, undefined, ["notes.md"]]
      )
      assert.strictEqual(landed!.agent.agentId, "agent-1")
      assert.strictEqual(landed!.agent.toolCalls, 1)
      assert.isNumber(landed!.at)
    }).pipe(provideNode))

  it.effect("failures are results: unknown tool, bad JSON, bad arguments, a denial and a handler's error", () =>
    Effect.gen(function*() {
      const readOnly = Permission.derive(Permission.allowAll, { label: "reader", postures: ["read"] })
      const { deps, state, subscription } = yield* harness(readOnly)
      const message = yield* runTools(deps, state, [
        { id: "1", name: "teleport", params: {} },
        { id: "2", name: "fail", params: "{not json" },
        { id: "3", name: "fail", params: { extra: 1 } },
        { id: "4", name: "echo", params: { path: "a" } },
        { id: "5", name: "fail", params: "  " }
      ])
      const payloads = message.content.map((_, index) => {
        const part = resultOf(message, index)
        return [part.id, part.isFailure, (part.result as { error: string }).error]
      })
      assert.deepStrictEqual(payloads, [
        ["1", true, "UnknownTool"],
        ["2", true, "InvalidArguments"],
        ["3", true, "InvalidArguments"],
        ["4", true, "PermissionDenied"],
        ["5", true, "ToolFailure"]
      ])
      const messageOf = (index: number) => (resultOf(message, index).result as { message: string }).message
      assert.strictEqual(
        messageOf(0),
        `there is no tool named "teleport"; available tools: ${state.view.tools.map((t) => t.name).join(", ")}`
      )
      assert.match(
        messageOf(1),
        /^invalid arguments for "fail": arguments are not valid JSON \(SyntaxError: .*\)\. Fix/
      )
      assert.match(
        messageOf(2),
        /^invalid arguments for "fail": .*extra.* \(unexpected: extra; accepted: why\)\. Fix the arguments and call it again\.$/s
      )
      // An empty argument string is no arguments: the call runs, and fails in its handler.
      assert.strictEqual(messageOf(4), "fail: as designed")
      assert.strictEqual(state.toolCalls, 5)
      const results = (yield* PubSub.takeAll(subscription)).filter((e) => e.type === "tool_result")
      assert.deepStrictEqual(
        results.map((e) => [e.isFailure, e.changed]),
        Array.from({ length: 5 }, () => [true, undefined])
      )
      assert.include(results.find((e) => e.tool === "teleport")!.reason!, "there is no tool named")
    }).pipe(provideNode))

  it.effect("a refusal's hint names keys only of an object; a tool without arguments says so; one tool message", () =>
    Effect.gen(function*() {
      const { deps, state } = yield* harness()
      yield* deps.registry.register(ToolRegistry.define({
        name: "ping",
        description: "takes nothing",
        parameters: Schema.Struct({}),
        posture: "read",
        handler: () => Effect.succeed("pong")
      }))
      const message = yield* runTools(deps, state, [
        { id: "a", name: "fail", params: "\"text\"" },
        { id: "b", name: "fail", params: "[1]" },
        { id: "c", name: "fail", params: "null" },
        { id: "d", name: "fail", params: { why: 5 } },
        { id: "e", name: "ping", params: { x: 1 } }
      ])
      assert.strictEqual(message.role, "tool")
      const texts = message.content.map((_, index) => {
        const part = resultOf(message, index)
        return [part.id, (part.result as { error: string }).error, (part.result as { message: string }).message]
      })
      assert.deepStrictEqual(texts.map(([id, error]) => [id, error]), [
        ["a", "InvalidArguments"],
        ["b", "InvalidArguments"],
        ["c", "InvalidArguments"],
        ["d", "InvalidArguments"],
        ["e", "InvalidArguments"]
      ])
      // A string, an array, null, a declared key of the wrong type: nothing undeclared to name,
      // so the refusal is the decoder's message and nothing more.
      const fail = Option.getOrThrow(deps.registry.get("fail"))
      const inputs = ["text", [1], null, { why: 5 }]
      for (const [index, [id, , text]] of texts.slice(0, 4).entries()) {
        const decoded = yield* Effect.flip(fail.decode(inputs[index]))
        assert.strictEqual(
          text,
          `invalid arguments for "fail": ${decoded.message}. Fix the arguments and call it again.`,
          id
        )
      }
      assert.include(texts[4]![2], " (this tool takes no arguments: call it with {}). Fix the arguments")
    }).pipe(provideNode))

  it("UnknownTool with no tools at all says none", () => {
    assert.strictEqual(
      new UnknownTool({ name: "x", available: [] }).message,
      `there is no tool named "x"; available tools: none`
    )
    assert.strictEqual(
      new InvalidArguments({ tool: "t", reason: "r" }).message,
      `invalid arguments for "t": r. Fix the arguments and call it again.`
    )
  })

  it.effect("a tool the view hides is still found in the registry, and then denied by the rules", () =>
    Effect.gen(function*() {
      const readOnly = Permission.derive(Permission.allowAll, { label: "reader", postures: ["read"] })
      const { deps, state } = yield* harness(readOnly)
      assert.isFalse(state.view.byName.has("echo"))
      const message = yield* runTools(deps, state, [{ id: "1", name: "echo", params: { path: "a" } }])
      assert.strictEqual((resultOf(message, 0).result as { error: string }).error, "PermissionDenied")
    }).pipe(provideNode))

  it.effect("with onResult, each result is handed over as it lands; an interrupted turn keeps the landed ones", () =>
    Effect.gen(function*() {
      const { deps, state } = yield* harness()
      const registry = deps.registry
      yield* registry.register(ToolRegistry.define({
        name: "wait",
        description: "never returns",
        parameters: Schema.Struct({}),
        posture: "read",
        handler: () => Effect.never
      }))
      state.view = registry.view(Permission.allowAll)
      const handed: Array<string> = []
      const onResult = (_: SessionState, part: Prompt.ToolResultPart) => Effect.sync(() => void handed.push(part.id))
      const single = yield* runTools({ ...deps, onResult }, state, [{ id: "s", name: "fail", params: {} }])
      assert.deepStrictEqual([single.content.length, handed], [1, ["s"]])
      const fiber = yield* Effect.forkChild(
        runTools({ ...deps, onResult }, state, [
          { id: "a", name: "echo", params: { path: "x" } },
          { id: "b", name: "wait", params: {} }
        ]),
        { startImmediately: true }
      )
      yield* Effect.yieldNow
      assert.deepStrictEqual(handed, ["s", "a"])
      yield* Fiber.interrupt(fiber)
      assert.strictEqual(state.messages.length, 1)
      const kept = state.messages[0]!
      assert.strictEqual(kept.role, "tool")
      assert.deepStrictEqual(
        (kept as Prompt.ToolMessage).content.map((_, index) => resultOf(kept as Prompt.ToolMessage, index).id),
        ["a"]
      )
      // Without onResult nothing is kept on interruption: the session records the whole turn itself.
      const plain = yield* Effect.forkChild(
        runTools(deps, state, [{ id: "c", name: "echo", params: { path: "y" } }, {
          id: "d",
          name: "wait",
          params: {}
        }]),
        { startImmediately: true }
      )
      yield* Effect.yieldNow
      yield* Fiber.interrupt(plain)
      assert.strictEqual(state.messages.length, 1)
    }).pipe(provideNode))

  it.effect("with onResult and now (the loop's single call), a call that lands at once is kept when the hand-over is interrupted", () =>
    Effect.gen(function*() {
      const { deps, state } = yield* harness()
      const handed: Array<string> = []
      // The hand-over never returns: the turn is interrupted after the result landed, during it.
      const onResult = (_: SessionState, part: Prompt.ToolResultPart) =>
        Effect.andThen(Effect.sync(() => void handed.push(part.id)), Effect.never)
      const fiber = yield* Effect.forkChild(
        Effect.suspend(() =>
          runTools({ ...deps, onResult }, state, [{ id: "n", name: "echo", params: { path: "z" } }], true)
        ),
        { startImmediately: true }
      )
      yield* Effect.yieldNow
      assert.deepStrictEqual(handed, ["n"])
      assert.strictEqual(state.messages.length, 0)
      yield* Fiber.interrupt(fiber)
      assert.strictEqual(state.messages.length, 1)
      assert.deepStrictEqual(
        (state.messages[0] as Prompt.ToolMessage).content.map((_, index) =>
          resultOf(state.messages[0] as Prompt.ToolMessage, index).id
        ),
        ["n"]
      )
      // Landed and handed over: the whole message, and nothing kept twice.
      const done = yield* runTools({ ...deps, onResult: () => Effect.void }, state, [{
        id: "m",
        name: "echo",
        params: { path: "w" }
      }], true)
      assert.deepStrictEqual([done.content.length, state.messages.length], [1, 1])
    }).pipe(provideNode))
})

describe("loop/ edges (tests from the second mutation run)", () => {
  const Target = Schema.Struct({ path: Schema.String })

  /** A registry of four tools that differ only in posture, paths and outcome, and a state over it. */
  const tools = Effect.gen(function*() {
    const { get } = yield* setup({ rules: [] })
    const registry = get(ToolRegistry.ToolRegistry)
    const define = (
      name: string,
      posture: "read" | "write",
      paths: ((params: typeof Target.Type) => ReadonlyArray<string>) | undefined,
      handler: () => Effect.Effect<unknown, ToolRegistry.ToolFailure>
    ) =>
      registry.register(ToolRegistry.define({ name, description: name, parameters: Target, posture, paths, handler }))
    yield* define("peek", "read", (params) => [params.path], () => Effect.succeed("seen"))
    yield* define("touch_nothing", "write", () => [], () => Effect.succeed("nothing"))
    yield* define(
      "write_fails",
      "write",
      (params) => [params.path],
      () => Effect.fail(new ToolRegistry.ToolFailure({ tool: "write_fails", reason: "disk full" }))
    )
    yield* define("hang", "read", undefined, () => Effect.never)
    const events = get(AgentEvents)
    const subscription = yield* events.subscribe
    const state = {
      id: "child-1",
      parent: { id: "root-1" },
      depth: 1,
      role: "explore",
      model: "small",
      description: "look around",
      messages: [],
      rules: Permission.allowAll,
      view: registry.view(Permission.allowAll),
      treeUsage: { input: 10, output: 20, cached: 5 },
      steps: 3,
      toolCalls: 0,
      lastTool: undefined,
      clock: yield* Clock.Clock
    } as unknown as SessionState
    const deps = { registry, permission: get(Permission.Permission), events, onResult: undefined, onEvent: undefined }
    return { state, deps, subscription }
  })

  it.effect("changed names the paths of a writing call that succeeded, and nothing else", () =>
    Effect.gen(function*() {
      const { deps, state, subscription } = yield* tools
      const message = yield* runTools(deps, state, [
        { id: "1", name: "peek", params: { path: "read.md" } },
        { id: "2", name: "touch_nothing", params: { path: "x" } },
        { id: "3", name: "write_fails", params: { path: "w.md" } }
      ])
      const results = (yield* PubSub.takeAll(subscription)).filter((e) => e.type === "tool_result")
      // The loop ran these calls itself: no result says the provider did.
      assert.deepStrictEqual(message.content.map((part) => (part as Prompt.ToolResultPart).providerExecuted), [
        false,
        false,
        false
      ])
      assert.deepStrictEqual(
        results.map((e) => [e.tool, e.isFailure, e.changed]).sort(),
        [["peek", false, undefined], ["touch_nothing", false, undefined], ["write_fails", true, undefined]].sort()
      )
    }).pipe(provideNode))

  it.effect("an event carries a snapshot of the agent: its parent, place, step, calls and tree usage", () =>
    Effect.gen(function*() {
      const { deps, state, subscription } = yield* tools
      yield* runTools(deps, state, [{ id: "1", name: "peek", params: { path: "a" } }])
      const [called, landed] = yield* PubSub.takeAll(subscription)
      const expected = {
        agentId: "child-1",
        parentId: "root-1",
        depth: 1,
        role: "explore",
        model: "small",
        description: "look around",
        step: 3,
        toolCalls: 1,
        lastTool: "peek",
        usage: { input: 10, output: 20, cached: 5 }
      }
      assert.deepStrictEqual(called!.agent, expected)
      assert.deepStrictEqual(landed!.agent, expected)
    }).pipe(provideNode))

  it.effect("a turn's calls run at once: a later call lands while an earlier one still runs", () =>
    Effect.gen(function*() {
      const { deps, state } = yield* tools
      const handed: Array<string> = []
      const onResult = (_: SessionState, part: Prompt.ToolResultPart) => Effect.sync(() => void handed.push(part.id))
      const fiber = yield* Effect.forkChild(
        runTools({ ...deps, onResult }, state, [
          { id: "slow", name: "hang", params: { path: "a" } },
          { id: "fast", name: "peek", params: { path: "b" } }
        ]),
        { startImmediately: true }
      )
      yield* Effect.yieldNow
      assert.deepStrictEqual(handed, ["fast"])
      yield* Fiber.interrupt(fiber)
      assert.deepStrictEqual(state.messages.map((m) => m.role), ["tool"])
    }).pipe(provideNode))

  it.effect("a turn interrupted before any result landed adds no message", () =>
    Effect.gen(function*() {
      const { deps, state } = yield* tools
      const onResult = () => Effect.void
      const fiber = yield* Effect.forkChild(
        runTools({ ...deps, onResult }, state, [
          { id: "a", name: "hang", params: { path: "a" } },
          { id: "b", name: "hang", params: { path: "b" } }
        ]),
        { startImmediately: true }
      )
      yield* Effect.yieldNow
      yield* Fiber.interrupt(fiber)
      assert.deepStrictEqual(state.messages, [])
    }).pipe(provideNode))

  it.effect("a rate limit that names no Retry-After waits the backoff", () =>
    Effect.gen(function*() {
      const scripted = yield* ScriptedModel.make({ rules: [{ turns: [{ text: "after the limit" }] }] })
      let calls = 0
      const model: LanguageModel.LanguageModel = {
        ...scripted,
        // The call builds its request once and runs it again for each attempt.
        generateText: (options: Parameters<LanguageModel.LanguageModel["generateText"]>[0]) =>
          Effect.suspend(() =>
            calls++ === 0
              ? Effect.fail(
                AiError.make({ module: "Test", method: "generateText", reason: new AiError.RateLimitError({}) })
              )
              : scripted.generateText(options)
          )
      } as LanguageModel.LanguageModel
      const toolkit = yield* emptyToolkit
      const retries: Array<number> = []
      const fiber = yield* Effect.forkChild(
        callModel(model, Prompt.make("hi"), toolkit, policy, (_, __, delayMs) =>
          Effect.sync(() =>
            void retries.push(delayMs)
          )),
        { startImmediately: true }
      )
      yield* TestClock.adjust("1 second")
      assert.strictEqual((yield* Fiber.join(fiber)).text, "after the limit")
      assert.strictEqual(retries.length, 1)
      assert.isTrue(retries[0]! >= 500 && retries[0]! <= 1000, String(retries[0]))
    }))

  // A timer longer than 2^31 - 1 ms fires at once in Node (with a TimeoutOverflowWarning).
  it.live("on the live clock, an api_timeout_secs past the timer's range waits, not times out at once", () =>
    Effect.gen(function*() {
      const { attempts, fiber, retries } = yield* call(
        { rules: [{ turns: [{ hang: true }] }] },
        { ...policy, apiTimeoutSecs: 30 * 24 * 60 * 60 }
      )
      // Long enough for an overflowed (1 ms) timer to have fired.
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 20)))
      assert.deepStrictEqual([attempts.length, retries.length], [1, 0])
      assert.isUndefined(fiber.pollUnsafe())
      yield* Fiber.interrupt(fiber)
    }))

  // The same as "interrupting a waiting call clears its timer" above, watching the attempt's own
  // timer rather than counting the process's timers (which other work can start or end meanwhile).
  it.live("on the live clock, the attempt's own timer is cleared when the waiting call is interrupted", () =>
    Effect.gen(function*() {
      const timeoutMs = 123_456_000
      const created: Array<unknown> = []
      const cleared: Array<unknown> = []
      const realSet = globalThis.setTimeout
      const realClear = globalThis.clearTimeout
      const spySet = (...args: Parameters<typeof setTimeout>) => {
        const timer = realSet(...args)
        if (args[1] === timeoutMs) created.push(timer)
        return timer
      }
      const spyClear = (timer: Parameters<typeof clearTimeout>[0]) => {
        if (created.includes(timer)) cleared.push(timer)
        realClear(timer)
      }
      yield* Effect.acquireRelease(
        Effect.sync(() => {
          globalThis.setTimeout = spySet as typeof setTimeout
          globalThis.clearTimeout = spyClear as typeof clearTimeout
        }),
        () =>
          Effect.sync(() => {
            globalThis.setTimeout = realSet
            globalThis.clearTimeout = realClear
          })
      )
      const { attempts, fiber } = yield* call(
        { rules: [{ turns: [{ hang: true }] }] },
        { ...policy, apiTimeoutSecs: timeoutMs / 1000 }
      )
      yield* Effect.yieldNow
      assert.strictEqual(attempts.length, 1)
      assert.strictEqual(created.length, 1, "one timer for the attempt")
      assert.deepStrictEqual(cleared, [])
      yield* Fiber.interrupt(fiber)
      assert.deepStrictEqual(cleared, created)
    }).pipe(Effect.scoped))
})

// eventOf builds an event field by field (a spread of every event shape was a megamorphic
// copy): it must give what the spread gives, for any event, keys set to undefined included.
describe("loop/State.eventOf", () => {
  const EventType = Schema.Literals([
    "spawned",
    "started",
    "step",
    "retry",
    "tool_call",
    "tool_result",
    "completed",
    "failed",
    "cancelled",
    "interrupted"
  ])
  const Given = Schema.Struct({
    type: EventType,
    tool: Schema.optionalKey(Schema.UndefinedOr(Schema.String)),
    reason: Schema.optionalKey(Schema.UndefinedOr(Schema.String)),
    isFailure: Schema.optionalKey(Schema.UndefinedOr(Schema.Boolean)),
    changed: Schema.optionalKey(Schema.UndefinedOr(Schema.Array(Schema.String)))
  })
  const state = {
    id: "agent-1",
    parent: { id: "agent-0" },
    depth: 1,
    role: "worker",
    model: "m",
    description: "d",
    treeUsage: { input: 1, output: 2, cached: 3 },
    steps: 4,
    toolCalls: 5,
    lastTool: "read",
    clock: { currentTimeMillisUnsafe: () => 1234 }
  } as unknown as SessionState

  it.prop("the event as given, with the agent's snapshot and the clock's time", [Given], ([event]) => {
    const got = eventOf(state, event)
    assert.deepStrictEqual(got, { ...event, agent: snapshot(state), at: 1234 })
    assert.deepStrictEqual(Object.keys(got).sort(), Object.keys({ ...event, agent: 0, at: 0 }).sort())
  })
})
