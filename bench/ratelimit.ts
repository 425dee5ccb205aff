/**
 * `node bench/ratelimit.ts`: a fan-out under a provider's rate limit (issue 38). K = 50 children,
 * each one model step through the agent loop's model call (CallModel: its retries, backoff and
 * Retry-After) on `OpenAiModel` and the real SDK, against the fake OpenAI server in rate-limit
 * mode: 10 requests at once, and a token budget per window that lets `perWindow` requests
 * through. The window is 500 ms instead of a provider's minute so the run takes seconds; the
 * loop's retry base is scaled down with it (50 ms). The ideal makespan T: every window's budget
 * used from its first millisecond, 10 at a time. Run with the limiter on (the default) and off;
 * prints one JSON line.
 */
import * as CallModel from "@fibril/core/loop/CallModel"
import * as RateLimiter from "@fibril/core/RateLimiter"
import { OpenAiClient, OpenAiModel } from "@fibril/openai"
import { FakeOpenAiServer, FakeRateLimit } from "@fibril/testkit"
import * as Prompt from "effect/ai/Prompt"
import type * as Tool from "effect/ai/Tool"
import type * as Toolkit from "effect/ai/Toolkit"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"

const K = 50
const concurrent = 10
const latencyMs = 100
const windowMs = 500
const perWindow = 12

const toolkit: Toolkit.WithHandler<Record<string, Tool.Any>> = { tools: {}, handle: () => Effect.die("no tools") }
const task = (i: number) => `Child ${i}: summarise the module. ${"Context line for the child task. ".repeat(100)}`
// Every child's request costs the same (the same length of task).
const charge = FakeRateLimit.chargeOf({ messages: [{ role: "user", content: task(10) }] })
const windows = Math.ceil(K / perWindow)
const lastWindow = K - (windows - 1) * perWindow
const idealMs = (windows - 1) * windowMs + Math.ceil(lastWindow / concurrent) * latencyMs
const policy = { apiTimeoutSecs: 60, maxRetries: 3, retryBaseMs: 50, retryMaxMs: 1000 }

const fanOut = (limiter: boolean) =>
  Effect.scoped(Effect.gen(function*() {
    const server = yield* FakeOpenAiServer.start({
      script: { rules: [{ turns: [{ text: "done", delay_ms: latencyMs }], repeat_last: true }] },
      rateLimit: { maxConcurrent: concurrent, tokensPerWindow: perWindow * charge, windowMs }
    })
    const client = yield* OpenAiClient.make({ apiKey: Redacted.make("sk-bench"), baseURL: server.url })
    const model = yield* OpenAiModel.makeWith(client, { model: "scripted" })
    const start = performance.now()
    const results = yield* Effect.forEach(
      Array.from({ length: K }, (_, i) => i),
      (i) => Effect.result(CallModel.callModel(model, Prompt.make(task(i + 10)), toolkit, policy, () => Effect.void)),
      { concurrency: "unbounded" }
    )
    const makespanMs = performance.now() - start
    const stats = server.rateLimitStats()
    const requests = stats.admitted + stats.rejected
    return {
      failed: results.filter((r) => r._tag === "Failure").length,
      makespan_ms: Math.round(makespanMs),
      makespan_over_ideal: makespanMs / idealMs,
      requests,
      rejected: stats.rejected,
      rejected_share: stats.rejected / requests,
      peak_concurrent: stats.peakConcurrent
    }
  })).pipe(Effect.provide(RateLimiter.layer({ enabled: limiter })))

// A first run warms the process (the SDK's modules, the JIT) so that neither measured run pays for it.
await Effect.runPromise(fanOut(true))
const on = await Effect.runPromise(fanOut(true))
const off = await Effect.runPromise(fanOut(false))
const ok = on.failed === 0 && on.makespan_over_ideal <= 1.15 && on.rejected_share <= 0.05
console.log(
  JSON.stringify({ ok, K, concurrent, per_window: perWindow, window_ms: windowMs, ideal_ms: idealMs, on, off })
)
