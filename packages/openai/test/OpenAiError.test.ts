import { assert, describe, it } from "@effect/vitest"
import * as RateLimiter from "@fibril/core/RateLimiter"
import type { FakeOpenAiServer } from "@fibril/testkit"
import { Cause, Clock, Duration, Effect, Fiber, Redacted, Schedule, Stream } from "effect"
import type { AiError, LanguageModel } from "effect/ai"
import * as OpenAiClient from "../src/OpenAiClient.ts"
import * as OpenAiError from "../src/OpenAiError.ts"
import * as OpenAiModel from "../src/OpenAiModel.ts"
import { chatBodies, generate, serve, stream } from "./support.ts"

const hello = {
  rules: [{ turns: [{ text: "hello there, this is a longer answer in several chunks" }], repeat_last: true }]
}

const reasonOf = (error: AiError.AiError) => ({ tag: error.reason._tag, retryable: error.reason.isRetryable })

const retryAfterMs = (error: AiError.AiError) =>
  error.reason._tag === "RateLimitError" && error.reason.retryAfter !== undefined
    ? Duration.toMillis(error.reason.retryAfter)
    : undefined

/** Waits (real time) until the server has received `n` chat requests. */
const awaitChats = (server: FakeOpenAiServer.FakeOpenAiServer, n: number) =>
  Effect.suspend(() => chatBodies(server).length >= n ? Effect.void : Effect.fail("not yet")).pipe(
    Effect.retry({ times: 1000, schedule: Schedule.spaced("5 millis") }),
    Effect.orDie
  )

// These tests read how each 429 maps to an error; the rate limiter (on by default) would make
// each next call wait out the previous one's retry-after (RateLimit.test.ts tests that).
const noLimiter = Effect.provide(RateLimiter.layer({ enabled: false }))

const bothWays = (model: LanguageModel.LanguageModel) =>
  Effect.all([Effect.flip(generate(model, "hi")), Effect.flip(stream(model, "hi"))])

