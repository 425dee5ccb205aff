import { assert, describe, it } from "@effect/vitest"
import { FakeOpenAiServer } from "@fibril/testkit"
import { ConfigProvider, Effect, Layer } from "effect"
import { APIConnectionError, APIConnectionTimeoutError, APIError, APIUserAbortError } from "openai"
import * as OpenAiClient from "../src/OpenAiClient.ts"
import * as OpenAiError from "../src/OpenAiError.ts"
import * as OpenAiModel from "../src/OpenAiModel.ts"
import { generate } from "./support.ts"

const script = { rules: [{ turns: [{ text: "hi" }], repeat_last: true }] }

const withEnv = (env: Record<string, string>) => Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env })))

describe("OpenAiClient", () => {
  it.live("layerConfig reads OPENAI_API_KEY and OPENAI_BASE_URL; extra headers go out; the key stays out of the service", () =>
    Effect.gen(function*() {
      const server = yield* FakeOpenAiServer.start({ script, apiKey: "sk-from-env" })
      const program = Effect.gen(function*() {
        const client = yield* OpenAiClient.OpenAiClient
        assert.strictEqual(client.baseURL, server.url)
        assert.notInclude(JSON.stringify(client), "sk-from-env")
        assert.notInclude(String(client), "sk-from-env")
        const model = yield* OpenAiModel.makeWith(client, { model: "scripted" })
        return (yield* generate(model, "hello")).text
      })
      const text = yield* program.pipe(
        Effect.provide(OpenAiClient.layerConfig({ headers: { "x-title": "fibril-tests" } })),
        withEnv({ OPENAI_API_KEY: "sk-from-env", OPENAI_BASE_URL: server.url })
      )
      assert.strictEqual(text, "hi")
      assert.strictEqual(server.requests[0]?.headers["authorization"], "Bearer sk-from-env")
      assert.strictEqual(server.requests[0]?.headers["x-title"], "fibril-tests")
    }))

  it.effect("layerConfig without OPENAI_API_KEY fails with a ConfigError naming it", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(
        Layer.build(OpenAiClient.layerConfig()).pipe(withEnv({ OPENAI_BASE_URL: "http://127.0.0.1:1/v1" }))
      )
      assert.strictEqual(error._tag, "ConfigError")
      assert.include(String(error), "OPENAI_API_KEY")
    }))
})

describe("OpenAiError.reasonOf for failures without an HTTP status", () => {
  const request = { method: "POST", url: "http://127.0.0.1:1/v1/chat/completions" }
  const reason = (cause: unknown) => {
    const r = OpenAiError.reasonOf(cause, request, 0)
    return { tag: r._tag, retryable: r.isRetryable }
  }
  const network = { tag: "NetworkError", retryable: true }

  it("timeouts, aborts not made by us, refused and reset connections are retryable NetworkErrors", () => {
    assert.deepStrictEqual(reason(new APIConnectionTimeoutError()), network)
    assert.deepStrictEqual(reason(new APIUserAbortError()), network)
    assert.deepStrictEqual(reason(new APIConnectionError({ cause: new Error("connect ECONNREFUSED") })), network)
    const reset = new TypeError("terminated", {
      cause: Object.assign(new Error("other side closed"), { code: "UND_ERR_SOCKET" })
    })
    assert.deepStrictEqual(reason(reset), network)
    assert.deepStrictEqual(reason(Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" })), network)
  })

  it("an error event inside an SSE stream is read from its type/code", () => {
    const streamed = (error: object) => new APIError(undefined, error, undefined, new Headers())
    assert.deepStrictEqual(reason(streamed({ message: "overloaded", type: "server_error" })), {
      tag: "InternalProviderError",
      retryable: true
    })
    assert.deepStrictEqual(reason(streamed({ message: "bad", type: "invalid_request_error" })), {
      tag: "InvalidRequestError",
      retryable: false
    })
    assert.deepStrictEqual(reason(streamed({ message: "slow", code: "rate_limit_exceeded" })), {
      tag: "RateLimitError",
      retryable: true
    })
  })

  it("invalid JSON is a retryable InvalidOutputError; anything else an UnknownError", () => {
    assert.deepStrictEqual(reason(new SyntaxError("Unexpected end of JSON input")), {
      tag: "InvalidOutputError",
      retryable: true
    })
    assert.deepStrictEqual(reason(new Error("something odd")), { tag: "UnknownError", retryable: false })
  })
})
