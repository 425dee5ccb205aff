// The agent loop's model call (tool calls returned undecoded: `disableToolCallResolution` with
// `toolCallValidation: "deferred"`) takes OpenAiModel's direct path when nothing observes
// LanguageModel's machinery (no tracer, no span transformer, no response-id tracker, no
// approvals). These tests hold the direct path to what `LanguageModel.make` gives for the same
// completion, part for part, and check that a tracer still gets the generic path and its span.
import { assert, describe, it } from "@effect/vitest"
import { OpenAiClient } from "@fibril/openai"
import { Effect, Option, Schema, Stream, Tracer } from "effect"
import { LanguageModel, Prompt, Tool } from "effect/ai"
import type { ChatCompletion } from "openai/resources/chat/completions"
import * as OpenAiModel from "../src/OpenAiModel.ts"

const completion = (options: {
  readonly message: Record<string, unknown>
  readonly finish?: string
  readonly usage?: Record<string, unknown> | undefined
  readonly created?: number
  readonly id?: unknown
}): ChatCompletion =>
  ({
    id: options.id ?? "chatcmpl-1",
    object: "chat.completion",
    created: options.created ?? 1_700_000_000,
    model: "scripted",
    choices: [{
      index: 0,
      finish_reason: options.finish ?? "stop",
      logprobs: null,
      message: { role: "assistant", ...options.message }
    }],
    usage: "usage" in options ? options.usage : { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 }
  }) as unknown as ChatCompletion

const cases: ReadonlyArray<readonly [string, ChatCompletion]> = [
  [
    "text with cached-token usage",
    completion({
      message: { content: "hello" },
      usage: { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17, prompt_tokens_details: { cached_tokens: 4 } }
    })
  ],
  [
    "reasoning, a declared call, an undeclared call and arguments that are not JSON",
    completion({
      finish: "tool_calls",
      message: {
        content: "let me look",
        reasoning_content: "the config is probably in src",
        tool_calls: [
          { id: "call_1", type: "function", function: { name: "read_file", arguments: "{\"path\":\"src/a.ts\"}" } },
          { id: "call_2", type: "function", function: { name: "no_such_tool", arguments: "{\"x\":1}" } },
          { id: "", type: "function", function: { name: "read_file", arguments: "{not json" } }
        ]
      }
    })
  ],
  [
    "a refusal, no usage, no creation time",
    completion({
      message: { content: null, refusal: "I can't" },
      usage: undefined,
      created: 0
    })
  ],
  ["cut at the length limit", completion({ message: { content: "partial" }, finish: "length" })]
]

const toolkit = {
  tools: {
    read_file: Tool.make("read_file", {
      description: "Read a file",
      parameters: Schema.Struct({ path: Schema.String })
    })
  },
  handle: () => Effect.die("tools are not run here")
}

const prompt = Prompt.fromMessages([
  Prompt.makeMessage("system", { content: "You explore." }),
  Prompt.makeMessage("user", { content: [Prompt.makePart("text", { text: "Where is the config?" })] })
])

/** An OpenAiModel over a client that answers `answer` and keeps the bodies it was sent. */
const modelFor = (answer: ChatCompletion) =>
  Effect.gen(function*() {
    const bodies: Array<unknown> = []
    const client = OpenAiClient.OpenAiClient.of(
      {
        baseURL: "http://127.0.0.1:1",
        createCompletion: (body: unknown) => Effect.sync(() => (bodies.push(body), answer)),
        streamCompletion: () => Stream.die("not streamed here"),
        listModels: Effect.succeed([])
      } as unknown as OpenAiClient.OpenAiClient["Service"]
    )
    const model = yield* OpenAiModel.makeWith(client, { model: "scripted" })
    return { model, bodies }
  })

const agentCall = (model: LanguageModel.LanguageModel) =>
  model.generateText({ prompt, toolkit, disableToolCallResolution: true, toolCallValidation: "deferred" })

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

describe("OpenAiModel's direct path", () => {
  for (const [name, answer] of cases) {
    it.effect(`the same parts as LanguageModel.make's path: ${name}`, () =>
      Effect.gen(function*() {
        const { bodies, model } = yield* modelFor(answer)
        const direct = yield* agentCall(model)
        const { names, tracer } = recordingTracer()
        const generic = yield* agentCall(model).pipe(Effect.withTracer(tracer))
        // The tracer saw the generic path (its span); the direct one made none.
        assert.include(names, "LanguageModel.generateText")
        assert.deepStrictEqual(direct.content, generic.content)
        assert.strictEqual(direct.text, generic.text)
        assert.strictEqual(direct.finishReason, generic.finishReason)
        assert.deepStrictEqual(direct.usage, generic.usage)
        assert.deepStrictEqual(direct.toolCalls, generic.toolCalls)
        // And the same request went out.
        assert.strictEqual(bodies.length, 2)
        assert.deepStrictEqual(bodies[0], bodies[1])
      }))
  }

  it.effect("a call that resolves its tool calls, or validates them, takes the generic path", () =>
    Effect.gen(function*() {
      const { model } = yield* modelFor(cases[0]![1])
      const { names, tracer } = recordingTracer()
      const undeferred = yield* model.generateText({ prompt, toolkit, disableToolCallResolution: true }).pipe(
        Effect.withTracer(tracer)
      )
      assert.strictEqual(undeferred.text, "hello")
      assert.include(names, "LanguageModel.generateText")
      // Without a tracer, the plain text call (no toolkit) goes through LanguageModel too, and answers.
      const plain = yield* model.generateText({ prompt })
      assert.strictEqual(plain.text, "hello")
      const metadata = plain.content.find((part) => part.type === "response-metadata")
      assert.isTrue(metadata !== undefined && Option.isSome(Option.fromNullishOr(metadata.timestamp)))
    }))

  it.effect("a bad part from the provider fails as LanguageModel's InvalidOutputError would", () =>
    Effect.gen(function*() {
      const { model } = yield* modelFor(completion({ message: { content: "x" }, id: 42 }))
      const direct = yield* Effect.flip(agentCall(model))
      const generic = yield* Effect.flip(agentCall(model).pipe(Effect.withTracer(recordingTracer().tracer)))
      assert.strictEqual(direct._tag, "AiError")
      assert.strictEqual(direct.reason._tag, "InvalidOutputError")
      assert.strictEqual(direct.reason._tag, generic.reason._tag)
    }))
})
