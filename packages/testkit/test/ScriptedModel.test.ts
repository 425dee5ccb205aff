import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Duration, Effect, Exit, Fiber, FileSystem, Result, Schema, Stream } from "effect"
import { LanguageModel, Tool, Toolkit } from "effect/ai"
import type { Prompt } from "effect/ai"
import { TestClock } from "effect/testing"
import { fileURLToPath } from "node:url"
import { ScriptedModel } from "../src/index.ts"

// --- conversations built by hand, as the agent loop would send them --------------------------

type Msg = Prompt.MessageEncoded

const system = (role: string, depth = 1, rest = "You are a careful agent."): Msg => ({
  role: "system",
  content: `Fibril agent: role=${role} depth=${depth}\n${rest}`
})
const user = (text: string): Msg => ({ role: "user", content: text })
const assistantText = (text: string): Msg => ({ role: "assistant", content: text })
const assistantCalls = (...calls: Array<{ id: string; name: string; params: unknown }>): Msg => ({
  role: "assistant",
  content: calls.map((c) => ({ type: "tool-call" as const, ...c }))
})
const toolResults = (...results: Array<{ id: string; name: string; result: unknown; isFailure?: boolean }>): Msg => ({
  role: "tool",
  content: results.map((r) => ({
    type: "tool-result" as const,
    id: r.id,
    name: r.name,
    result: r.result,
    isFailure: r.isFailure ?? false
  }))
})

const ReadFile = Tool.make("read_file", {
  description: "Read a file",
  parameters: Schema.Struct({ path: Schema.String }),
  success: Schema.String
})
const Tools = Toolkit.make(ReadFile)

// Exactly how the Fibril agent loop calls the model.
const generate = (prompt: ReadonlyArray<Msg>) =>
  LanguageModel.generateText({
    prompt,
    toolkit: Tools,
    disableToolCallResolution: true,
    toolCallValidation: "deferred"
  })

const run = (script: ScriptedModel.ScriptInput, prompt: ReadonlyArray<Msg>) =>
  generate(prompt).pipe(Effect.provide(ScriptedModel.layer(script)))

const failure = (script: ScriptedModel.ScriptInput, prompt: ReadonlyArray<Msg>) => Effect.flip(run(script, prompt))

const descriptionOf = (error: { readonly reason: { readonly _tag: string } }) =>
  "description" in error.reason ? String(error.reason.description) : ""

const explore = [system("explore"), user("Find where the config is loaded")]

// --- matching ----------------------------------------------------------------------------------

describe("ScriptedModel matching", () => {
  it.effect("matches the header role case-insensitively", () =>
    Effect.gen(function*() {
      const script: ScriptedModel.ScriptInput = {
        rules: [
          { match: { role: "PLAN" }, turns: [{ text: "plan" }] },
          { match: { role: "Explore" }, turns: [{ text: "explore" }] }
        ]
      }
      assert.strictEqual((yield* run(script, explore)).text, "explore")
      assert.strictEqual((yield* run(script, [system("plan"), user("x")])).text, "plan")
      assert.strictEqual((yield* run(script, [system("Plan"), user("x")])).text, "plan")
    }))

  it.effect("matches depth, prompt and system substrings; the first matching rule wins", () =>
    Effect.gen(function*() {
      const script: ScriptedModel.ScriptInput = {
        rules: [
          { match: { role: "explore", depth: 2 }, turns: [{ text: "deep explorer" }] },
          { match: { prompt: "config" }, turns: [{ text: "config task" }] },
          { match: { system: "careful" }, turns: [{ text: "careful agent" }] },
          { turns: [{ text: "fallback" }] }
        ]
      }
      assert.strictEqual((yield* run(script, [system("explore", 2), user("Find the config")])).text, "deep explorer")
      assert.strictEqual((yield* run(script, explore)).text, "config task") // depth 1: rule 1 does not hold
      assert.strictEqual((yield* run(script, [system("review"), user("Review it")])).text, "careful agent")
      assert.strictEqual(
        (yield* run(script, [{ role: "system", content: "Fibril agent: role=general depth=0" }, user("hi")])).text,
        "fallback"
      )
    }))

  it.effect("no matching rule: a fatal error that says what was seen", () =>
    Effect.gen(function*() {
      const error = yield* failure({ rules: [{ match: { role: "plan" }, turns: [{ text: "x" }] }] }, explore)
      assert.strictEqual(error.reason._tag, "InvalidRequestError")
      assert.isFalse(error.isRetryable)
      const description = descriptionOf(error)
      assert.include(description, "no rule matches")
      assert.include(description, "role=explore depth=1")
      assert.include(description, `prompt="Find where the config is loaded"`)
      assert.include(description, "rule 1 (role=plan)")
    }))

  it.effect("without a header, only rules without role/depth can match", () =>
    Effect.gen(function*() {
      const script = { rules: [{ match: { role: "general" }, turns: [{ text: "x" }] }] }
      const error = yield* failure(script, [user("hello")])
      assert.include(descriptionOf(error), "role=<no header> depth=<no header>")
      assert.strictEqual((yield* run({ rules: [{ turns: [{ text: "any" }] }] }, [user("hello")])).text, "any")
    }))
})

