// DirectModel: the agent loop's model call, taken straight to the provider's parts when nothing
// would observe LanguageModel's machinery, gives what LanguageModel.make's path gives. Checked
// here on the ScriptedModel (the OpenAI provider has its own test on completions).
import { assert, describe, it } from "@effect/vitest"
import { ScriptedModel } from "@fibril/testkit"
import { Effect, Schema, Tracer } from "effect"
import { type LanguageModel, Prompt, Tool } from "effect/ai"

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
})