describe("OpenAiError: every fault maps to the right AiError reason", () => {
  it("parseRetryAfter reads retry-after-ms, seconds and HTTP dates", () => {
    const now = Date.parse("2026-01-01T00:00:00Z")
    const parse = (headers: Record<string, string>) => {
      const d = OpenAiError.parseRetryAfter(new Headers(headers), now)
      return d === undefined ? undefined : Duration.toMillis(d)
    }
    assert.strictEqual(parse({ "retry-after": "7" }), 7000)
    assert.strictEqual(parse({ "retry-after": "0.5" }), 500)
    assert.strictEqual(parse({ "retry-after-ms": "1500", "retry-after": "9" }), 1500)
    assert.strictEqual(parse({ "retry-after": "Thu, 01 Jan 2026 00:00:30 GMT" }), 30_000)
    assert.strictEqual(parse({ "retry-after": "Wed, 31 Dec 2025 23:00:00 GMT" }), 0)
    assert.strictEqual(parse({ "retry-after": "soon" }), undefined)
    assert.strictEqual(parse({}), undefined)
  })

  it.live("429 is a retryable RateLimitError whose retryAfter comes from the headers; insufficient_quota is not retryable", () =>
    Effect.gen(function*() {
      const date = new Date((yield* Clock.currentTimeMillis) + 30_000).toUTCString()
      const { model } = yield* serve({
        script: hello,
        faults: [
          { on: 1, fault: { status: 429, retryAfterSecs: 7 } },
          { on: 2, fault: { status: 429, retryAfterMs: 1500 } },
          { on: 3, fault: { status: 429, retryAfter: date } },
          { on: 4, fault: { status: 429 } },
          { on: 5, fault: { status: 429, code: "insufficient_quota" } },
          { on: 6, fault: { status: 429, retryAfterSecs: 3 } }
        ]
      })
      const lm = yield* model()
      const errors = yield* Effect.forEach([1, 2, 3, 4, 5], () => Effect.flip(generate(lm, "hi")))
      for (const error of errors.slice(0, 4)) {
        assert.deepStrictEqual(reasonOf(error), { tag: "RateLimitError", retryable: true })
      }
      assert.strictEqual(retryAfterMs(errors[0]!), 7000)
      assert.strictEqual(retryAfterMs(errors[1]!), 1500)
      const fromDate = retryAfterMs(errors[2]!) ?? -1
      assert.isTrue(fromDate > 27_000 && fromDate <= 30_000, `retryAfter from an HTTP date: ${fromDate}`)
      assert.strictEqual(retryAfterMs(errors[3]!), undefined)
      assert.deepStrictEqual(reasonOf(errors[4]!), { tag: "QuotaExhaustedError", retryable: false })
      // The streaming request fails the same way, before any part.
      const streamed = yield* Effect.flip(stream(lm, "hi"))
      assert.deepStrictEqual(reasonOf(streamed), { tag: "RateLimitError", retryable: true })
      assert.strictEqual(retryAfterMs(streamed), 3000)
      assert.strictEqual(streamed.module, "OpenAiModel")
      assert.strictEqual(streamed.method, "streamText")
    }).pipe(noLimiter))

  it.live("a 429 with no code, or a code other than insufficient_quota, is a rate limit to wait out, not an empty account", () =>
    Effect.gen(function*() {
      // vLLM, Ollama and some proxies answer 429 without OpenAI's `rate_limit_exceeded` code;
      // Azure says `429` with its own codes. Only `insufficient_quota` means the money is gone.
      const codes = [null, "tokens", "requests", "insufficient_quota"] as const
      const { model } = yield* serve({
        script: hello,
        faults: codes.map((code, i) => ({ on: i + 1, fault: { status: 429, code, retryAfterSecs: 2 } }))
      })
      const lm = yield* model()
      const errors = yield* Effect.forEach(codes, () => Effect.flip(generate(lm, "hi")))
      assert.deepStrictEqual(errors.map(reasonOf), [
        { tag: "RateLimitError", retryable: true },
        { tag: "RateLimitError", retryable: true },
        { tag: "RateLimitError", retryable: true },
        { tag: "QuotaExhaustedError", retryable: false }
      ])
      assert.deepStrictEqual(errors.slice(0, 3).map(retryAfterMs), [2000, 2000, 2000])
    }).pipe(noLimiter))

  it.live("HTTP statuses: 5xx/408 retryable InternalProviderError; 400/422 InvalidRequestError and 403 AuthenticationError are not", () =>
    Effect.gen(function*() {
      const statuses = [500, 502, 503, 408, 400, 422, 403]
      const { model } = yield* serve({
        script: hello,
        faults: statuses.map((status, i) => ({ on: i + 1, fault: { status } }))
      })
      const lm = yield* model()
      const reasons = yield* Effect.forEach(statuses, () => Effect.map(Effect.flip(generate(lm, "hi")), reasonOf))
      assert.deepStrictEqual(reasons, [
        { tag: "InternalProviderError", retryable: true },
        { tag: "InternalProviderError", retryable: true },
        { tag: "InternalProviderError", retryable: true },
        { tag: "InternalProviderError", retryable: true },
        { tag: "InvalidRequestError", retryable: false },
        { tag: "InvalidRequestError", retryable: false },
        { tag: "AuthenticationError", retryable: false }
      ])
    }))

  it.live("401 (wrong key) is a non-retryable AuthenticationError; 404 (unknown model) a non-retryable InvalidRequestError", () =>
    Effect.gen(function*() {
      const wrongKey = yield* serve({ script: hello, apiKey: "sk-the-real-key" })
      const unauthorized = yield* Effect.flip(generate(yield* wrongKey.model(), "hi"))
      assert.deepStrictEqual(reasonOf(unauthorized), { tag: "AuthenticationError", retryable: false })
      assert.isTrue(unauthorized.reason._tag === "AuthenticationError" && unauthorized.reason.kind === "InvalidKey")
      // The key went out as a bearer token, and nowhere in the error.
      assert.strictEqual(wrongKey.server.requests[0]?.headers["authorization"], "Bearer sk-test-key")
      assert.notInclude(JSON.stringify(unauthorized), "sk-test-key")

      const { model } = yield* serve({ script: hello, models: ["gpt-real"] })
      const [json, sse] = yield* bothWays(yield* model("gpt-imaginary"))
      for (const error of [json, sse]) {
        assert.deepStrictEqual(reasonOf(error), { tag: "InvalidRequestError", retryable: false })
        assert.include(error.message, "gpt-imaginary")
      }
    }))

  it.live("a hang until the client's timeout is a retryable NetworkError, and the server sees the connection close", () =>
    Effect.gen(function*() {
      const { server, model } = yield* serve({ script: hello, faults: [{ on: () => true, fault: { hang: true } }] }, {
        timeoutMs: 300
      })
      const [json, sse] = yield* bothWays(yield* model())
      for (const error of [json, sse]) {
        assert.deepStrictEqual(reasonOf(error), { tag: "NetworkError", retryable: true })
        assert.include(error.message, "timed out")
      }
      yield* server.awaitClosed(2).pipe(Effect.timeout("5 seconds"))
      assert.strictEqual(yield* server.closed, 2)
    }))

  it.live("a refused connection is a retryable NetworkError", () =>
    Effect.gen(function*() {
      // Port 9 (discard) on loopback: nothing listens there.
      const client = yield* OpenAiClient.make({ apiKey: Redacted.make("k"), baseURL: "http://127.0.0.1:9/v1" })
      const [json, sse] = yield* bothWays(yield* OpenAiModel.makeWith(client, { model: "m" }))
      for (const error of [json, sse]) {
        assert.deepStrictEqual(reasonOf(error), { tag: "NetworkError", retryable: true })
        assert.isTrue(
          error.reason._tag === "NetworkError" && error.reason.url === "http://127.0.0.1:9/v1/chat/completions"
        )
      }
    }))

  it.live("a connection cut mid-answer is a retryable NetworkError (SSE after some chunks, and a half JSON body)", () =>
    Effect.gen(function*() {
      const { server, model } = yield* serve({
        script: hello,
        faults: [{ on: () => true, fault: { disconnectMidStream: true, afterChunks: 3 } }]
      })
      const [json, sse] = yield* bothWays(yield* model())
      assert.deepStrictEqual(reasonOf(json), { tag: "NetworkError", retryable: true })
      assert.deepStrictEqual(reasonOf(sse), { tag: "NetworkError", retryable: true })
      // The server cut these itself: they are not client closes.
      assert.strictEqual(yield* server.closed, 0)
    }))

  it.live("a body that is not JSON is a retryable InvalidOutputError (JSON body and SSE event)", () =>
    Effect.gen(function*() {
      const { model } = yield* serve({ script: hello, faults: [{ on: () => true, fault: { malformedJson: true } }] })
      const [json, sse] = yield* bothWays(yield* model())
      assert.deepStrictEqual(reasonOf(json), { tag: "InvalidOutputError", retryable: true })
      assert.deepStrictEqual(reasonOf(sse), { tag: "InvalidOutputError", retryable: true })
    }))

  it.live("the script's own errors travel as HTTP errors: transient rate limit, then the answer; fatal errors", () =>
    Effect.gen(function*() {
      const { model } = yield* serve({
        script: {
          rules: [
            {
              match: { prompt: "busy" },
              turns: [{
                error: { kind: "retryable", message: "slow down", retry_after_ms: 2500, times: 1 },
                text: "ok now"
              }]
            },
            {
              match: { prompt: "flaky" },
              turns: [{ error: { kind: "retryable", message: "upstream 502", times: 1 }, text: "ok" }]
            },
            { turns: [{ error: { kind: "fatal", message: "context too long" } }] }
          ]
        }
      })
      const lm = yield* model()
      const limited = yield* Effect.flip(generate(lm, "busy"))
      assert.deepStrictEqual(reasonOf(limited), { tag: "RateLimitError", retryable: true })
      assert.strictEqual(retryAfterMs(limited), 2500)
      assert.strictEqual((yield* generate(lm, "busy")).text, "ok now")
      assert.deepStrictEqual(reasonOf(yield* Effect.flip(generate(lm, "flaky"))), {
        tag: "InternalProviderError",
        retryable: true
      })
      assert.strictEqual((yield* generate(lm, "flaky")).text, "ok")
      const fatal = yield* Effect.flip(generate(lm, "anything"))
      assert.deepStrictEqual(reasonOf(fatal), { tag: "InvalidRequestError", retryable: false })
      assert.include(fatal.message, "context too long")
    }))

  it.live("slow chunks arrive late but complete", () =>
    Effect.gen(function*() {
      const { model } = yield* serve({
        script: { rules: [{ turns: [{ text: "0123456789abcdef" }] }] },
        textChunkChars: 4,
        faults: [{ on: 1, fault: { slowChunksMs: 40 } }]
      })
      const started = yield* Clock.currentTimeMillis
      const parts = yield* stream(yield* model(), "hi")
      const elapsed = (yield* Clock.currentTimeMillis) - started
      assert.strictEqual(parts.flatMap((p) => p.type === "text-delta" ? [p.delta] : []).join(""), "0123456789abcdef")
      // role chunk + 4 text chunks + finish + usage, each 40 ms late
      assert.isAtLeast(elapsed, 7 * 40 - 10)
    }))
})

