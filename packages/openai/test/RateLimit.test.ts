// The rate limiter on the real SDK against the fake server: children that share an endpoint
// (base URL and key) share its gate, so a 429's retry-after holds all of them; a fan-out under
// the server's rate-limit mode waits for its budget instead of being answered 429.
import { assert, describe, it } from "@effect/vitest"
import * as CallModel from "@fibril/core/loop/CallModel"
import * as RateLimiter from "@fibril/core/RateLimiter"
import { FakeOpenAiServer } from "@fibril/testkit"
import { Effect, Fiber, Redacted } from "effect"
import { Prompt } from "effect/ai"
import { TestClock } from "effect/testing"
import * as OpenAiClient from "../src/OpenAiClient.ts"
import * as OpenAiModel from "../src/OpenAiModel.ts"
import { chatBodies, generate, toolkit } from "./support.ts"

const hello = { rules: [{ turns: [{ text: "hello" }], repeat_last: true }] }

/** A child's model: its own client on `url` with `key` (children of a tree may have their own). */
const childModel = (url: string, key = "sk-test-key") =>
  OpenAiClient.make({ apiKey: Redacted.make(key), baseURL: url }).pipe(
    Effect.flatMap((client) => OpenAiModel.makeWith(client, { model: "scripted" }))
  )

/** Real time for the fake server to answer (the limiter itself waits on the TestClock). */
const settle = Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 150)))

describe("OpenAiClient through the RateLimiter", () => {
  it.effect("a 429's retry-after holds every child on that endpoint, not those on another key", () =>
    Effect.gen(function*() {
      const server = yield* FakeOpenAiServer.start({
        script: hello,
        faults: [{ on: 1, fault: { status: 429, retryAfterMs: 5000 } }]
      })
      const [first, second, otherKey] = yield* Effect.all([
        childModel(server.url),
        childModel(server.url),
        childModel(server.url, "sk-another-account")
      ])
      const refused = yield* Effect.flip(generate(first, "hi"))
      assert.strictEqual(refused.reason._tag, "RateLimitError")
      const waiting = yield* Effect.forkChild(generate(second, "hi"))
      yield* settle
      assert.strictEqual(chatBodies(server).length, 1, "the second child called during the first one's retry-after")
      yield* generate(otherKey, "hi")
      assert.strictEqual(chatBodies(server).length, 2, "another key has its own budget")
      yield* TestClock.adjust(5000)
      const answer = yield* Fiber.join(waiting)
      assert.strictEqual(answer.text, "hello")
      assert.strictEqual(chatBodies(server).length, 3)
    }).pipe(Effect.provide(RateLimiter.layer())))

  const fanOut = (limiter: RateLimiter.Options) =>
    Effect.gen(function*() {
      const server = yield* FakeOpenAiServer.start({
        script: hello,
        rateLimit: { requestsPerWindow: 8, windowMs: 250, maxConcurrent: 4 }
      })
      const model = yield* childModel(server.url)
      const policy = { apiTimeoutSecs: 30, maxRetries: 2, retryBaseMs: 20, retryMaxMs: 100 }
      const results = yield* Effect.forEach(
        Array.from({ length: 24 }, (_, i) => i),
        () =>
          Effect.result(
            CallModel.callModel(model, Prompt.make("hi"), toolkit, policy, () => Effect.void)
          ),
        { concurrency: "unbounded" }
      )
      return { failed: results.filter((r) => r._tag === "Failure").length, server: server.rateLimitStats() }
    }).pipe(Effect.provide(RateLimiter.layer(limiter)))

  it.live("24 children against 8 requests per 250 ms and 4 at once: none fails and the server is not hammered", () =>
    Effect.gen(function*() {
      const on = yield* fanOut({})
      assert.strictEqual(on.failed, 0)
      assert.strictEqual(on.server.admitted, 24)
      assert.isAtMost(on.server.rejected, 2, `429s with the limiter: ${on.server.rejected}`)
      assert.isAtMost(on.server.peakConcurrent, 4)
      // The same fan-out without it: children retry on their own and some run out of retries.
      const off = yield* fanOut({ enabled: false })
      assert.isAbove(off.server.rejected, 10, `429s without the limiter: ${off.server.rejected}`)
    }))
})
