// The rate limiter against a provider that enforces real limits (testkit's FakeRateLimit, the
// fake OpenAI server's rate-limit mode) on the TestClock: no real waiting.
import { assert, describe, it } from "@effect/vitest"
import { FakeRateLimit } from "@fibril/testkit"
import { Clock, Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import * as RateLimiter from "../src/RateLimiter.ts"

interface Refused {
  readonly headers: Record<string, string>
}

/** One call to a provider with `limits` that answers after `latencyMs`. */
const callProvider = (limits: ReturnType<typeof FakeRateLimit.make>, latencyMs: number, tokens: number) =>
  Effect.gen(function*() {
    const admission = limits.admit(tokens, yield* Clock.currentTimeMillis)
    if (!admission.admitted) return yield* Effect.fail<Refused>({ headers: admission.headers })
    yield* Effect.sleep(latencyMs).pipe(Effect.ensuring(Effect.sync(admission.done)))
    return { headers: admission.headers(yield* Clock.currentTimeMillis) }
  })

/** What the provider's answer says, as OpenAiClient reads it. */
const outcome = (
  result: RateLimiter.Result<{ readonly headers: Record<string, string> }, Refused>,
  now: number
): RateLimiter.Outcome => {
  const headers = result._tag === "Success" ? result.value.headers : result.error.headers
  return { rateLimited: result._tag === "Failure", headers: RateLimiter.readHeaders((name) => headers[name], now) }
}

/** A call as a child makes it: through the gate, retried (after the gate's wait) when refused. */
const child = (
  limiter: RateLimiter.Service,
  limits: ReturnType<typeof FakeRateLimit.make>,
  options: { readonly latencyMs: number; readonly tokens: number; readonly key?: string }
) =>
  RateLimiter.gate(
    limiter,
    options.key ?? "https://api.example/v1#k1",
    options.tokens,
    callProvider(limits, options.latencyMs, options.tokens),
    outcome
  ).pipe(Effect.retry({ times: 20 }))

/** Runs `effect` forked and moves the TestClock in `stepMs` steps until it ends. */
const runToEnd = <A, E>(effect: Effect.Effect<A, E>, stepMs = 10) =>
  Effect.gen(function*() {
    const fiber = yield* Effect.forkChild(effect)
    const start = yield* Clock.currentTimeMillis
    while (fiber.pollUnsafe() === undefined) yield* TestClock.adjust(stepMs)
    const value = yield* Fiber.join(fiber)
    return { value, elapsedMs: (yield* Clock.currentTimeMillis) - start }
  })

describe("RateLimiter", () => {
  it("reads OpenAI's reset durations", () => {
    assert.strictEqual(RateLimiter.parseResetMs("1s"), 1000)
    assert.strictEqual(RateLimiter.parseResetMs("6m0s"), 360_000)
    assert.strictEqual(RateLimiter.parseResetMs("20ms"), 20)
    assert.strictEqual(RateLimiter.parseResetMs("1h2m3.5s"), 3_723_500)
    assert.strictEqual(RateLimiter.parseResetMs("2"), 2000)
    assert.strictEqual(RateLimiter.parseResetMs("soon"), undefined)
    assert.strictEqual(RateLimiter.parseResetMs(FakeRateLimit.formatReset(1250)), 1250)
  })

  it.effect("a 429's retry-after holds every call to the endpoint until then", () =>
    Effect.gen(function*() {
      const limiter = RateLimiter.make()
      const endpoint = limiter.endpoint("e")
      const ticket = yield* endpoint.acquire(10)
      const now = yield* Clock.currentTimeMillis
      yield* endpoint.complete(ticket, {
        rateLimited: true,
        headers: RateLimiter.readHeaders((name) => name === "retry-after" ? "5" : undefined, now)
      })
      const next = yield* Effect.forkChild(endpoint.acquire(10))
      yield* TestClock.adjust(4999)
      assert.isUndefined(next.pollUnsafe(), "admitted before retry-after ran out")
      yield* TestClock.adjust(1)
      const admitted = yield* Fiber.join(next)
      assert.strictEqual(admitted.sentAt - now, 5000)
      assert.strictEqual(endpoint.stats().rateLimited, 1)
    }))

  it.effect("a 429 that says nothing pauses the endpoint and halves its concurrency", () =>
    Effect.gen(function*() {
      const endpoint = RateLimiter.make({ initialConcurrency: 8, pauseMs: 700 }).endpoint("e")
      const tickets = yield* Effect.forEach([1, 2, 3], () => endpoint.acquire(1))
      yield* endpoint.complete(tickets[0]!, { rateLimited: true, headers: RateLimiter.noHeaders })
      // One cut per congestion event: the others were sent before it.
      yield* endpoint.complete(tickets[1]!, { rateLimited: true, headers: RateLimiter.noHeaders })
      assert.strictEqual(endpoint.stats().limit, 4)
      assert.strictEqual(endpoint.stats().notBefore - (yield* Clock.currentTimeMillis), 700)
    }))

  it.effect("the budget headers hold calls until the window resets, before any 429", () =>
    Effect.gen(function*() {
      // 5 requests per second; 12 calls of 100 ms.
      const limits = FakeRateLimit.make({ requestsPerWindow: 5, windowMs: 1000 })
      const limiter = RateLimiter.make({ initialConcurrency: 1 })
      const { elapsedMs } = yield* runToEnd(
        Effect.forEach(Array.from({ length: 12 }, (_, i) => i), () =>
          child(limiter, limits, { latencyMs: 100, tokens: 1 }), {
          concurrency: "unbounded"
        })
      )
      const stats = limits.stats()
      assert.strictEqual(stats.admitted, 12)
      // The first window's calls run before any header says the budget is 5: at most the
      // concurrency then admitted can overshoot; every later window is waited for.
      assert.isAtMost(stats.rejected, 1, `429s: ${stats.rejected}`)
      assert.isAtLeast(elapsedMs, 2000)
      assert.isAtMost(elapsedMs, 2200)
    }))

  it.effect("concurrency grows until the provider refuses, then shrinks to what it accepts", () =>
    Effect.gen(function*() {
      const limits = FakeRateLimit.make({ maxConcurrent: 6, requestsPerWindow: 10_000, windowMs: 60_000 })
      const limiter = RateLimiter.make({ initialConcurrency: 2 })
      const endpoint = limiter.endpoint("https://api.example/v1#k1")
      const limitsSeen: Array<number> = []
      const observed = Effect.sync(() => limitsSeen.push(endpoint.stats().limit))
      yield* runToEnd(
        Effect.forEach(
          Array.from({ length: 60 }, (_, i) => i),
          () => child(limiter, limits, { latencyMs: 100, tokens: 1 }).pipe(Effect.tap(() => observed)),
          { concurrency: "unbounded" }
        )
      )
      const stats = endpoint.stats()
      assert.isAbove(Math.max(...limitsSeen), 2, "the window grew")
      assert.strictEqual(stats.learnedLimit, 6, "learned what the provider accepts")
      assert.isAtMost(stats.limit, 6)
      assert.isAtMost(limits.stats().rejected, 3, `429s: ${limits.stats().rejected}`)
      assert.strictEqual(limits.stats().admitted, 60)
    }))

  it.effect("callers of one endpoint share its gate; another endpoint has its own", () =>
    Effect.gen(function*() {
      const limiter = RateLimiter.make()
      assert.strictEqual(limiter.endpoint("a#k1"), limiter.endpoint("a#k1"))
      const ticket = yield* limiter.endpoint("a#k1").acquire(1)
      const now = yield* Clock.currentTimeMillis
      yield* limiter.endpoint("a#k1").complete(ticket, {
        rateLimited: true,
        headers: RateLimiter.readHeaders((name) => name === "retry-after-ms" ? "3000" : undefined, now)
      })
      const sameEndpoint = yield* Effect.forkChild(limiter.endpoint("a#k1").acquire(1))
      const otherKey = yield* Effect.forkChild(limiter.endpoint("a#k2").acquire(1))
      yield* TestClock.adjust(1)
      assert.isDefined(otherKey.pollUnsafe(), "another key waits for nothing")
      assert.isUndefined(sameEndpoint.pollUnsafe(), "the same endpoint waits")
      yield* TestClock.adjust(2999)
      assert.isDefined(sameEndpoint.pollUnsafe())
    }))

  it.effect("off, calls go straight through", () =>
    Effect.gen(function*() {
      const limiter = RateLimiter.make({ enabled: false })
      const limits = FakeRateLimit.make({ maxConcurrent: 1 })
      const results = yield* Effect.forEach(
        [1, 2, 3],
        () => Effect.result(RateLimiter.gate(limiter, "e", 1, callProvider(limits, 100, 1), outcome)),
        { concurrency: "unbounded" }
      ).pipe(runToEnd)
      assert.strictEqual(results.value.filter((r) => r._tag === "Failure").length, 2)
    }))
})