describe("interruption cancels the in-flight request", () => {
  it.live("interrupting generateText aborts the HTTP request: the server sees the connection close", () =>
    Effect.gen(function*() {
      const { server, model } = yield* serve({ script: hello, faults: [{ on: 1, fault: { hang: true } }] })
      const fiber = yield* Effect.forkChild(generate(yield* model(), "hi"))
      yield* awaitChats(server, 1)
      assert.strictEqual(yield* server.closed, 0)
      yield* Fiber.interrupt(fiber)
      yield* server.awaitClosed(1).pipe(Effect.timeout("5 seconds"))
      assert.strictEqual(yield* server.closed, 1)
    }))

  it.live("interrupting a stream that has no headers yet aborts it too", () =>
    Effect.gen(function*() {
      const { server, model } = yield* serve({ script: hello, faults: [{ on: 1, fault: { hang: true } }] })
      const fiber = yield* Effect.forkChild(stream(yield* model(), "hi"))
      yield* awaitChats(server, 1)
      yield* Fiber.interrupt(fiber)
      yield* server.awaitClosed(1).pipe(Effect.timeout("5 seconds"))
      assert.strictEqual(yield* server.closed, 1)
    }))

  it.live("a stream consumed only in part is aborted when it is finalized", () =>
    Effect.gen(function*() {
      const { server, model } = yield* serve({
        script: hello,
        textChunkChars: 2,
        faults: [{ on: 1, fault: { slowChunksMs: 50 } }]
      })
      const lm = yield* model()
      const first = yield* Stream.runCollect(
        lm.streamText({ prompt: "hi" }).pipe(Stream.filter((p) => p.type === "text-delta"), Stream.take(2))
      )
      assert.strictEqual(first.length, 2)
      yield* server.awaitClosed(1).pipe(Effect.timeout("5 seconds"))
      assert.strictEqual(yield* server.closed, 1)
    }))
})

describe("OpenAiError: credentials in the base URL never reach an error", () => {
  it.effect("a base URL with user:KEY@ and ?api_key=KEY: the client, its errors and their causes show ***", () =>
    Effect.gen(function*() {
      for (const baseURL of ["http://user:SECRETKEY@127.0.0.1:9/v1", "http://127.0.0.1:9/v1?api_key=SECRETKEY"]) {
        const client = yield* OpenAiClient.make({ apiKey: Redacted.make("sk-test"), baseURL })
        assert.notInclude(client.baseURL, "SECRETKEY")
        const error = yield* Effect.flip(client.listModels)
        const shown = [
          error.message,
          JSON.stringify(error.reason),
          String(error.reason._tag === "NetworkError" ? JSON.stringify(error.reason.cause) : ""),
          Cause.pretty(Cause.fail(error))
        ].join("\n")
        assert.include(shown, "127.0.0.1:9")
        assert.notInclude(shown, "SECRETKEY")
      }
    }))
})