// --- turns ---------------------------------------------------------------------------------------

describe("ScriptedModel turns", () => {
  const script: ScriptedModel.ScriptInput = {
    rules: [{
      name: "explorer",
      match: { role: "explore" },
      turns: [
        { tool_calls: [{ name: "read_file", args: { path: "src/config.ts" } }] },
        { text: "thinking", tool_calls: [{ name: "read_file", args: { path: "a.ts" }, id: "mine" }] },
        { text: "SUMMARY\nconfig is loaded in src/config.ts" }
      ]
    }]
  }

  it.effect("turn i plays turns[i], counting assistant messages", () =>
    Effect.gen(function*() {
      const first = yield* run(script, explore)
      assert.strictEqual(first.finishReason, "tool-calls")
      assert.deepStrictEqual(
        first.toolCalls.map((c) => [c.id, c.name, c.params]),
        [["call_0_0", "read_file", { path: "src/config.ts" }]]
      )
      const second = [
        ...explore,
        assistantCalls({ id: "call_0_0", name: "read_file", params: { path: "src/config.ts" } }),
        toolResults({ id: "call_0_0", name: "read_file", result: "export const config = {}" })
      ]
      const r2 = yield* run(script, second)
      assert.strictEqual(r2.text, "thinking")
      assert.deepStrictEqual(r2.toolCalls.map((c) => c.id), ["mine"])
      const third = [
        ...second,
        assistantCalls({ id: "mine", name: "read_file", params: { path: "a.ts" } }),
        toolResults({ id: "mine", name: "read_file", result: "a" })
      ]
      const r3 = yield* run(script, third)
      assert.strictEqual(r3.finishReason, "stop")
      assert.strictEqual(r3.text, "SUMMARY\nconfig is loaded in src/config.ts")
      assert.strictEqual(r3.toolCalls.length, 0)
    }))

  it.effect("every response carries response-metadata with modelId \"scripted\"", () =>
    Effect.gen(function*() {
      const r = yield* run(script, explore)
      const metadata = r.content.find((p) => p.type === "response-metadata")
      assert.strictEqual(metadata?.type === "response-metadata" ? metadata.modelId : undefined, "scripted")
      assert.strictEqual(ScriptedModel.modelId, "scripted")
    }))

  it.effect("several tool calls in one turn get ids call_<turn>_<index>; raw string args pass through", () =>
    Effect.gen(function*() {
      const r = yield* run({
        rules: [{
          turns: [{ text: "x" }, {
            tool_calls: [
              { name: "read_file", args: { path: "a" } },
              { name: "read_file", args: "{not json" },
              { name: "grep" }
            ]
          }]
        }]
      }, [system("general"), user("go"), assistantText("x"), user("more")])
      assert.deepStrictEqual(
        r.toolCalls.map((c) => [c.id, c.name, c.params]),
        [["call_1_0", "read_file", { path: "a" }], ["call_1_1", "read_file", "{not json"], ["call_1_2", "grep", {}]]
      )
    }))

  it.effect("past the last turn: fatal error naming rule and turn, unless repeat_last", () =>
    Effect.gen(function*() {
      const twoTurns = {
        rules: [
          { match: { role: "plan" }, turns: [{ text: "no" }] },
          { match: { role: "explore" }, turns: [{ text: "a" }, { text: "b" }] }
        ]
      }
      const convo = [...explore, assistantText("a"), user("again"), assistantText("b"), user("and again")]
      const error = yield* failure(twoTurns, convo)
      assert.strictEqual(error.reason._tag, "InvalidRequestError")
      assert.isFalse(error.isRetryable)
      assert.strictEqual(
        descriptionOf(error),
        "ScriptedModel: rule 2 (role=explore) has 2 turns; the conversation is at turn 3"
      )
      const repeating = {
        rules: [{ match: { role: "explore" }, turns: [{ text: "a" }, { text: "b" }], repeat_last: true }]
      }
      assert.strictEqual((yield* run(repeating, convo)).text, "b")
      assert.strictEqual((yield* run(repeating, [...convo, assistantText("b"), user("more")])).text, "b")
    }))

  it.effect("a forked child counts only assistant messages after the [fork] marker", () =>
    Effect.gen(function*() {
      const forkScript: ScriptedModel.ScriptInput = {
        rules: [
          {
            match: { role: "explore", prompt: "child task" },
            turns: [{ text: "child turn 0" }, { text: "child turn 1" }]
          },
          { turns: [{ text: "parent" }] }
        ]
      }
      const parentHistory = [
        system("general", 0),
        user("parent task"),
        assistantText("p1"),
        user("go on"),
        assistantText("p2")
      ]
      const fork = [
        ...parentHistory,
        user("[fork] you are a fork of the agent above"),
        user("Fibril agent: role=explore depth=1\nExplore read-only."),
        user("child task: list the files")
      ]
      assert.strictEqual((yield* run(forkScript, fork)).text, "child turn 0")
      assert.strictEqual(
        (yield* run(forkScript, [...fork, assistantText("child turn 0"), user("next")])).text,
        "child turn 1"
      )
    }))
})

