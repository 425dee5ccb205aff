// Cluster workers share the rate limiter through their store: two connections to one SQLite
// file are two workers. Not run on PostgreSQL: its client under the TestClock hangs connecting
// (seen Nov 28); the SQL is the same on both.
import { afterAll, assert, describe, it } from "@effect/vitest"
import * as RateLimiter from "@fibril/core/RateLimiter"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import { mkdtempSync, rmSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as ClusterRateLimit from "../src/ClusterRateLimit.ts"
import * as Sqlite from "../src/Sqlite.ts"

const key = "https://api.example/v1#0123456789ab"

/** A 429 (budget left: a concurrency limit; retry after 5 s) on worker A holds worker B's next call. */
const workersShare = (
  workerA: Layer.Layer<SqlClient.SqlClient, unknown>,
  workerB: Layer.Layer<SqlClient.SqlClient, unknown>
) =>
  Effect.gen(function*() {
    // Each worker's connection stays open for the whole test (the test's scope).
    const contextA = yield* Layer.build(workerA)
    const contextB = yield* Layer.build(workerB)
    const sharedA = yield* Effect.provide(ClusterRateLimit.makeShared, contextA)
    const sharedB = yield* Effect.provide(ClusterRateLimit.makeShared, contextB)
    const a = RateLimiter.make({ shared: sharedA, initialConcurrency: 8 }).endpoint(key)
    const b = RateLimiter.make({ shared: sharedB, initialConcurrency: 8 }).endpoint(key)
    // B has read the (empty) row and called once: it knows nothing yet.
    yield* b.complete(yield* b.acquire(1), { rateLimited: false, headers: RateLimiter.noHeaders })
    const tickets = yield* Effect.forEach([1, 2, 3], () => a.acquire(1))
    const now = yield* Clock.currentTimeMillis
    const refused = { "retry-after": "5", "x-ratelimit-remaining-requests": "100" }
    yield* a.complete(tickets[2]!, {
      rateLimited: true,
      headers: RateLimiter.readHeaders((name) => refused[name as keyof typeof refused], now)
    })
    assert.deepStrictEqual([a.stats().notBefore - now, a.stats().learnedLimit], [5000, 2])
    // On the disk, for every worker.
    const rows = yield* Effect.provide(
      SqlClient.SqlClient.pipe(Effect.flatMap((sql) =>
        sql<{ readonly not_before: number | string; readonly learned_limit: number | string }>`
          SELECT not_before, learned_limit FROM fibril_rate_limits WHERE endpoint = ${key}`
      )),
      contextB
    )
    assert.deepStrictEqual(rows.map((row) => [Number(row.not_before) - now, Number(row.learned_limit)]), [[5000, 2]])
    // B's copy of the row goes stale after a second: its next call reads it and waits.
    yield* TestClock.adjust(1000)
    const next = yield* Effect.forkChild(b.acquire(1))
    yield* Effect.yieldNow
    yield* TestClock.adjust(3999)
    assert.isUndefined(next.pollUnsafe(), "worker B called before worker A's retry-after ran out")
    yield* TestClock.adjust(1)
    const admitted = yield* Fiber.join(next)
    assert.strictEqual(admitted.sentAt - now, 5000)
    assert.strictEqual(b.stats().learnedLimit, 2, "worker B adopts the learned concurrency")
  })

const dir = mkdtempSync(path.join(os.tmpdir(), "fibril-ratelimit-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

describe("ClusterRateLimit on SQLite", () => {
  it.effect("a 429 one worker got holds the other worker's calls until its retry-after, and teaches it the limit", () => {
    const file = path.join(dir, "cluster.db")
    return workersShare(Sqlite.layer(file), Sqlite.layer(file))
  })
})
