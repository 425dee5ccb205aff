/**
 * The cluster on Node processes and Postgres: the database connection (with a clear error
 * when it is unreachable), `migrate`, a worker (a runner that hosts agent workflows) and a
 * client (starts, waits for, cancels agents; hosts none). Loaded lazily by the CLI: a
 * command without `--cluster` never imports it.
 */
import * as NodeClusterSocket from "@effect/platform-node/NodeClusterSocket"
import * as NodeCrypto from "@effect/platform-node/NodeCrypto"
import * as PgClient from "@effect/sql-pg/PgClient"
import { AgentSteps } from "@fibril/core"
import type * as RateLimiter from "@fibril/core/RateLimiter"
import { redactUrl } from "@fibril/core/Secrets"
import { ClusterWorkflowEngine, RunnerAddress } from "effect/cluster"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Reactivity from "effect/reactivity/Reactivity"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql"
import { appendFileSync } from "node:fs"
import * as net from "node:net"
import * as AgentWorkflow from "./AgentWorkflow.ts"
import * as ClusterQuestions from "./ClusterQuestions.ts"
import * as ClusterRateLimit from "./ClusterRateLimit.ts"
import type * as ClusterStore from "./ClusterStore.ts"
import * as PgClusterStore from "./PgClusterStore.ts"
import * as Sqlite from "./Sqlite.ts"
import * as SqliteClusterStore from "./SqliteClusterStore.ts"

export class ClusterUnreachable extends Schema.TaggedError<ClusterUnreachable>()("ClusterUnreachable", {
  url: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return this.url.startsWith("sqlite:")
      ? `cannot open the cluster database ${this.url}: ${this.reason}. Check that its directory exists and is writable (--cluster, FIBRIL_CLUSTER_URL)`
      : `cannot reach the cluster database at ${this.url}: ${this.reason}. Check that Postgres is running and reachable at that host and port, that the database exists, and the user and password (--cluster, FIBRIL_CLUSTER_URL)`
  }
}

/** The URL as it may be shown: the password (and any secret parameter) masked. */
export const displayUrl = (url: string): string => redactUrl(url)

const reasonOf = (error: unknown): string => {
  const cause = (error as { cause?: unknown }).cause
  const inner = cause instanceof Error ? cause.message : undefined
  const own = error instanceof Error ? error.message : String(error)
  return inner !== undefined && inner !== "" && inner !== own ? `${own} (${inner})` : own
}

/** Connections a process's pool opens at most, unless told otherwise (`fibril worker --db-connections`). */
export const defaultConnections = 20

/**
 * A Postgres connection pool (or, for `sqlite:<file>`, that SQLite file), checked with one
 * query; unreachable: ClusterUnreachable.
 *
 * On a worker a step holds a connection for its reads and for its commit, not during its model
 * or tool call (it commits after the call), so `maxConnections` bounds the statements and short
 * transactions in flight at once (less the one effect/cluster holds for its shard locks), not how
 * many calls a worker makes at once.
 */
export const database = (url: string, options: { readonly maxConnections?: number | undefined } = {}) =>
  Layer.effectContext(Effect.gen(function*() {
    const file = Sqlite.fileOf(url)
    const client = file === undefined
      ? PgClient.layer({
        url: Redacted.make(url),
        maxConnections: options.maxConnections ?? defaultConnections,
        connectTimeout: Duration.seconds(5)
      })
      // One machine, no server: a SQLite file (effect/cluster's storage hashes with `Digest`).
      : Layer.merge(Sqlite.layer(file), NodeCrypto.layerDigest)
    const context = yield* Layer.build(client).pipe(
      Effect.mapError((error) => new ClusterUnreachable({ url: displayUrl(url), reason: reasonOf(error) }))
    )
    yield* SqlClient.SqlClient.pipe(
      Effect.flatMap((sql) => sql`SELECT 1`),
      Effect.provide(context),
      Effect.timeoutOrElse({
        duration: Duration.seconds(10),
        orElse: () => Effect.fail("no answer within 10 s")
      }),
      Effect.mapError((error) => new ClusterUnreachable({ url: displayUrl(url), reason: reasonOf(error) }))
    )
    return context
  }))

/** The Postgres or the SQLite variant, by the database in context. */
const byDialect = <A>(postgres: A, sqlite: A) =>
  Effect.map(SqlClient.SqlClient, (sql) => sql.onDialectOrElse({ sqlite: () => sqlite, orElse: () => postgres }))