// --- usage -----------------------------------------------------------------------------------------

describe("ScriptedModel usage", () => {
  it.effect("explicit usage, cached → inputTokens.cacheRead", () =>
    Effect.gen(function*() {
      const r = yield* run(
        { rules: [{ turns: [{ text: "hi", usage: { input: 1000, output: 20, cached: 800 } }] }] },
        explore
      )
      assert.strictEqual(r.usage.inputTokens.total, 1000)
      assert.strictEqual(r.usage.inputTokens.cacheRead, 800)
      assert.strictEqual(r.usage.inputTokens.uncached, 200)
      assert.strictEqual(r.usage.outputTokens.total, 20)
    }))

  it.effect("default usage: ceil(chars / 4) of prompt and reply, cached 0", () =>
    Effect.gen(function*() {
      const prompt = [{ role: "system" as const, content: "Fibril agent: role=general depth=0" }, user("12345678")]
      const r = yield* run({ rules: [{ turns: [{ text: "abcde" }] }] }, prompt)
      assert.strictEqual(r.usage.inputTokens.total, Math.ceil(("Fibril agent: role=general depth=0".length + 8) / 4))
      assert.strictEqual(r.usage.inputTokens.cacheRead, 0)
      assert.strictEqual(r.usage.outputTokens.total, 2)
      const calls = yield* run(
        { rules: [{ turns: [{ tool_calls: [{ name: "read_file", args: { path: "a" } }] }] }] },
        prompt
      )
      assert.strictEqual(calls.usage.outputTokens.total, Math.ceil(("read_file".length + `{"path":"a"}`.length) / 4))
      const partial = yield* run({ rules: [{ turns: [{ text: "abcde", usage: { cached: 3 } }] }] }, prompt)
      assert.strictEqual(partial.usage.inputTokens.total, r.usage.inputTokens.total)
      assert.strictEqual(partial.usage.inputTokens.cacheRead, 3)
    }))

  it.effect("usage: null reports no counts at all (a provider without usage)", () =>
    Effect.gen(function*() {
      const r = yield* run({ rules: [{ turns: [{ text: "hi", usage: null }] }] }, explore)
      assert.isUndefined(r.usage.inputTokens.total)
      assert.isUndefined(r.usage.outputTokens.total)
      assert.isUndefined(r.usage.inputTokens.cacheRead)
      const decoded = yield* Schema.decodeUnknownEffect(ScriptedModel.Script)({
        rules: [{ turns: [{ text: "hi", usage: null }] }]
      })
      assert.isNull(decoded.rules[0]!.turns[0]!.usage)
    }))
})

