/**
 * ClusterRateLimit — the workers of a cluster share what each learns of a provider's rate limit
 * through their store: one row per endpoint in `fibril_rate_limits` (Postgres or SQLite, the same
 * statements), holding the endpoint's "not before" time and its learned concurrency.
 *
 * Cheap by design: a worker reads the row at most once per `syncMs` (a second by default) before
 * a call, and writes it only after a 429 (a few times per congestion event), so a fan-out of
 * thousands of calls costs the database about one read per second per worker, not a statement
 * per call. A worker may start one call late to learn of another's 429: that costs at most one
 * more 429, which it then learns from itself. A failing database costs only the sharing: the
 * row's errors are logged and each worker's limiter goes on alone.
 */
import * as RateLimiter from "@fibril/core/RateLimiter"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { SqlClient } from "effect/sql"

/** Creates the table (once per worker start; the same statement on both databases). */
export const migrate = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS fibril_rate_limits (endpoint TEXT PRIMARY KEY,
    not_before BIGINT NOT NULL, learned_limit INTEGER, updated_at BIGINT NOT NULL)`
})

interface Row {
  readonly not_before: number | string | bigint
  readonly learned_limit: number | string | bigint | null
}

const logged =
  (what: string) => <A, R>(effect: Effect.Effect<A, unknown, R>, fallback: A): Effect.Effect<A, never, R> =>
    effect.pipe(
      Effect.catch((error) =>
        Effect.as(
          Effect.logWarning(`rate limit row: ${what} failed; this worker goes on with what it knows`).pipe(
            Effect.annotateLogs({ error: String(error) })
          ),
          fallback
        )
      )
    )

/** The shared row on the database in context. */
export const makeShared = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* migrate
  const read = (endpoint: string) =>
    logged("reading")(
      sql<Row>`SELECT not_before, learned_limit FROM fibril_rate_limits WHERE endpoint = ${endpoint}`.pipe(
        Effect.map((rows): RateLimiter.SharedRow | undefined => {
          const row = rows[0]
          return row === undefined ? undefined : {
            notBefore: Number(row.not_before),
            learnedLimit: row.learned_limit === null ? undefined : Number(row.learned_limit)
          }
        })
      ),
      undefined
    )
  // The later "not before" wins; the learned limit is the latest one learned (a probe may raise it).
  const write = (endpoint: string, row: RateLimiter.SharedRow) =>
    logged("writing")(
      Effect.flatMap(Clock.currentTimeMillis, (now) =>
        sql`INSERT INTO fibril_rate_limits (endpoint, not_before, learned_limit, updated_at)
        VALUES (${endpoint}, ${Math.round(row.notBefore)}, ${row.learnedLimit ?? null}, ${now})
        ON CONFLICT (endpoint) DO UPDATE SET
          not_before = CASE WHEN excluded.not_before > fibril_rate_limits.not_before
            THEN excluded.not_before ELSE fibril_rate_limits.not_before END,
          learned_limit = COALESCE(excluded.learned_limit, fibril_rate_limits.learned_limit),
          updated_at = excluded.updated_at`.pipe(Effect.asVoid)),
      undefined
    )
  return { read, write } satisfies RateLimiter.SharedState
})

/**
 * The worker's `RateLimiter`, shared with the other workers through the database in context.
 *
 * @example
 * ```ts
 * core.pipe(Layer.provide(ClusterRateLimit.layer()))
 * ```
 */
export const layer = (
  options: Omit<RateLimiter.Options, "shared"> = {}
): Layer.Layer<never, never, SqlClient.SqlClient> =>
  Layer.effect(
    RateLimiter.RateLimiter,
    Effect.map(
      logged("creating the table")(
        Effect.map(makeShared, (shared) => shared as RateLimiter.SharedState | undefined),
        undefined
      ),
      (shared) => RateLimiter.make({ ...options, shared })
    )
  )
