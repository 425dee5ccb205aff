// Shared wiring for the provider tests: a FakeOpenAiServer (real HTTP on 127.0.0.1) and the
// provider on the real openai SDK pointed at it.
import { FakeOpenAiServer } from "@fibril/testkit"
import { Effect, Redacted, Schema, Stream } from "effect"
import type { AiError, LanguageModel, Prompt, Response } from "effect/ai"
import { Tool } from "effect/ai"
import type { Toolkit } from "effect/ai"
import * as OpenAiClient from "../src/OpenAiClient.ts"
import * as OpenAiModel from "../src/OpenAiModel.ts"

export const ReadFile = Tool.make("read_file", {
  description: "Read a UTF-8 file",
  parameters: Schema.Struct({ path: Schema.String })
})
export const Grep = Tool.make("grep", {
  description: "Search files",
  parameters: Schema.Struct({ pattern: Schema.String })
})

/** The toolkit the agent loop hands the model: tools to advertise, never executed here. */
export const toolkit: Toolkit.WithHandler<Record<string, Tool.Any>> = {
  tools: { read_file: ReadFile, grep: Grep },
  handle: (name) => Effect.die(`the test toolkit does not run tools (${String(name)})`)
}

export const apiKey = "sk-test-key"

/** A fake server plus a client and models on it. */
export const serve = Effect.fn("test.serve")(function*(
  options: FakeOpenAiServer.Options,
  client: Omit<OpenAiClient.Options, "apiKey" | "baseURL"> = {}
) {
  const server = yield* FakeOpenAiServer.start(options)
  const openai = yield* OpenAiClient.make({ ...client, apiKey: Redacted.make(apiKey), baseURL: server.url })
  const model = (id = "scripted", extra: Omit<OpenAiModel.Options, "model"> = {}) =>
    OpenAiModel.makeWith(openai, { ...extra, model: id })
  return { server, client: openai, model }
})

export type Answer = LanguageModel.GenerateTextResponse<Record<string, Tool.Any>, "deferred">

/** One model call exactly as the agent loop makes it (CallModel.ts). */
export const generate = (model: LanguageModel.LanguageModel, prompt: Prompt.RawInput) =>
  model.generateText({
    prompt,
    toolkit,
    disableToolCallResolution: true,
    toolCallValidation: "deferred"
  }) as Effect.Effect<Answer, AiError.AiError> // R: the toolkit's tools need no services

export type StreamPart = Response.StreamPart<Record<string, Tool.Any>, "deferred">

/** The same call, streamed, collected. */
export const stream = (model: LanguageModel.LanguageModel, prompt: Prompt.RawInput) =>
  Stream.runCollect(
    model.streamText({
      prompt,
      toolkit,
      disableToolCallResolution: true,
      toolCallValidation: "deferred"
    }) as Stream.Stream<StreamPart, AiError.AiError>
  )

/** The chat-completions request bodies the server received. */
export const chatBodies = (server: FakeOpenAiServer.FakeOpenAiServer) =>
  server.requests.filter((r) => r.path === "/v1/chat/completions").map((r) => r.body)