// --- time: delays and hangs ---------------------------------------------------------------------------

describe("ScriptedModel time", () => {
  it.effect("delay_ms is a sleep on the Effect clock", () =>
    Effect.gen(function*() {
      const fiber = yield* Effect.forkChild(run({ rules: [{ turns: [{ text: "late", delay_ms: 1000 }] }] }, explore))
      yield* TestClock.adjust("999 millis")
      assert.isUndefined(fiber.pollUnsafe())
      yield* TestClock.adjust("1 millis")
      assert.strictEqual((yield* Fiber.join(fiber)).text, "late")
    }))

  it.effect("hang never answers and is interruptible", () =>
    Effect.gen(function*() {
      const fiber = yield* Effect.forkChild(run({ rules: [{ turns: [{ hang: true }] }] }, explore))
      yield* TestClock.adjust("10 hours")
      assert.isUndefined(fiber.pollUnsafe())
      yield* Fiber.interrupt(fiber)
      const exit = yield* Fiber.await(fiber)
      assert.isTrue(Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause))
    }))

  it.effect("hang.times: a timed-out attempt, retried with the same conversation, then answers", () =>
    Effect.gen(function*() {
      const attempt = generate(explore).pipe(Effect.timeout("30 seconds"), Effect.result)
      const results = yield* Effect.gen(function*() {
        const first = yield* Effect.forkChild(attempt)
        yield* TestClock.adjust("30 seconds")
        const r1 = yield* Fiber.join(first)
        const r2 = yield* attempt
        return [r1, r2] as const
      }).pipe(Effect.provide(ScriptedModel.layer({ rules: [{ turns: [{ hang: { times: 1 }, text: "finally" }] }] })))
      assert.isTrue(Result.isFailure(results[0]) && Cause.isTimeoutError(results[0].failure))
      assert.isTrue(Result.isSuccess(results[1]) && results[1].success.text === "finally")
    }))
})

// --- errors ----------------------------------------------------------------------------------------------