/** Creates the cluster's tables (`cluster_*`, effect/cluster's) and Fibril's (`fibril_*`). */
export const migrate = Effect.gen(function*() {
  yield* Effect.flatten(byDialect(PgClusterStore.migrate, SqliteClusterStore.migrate))
  yield* ClusterQuestions.migrate
  // effect/cluster creates its tables when its storage starts: start a client once, here.
  yield* Layer.build(NodeClusterSocket.layer({ clientOnly: true, storage: "sql" })).pipe(Effect.scoped)
}).pipe(Effect.orDie)

/** Drops finished agents older than `olderThan` and their journal: how many agents went. */
export const prune = (olderThan: Duration.Duration) =>
  Effect.flatten(byDialect(prunePostgres(olderThan), SqliteClusterStore.prune(olderThan)))

const prunePostgres = (olderThan: Duration.Duration) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const seconds = Duration.toSeconds(olderThan)
    return yield* sql.withTransaction(Effect.gen(function*() {
      const gone = yield* sql<{ agent_id: string; execution_id: string }>`
        DELETE FROM fibril_agents
        WHERE status IN ('completed', 'failed', 'cancelled')
          AND updated_at < now() - make_interval(secs => ${seconds})
        RETURNING agent_id, execution_id`
      if (gone.length === 0) return { agents: 0, messages: 0 }
      const ids = gone.map((r) => r.agent_id)
      yield* sql`DELETE FROM fibril_transcript WHERE agent_id IN ${sql.in(ids)}`
      yield* sql`DELETE FROM fibril_inbox WHERE agent_id IN ${sql.in(ids)}`
      yield* sql`DELETE FROM fibril_tool_calls WHERE agent_id IN ${sql.in(ids)}`
      yield* sql`DELETE FROM fibril_steps WHERE agent_id IN ${sql.in(ids)}`
      // The workflows' journal: their own messages, their activities' and clocks' (entity ids
      // start with the execution id).
      const executions = gone.map((r) => r.execution_id)
      const messages = yield* sql<{ n: string }>`
        WITH d AS (DELETE FROM cluster_messages
          WHERE split_part(entity_id, '/', 1) IN ${sql.in(executions)} RETURNING id)
        SELECT count(*)::text AS n FROM d`
      yield* sql`DELETE FROM cluster_replies WHERE request_id NOT IN (SELECT id FROM cluster_messages)`
      return { agents: gone.length, messages: Number(messages[0]?.n ?? 0) }
    }))
  })

/** Fails with SchemaMismatch (naming `fibril cluster migrate`) unless the tables match this code. */
export const checkSchema = Effect.flatten(byDialect(PgClusterStore.checkSchema, SqliteClusterStore.checkSchema))

/** A free TCP port on `host`, for a runner's address. */
export const freePort = (host: string) =>
  Effect.callback<number, Error>((resume) => {
    const server = net.createServer()
    server.once("error", (error) => resume(Effect.fail(error)))
    server.listen(0, host, () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resume(Effect.succeed(port)))
    })
  })

export interface WorkerOptions extends Partial<AgentWorkflow.Options> {
  readonly host: string
  readonly port: number
  /** How long a dead worker's shards stay locked (failover time). Default 35 s (effect/cluster's). */
  readonly lockExpiration?: Duration.Input | undefined
  readonly lockRefresh?: Duration.Input | undefined
  /** The rate limiter of the worker's model calls (`[rate_limit]`); shared with the other workers. */
  readonly rateLimit?: Omit<RateLimiter.Options, "shared"> | undefined
  /** Appends one JSON line per step start and end (tests count re-executions with it). */
  readonly stepLog?: string | undefined
  /**
   * How long an approval question waits for an answer before it is a denial
   * (`[permissions] ask_timeout_secs`; ClusterQuestions). Default 300 s.
   */
  readonly askTimeoutSecs?: number | undefined
  /** `[permissions] allow`: tools and postures whose questions are answered allow as asked. */
  readonly askAllow?: ReadonlyArray<string> | undefined
}

const stepLogger = (file: string | undefined): AgentWorkflow.Options["onStep"] =>
  file === undefined ?
    undefined :
    (event, agentId, run, name) =>
      Effect.sync(() =>
        appendFileSync(file, `${JSON.stringify({ pid: process.pid, event, agentId, run, name, t: Date.now() })}\n`)
      )

/** Shards per shard group, the same on every worker and client of a cluster (schema version 2). */
export const shardsPerGroup = 64

