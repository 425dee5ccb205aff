/**
 * PgClusterStore — the cluster store on PostgreSQL (`--cluster postgres://…`): the tables
 * (`migrate`, `checkSchema`) and `layerSql`, the `ClusterStore` every worker of a cluster shares.
 *
 * Where a write is several statements, they are joined into one (data-modifying CTEs), so a
 * step's commit is one round trip; admissions are serialised cluster-wide by an advisory lock.
 * Times are the database's (`now()`, `clock_timestamp()`): one clock for every worker.
 */
import type * as Prompt from "effect/ai/Prompt"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Option from "effect/Option"
import { SqlClient } from "effect/sql"
import {
  type AgentRow,
  ClusterStore,
  finished,
  SchemaMismatch,
  schemaVersion,
  type Slot,
  stepTokens
} from "./ClusterStore.ts"
import {
  type AgentDbRow,
  agentReads,
  attempt,
  decodeMessage,
  encodeClaims,
  encodeMessage,
  fromDb,
  journalSql,
  runStepSql
} from "./internal/sql.ts"

type Service = ClusterStore["Service"]

/** Creates (or brings up to date) the `fibril_*` tables. */
export const migrate = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS fibril_meta (key text PRIMARY KEY, value text NOT NULL)`
  yield* sql`CREATE TABLE IF NOT EXISTS fibril_agents (
    agent_id text PRIMARY KEY, parent_id text, depth int NOT NULL, role text NOT NULL, model text NOT NULL,
    description text NOT NULL, prompt text NOT NULL, detached boolean NOT NULL, workspace text NOT NULL,
    status text NOT NULL, run int NOT NULL, execution_id text NOT NULL, text text, reason text,
    steps int NOT NULL DEFAULT 0, tool_calls int NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now())`
  yield* sql`CREATE INDEX IF NOT EXISTS fibril_agents_parent ON fibril_agents (parent_id)`
  yield* sql`CREATE TABLE IF NOT EXISTS fibril_transcript (
    agent_id text NOT NULL, run int NOT NULL, step int NOT NULL, slot int NOT NULL, message text NOT NULL,
    pid int NOT NULL DEFAULT 0, at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (agent_id, run, step, slot))`
  yield* sql`CREATE TABLE IF NOT EXISTS fibril_inbox (
    id bigserial PRIMARY KEY, agent_id text NOT NULL, text text NOT NULL, at timestamptz NOT NULL DEFAULT now())`
  yield* sql`CREATE INDEX IF NOT EXISTS fibril_inbox_agent ON fibril_inbox (agent_id)`
  yield* sql`CREATE TABLE IF NOT EXISTS fibril_permits (agent_id text PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())`
  // Version 2: tree budgets, the heartbeat, event following.
  yield* sql`CREATE SEQUENCE IF NOT EXISTS fibril_changes`
  yield* sql`ALTER TABLE fibril_agents
    ADD COLUMN IF NOT EXISTS root_id text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS tokens float8 NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS run_started_at timestamptz,
    ADD COLUMN IF NOT EXISTS last_progress timestamptz,
    ADD COLUMN IF NOT EXISTS changed bigint NOT NULL DEFAULT 0`
  yield* sql`ALTER TABLE fibril_agents ALTER COLUMN changed SET DEFAULT nextval('fibril_changes')`
  yield* sql`UPDATE fibril_agents SET root_id = agent_id WHERE root_id = ''`
  yield* sql`CREATE INDEX IF NOT EXISTS fibril_agents_root ON fibril_agents (root_id, changed)`
  // The running agents, for the heartbeat's look. Not on last_progress, which every step updates:
  // a step's update of its agent's row then changes no indexed column and can be a HOT update (no
  // index entries written), for which the pages keep some room.
  yield* sql`DROP INDEX IF EXISTS fibril_agents_running`
  yield* sql`CREATE INDEX IF NOT EXISTS fibril_agents_live ON fibril_agents (agent_id) WHERE status = 'running'`
  yield* sql`ALTER TABLE fibril_agents SET (fillfactor = 80)`
  yield* sql`ALTER TABLE fibril_agents ADD COLUMN IF NOT EXISTS waiting_on text`
  yield* sql`CREATE TABLE IF NOT EXISTS fibril_waiters (agent_id text PRIMARY KEY, execution_id text NOT NULL,
    clock text NOT NULL, at timestamptz NOT NULL DEFAULT now())`
  yield* sql`ALTER TABLE fibril_transcript ADD COLUMN IF NOT EXISTS seq bigserial`
  yield* sql`CREATE INDEX IF NOT EXISTS fibril_transcript_seq ON fibril_transcript (seq)`
  // Version 3: the markers of non-idempotent tool calls started.
  yield* sql`ALTER TABLE fibril_agents
    ADD COLUMN IF NOT EXISTS tokens_input float8 NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS tokens_output float8 NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS tokens_cached float8 NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS run_finished_at timestamptz,
    ADD COLUMN IF NOT EXISTS grants text`
  yield* sql`CREATE TABLE IF NOT EXISTS fibril_tool_calls (agent_id text NOT NULL, run int NOT NULL,
    step int NOT NULL, slot int NOT NULL, pid int NOT NULL, at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (agent_id, run, step, slot))`
  // Version 4: Fibril's journal of the model and tool steps (each committed with the step's writes).
  yield* sql`CREATE TABLE IF NOT EXISTS fibril_steps (execution_id text NOT NULL, name text NOT NULL,
    agent_id text NOT NULL, result text, at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (execution_id, name))`
  yield* sql`CREATE INDEX IF NOT EXISTS fibril_steps_agent ON fibril_steps (agent_id)`
  // Version 5: a completed answer's checked claims (JSON) and a typed result's schema (JSON).
  yield* sql`ALTER TABLE fibril_agents ADD COLUMN IF NOT EXISTS claims text,
    ADD COLUMN IF NOT EXISTS output_schema text`
  yield* sql`INSERT INTO fibril_meta (key, value) VALUES ('schema_version', ${String(schemaVersion)})
    ON CONFLICT (key) DO UPDATE SET value = excluded.value`
})

/** Fails with SchemaMismatch unless the `fibril_*` tables are this code's version. */
export const checkSchema = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const exists = yield* sql<{ present: boolean }>`SELECT to_regclass('fibril_meta') IS NOT NULL AS present`
  if (exists[0]?.present !== true) return yield* new SchemaMismatch({ found: null, expected: schemaVersion })
  const rows = yield* sql<{ value: string }>`SELECT value FROM fibril_meta WHERE key = 'schema_version'`
  const found = rows[0] === undefined ? null : Number(rows[0].value)
  if (found !== schemaVersion) return yield* new SchemaMismatch({ found, expected: schemaVersion })
})

/**
 * The connections the Postgres store commits tool-call markers on (`startToolCall`) and the
 * worker's cancellation watch reads with (`cancelledAmong`), apart from the pool the steps'
 * reads and commits use, so neither waits behind them. Without it the store's own pool is used,
 * outside any transaction.
 */
export class MarkerClient extends Context.Service<MarkerClient, SqlClient.SqlClient>()(
  "@fibril/cluster/PgClusterStore/MarkerClient"
) {}

// --- Rows ---

/** An agent's row as its columns. */
const dbRow = (row: AgentRow) => ({
  agent_id: row.agentId,
  parent_id: row.parentId,
  root_id: row.rootId,
  depth: row.depth,
  role: row.role,
  model: row.model,
  description: row.description,
  prompt: row.prompt,
  detached: row.detached,
  workspace: row.workspace,
  status: row.status,
  run: row.run,
  execution_id: row.executionId,
  text: row.text,
  reason: row.reason,
  steps: row.steps,
  tool_calls: row.toolCalls,
  tokens: row.tokens,
  grants: row.grants === undefined ? null : JSON.stringify(row.grants),
  output_schema: row.outputSchema === undefined ? null : JSON.stringify(row.outputSchema)
})

/** A transcript message's row. */
const transcriptRow = (agentId: string, at: Slot, message: Prompt.Message) => ({
  agent_id: agentId,
  run: at.run,
  step: at.step,
  slot: at.slot,
  message: encodeMessage(message),
  pid: process.pid
})

/** Starts a run (a CTE named `a`): an agent cancelled before its first step stays cancelled. */
const startRunCte = (sql: SqlClient.SqlClient, agentId: string) =>
  sql`a AS (UPDATE fibril_agents SET status = 'running', reason = NULL, run_started_at = now(),
          run_finished_at = NULL,
          last_progress = now(), changed = nextval('fibril_changes'), updated_at = now()
          WHERE agent_id = ${agentId} AND status <> 'cancelled')`

/** Agents' rows, their transcripts and their inboxes. */
const agentWrites = (
  sql: SqlClient.SqlClient
): Pick<Service, "insert" | "insertMany" | "update" | "append" | "sendInput" | "takeInbox"> => {
  const insertMany = (rows: ReadonlyArray<AgentRow>) =>
    rows.length === 0 ? Effect.void : attempt(
      "insert",
      sql`INSERT INTO fibril_agents ${sql.insert(rows.map(dbRow) as [ReturnType<typeof dbRow>])}
        ON CONFLICT (agent_id) DO NOTHING`
    )
  return {
    insert: (row) => insertMany([row]),
    insertMany,
    update: (agentId, change) =>
      attempt(
        "update",
        sql`UPDATE fibril_agents SET
          status = COALESCE(${change.status ?? null}, status),
          run = COALESCE(${change.run ?? null}, run),
          execution_id = COALESCE(${change.executionId ?? null}, execution_id),
          prompt = COALESCE(${change.prompt ?? null}, prompt),
          text = CASE WHEN ${change.text !== undefined} THEN ${change.text ?? null} ELSE text END,
          claims = CASE WHEN ${change.claims !== undefined} THEN ${encodeClaims(change.claims)} ELSE claims END,
          reason = CASE WHEN ${change.reason !== undefined} THEN ${change.reason ?? null} ELSE reason END,
          steps = COALESCE(${change.steps ?? null}, steps),
          tool_calls = COALESCE(${change.toolCalls ?? null}, tool_calls),
          run_finished_at = CASE WHEN ${change.status !== undefined && finished(change.status)} THEN clock_timestamp()
            ELSE run_finished_at END,
          changed = nextval('fibril_changes'),
          updated_at = now()
          WHERE agent_id = ${agentId}`
      ),
    append: (agentId, at, message) =>
      attempt(
        "append",
        sql`INSERT INTO fibril_transcript (agent_id, run, step, slot, message, pid)
          VALUES (${agentId}, ${at.run}, ${at.step}, ${at.slot}, ${encodeMessage(message)}, ${process.pid})
          ON CONFLICT DO NOTHING`
      ),
    sendInput: (agentId, text) =>
      attempt("sendInput", sql`INSERT INTO fibril_inbox (agent_id, text) VALUES (${agentId}, ${text})`),
    takeInbox: (agentId) =>
      attempt(
        "takeInbox",
        Effect.map(
          sql<{ id: string; text: string }>`DELETE FROM fibril_inbox WHERE agent_id = ${agentId} RETURNING id, text`,
          (rows) => [...rows].sort((a, b) => Number(a.id) - Number(b.id)).map((r) => r.text)
        )
      )
  }
}

// --- Admission ---

/** The permits of the cluster-wide cap, and the queue of agents waiting for one. */
const admission = (sql: SqlClient.SqlClient): Pick<Service, "acquire" | "handOff" | "release" | "permits"> => ({
  acquire: (agentId, cap, waiter) =>
    attempt(
      "acquire",
      Effect.gen(function*() {
        // A permit handed to this agent (or taken by an earlier try) admits it without the
        // cluster-wide lock: at each wave of a queued fan-out, every woken agent's try would
        // otherwise queue on that one lock behind the releases' hand-offs.
        const handed = yield* sql`WITH p AS (SELECT 1 FROM fibril_permits WHERE agent_id = ${agentId}),
            w AS (DELETE FROM fibril_waiters WHERE agent_id = ${agentId} AND EXISTS (SELECT 1 FROM p))
          SELECT 1 FROM p`
        if (handed.length > 0) return true
        // One admission at a time cluster-wide: the lock lasts until the transaction ends.
        yield* sql`SELECT pg_advisory_xact_lock(4242)`
        const rows = yield* sql<{ admitted: boolean }>`
          WITH have AS (SELECT 1 FROM fibril_permits WHERE agent_id = ${agentId}),
               ins AS (INSERT INTO fibril_permits (agent_id)
                       SELECT ${agentId} WHERE NOT EXISTS (SELECT 1 FROM have)
                         AND (SELECT count(*) FROM fibril_permits) < ${cap}
                       RETURNING 1)
          SELECT (EXISTS (SELECT 1 FROM have) OR EXISTS (SELECT 1 FROM ins)) AS admitted`
        const admitted = rows[0]?.admitted === true
        if (admitted) yield* sql`DELETE FROM fibril_waiters WHERE agent_id = ${agentId}`
        else if (waiter !== undefined) {
          yield* sql`INSERT INTO fibril_waiters (agent_id, execution_id, clock)
            VALUES (${agentId}, ${waiter.executionId}, ${waiter.clock})
            ON CONFLICT (agent_id) DO UPDATE SET clock = excluded.clock`
        }
        return admitted
      })
    ),
  handOff: (cap, resendAfterMs) =>
    attempt(
      "handOff",
      sql.withTransaction(Effect.gen(function*() {
        // After the admissions in progress: a waiter they queue is seen here. (The outer query
        // does not see the CTE's inserts: the permits handed now are named by `handed`, and
        // `fibril_permits` holds those handed earlier.) The new wakes first: in a wave of
        // releases, each would otherwise send the earlier ones' again before its own.
        yield* sql`SELECT pg_advisory_xact_lock(4242)`
        return yield* sql<{ execution_id: string; clock: string }>`
          WITH next AS (SELECT w.agent_id FROM fibril_waiters w
                 WHERE NOT EXISTS (SELECT 1 FROM fibril_permits p WHERE p.agent_id = w.agent_id)
                 ORDER BY w.at, w.agent_id
                 LIMIT GREATEST(${cap} - (SELECT count(*) FROM fibril_permits), 0)),
               handed AS (INSERT INTO fibril_permits (agent_id) SELECT agent_id FROM next RETURNING agent_id)
          SELECT execution_id, clock FROM fibril_waiters w
          WHERE w.agent_id IN (SELECT agent_id FROM handed)
             OR EXISTS (SELECT 1 FROM fibril_permits p WHERE p.agent_id = w.agent_id
                          AND p.at <= now() - make_interval(secs => ${resendAfterMs / 1000}))
          ORDER BY w.agent_id IN (SELECT agent_id FROM handed) DESC, w.at, w.agent_id`
      })).pipe(Effect.map((rows) => rows.map((r) => ({ executionId: r.execution_id, clock: r.clock }))))
    ),
  // A queued agent that ends (cancelled) leaves the queue with its permit, if any.
  release: (agentId) =>
    attempt(
      "release",
      sql`WITH w AS (DELETE FROM fibril_waiters WHERE agent_id = ${agentId})
        DELETE FROM fibril_permits WHERE agent_id = ${agentId}`
    ),
  permits: attempt(
    "permits",
    Effect.map(
      sql<{ agent_id: string }>`SELECT agent_id FROM fibril_permits`,
      (rows) => rows.map((row) => row.agent_id)
    )
  )
})

// --- Steps ---

/** A run's start, a model step's first read and its commit, a run's end. */
const runSteps = (sql: SqlClient.SqlClient): Pick<Service, "startRun" | "beginStep" | "recordStep" | "finishRun"> => ({
  startRun: (agentId, at, prompt) =>
    attempt(
      "startRun",
      sql`WITH ${startRunCte(sql, agentId)}
        INSERT INTO fibril_transcript ${sql.insert(transcriptRow(agentId, at, prompt))} ON CONFLICT DO NOTHING`
    ),
  beginStep: (agentId, { runAge, start, treeOf }) =>
    attempt(
      "beginStep",
      Effect.map(
        // With `start`, the run starts in this statement (its CTEs' writes are not visible to the
        // SELECT, which reads the rows as they were: the run's age is then 0, as it starts now).
        sql<{ inbox: string; tree_tokens: number; run_secs: number | null }>`
          ${
          start === undefined ? sql`` : sql`WITH ${startRunCte(sql, agentId)},
            p AS (INSERT INTO fibril_transcript ${
            sql.insert(transcriptRow(agentId, start.at, start.prompt))
          } ON CONFLICT DO NOTHING)`
        }
          SELECT (SELECT COALESCE(json_agg(json_build_array(id::text, text) ORDER BY id), '[]'::json)
              FROM fibril_inbox WHERE agent_id = ${agentId})::text AS inbox,
            ${
          treeOf === undefined
            ? sql`0::float8`
            : sql`(SELECT COALESCE(sum(tokens), 0) FROM fibril_agents WHERE root_id = ${treeOf})::float8`
        } AS tree_tokens,
            ${
          start === undefined && runAge === true
            ? sql`(SELECT EXTRACT(EPOCH FROM now() - run_started_at) FROM fibril_agents
              WHERE agent_id = ${agentId})::float8`
            : sql`0::float8`
        } AS run_secs`,
        (rows) => {
          const inbox = JSON.parse(rows[0]?.inbox ?? "[]") as ReadonlyArray<readonly [string, string]>
          return {
            inbox: inbox.map(([, text]) => text),
            inboxIds: inbox.map(([id]) => id),
            treeTokens: Number(rows[0]?.tree_tokens ?? 0),
            runSecs: Number(rows[0]?.run_secs ?? 0)
          }
        }
      )
    ),
  recordStep: (agentId, messages, usage, finish, taken) => {
    const tokens = sql`tokens = tokens + ${stepTokens(usage)}, tokens_input = tokens_input + ${usage.input},
      tokens_output = tokens_output + ${usage.output}, tokens_cached = tokens_cached + ${usage.cached}`
    const transcript = messages.length === 0 ? sql`` : sql`t AS (INSERT INTO fibril_transcript ${
      sql.insert(
        messages.map((m) => transcriptRow(agentId, m.at, m.message)) as [ReturnType<typeof transcriptRow>]
      )
    } ON CONFLICT DO NOTHING)`
    // The queued input the step delivered is taken with it.
    const inbox = taken === undefined || taken.length === 0
      ? undefined
      : sql`i AS (DELETE FROM fibril_inbox WHERE id IN ${sql.in(taken.map(BigInt))})`
    const ctes = [...(messages.length === 0 ? [] : [transcript]), ...(inbox === undefined ? [] : [inbox])]
    if (finish === undefined) {
      return attempt(
        "recordStep",
        sql`${ctes.length === 0 ? sql`` : sql`WITH ${sql.csv(ctes)}`}
          UPDATE fibril_agents SET ${tokens}, last_progress = now() WHERE agent_id = ${agentId}`
      )
    }
    // One UPDATE of the row for both (a statement changes a row once): the tokens always, the
    // outcome unless a cancel was recorded meanwhile (it stands, as in finishRun).
    const change = finish.update
    const live = sql.literal("status <> 'cancelled'")
    return attempt(
      "recordStep",
      sql`WITH ${ctes.length === 0 ? sql`` : sql`${sql.csv(ctes)},`}
          r AS (DELETE FROM fibril_permits WHERE agent_id = ${agentId} AND ${finish.release})
        UPDATE fibril_agents SET ${tokens}, last_progress = now(),
        status = CASE WHEN ${live} THEN COALESCE(${change.status ?? null}, status) ELSE status END,
        text = CASE WHEN ${live} AND ${change.text !== undefined} THEN ${change.text ?? null} ELSE text END,
        claims = CASE WHEN ${live} AND ${change.claims !== undefined} THEN ${encodeClaims(change.claims)}
          ELSE claims END,
        reason = CASE WHEN ${live} AND ${change.reason !== undefined} THEN ${change.reason ?? null} ELSE reason END,
        steps = CASE WHEN ${live} THEN COALESCE(${change.steps ?? null}, steps) ELSE steps END,
        tool_calls = CASE WHEN ${live} THEN COALESCE(${change.toolCalls ?? null}, tool_calls) ELSE tool_calls END,
        run_finished_at = CASE WHEN ${live} THEN clock_timestamp() ELSE run_finished_at END,
        changed = CASE WHEN ${live} THEN nextval('fibril_changes') ELSE changed END,
        updated_at = CASE WHEN ${live} THEN now() ELSE updated_at END
        WHERE agent_id = ${agentId}`
    )
  },
  finishRun: (agentId, change, release) =>
    attempt(
      "finishRun",
      sql`WITH r AS (DELETE FROM fibril_permits WHERE agent_id = ${agentId} AND ${release})
        UPDATE fibril_agents SET
        status = COALESCE(${change.status ?? null}, status),
        text = CASE WHEN ${change.text !== undefined} THEN ${change.text ?? null} ELSE text END,
        claims = CASE WHEN ${change.claims !== undefined} THEN ${encodeClaims(change.claims)} ELSE claims END,
        reason = CASE WHEN ${change.reason !== undefined} THEN ${change.reason ?? null} ELSE reason END,
        steps = COALESCE(${change.steps ?? null}, steps),
        tool_calls = COALESCE(${change.toolCalls ?? null}, tool_calls),
        run_finished_at = clock_timestamp(),
        changed = nextval('fibril_changes'),
        updated_at = now()
        WHERE agent_id = ${agentId} AND status <> 'cancelled'`
    )
})

// --- Following and watching ---

/** What a client, a waiting parent, the heartbeat and a worker's cancellation watch read. */
const following = (
  sql: SqlClient.SqlClient,
  markers: Option.Option<SqlClient.SqlClient>
): Pick<Service, "changes" | "look" | "stale" | "cancelledAmong" | "startToolCall"> => {
  // A step's transaction is the SqlClient's transaction connection in the context: without it, a
  // statement takes a connection of its own and commits at once.
  const omitTransaction = Context.omit(sql.transactionService)
  const outsideTransaction = (context: Context.Context<never>): Context.Context<never> => omitTransaction(context)
  return {
    changes: (rootId, cursor) =>
      attempt(
        "changes",
        Effect.gen(function*() {
          const messages = yield* sql<
            { agent_id: string; run: number; step: number; slot: number; message: string; seq: string }
          >`
            SELECT t.agent_id, t.run, t.step, t.slot, t.message, t.seq::text AS seq FROM fibril_transcript t
            WHERE t.seq > ${cursor.transcript}
              AND t.agent_id IN (SELECT agent_id FROM fibril_agents WHERE root_id = ${rootId})
            ORDER BY t.seq`
          const agents = yield* sql<AgentDbRow & { changed_text: string }>`
            SELECT *, changed::text AS changed_text FROM fibril_agents
            WHERE root_id = ${rootId} AND changed > ${cursor.agents} ORDER BY changed`
          return {
            messages: messages.map((r) => ({
              agentId: r.agent_id,
              at: { run: r.run, step: r.step, slot: r.slot },
              message: decodeMessage(r.message)
            })),
            agents: agents.map(fromDb),
            cursor: {
              transcript: messages.length === 0 ? cursor.transcript : Number(messages.at(-1)!.seq),
              agents: agents.length === 0 ? cursor.agents : Number(agents.at(-1)!.changed_text)
            }
          }
        })
      ),
    look: (agentId, ids, waitingOn) =>
      attempt(
        "look",
        Effect.gen(function*() {
          yield* sql`UPDATE fibril_agents SET waiting_on = ${waitingOn} WHERE agent_id = ${agentId}`
          const rows = ids === undefined
            ? yield* sql<AgentDbRow>`SELECT * FROM fibril_agents WHERE parent_id = ${agentId}
                AND status NOT IN ('completed', 'failed', 'cancelled') ORDER BY created_at FOR SHARE`
            : ids.length === 0
            ? []
            : yield* sql<AgentDbRow>`SELECT * FROM fibril_agents WHERE agent_id IN ${sql.in(ids)} FOR SHARE`
          const [clock] = yield* sql<{ now: number }>`SELECT (EXTRACT(EPOCH FROM now()) * 1000)::float8 AS now`
          const byId = new Map(rows.map((r) => [r.agent_id, fromDb(r)]))
          return {
            rows: ids === undefined ? rows.map(fromDb) : ids.flatMap((id) => byId.get(id) ?? []),
            now: Number(clock?.now ?? 0)
          }
        })
      ),
    stale: (seconds) =>
      attempt(
        "stale",
        Effect.gen(function*() {
          // A running child is its parent's progress (as embedded).
          yield* sql`UPDATE fibril_agents a SET last_progress = now() WHERE a.status = 'running'
            AND EXISTS (SELECT 1 FROM fibril_agents c WHERE c.parent_id = a.agent_id AND c.status = 'running')`
          const rows = yield* sql<{ agent_id: string }>`SELECT a.agent_id FROM fibril_agents a
            WHERE a.status = 'running' AND a.depth > 0
              AND a.last_progress < now() - make_interval(secs => ${seconds})
              AND NOT EXISTS (SELECT 1 FROM fibril_agents c WHERE c.parent_id = a.agent_id AND c.status = 'running')`
          return rows.map((r) => r.agent_id)
        })
      ),
    cancelledAmong: (agentIds) => {
      if (agentIds.length === 0) return Effect.succeed([])
      const read = (client: SqlClient.SqlClient) =>
        client<{ agent_id: string }>`SELECT agent_id FROM fibril_agents
          WHERE agent_id IN ${client.in(agentIds)} AND status = 'cancelled'`
      const statement = markers._tag === "Some"
        ? read(markers.value)
        : Effect.updateContext(read(sql), outsideTransaction)
      return attempt("cancelledAmong", Effect.map(statement, (rows) => rows.map((r) => r.agent_id)))
    },
    startToolCall: (agentId, at) => {
      const insert = (client: SqlClient.SqlClient) =>
        client<{ one: number }>`INSERT INTO fibril_tool_calls (agent_id, run, step, slot, pid)
          VALUES (${agentId}, ${at.run}, ${at.step}, ${at.slot}, ${process.pid})
          ON CONFLICT DO NOTHING RETURNING 1 AS one`
      const statement = markers._tag === "Some"
        ? insert(markers.value)
        : Effect.updateContext(insert(sql), outsideTransaction)
      return attempt("startToolCall", Effect.map(statement, (rows) => rows.length === 1))
    }
  }
}

export const makeSql = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const markers = yield* Effect.serviceOption(MarkerClient)
  return ClusterStore.of({
    ...agentReads(sql, "created_at"),
    ...agentWrites(sql),
    ...admission(sql),
    ...runSteps(sql),
    ...following(sql, markers),
    journal: (executionId) => journalSql(sql, executionId),
    runStep: runStepSql(sql)
  })
})

export const layerSql: Layer.Layer<ClusterStore, never, SqlClient.SqlClient> = Layer.effect(ClusterStore, makeSql)