describe("ScriptedModel errors", () => {
  it.effect("retryable with retry_after_ms → RateLimitError with retryAfter", () =>
    Effect.gen(function*() {
      const error = yield* failure(
        { rules: [{ turns: [{ error: { kind: "retryable", message: "slow down", retry_after_ms: 1500 } }] }] },
        explore
      )
      assert.strictEqual(error.module, "ScriptedModel")
      assert.strictEqual(error.method, "generateText")
      assert.strictEqual(error.reason._tag, "RateLimitError")
      assert.isTrue(error.isRetryable)
      assert.strictEqual(error.retryAfter === undefined ? -1 : Duration.toMillis(error.retryAfter), 1500)
    }))

  it.effect("retryable without retry_after_ms → InternalProviderError; fatal → InvalidRequestError", () =>
    Effect.gen(function*() {
      const retryable = yield* failure(
        { rules: [{ turns: [{ error: { kind: "retryable", message: "502" } }] }] },
        explore
      )
      assert.strictEqual(retryable.reason._tag, "InternalProviderError")
      assert.isTrue(retryable.isRetryable)
      assert.strictEqual(descriptionOf(retryable), "502")
      const fatal = yield* failure({ rules: [{ turns: [{ error: { kind: "fatal", message: "bad key" } }] }] }, explore)
      assert.strictEqual(fatal.reason._tag, "InvalidRequestError")
      assert.isFalse(fatal.isRetryable)
      assert.strictEqual(descriptionOf(fatal), "bad key")
    }))

  it.effect("error.times: the first n attempts of a conversation fail, then the turn answers", () =>
    Effect.gen(function*() {
      const other = [system("explore"), user("Another task")]
      const outcome = (prompt: ReadonlyArray<Msg>) =>
        generate(prompt).pipe(Effect.map((r) => r.text), Effect.catch((e) => Effect.succeed(e.reason._tag)))
      const seen = yield* Effect.all([
        outcome(explore),
        outcome(explore),
        outcome(other), // its own counter: a different conversation
        outcome(explore),
        outcome(explore)
      ]).pipe(
        Effect.provide(ScriptedModel.layer({
          rules: [{ turns: [{ error: { kind: "retryable", message: "flaky", times: 2 }, text: "ok" }] }]
        }))
      )
      assert.deepStrictEqual(seen, [
        "InternalProviderError",
        "InternalProviderError",
        "InternalProviderError",
        "ok",
        "ok"
      ])
    }))

  it.effect("each layer build starts with fresh attempt counters", () =>
    Effect.gen(function*() {
      const script = {
        rules: [{ turns: [{ error: { kind: "retryable" as const, message: "flaky", times: 1 }, text: "ok" }] }]
      }
      const first = yield* Effect.flip(run(script, explore))
      const again = yield* Effect.flip(run(script, explore))
      assert.strictEqual(first.reason._tag, "InternalProviderError")
      assert.strictEqual(again.reason._tag, "InternalProviderError")
    }))
})

// --- code-defined rules -----------------------------------------------------------------------------------------

describe("ScriptedModel respond rules", () => {
  it.effect("respond sees the conversation view", () =>
    Effect.gen(function*() {
      const views: Array<ScriptedModel.Conversation> = []
      const script: ScriptedModel.ScriptInput = {
        rules: [{
          match: { role: "explore" },
          respond: (c) => {
            views.push(c)
            return c.turn === 0
              ? { tool_calls: [{ name: "read_file", args: { path: "a" } }, { name: "read_file", args: { path: "b" } }] }
              : { text: `read ${c.lastToolResults.map((r) => String(r.result)).join("+")}` }
          }
        }]
      }
      const r1 = yield* run(script, explore)
      assert.deepStrictEqual(r1.toolCalls.map((c) => c.id), ["call_0_0", "call_0_1"])
      const convo = [
        ...explore,
        assistantCalls({ id: "call_0_0", name: "read_file", params: { path: "a" } }, {
          id: "call_0_1",
          name: "read_file",
          params: { path: "b" }
        }),
        toolResults({ id: "call_0_0", name: "read_file", result: "A" }, {
          id: "call_0_1",
          name: "read_file",
          result: "missing",
          isFailure: true
        })
      ]
      const r2 = yield* run(script, convo)
      assert.strictEqual(r2.text, "read A+missing")
      const view = views[1]!
      assert.strictEqual(view.role, "explore")
      assert.strictEqual(view.depth, 1)
      assert.strictEqual(view.prompt, "Find where the config is loaded")
      assert.include(view.system, "You are a careful agent.")
      assert.strictEqual(view.turn, 1)
      assert.strictEqual(view.messages.length, 4)
      assert.deepStrictEqual(view.toolResults, [
        { id: "call_0_0", name: "read_file", result: "A", isFailure: false },
        { id: "call_0_1", name: "read_file", result: "missing", isFailure: true }
      ])
      assert.deepStrictEqual(view.lastToolResults, view.toolResults)
    }))

  it.effect("respond may return an Effect, and its turn may delay", () =>
    Effect.gen(function*() {
      const script: ScriptedModel.ScriptInput = {
        rules: [{ respond: (c) => Effect.succeed({ text: `depth ${c.depth}`, delay_ms: 50 }) }]
      }
      const fiber = yield* Effect.forkChild(run(script, explore))
      yield* TestClock.adjust("50 millis")
      assert.strictEqual((yield* Fiber.join(fiber)).text, "depth 1")
    }))
})