const sharding = (options: {
  readonly host?: string | undefined
  readonly port?: number | undefined
  readonly lockExpiration?: Duration.Input | undefined
  readonly lockRefresh?: Duration.Input | undefined
}) => ({
  ...(options.host === undefined || options.port === undefined
    ? {}
    : { runnerAddress: Option.some(RunnerAddress.make(options.host, options.port)) }),
  // Every runner and client must use the same number: it decides which shard a message goes to.
  // 64 rather than effect/cluster's 300: each storage poll names every shard of the runner in
  // its query, and the server parses it anew each time (bench/cluster-profile.ts: 15-20% less
  // Postgres CPU with 32 than 300); 64 still spreads agents evenly over a few dozen workers.
  shardsPerGroup,
  // Local messages are not serialized as if they were remote (a testing aid of effect/cluster).
  simulateRemoteSerialization: false,
  entityMessagePollInterval: AgentWorkflow.messagePollInterval,
  entityReplyPollInterval: Duration.millis(100),
  ...(options.lockExpiration === undefined ? {} : { shardLockExpiration: options.lockExpiration }),
  ...(options.lockRefresh === undefined ? {} : { shardLockRefreshInterval: options.lockRefresh })
})

/**
 * A worker's second, small pool on the same database: the markers of non-idempotent tool calls
 * commit on it, and the cancellation watch reads on it, whatever the main pool is busy with.
 */
const markerClient = Layer.effect(
  PgClusterStore.MarkerClient,
  Effect.gen(function*() {
    const pg = yield* PgClient.PgClient
    return yield* PgClient.make({ ...pg.config, maxConnections: 2 })
  })
).pipe(Layer.provide(Reactivity.layer), Layer.orDie)

/** The store on the database in context: Postgres (with its marker pool) or SQLite. */
const storeFor = (postgres: Layer.Layer<ClusterStore.ClusterStore, never, SqlClient.SqlClient>) =>
  Layer.unwrap(byDialect(postgres, SqliteClusterStore.layer))

const workerStore = storeFor(PgClusterStore.layerSql.pipe(Layer.provide(markerClient)))

/**
 * The worker's core services, whose model calls share a `RateLimiter` with the other workers
 * through the database (ClusterRateLimit).
 */
const sharingRateLimits = <E, R>(
  core: Layer.Layer<AgentSteps.AgentSteps | AgentWorkflow.WorkerServices, E, R>,
  options: WorkerOptions
) => core.pipe(Layer.provide(ClusterRateLimit.layer(options.rateLimit)))

/**
 * A worker: hosts agent workflows over the given core services (its workspace, tools, models),
 * on the cluster in the database in context.
 */
export const worker = <E, R>(
  options: WorkerOptions,
  core: Layer.Layer<AgentSteps.AgentSteps | AgentWorkflow.WorkerServices, E, R>
) =>
  AgentWorkflow.layer({ ...options, onStep: stepLogger(options.stepLog) }).pipe(
    // Approval questions are rows the asking step waits on: answered from any process.
    Layer.provide(ClusterQuestions.layer({ timeoutSecs: options.askTimeoutSecs, allow: options.askAllow })),
    Layer.provide(ClusterWorkflowEngine.layer),
    Layer.provide(NodeClusterSocket.layer({ storage: "sql", shardingConfig: sharding(options) })),
    Layer.provide(workerStore),
    Layer.provide(sharingRateLimits(core, options))
  )

/** A worker that is also a client in the same process (benchmarks, embedding): one engine. */
export const workerAndClient = <E, R>(
  options: WorkerOptions,
  core: Layer.Layer<AgentSteps.AgentSteps | AgentWorkflow.WorkerServices, E, R>
) =>
  AgentWorkflow.layer({ ...options, onStep: stepLogger(options.stepLog) }).pipe(
    // Approval questions are rows the asking step waits on: answered from any process.
    Layer.provide(ClusterQuestions.layer({ timeoutSecs: options.askTimeoutSecs, allow: options.askAllow })),
    Layer.provideMerge(ClusterWorkflowEngine.layer),
    Layer.provideMerge(NodeClusterSocket.layer({ storage: "sql", shardingConfig: sharding(options) })),
    Layer.provideMerge(workerStore),
    Layer.provide(sharingRateLimits(core, options))
  )

/**
 * A client: the engine (no shards hosted), the store, and the durable questions (read for the
 * tree's `question`/`answered` events and receipts, answered from here), on the database in context.
 */
export const client = ClusterWorkflowEngine.layer.pipe(
  Layer.provideMerge(NodeClusterSocket.layer({ clientOnly: true, storage: "sql", shardingConfig: sharding({}) })),
  Layer.provideMerge(storeFor(PgClusterStore.layerSql)),
  Layer.merge(ClusterQuestions.layer())
)
