// DirectModel: the agent loop's model call, taken straight to the provider's parts when nothing
// would observe LanguageModel's machinery, gives what LanguageModel.make's path gives. Checked
// here on the ScriptedModel (the OpenAI provider has its own test on completions).
import { assert, describe, it } from "@effect/vitest"
import { ScriptedModel } from "@fibril/testkit"
import { Effect, Schema, Stream, Tracer } from "effect"
import { LanguageModel, Prompt, type Response, Tool } from "effect/ai"
import * as DirectModel from "../src/DirectModel.ts"

const toolkit = {
  tools: {
    read_file: Tool.make("read_file", {
      description: "Read a file",
      parameters: Schema.Struct({ path: Schema.String })
    }),
    list_dir: Tool.make("list_dir", { description: "List", parameters: Schema.Struct({}) })
  },
  handle: () => Effect.die("tools are not run here")
}

const prompt = (text: string) =>
  Prompt.fromMessages([
    Prompt.makeMessage("system", { content: "Fibril agent: role=explore depth=1\n\nYou explore." }),
    Prompt.makeMessage("user", { content: [Prompt.makePart("text", { text })] })
  ])

const call = (model: LanguageModel.LanguageModel, text: string) =>
  model.generateText({ prompt: prompt(text), toolkit, disableToolCallResolution: true, toolCallValidation: "deferred" })

const recordingTracer = () => {
  const names: Array<string> = []
  const tracer = Tracer.make({
    span(options) {
      names.push(options.name)
      return Tracer.nativeTracer.span(options)
    }
  })
  return { names, tracer }
}

describe("DirectModel on the ScriptedModel", () => {
  it.effect("the same response as LanguageModel.make's path: text, tool calls (one not JSON), usage, metadata", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel.make({
        rules: [
          {
            match: { prompt: "text" },
            turns: [{ text: "an answer", usage: { input: 30, output: 4, cached: 10 } }],
            repeat_last: true
          },
          {
            match: { prompt: "calls" },
            turns: [{
              text: "looking",
              tool_calls: [{ name: "read_file", args: { path: "a.ts" } }, { name: "no_such_tool", args: "{not json" }]
            }],
            repeat_last: true
          }
        ]
      })
      for (const text of ["text", "calls"]) {
        const direct = yield* call(model, text)
        const { names, tracer } = recordingTracer()
        const generic = yield* call(model, text).pipe(Effect.withTracer(tracer))
        // The tracer got the generic path, with its span; the direct call made none.
        assert.include(names, "LanguageModel.generateText")
        assert.deepStrictEqual(direct.content, generic.content)
        assert.strictEqual(direct.text, generic.text)
        assert.deepStrictEqual(direct.toolCalls, generic.toolCalls)
        assert.deepStrictEqual(direct.usage, generic.usage)
        assert.strictEqual(direct.finishReason, generic.finishReason)
      }
    }))

  it.effect("a scripted error is the same AiError on both paths", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel.make({
        rules: [{ turns: [{ error: { kind: "retryable", message: "slow down" } }], repeat_last: true }]
      })
      const direct = yield* Effect.flip(call(model, "x"))
      const generic = yield* Effect.flip(call(model, "x").pipe(Effect.withTracer(recordingTracer().tracer)))
      assert.strictEqual(direct._tag, "AiError")
      assert.strictEqual(direct.reason._tag, generic.reason._tag)
      assert.strictEqual(direct.message, generic.message)
    }))

  // The finish and metadata parts are built directly only when plainly valid; every other
  // shape goes through their schemas: the same value, or the same InvalidOutputError.
  const withParts = (parts: ReadonlyArray<Response.PartEncoded>) =>
    Effect.flatMap(
      LanguageModel.make({
        generateText: () => Effect.succeed([...parts]),
        streamText: () => Stream.die("not used")
      }),
      (made) => DirectModel.make(made, () => Effect.succeed(parts))
    )
  const usage = { inputTokens: { total: 12, cacheRead: 2, uncached: 10 }, outputTokens: { total: 3, text: 3 } }
  const shapes: ReadonlyArray<readonly [string, ReadonlyArray<Response.PartEncoded>, boolean]> = [
    ["plain valid parts", [
      { type: "response-metadata", id: "r1", modelId: "m", timestamp: "2026-11-23T12:00:00.000Z" },
      { type: "text", text: "hi" },
      { type: "finish", reason: "stop", usage }
    ], true],
    ["no timestamp, undefined counts", [
      { type: "response-metadata", id: "r1", modelId: "m" },
      { type: "finish", reason: "tool-calls", usage: { inputTokens: { total: undefined }, outputTokens: {} } }
    ], true],
    ["provider metadata (the schema's path)", [
      { type: "response-metadata", id: "r1", metadata: { openai: { tier: "x" } } },
      { type: "finish", reason: "stop", usage, metadata: { openai: { a: 1 } } }
    ], true],
    ["a fractional token count", [{
      type: "finish",
      reason: "stop",
      usage: { ...usage, outputTokens: { total: 1.5 } }
    }], false],
    ["an unknown finish reason", [{ type: "finish", reason: "bored" as "stop", usage }], false],
    ["a timestamp that is no date", [{ type: "response-metadata", id: "r1", timestamp: "yesterday" }], false],
    ["an id that is not a string", [{ type: "response-metadata", id: 42 as unknown as string }], false]
  ]
  for (const [name, parts, valid] of shapes) {
    it.effect(`finish and metadata parts as the schema makes them: ${name}`, () =>
      Effect.gen(function*() {
        const model = yield* withParts(parts)
        const direct = yield* Effect.exit(call(model, "x"))
        const generic = yield* Effect.exit(call(model, "x").pipe(Effect.withTracer(recordingTracer().tracer)))
        assert.strictEqual(direct._tag, valid ? "Success" : "Failure")
        if (direct._tag === "Success" && generic._tag === "Success") {
          assert.deepStrictEqual(direct.value.content, generic.value.content)
          assert.deepStrictEqual(direct.value.usage, generic.value.usage)
        } else {
          const reason = (exit: typeof direct) =>
            exit._tag === "Failure" ? String(exit.cause).match(/InvalidOutputError/)?.[0] : undefined
          assert.strictEqual(reason(direct), "InvalidOutputError")
          assert.strictEqual(reason(direct), reason(generic))
        }
      }))
  }
})