// --- streaming -------------------------------------------------------------------------------------------------

describe("ScriptedModel streamText", () => {
  const script: ScriptedModel.ScriptInput = {
    rules: [
      { match: { prompt: "text" }, turns: [{ text: "streamed answer" }] },
      { turns: [{ text: "calling", tool_calls: [{ name: "read_file", args: { path: "x" } }] }] }
    ]
  }
  const stream = (prompt: ReadonlyArray<Msg>) =>
    LanguageModel.streamText({
      prompt,
      toolkit: Tools,
      disableToolCallResolution: true,
      toolCallValidation: "deferred"
    })
      .pipe(Stream.runCollect, Effect.provide(ScriptedModel.layer(script)))

  it.effect("produces the same text as generateText, with metadata and finish parts", () =>
    Effect.gen(function*() {
      const prompt = [system("general"), user("answer in text")]
      const parts = yield* stream(prompt)
      const types = parts.map((p) => p.type)
      assert.deepStrictEqual(types, ["response-metadata", "text-start", "text-delta", "text-end", "finish"])
      const text = parts.map((p) => (p.type === "text-delta" ? p.delta : "")).join("")
      const generated = yield* run(script, prompt)
      assert.strictEqual(text, generated.text)
      const metadata = parts[0]
      assert.strictEqual(metadata?.type === "response-metadata" ? metadata.modelId : undefined, "scripted")
      const finish = parts.at(-1)
      assert.strictEqual(finish?.type === "finish" ? finish.reason : undefined, "stop")
    }))

  it.effect("streams tool calls and finishes with reason tool-calls", () =>
    Effect.gen(function*() {
      const parts = yield* stream([system("general"), user("use a tool")])
      const call = parts.find((p) => p.type === "tool-call")
      assert.deepStrictEqual(call?.type === "tool-call" ? [call.id, call.name, call.params] : [], [
        "call_0_0",
        "read_file",
        { path: "x" }
      ])
      const finish = parts.at(-1)
      assert.strictEqual(finish?.type === "finish" ? finish.reason : undefined, "tool-calls")
    }))

  it.effect("errors reach the stream as AiError from streamText", () =>
    Effect.gen(function*() {
      const error = yield* LanguageModel.streamText({ prompt: explore }).pipe(
        Stream.runCollect,
        Effect.flip,
        Effect.provide(ScriptedModel.layer({ rules: [{ turns: [{ error: { kind: "fatal", message: "nope" } }] }] }))
      )
      assert.strictEqual(error.method, "streamText")
      assert.strictEqual(error.reason._tag, "InvalidRequestError")
    }))
})

// --- JSON scripts -----------------------------------------------------------------------------------------

const jsonScript = {
  description: "explore then answer",
  rules: [{
    name: "explorer",
    match: { role: "explore", depth: 1 },
    turns: [
      { tool_calls: [{ name: "read_file", args: { path: "README.md" } }], delay_ms: 10 },
      { text: "SUMMARY\ndone", usage: { input: 100, output: 10, cached: 40 } }
    ]
  }]
}

