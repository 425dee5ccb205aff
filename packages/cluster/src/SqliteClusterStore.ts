/**
 * SqliteClusterStore — the cluster store on SQLite (`--cluster sqlite:<file>`): the same
 * `ClusterStore` as the Postgres one, for a cluster on one machine with no database server.
 * SQLite has one writer per file, so where the Postgres store joins writes into one statement
 * (data-modifying CTEs) or takes an advisory lock, this one runs a few plain statements in one
 * `BEGIN IMMEDIATE` transaction (statements on a local file cost microseconds, not round trips).
 * Times are milliseconds since the epoch from this machine's clock, the one clock of such a
 * cluster; change numbers are the agents' table's largest plus one, taken under the write lock.
 */
import type * as Usage from "@fibril/core/Usage"
import type * as Prompt from "effect/ai/Prompt"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { SqlClient } from "effect/sql"
import {
  type AgentRow,
  type AgentUpdate,
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

/** Creates (or brings up to date) the `fibril_*` tables in a SQLite file. */
export const migrate = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS fibril_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`
  yield* sql`CREATE TABLE IF NOT EXISTS fibril_agents (
    agent_id TEXT PRIMARY KEY, parent_id TEXT, root_id TEXT NOT NULL, depth INTEGER NOT NULL,
    role TEXT NOT NULL, model TEXT NOT NULL, description TEXT NOT NULL, prompt TEXT NOT NULL,
    detached INTEGER NOT NULL, workspace TEXT NOT NULL, status TEXT NOT NULL, run INTEGER NOT NULL,
    execution_id TEXT NOT NULL, text TEXT, reason TEXT, steps INTEGER NOT NULL DEFAULT 0,
    tool_calls INTEGER NOT NULL DEFAULT 0, tokens REAL NOT NULL DEFAULT 0,
    tokens_input REAL NOT NULL DEFAULT 0, tokens_output REAL NOT NULL DEFAULT 0,
    tokens_cached REAL NOT NULL DEFAULT 0, grants TEXT, waiting_on TEXT, claims TEXT, output_schema TEXT,
    run_started_at INTEGER, run_finished_at INTEGER, last_progress INTEGER,
    changed INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL)`
  yield* sql`CREATE INDEX IF NOT EXISTS fibril_agents_parent ON fibril_agents (parent_id)`
  yield* sql`CREATE INDEX IF NOT EXISTS fibril_agents_root ON fibril_agents (root_id, changed)`
  yield* sql`CREATE INDEX IF NOT EXISTS fibril_agents_live ON fibril_agents (agent_id) WHERE status = 'running'`
  yield* sql`CREATE TABLE IF NOT EXISTS fibril_transcript (seq INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id TEXT NOT NULL, run INTEGER NOT NULL, step INTEGER NOT NULL, slot INTEGER NOT NULL,
    message TEXT NOT NULL, pid INTEGER NOT NULL DEFAULT 0, at INTEGER NOT NULL,
    UNIQUE (agent_id, run, step, slot))`
  yield* sql`CREATE TABLE IF NOT EXISTS fibril_inbox (id INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id TEXT NOT NULL, text TEXT NOT NULL, at INTEGER NOT NULL)`
  yield* sql`CREATE INDEX IF NOT EXISTS fibril_inbox_agent ON fibril_inbox (agent_id)`
  yield* sql`CREATE TABLE IF NOT EXISTS fibril_permits (agent_id TEXT PRIMARY KEY, at INTEGER NOT NULL)`
  yield* sql`CREATE TABLE IF NOT EXISTS fibril_waiters (agent_id TEXT PRIMARY KEY, execution_id TEXT NOT NULL,
    clock TEXT NOT NULL, at INTEGER NOT NULL)`
  yield* sql`CREATE TABLE IF NOT EXISTS fibril_tool_calls (agent_id TEXT NOT NULL, run INTEGER NOT NULL,
    step INTEGER NOT NULL, slot INTEGER NOT NULL, pid INTEGER NOT NULL, at INTEGER NOT NULL,
    PRIMARY KEY (agent_id, run, step, slot))`
  yield* sql`CREATE TABLE IF NOT EXISTS fibril_steps (execution_id TEXT NOT NULL, name TEXT NOT NULL,
    agent_id TEXT NOT NULL, result TEXT,
    at INTEGER NOT NULL DEFAULT (CAST(strftime('%s', 'now') AS INTEGER) * 1000),
    PRIMARY KEY (execution_id, name))`
  yield* sql`CREATE INDEX IF NOT EXISTS fibril_steps_agent ON fibril_steps (agent_id)`
  // Version 5: a completed answer's checked claims (JSON) and a typed result's schema (JSON); a
  // table made by version 4 lacks the columns.
  const columns = yield* sql<{ name: string }>`SELECT name FROM pragma_table_info('fibril_agents')`
  const lacks = (name: string) => !columns.some((column) => column.name === name)
  if (lacks("claims")) yield* sql`ALTER TABLE fibril_agents ADD COLUMN claims TEXT`
  if (lacks("output_schema")) yield* sql`ALTER TABLE fibril_agents ADD COLUMN output_schema TEXT`
  yield* sql`INSERT INTO fibril_meta (key, value) VALUES ('schema_version', ${String(schemaVersion)})
    ON CONFLICT (key) DO UPDATE SET value = excluded.value`
})

/** Fails with SchemaMismatch unless the file has this code's `fibril_*` tables. */
export const checkSchema = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const exists = yield* sql<
    { name: string }
  >`SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'fibril_meta'`
  if (exists.length === 0) return yield* new SchemaMismatch({ found: null, expected: schemaVersion })
  const rows = yield* sql<{ value: string }>`SELECT value FROM fibril_meta WHERE key = 'schema_version'`
  const found = rows[0] === undefined ? null : Number(rows[0].value)
  if (found !== schemaVersion) return yield* new SchemaMismatch({ found, expected: schemaVersion })
})

/** Drops finished agents older than `olderThan` and their journal: how many agents and messages went. */
export const prune = (olderThan: Duration.Duration) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const before = Date.now() - Duration.toMillis(olderThan)
    return yield* sql.withTransaction(Effect.gen(function*() {
      const gone = yield* sql<{ agent_id: string; execution_id: string }>`
        SELECT agent_id, execution_id FROM fibril_agents
        WHERE status IN ('completed', 'failed', 'cancelled') AND updated_at < ${before}`
      if (gone.length === 0) return { agents: 0, messages: 0 }
      const ids = gone.map((r) => r.agent_id)
      for (const table of ["fibril_agents", "fibril_transcript", "fibril_inbox", "fibril_tool_calls", "fibril_steps"]) {
        yield* sql`DELETE FROM ${sql(table)} WHERE agent_id IN ${sql.in(ids)}`
      }
      const executions = gone.map((r) => r.execution_id)
      const messages = yield* sql<{ total: number }>`
        SELECT count(*) AS total FROM cluster_messages
        WHERE substr(entity_id, 1, instr(entity_id || '/', '/') - 1) IN ${sql.in(executions)}`
      yield* sql`DELETE FROM cluster_messages
        WHERE substr(entity_id, 1, instr(entity_id || '/', '/') - 1) IN ${sql.in(executions)}`
      yield* sql`DELETE FROM cluster_replies WHERE request_id NOT IN (SELECT id FROM cluster_messages)`
      return { agents: gone.length, messages: Number(messages[0]?.total ?? 0) }
    }))
  })

// --- Statements ---

/** `effect` in one `BEGIN IMMEDIATE` transaction, its failure as `operation`'s. */
const inTransaction = <A, E, R>(sql: SqlClient.SqlClient, operation: string, effect: Effect.Effect<A, E, R>) =>
  attempt(operation, sql.withTransaction(effect))

/** The statements several methods run, within their transactions. */
const statements = (sql: SqlClient.SqlClient) => {
  const nextChange = sql`(SELECT COALESCE(max(changed), 0) + 1 FROM fibril_agents)`

  const insertOne = (row: AgentRow) => {
    const now = Date.now()
    return sql`INSERT INTO fibril_agents (agent_id, parent_id, root_id, depth, role, model, description, prompt,
        detached, workspace, status, run, execution_id, text, reason, steps, tool_calls, tokens, grants,
        output_schema, changed, created_at, updated_at)
      VALUES (${row.agentId}, ${row.parentId}, ${row.rootId}, ${row.depth}, ${row.role}, ${row.model},
        ${row.description}, ${row.prompt}, ${row.detached ? 1 : 0}, ${row.workspace}, ${row.status}, ${row.run},
        ${row.executionId}, ${row.text}, ${row.reason}, ${row.steps}, ${row.toolCalls}, ${row.tokens},
        ${row.grants === undefined ? null : JSON.stringify(row.grants)},
        ${row.outputSchema === undefined ? null : JSON.stringify(row.outputSchema)}, ${nextChange}, ${now}, ${now})
      ON CONFLICT DO NOTHING`
  }
  const insertMany = (rows: ReadonlyArray<AgentRow>) =>
    rows.length === 0 ? Effect.void : inTransaction(sql, "insert", Effect.forEach(rows, insertOne, { discard: true }))
  const appendRows = (
    agentId: string,
    messages: ReadonlyArray<{ readonly at: Slot; readonly message: Prompt.Message }>
  ) =>
    Effect.forEach(
      messages,
      ({ at, message }) =>
        sql`INSERT INTO fibril_transcript (agent_id, run, step, slot, message, pid, at)
        VALUES (${agentId}, ${at.run}, ${at.step}, ${at.slot}, ${encodeMessage(message)}, ${process.pid}, ${Date.now()})
        ON CONFLICT DO NOTHING`,
      { discard: true }
    )
  const startRun = (agentId: string, at: Slot, prompt: Prompt.Message) => {
    const now = Date.now()
    return Effect.andThen(
      sql`UPDATE fibril_agents SET status = 'running', reason = NULL, run_started_at = ${now}, run_finished_at = NULL,
          last_progress = ${now}, changed = ${nextChange}, updated_at = ${now}
        WHERE agent_id = ${agentId} AND status <> 'cancelled'`,
      appendRows(agentId, [{ at, message: prompt }])
    )
  }
  /** The outcome's columns, unless the agent was cancelled meanwhile (the cancel stands). */
  const finish = (agentId: string, change: AgentUpdate, release: boolean) => {
    const now = Date.now()
    const released: Effect.Effect<unknown, unknown> = release
      ? sql`DELETE FROM fibril_permits WHERE agent_id = ${agentId}`
      : Effect.void
    return Effect.andThen(
      released,
      sql`UPDATE fibril_agents SET
          status = COALESCE(${change.status ?? null}, status),
          text = CASE WHEN ${change.text !== undefined ? 1 : 0} THEN ${change.text ?? null} ELSE text END,
        claims = CASE WHEN ${change.claims !== undefined ? 1 : 0} THEN ${encodeClaims(change.claims)} ELSE claims END,
          reason = CASE WHEN ${change.reason !== undefined ? 1 : 0} THEN ${change.reason ?? null} ELSE reason END,
          steps = COALESCE(${change.steps ?? null}, steps),
          tool_calls = COALESCE(${change.toolCalls ?? null}, tool_calls),
          run_finished_at = ${now}, changed = ${nextChange}, updated_at = ${now}
        WHERE agent_id = ${agentId} AND status <> 'cancelled'`
    )
  }
  const addTokens = (agentId: string, usage: Usage.Usage) =>
    sql`UPDATE fibril_agents SET tokens = tokens + ${stepTokens(usage)}, tokens_input = tokens_input + ${usage.input},
        tokens_output = tokens_output + ${usage.output}, tokens_cached = tokens_cached + ${usage.cached},
        last_progress = ${Date.now()}
      WHERE agent_id = ${agentId}`
  return { nextChange, insertMany, appendRows, startRun, finish, addTokens }
}
type Statements = ReturnType<typeof statements>

// --- Rows ---

/** Agents' rows, their transcripts and their inboxes. */
const agentWrites = (
  sql: SqlClient.SqlClient,
  { appendRows, insertMany, nextChange }: Statements
): Pick<Service, "insert" | "insertMany" | "update" | "append" | "sendInput" | "takeInbox"> => ({
  insert: (row) => insertMany([row]),
  insertMany,
  update: (agentId, change) => {
    const now = Date.now()
    return attempt(
      "update",
      sql`UPDATE fibril_agents SET
        status = COALESCE(${change.status ?? null}, status),
        run = COALESCE(${change.run ?? null}, run),
        execution_id = COALESCE(${change.executionId ?? null}, execution_id),
        prompt = COALESCE(${change.prompt ?? null}, prompt),
        text = CASE WHEN ${change.text !== undefined ? 1 : 0} THEN ${change.text ?? null} ELSE text END,
        claims = CASE WHEN ${change.claims !== undefined ? 1 : 0} THEN ${encodeClaims(change.claims)} ELSE claims END,
        reason = CASE WHEN ${change.reason !== undefined ? 1 : 0} THEN ${change.reason ?? null} ELSE reason END,
        steps = COALESCE(${change.steps ?? null}, steps),
        tool_calls = COALESCE(${change.toolCalls ?? null}, tool_calls),
        run_finished_at = CASE WHEN ${change.status !== undefined && finished(change.status) ? 1 : 0} THEN ${now}
          ELSE run_finished_at END,
        changed = ${nextChange}, updated_at = ${now}
        WHERE agent_id = ${agentId}`
    )
  },
  append: (agentId, at, message) => attempt("append", appendRows(agentId, [{ at, message }])),
  sendInput: (agentId, text) =>
    attempt(
      "sendInput",
      sql`INSERT INTO fibril_inbox (agent_id, text, at) VALUES (${agentId}, ${text}, ${Date.now()})`
    ),
  takeInbox: (agentId) =>
    inTransaction(
      sql,
      "takeInbox",
      Effect.gen(function*() {
        const rows = yield* sql<{ id: number; text: string }>`SELECT id, text FROM fibril_inbox
          WHERE agent_id = ${agentId} ORDER BY id`
        yield* sql`DELETE FROM fibril_inbox WHERE agent_id = ${agentId} AND id <= ${rows.at(-1)?.id ?? 0}`
        return rows.map((r) => r.text)
      })
    )
})

// --- Admission ---

/** The permits of the cluster-wide cap, and the queue of agents waiting for one. */
const admission = (sql: SqlClient.SqlClient): Pick<Service, "acquire" | "handOff" | "release" | "permits"> => ({
  acquire: (agentId, cap, waiter) =>
    inTransaction(
      sql,
      "acquire",
      Effect.gen(function*() {
        const held = yield* sql`SELECT 1 FROM fibril_permits WHERE agent_id = ${agentId}`
        const [permits] = yield* sql<{ held: number }>`SELECT count(*) AS held FROM fibril_permits`
        const admitted = held.length > 0 || Number(permits?.held ?? 0) < cap
        if (admitted) {
          yield* sql`INSERT INTO fibril_permits (agent_id, at) VALUES (${agentId}, ${Date.now()}) ON CONFLICT DO NOTHING`
          yield* sql`DELETE FROM fibril_waiters WHERE agent_id = ${agentId}`
        } else if (waiter !== undefined) {
          yield* sql`INSERT INTO fibril_waiters (agent_id, execution_id, clock, at)
            VALUES (${agentId}, ${waiter.executionId}, ${waiter.clock}, ${Date.now()})
            ON CONFLICT (agent_id) DO UPDATE SET clock = excluded.clock`
        }
        return admitted
      })
    ),
  handOff: (cap, resendAfterMs) =>
    inTransaction(
      sql,
      "handOff",
      Effect.gen(function*() {
        const now = Date.now()
        const [permits] = yield* sql<{ held: number }>`SELECT count(*) AS held FROM fibril_permits`
        const free = Math.max(0, cap - Number(permits?.held ?? 0))
        // Handed earlier and not admitted yet: their wakes are sent again after the new ones.
        const earlier = yield* sql<{ execution_id: string; clock: string }>`SELECT execution_id, clock
          FROM fibril_waiters w
          WHERE EXISTS (SELECT 1 FROM fibril_permits p WHERE p.agent_id = w.agent_id AND p.at <= ${now - resendAfterMs})
          ORDER BY at, agent_id`
        const handed = free === 0 ? [] : yield* sql<{ agent_id: string; execution_id: string; clock: string }>`
          SELECT agent_id, execution_id, clock FROM fibril_waiters w
          WHERE NOT EXISTS (SELECT 1 FROM fibril_permits p WHERE p.agent_id = w.agent_id)
          ORDER BY at, agent_id LIMIT ${free}`
        for (const waiter of handed) {
          yield* sql`INSERT INTO fibril_permits (agent_id, at) VALUES (${waiter.agent_id}, ${now})`
        }
        return [...handed, ...earlier].map((r) => ({ executionId: r.execution_id, clock: r.clock }))
      })
    ),
  release: (agentId) =>
    inTransaction(
      sql,
      "release",
      Effect.andThen(
        sql`DELETE FROM fibril_waiters WHERE agent_id = ${agentId}`,
        sql`DELETE FROM fibril_permits WHERE agent_id = ${agentId}`
      )
    ),
  permits: attempt(
    "permits",
    Effect.map(sql<{ agent_id: string }>`SELECT agent_id FROM fibril_permits`, (r) => r.map((x) => x.agent_id))
  )
})

// --- Steps ---

/** A run's start, a model step's first read and its commit, a run's end. */
const runSteps = (
  sql: SqlClient.SqlClient,
  { addTokens, appendRows, finish, startRun }: Statements
): Pick<Service, "startRun" | "beginStep" | "recordStep" | "finishRun"> => ({
  startRun: (agentId, at, prompt) => inTransaction(sql, "startRun", startRun(agentId, at, prompt)),
  beginStep: (agentId, { runAge, start, treeOf }) =>
    inTransaction(
      sql,
      "beginStep",
      Effect.gen(function*() {
        if (start !== undefined) yield* startRun(agentId, start.at, start.prompt)
        const inbox = yield* sql<{ id: number; text: string }>`SELECT id, text FROM fibril_inbox
          WHERE agent_id = ${agentId} ORDER BY id`
        const tree = treeOf === undefined
          ? 0
          : Number(
            (yield* sql<{ tokens: number }>`SELECT COALESCE(sum(tokens), 0) AS tokens FROM fibril_agents
              WHERE root_id = ${treeOf}`)[0]?.tokens ?? 0
          )
        const started = start === undefined && runAge === true
          ? (yield* sql<{ at: number | null }>`SELECT run_started_at AS at FROM fibril_agents
              WHERE agent_id = ${agentId}`)[0]?.at ?? null
          : null
        return {
          inbox: inbox.map((r) => r.text),
          inboxIds: inbox.map((r) => String(r.id)),
          treeTokens: tree,
          runSecs: started === null ? 0 : (Date.now() - Number(started)) / 1000
        }
      })
    ),
  recordStep: (agentId, messages, usage, end, taken) =>
    inTransaction(
      sql,
      "recordStep",
      Effect.gen(function*() {
        yield* appendRows(agentId, messages)
        if (taken !== undefined && taken.length > 0) {
          yield* sql`DELETE FROM fibril_inbox WHERE id IN ${sql.in(taken.map(Number))}`
        }
        yield* addTokens(agentId, usage)
        if (end !== undefined) yield* finish(agentId, end.update, end.release)
      })
    ),
  finishRun: (agentId, change, release) =>
    Effect.asVoid(inTransaction(sql, "finishRun", finish(agentId, change, release)))
})

// --- Following and watching ---

/** What a client, a waiting parent, the heartbeat and a worker's cancellation watch read. */
const following = (
  sql: SqlClient.SqlClient
): Pick<Service, "changes" | "look" | "stale" | "cancelledAmong" | "startToolCall"> => {
  const omitTransaction = Context.omit(sql.transactionService)
  return {
    changes: (rootId, cursor) =>
      attempt(
        "changes",
        Effect.gen(function*() {
          const messages = yield* sql<
            { agent_id: string; run: number; step: number; slot: number; message: string; seq: number }
          >`SELECT t.agent_id, t.run, t.step, t.slot, t.message, t.seq FROM fibril_transcript t
            WHERE t.seq > ${cursor.transcript}
              AND t.agent_id IN (SELECT agent_id FROM fibril_agents WHERE root_id = ${rootId})
            ORDER BY t.seq`
          const agents = yield* sql<AgentDbRow & { changed: number }>`SELECT * FROM fibril_agents
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
              agents: agents.length === 0 ? cursor.agents : Number(agents.at(-1)!.changed)
            }
          }
        })
      ),
    look: (agentId, ids, waitingOn) =>
      inTransaction(
        sql,
        "look",
        Effect.gen(function*() {
          yield* sql`UPDATE fibril_agents SET waiting_on = ${waitingOn} WHERE agent_id = ${agentId}`
          const rows = ids === undefined
            ? yield* sql<AgentDbRow>`SELECT * FROM fibril_agents WHERE parent_id = ${agentId}
                AND status NOT IN ('completed', 'failed', 'cancelled') ORDER BY created_at, rowid`
            : ids.length === 0
            ? []
            : yield* sql<AgentDbRow>`SELECT * FROM fibril_agents WHERE agent_id IN ${sql.in(ids)}`
          const byId = new Map(rows.map((r) => [r.agent_id, fromDb(r)]))
          return {
            rows: ids === undefined ? rows.map(fromDb) : ids.flatMap((id) => byId.get(id) ?? []),
            now: Date.now()
          }
        })
      ),
    stale: (seconds) =>
      inTransaction(
        sql,
        "stale",
        Effect.gen(function*() {
          const now = Date.now()
          // A running child is its parent's progress (as embedded).
          yield* sql`UPDATE fibril_agents SET last_progress = ${now} WHERE status = 'running'
            AND EXISTS (SELECT 1 FROM fibril_agents c WHERE c.parent_id = fibril_agents.agent_id
              AND c.status = 'running')`
          const rows = yield* sql<{ agent_id: string }>`SELECT a.agent_id FROM fibril_agents a
            WHERE a.status = 'running' AND a.depth > 0 AND a.last_progress < ${now - seconds * 1000}
              AND NOT EXISTS (SELECT 1 FROM fibril_agents c WHERE c.parent_id = a.agent_id AND c.status = 'running')`
          return rows.map((r) => r.agent_id)
        })
      ),
    cancelledAmong: (agentIds) =>
      agentIds.length === 0 ? Effect.succeed([]) : attempt(
        "cancelledAmong",
        Effect.map(
          sql<{ agent_id: string }>`SELECT agent_id FROM fibril_agents
            WHERE agent_id IN ${sql.in(agentIds)} AND status = 'cancelled'`,
          (rows) => rows.map((r) => r.agent_id)
        )
      ),
    // Committed by itself, outside any step's transaction: it stays when the step never commits.
    startToolCall: (agentId, at) =>
      attempt(
        "startToolCall",
        Effect.map(
          Effect.updateContext(
            sql<{ one: number }>`INSERT INTO fibril_tool_calls (agent_id, run, step, slot, pid, at)
              VALUES (${agentId}, ${at.run}, ${at.step}, ${at.slot}, ${process.pid}, ${Date.now()})
              ON CONFLICT DO NOTHING RETURNING 1 AS one`,
            omitTransaction
          ),
          (rows) => rows.length === 1
        )
      )
  }
}

export const make = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const shared = statements(sql)
  return ClusterStore.of({
    ...agentReads(sql, "created_at, rowid"),
    ...agentWrites(sql, shared),
    ...admission(sql),
    ...runSteps(sql, shared),
    ...following(sql),
    journal: (executionId) => journalSql(sql, executionId),
    runStep: runStepSql(sql)
  })
})

export const layer: Layer.Layer<ClusterStore, never, SqlClient.SqlClient> = Layer.effect(ClusterStore, make)