describe("ScriptedModel JSON scripts", () => {
  it("Script rejects unknown keys, naming each with its path", () => {
    const r = Schema.decodeUnknownResult(ScriptedModel.Script)({
      rules: [{ match: { rol: "explore" }, turns: [{ txt: "hi" }], repeatLast: true }]
    })
    assert.isTrue(Result.isFailure(r))
    const message = Result.isFailure(r) ? r.failure.message : ""
    assert.include(message, `["rules"][0]["match"]["rol"]`)
    assert.include(message, `["rules"][0]["turns"][0]["txt"]`)
    assert.include(message, `["rules"][0]["repeatLast"]`)
  })

  it("Script rejects turns that cannot answer", () => {
    const message = (turn: unknown) => {
      const r = Schema.decodeUnknownResult(ScriptedModel.Script)({ rules: [{ turns: [turn] }] })
      return Result.isFailure(r) ? r.failure.message : "decoded"
    }
    assert.include(message({}), "a turn needs at least one of text, tool_calls, error or hang")
    assert.include(
      message({ error: { kind: "retryable", message: "x", times: 2 } }),
      "error.times needs text or tool_calls"
    )
    assert.include(message({ hang: true, text: "x" }), "hang: true never answers")
    assert.include(
      message({ error: { kind: "fatal", message: "x", retry_after_ms: 5 } }),
      "retry_after_ms only applies"
    )
    assert.strictEqual(message({ hang: { times: 1 }, tool_calls: [{ name: "a", args: "raw" }] }), "decoded")
  })

  it.effect("layerFile loads a JSON script file", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      const path = `${dir}/script.json`
      yield* fs.writeFileString(path, JSON.stringify(jsonScript, null, 2))
      const [first, second] = yield* Effect.gen(function*() {
        const fiber = yield* Effect.forkChild(generate(explore))
        yield* TestClock.adjust("10 millis")
        const joined = yield* Fiber.join(fiber)
        const next = yield* generate([
          ...explore,
          assistantCalls({ id: "call_0_0", name: "read_file", params: { path: "README.md" } }),
          toolResults({ id: "call_0_0", name: "read_file", result: "# readme" })
        ])
        return [joined, next] as const
      }).pipe(Effect.provide(ScriptedModel.layerFile(path)))
      assert.deepStrictEqual(first.toolCalls.map((c) => c.params), [{ path: "README.md" }])
      assert.strictEqual(second.text, "SUMMARY\ndone")
      assert.strictEqual(second.usage.inputTokens.cacheRead, 40)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("a malformed or invalid file is a ScriptFileError naming the path", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      const load = (name: string, content: string | undefined) =>
        Effect.gen(function*() {
          const path = `${dir}/${name}`
          if (content !== undefined) yield* fs.writeFileString(path, content)
          const error = yield* Effect.flip(generate(explore).pipe(Effect.provide(ScriptedModel.layerFile(path))))
          return { path, error }
        })

      const bad = yield* load("bad.json", "{ \"rules\": [ ")
      assert.strictEqual(bad.error._tag, "ScriptFileError")
      if (bad.error._tag === "ScriptFileError") {
        assert.strictEqual(bad.error.path, bad.path)
        assert.include(bad.error.message, bad.path)
        assert.include(bad.error.message, "invalid JSON")
      }

      const typo = yield* load("typo.json", JSON.stringify({ rules: [{ turns: [{ text: "x", delay: 5 }] }] }))
      assert.strictEqual(typo.error._tag, "ScriptFileError")
      assert.include(typo.error.message, typo.path)
      assert.include(typo.error.message, `["rules"][0]["turns"][0]["delay"]`)

      const missing = yield* load("missing.json", undefined)
      assert.strictEqual(missing.error._tag, "ScriptFileError")
      assert.include(missing.error.message, missing.path)
      assert.include(missing.error.message, "cannot read it")
    }).pipe(Effect.provide(NodeServices.layer)))
})

describe("docs/script-format.md", () => {
  it.effect("the complete example decodes and plays as described", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const doc = yield* fs.readFileString(fileURLToPath(new URL("../../../docs/script-format.md", import.meta.url)))
      const block = /```json\n([\s\S]*?)```/.exec(doc)?.[1] ?? ""
      const script = yield* Schema.decodeUnknownEffect(Schema.fromJsonString(ScriptedModel.Script))(block)
      assert.deepStrictEqual(script.rules.map((r) => r.name), [
        "orchestrator",
        "explorer",
        "slow reviewer",
        "anyone else"
      ])
      const results = yield* Effect.gen(function*() {
        const orchestrator = yield* generate([system("general", 0), user("Where is the config loaded?")])
        const explorerTask = [system("explore", 1), user("Find where the config is loaded")]
        const fiber = yield* Effect.forkChild(generate(explorerTask))
        yield* TestClock.adjust("200 millis")
        const explorer = yield* Fiber.join(fiber)
        const turn1 = [
          ...explorerTask,
          assistantCalls({ id: "call_0_0", name: "grep", params: { pattern: "loadConfig" } }, {
            id: "read-config",
            name: "read_file",
            params: { path: "src/config.ts" }
          }),
          toolResults({ id: "call_0_0", name: "grep", result: "src/config.ts:12" }, {
            id: "read-config",
            name: "read_file",
            result: "..."
          })
        ]
        const failed = yield* Effect.flip(generate(turn1))
        const retried = yield* generate(turn1)
        const other = yield* generate([system("verifier", 1), user("run the tests")])
        return { orchestrator, explorer, failed, retried, other }
      }).pipe(Effect.provide(ScriptedModel.layer(script)))
      assert.deepStrictEqual(results.orchestrator.toolCalls.map((c) => [c.id, c.name]), [["call_0_0", "task"]])
      assert.deepStrictEqual(results.explorer.toolCalls.map((c) => c.id), ["call_0_0", "read-config"])
      assert.strictEqual(results.failed.reason._tag, "InternalProviderError")
      assert.deepStrictEqual(results.retried.toolCalls.map((c) => c.params), [`{"path": "src/main.ts"`])
      assert.include(results.other.text, "Nothing to do.")
    }).pipe(Effect.provide(NodeServices.layer)))
})

describe("ScriptedModel with several toolkits", () => {
  // Agents with different tools (a root and its sub-agents) call one model in turn; each
  // toolkit keeps its own response decoder (one LanguageModel per set of tool names).
  const Grep = Tool.make("grep", {
    description: "Search",
    parameters: Schema.Struct({ pattern: Schema.String }),
    success: Schema.String
  })
  const Both = Toolkit.make(ReadFile, Grep)
  const script: ScriptedModel.ScriptInput = {
    rules: [{
      respond: (c) =>
        c.tools.length === 0
          ? { text: "no tools" }
          : c.tools.includes("grep")
          ? { tool_calls: [{ name: "grep", args: { pattern: c.prompt } }] }
          : { tool_calls: [{ name: "read_file", args: { path: c.prompt } }] }
    }]
  }
  const call = (toolkit: typeof Tools | typeof Both, prompt: string) =>
    LanguageModel.generateText({
      prompt: [system("general"), user(prompt)],
      toolkit,
      disableToolCallResolution: true,
      toolCallValidation: "deferred"
    })
  const streamed = (toolkit: typeof Tools | typeof Both, prompt: string) =>
    LanguageModel.streamText({
      prompt: [system("general"), user(prompt)],
      toolkit,
      disableToolCallResolution: true,
      toolCallValidation: "deferred"
    }).pipe(Stream.runCollect)

  it.effect("each request's tool calls are decoded against its own toolkit, in any order", () =>
    Effect.gen(function*() {
      const calls: Array<[string, unknown]> = []
      for (const [toolkit, prompt] of [[Tools, "a.ts"], [Both, "b"], [Tools, "c.ts"], [Both, "d"]] as const) {
        const response = yield* call(toolkit, prompt)
        calls.push(...response.toolCalls.map((c): [string, unknown] => [c.name, c.params]))
      }
      assert.deepStrictEqual(calls, [
        ["read_file", { path: "a.ts" }],
        ["grep", { pattern: "b" }],
        ["read_file", { path: "c.ts" }],
        ["grep", { pattern: "d" }]
      ])
      const parts = yield* streamed(Both, "e")
      const streamedCalls = parts.flatMap((p) => (p.type === "tool-call" ? [[p.name, p.params]] : []))
      assert.deepStrictEqual(streamedCalls, [["grep", { pattern: "e" }]])
      const plain = yield* LanguageModel.generateText({ prompt: [system("general"), user("no tools")] })
      assert.deepStrictEqual([plain.text, plain.toolCalls], ["no tools", []])
    }).pipe(Effect.provide(ScriptedModel.layer(script))))
})
