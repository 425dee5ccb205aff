/**
 * ClusterStore — what cluster mode keeps besides the workflow journal: one row per agent
 * (its tree, status and result), its transcript, its inbox (`agent_send_input`) and the
 * permits of the cluster-wide cap.
 *
 * Two implementations: `layerMemory` (one process; with the in-memory `TestRunner`) and
 * `layerSql` (Postgres). On Postgres every write made inside an activity annotated
 * `ClusterSchema.WithTransaction` commits in the transaction that journals the activity's
 * result: a transcript message is written exactly once per step, an inbox message is taken
 * exactly once, a permit is held exactly when the journal says it was granted.
 */
import * as Prompt from "effect/ai/Prompt"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql"

export const Status = Schema.Literals(["pending", "running", "completed", "failed", "cancelled"])
export type Status = typeof Status.Type

export const finished = (status: Status): boolean =>
  status === "completed" || status === "failed" || status === "cancelled"

export const AgentRow = Schema.Struct({
  agentId: Schema.String,
  parentId: Schema.NullOr(Schema.String),
  depth: Schema.Int,
  role: Schema.String,
  model: Schema.String,
  description: Schema.String,
  prompt: Schema.String,
  detached: Schema.Boolean,
  workspace: Schema.String,
  status: Status,
  run: Schema.Int,
  executionId: Schema.String,
  text: Schema.NullOr(Schema.String),
  reason: Schema.NullOr(Schema.String),
  steps: Schema.Int,
  toolCalls: Schema.Int
})
export type AgentRow = typeof AgentRow.Type

export interface AgentUpdate {
  readonly status?: Status
  readonly run?: number
  readonly executionId?: string
  readonly prompt?: string
  readonly text?: string | null
  readonly reason?: string | null
  readonly steps?: number
  readonly toolCalls?: number
}

export class StoreFailure extends Schema.TaggedError<StoreFailure>()("StoreFailure", {
  operation: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `cluster store: ${this.operation} failed: ${this.reason}`
  }
}

/** The version of the `fibril_*` tables this code reads and writes. */
export const schemaVersion = 1

export class SchemaMismatch extends Schema.TaggedError<SchemaMismatch>()("SchemaMismatch", {
  found: Schema.NullOr(Schema.Int),
  expected: Schema.Int
}) {
  override get message() {
    return this.found === null
      ? `the cluster database has no Fibril tables; run \`fibril cluster migrate --cluster <url>\` first`
      : `the cluster database's schema is version ${this.found}, this fibril needs ${this.expected}; run \`fibril cluster migrate --cluster <url>\``
  }
}

export class ClusterStore extends Context.Service<ClusterStore, {
  /** Inserts the row unless the agent exists (a replayed spawn changes nothing). */
  readonly insert: (row: AgentRow) => Effect.Effect<void, StoreFailure>
  readonly update: (agentId: string, update: AgentUpdate) => Effect.Effect<void, StoreFailure>
  readonly get: (agentId: string) => Effect.Effect<AgentRow | undefined, StoreFailure>
  readonly children: (agentId: string) => Effect.Effect<ReadonlyArray<AgentRow>, StoreFailure>
  /** Every agent, oldest first. */
  readonly list: Effect.Effect<ReadonlyArray<AgentRow>, StoreFailure>
  /** Writes a transcript message at (run, step, slot) unless one is there (idempotent). */
  readonly append: (
    agentId: string,
    at: { readonly run: number; readonly step: number; readonly slot: number },
    message: Prompt.Message
  ) => Effect.Effect<void, StoreFailure>
  /** The agent's whole transcript, every run, in order. */
  readonly transcript: (agentId: string) => Effect.Effect<ReadonlyArray<Prompt.Message>, StoreFailure>
  readonly sendInput: (agentId: string, text: string) => Effect.Effect<void, StoreFailure>
  /** Takes the agent's queued input, oldest first; each message is taken once. */
  readonly takeInbox: (agentId: string) => Effect.Effect<ReadonlyArray<string>, StoreFailure>
  /** Takes a permit for `agentId` if fewer than `cap` are held (holding one already: true). */
  readonly acquire: (agentId: string, cap: number) => Effect.Effect<boolean, StoreFailure>
  readonly release: (agentId: string) => Effect.Effect<void, StoreFailure>
  readonly permits: Effect.Effect<ReadonlyArray<string>, StoreFailure>
}>()("@fibril/cluster/ClusterStore") {}

const applyUpdate = (row: AgentRow, update: AgentUpdate): AgentRow => ({
  ...row,
  ...(update.status === undefined ? {} : { status: update.status }),
  ...(update.run === undefined ? {} : { run: update.run }),
  ...(update.executionId === undefined ? {} : { executionId: update.executionId }),
  ...(update.prompt === undefined ? {} : { prompt: update.prompt }),
  ...(update.text === undefined ? {} : { text: update.text }),
  ...(update.reason === undefined ? {} : { reason: update.reason }),
  ...(update.steps === undefined ? {} : { steps: update.steps }),
  ...(update.toolCalls === undefined ? {} : { toolCalls: update.toolCalls })
})

const slotKey = (
  at: { readonly run: number; readonly step: number; readonly slot: number }
) => [at.run, at.step, at.slot]

const compareKeys = (a: ReadonlyArray<number>, b: ReadonlyArray<number>) =>
  a[0]! - b[0]! || a[1]! - b[1]! || a[2]! - b[2]!

/** One process's store (tests, and the in-memory engine). */
export const makeMemory = Effect.sync(() => {
  const agents = new Map<string, AgentRow>()
  const transcripts = new Map<string, Map<string, { key: ReadonlyArray<number>; message: Prompt.Message }>>()
  const inboxes = new Map<string, Array<string>>()
  const held = new Set<string>()
  return ClusterStore.of({
    insert: (row) => Effect.sync(() => void (agents.has(row.agentId) || agents.set(row.agentId, row))),
    update: (agentId, update) =>
      Effect.sync(() => {
        const row = agents.get(agentId)
        if (row !== undefined) agents.set(agentId, applyUpdate(row, update))
      }),
    get: (agentId) => Effect.sync(() => agents.get(agentId)),
    children: (agentId) => Effect.sync(() => [...agents.values()].filter((row) => row.parentId === agentId)),
    list: Effect.sync(() => [...agents.values()]),
    append: (agentId, at, message) =>
      Effect.sync(() => {
        let rows = transcripts.get(agentId)
        if (rows === undefined) transcripts.set(agentId, rows = new Map())
        const key = slotKey(at)
        if (!rows.has(key.join("/"))) rows.set(key.join("/"), { key, message })
      }),
    transcript: (agentId) =>
      Effect.sync(() =>
        [...(transcripts.get(agentId)?.values() ?? [])].sort((a, b) => compareKeys(a.key, b.key)).map((r) => r.message)
      ),
    sendInput: (agentId, text) =>
      Effect.sync(() => {
        const inbox = inboxes.get(agentId)
        if (inbox === undefined) inboxes.set(agentId, [text])
        else inbox.push(text)
      }),
    takeInbox: (agentId) =>
      Effect.sync(() => {
        const inbox = inboxes.get(agentId)
        if (inbox === undefined) return []
        inboxes.delete(agentId)
        return inbox
      }),
    acquire: (agentId, cap) =>
      Effect.sync(() => {
        if (held.has(agentId)) return true
        if (held.size >= cap) return false
        held.add(agentId)
        return true
      }),
    release: (agentId) => Effect.sync(() => void held.delete(agentId)),
    permits: Effect.sync(() => [...held])
  })
})

export const layerMemory: Layer.Layer<ClusterStore> = Layer.effect(ClusterStore, makeMemory)

// ---------------------------------------------------------------------------
// Postgres
// ---------------------------------------------------------------------------

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

interface AgentDbRow {
  readonly agent_id: string
  readonly parent_id: string | null
  readonly depth: number
  readonly role: string
  readonly model: string
  readonly description: string
  readonly prompt: string
  readonly detached: boolean
  readonly workspace: string
  readonly status: Status
  readonly run: number
  readonly execution_id: string
  readonly text: string | null
  readonly reason: string | null
  readonly steps: number
  readonly tool_calls: number
}

const fromDb = (r: AgentDbRow): AgentRow => ({
  agentId: r.agent_id,
  parentId: r.parent_id,
  depth: r.depth,
  role: r.role,
  model: r.model,
  description: r.description,
  prompt: r.prompt,
  detached: r.detached,
  workspace: r.workspace,
  status: r.status,
  run: r.run,
  executionId: r.execution_id,
  text: r.text,
  reason: r.reason,
  steps: r.steps,
  toolCalls: r.tool_calls
})

const encodeMessage = Schema.encodeSync(Schema.fromJsonString(Prompt.Message))
const decodeMessage = Schema.decodeSync(Schema.fromJsonString(Prompt.Message))

export const makeSql = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const fail = (operation: string) => (error: unknown) =>
    new StoreFailure({ operation, reason: error instanceof Error ? error.message : String(error) })
  const q = <A>(operation: string, effect: Effect.Effect<A, unknown>) => Effect.mapError(effect, fail(operation))
  return ClusterStore.of({
    insert: (row) =>
      q(
        "insert",
        sql`INSERT INTO fibril_agents (agent_id, parent_id, depth, role, model, description, prompt, detached,
          workspace, status, run, execution_id, text, reason, steps, tool_calls)
          VALUES (${row.agentId}, ${row.parentId}, ${row.depth}, ${row.role}, ${row.model}, ${row.description},
          ${row.prompt}, ${row.detached}, ${row.workspace}, ${row.status}, ${row.run}, ${row.executionId},
          ${row.text}, ${row.reason}, ${row.steps}, ${row.toolCalls})
          ON CONFLICT (agent_id) DO NOTHING`
      ),
    update: (agentId, u) =>
      q(
        "update",
        sql`UPDATE fibril_agents SET
          status = COALESCE(${u.status ?? null}, status),
          run = COALESCE(${u.run ?? null}, run),
          execution_id = COALESCE(${u.executionId ?? null}, execution_id),
          prompt = COALESCE(${u.prompt ?? null}, prompt),
          text = CASE WHEN ${u.text !== undefined} THEN ${u.text ?? null} ELSE text END,
          reason = CASE WHEN ${u.reason !== undefined} THEN ${u.reason ?? null} ELSE reason END,
          steps = COALESCE(${u.steps ?? null}, steps),
          tool_calls = COALESCE(${u.toolCalls ?? null}, tool_calls),
          updated_at = now()
          WHERE agent_id = ${agentId}`
      ),
    get: (agentId) =>
      q(
        "get",
        Effect.map(sql<AgentDbRow>`SELECT * FROM fibril_agents WHERE agent_id = ${agentId}`, (rows) =>
          rows[0] === undefined ? undefined : fromDb(rows[0]))
      ),
    children: (agentId) =>
      q(
        "children",
        Effect.map(
          sql<AgentDbRow>`SELECT * FROM fibril_agents WHERE parent_id = ${agentId} ORDER BY created_at`,
          (rows) => rows.map(fromDb)
        )
      ),
    list: q("list", Effect.map(sql<AgentDbRow>`SELECT * FROM fibril_agents ORDER BY created_at`, (r) => r.map(fromDb))),
    append: (agentId, at, message) =>
      q(
        "append",
        sql`INSERT INTO fibril_transcript (agent_id, run, step, slot, message, pid)
          VALUES (${agentId}, ${at.run}, ${at.step}, ${at.slot}, ${encodeMessage(message)}, ${process.pid})
          ON CONFLICT DO NOTHING`
      ),
    transcript: (agentId) =>
      q(
        "transcript",
        Effect.map(
          sql<{ message: string }>`SELECT message FROM fibril_transcript WHERE agent_id = ${agentId}
            ORDER BY run, step, slot`,
          (rows) => rows.map((r) => decodeMessage(r.message))
        )
      ),
    sendInput: (agentId, text) =>
      q("sendInput", sql`INSERT INTO fibril_inbox (agent_id, text) VALUES (${agentId}, ${text})`),
    takeInbox: (agentId) =>
      q(
        "takeInbox",
        Effect.map(
          sql<{ id: string; text: string }>`DELETE FROM fibril_inbox WHERE agent_id = ${agentId} RETURNING id, text`,
          (rows) => [...rows].sort((a, b) => Number(a.id) - Number(b.id)).map((r) => r.text)
        )
      ),
    acquire: (agentId, cap) =>
      q(
        "acquire",
        Effect.gen(function*() {
          // One admission at a time cluster-wide: the lock lasts until the transaction ends.
          yield* sql`SELECT pg_advisory_xact_lock(4242)`
          const rows = yield* sql<{ ok: boolean }>`
            WITH have AS (SELECT 1 FROM fibril_permits WHERE agent_id = ${agentId}),
                 ins AS (INSERT INTO fibril_permits (agent_id)
                         SELECT ${agentId} WHERE NOT EXISTS (SELECT 1 FROM have)
                           AND (SELECT count(*) FROM fibril_permits) < ${cap}
                         RETURNING 1)
            SELECT (EXISTS (SELECT 1 FROM have) OR EXISTS (SELECT 1 FROM ins)) AS ok`
          return rows[0]?.ok === true
        })
      ),
    release: (agentId) => q("release", sql`DELETE FROM fibril_permits WHERE agent_id = ${agentId}`),
    permits: q(
      "permits",
      Effect.map(sql<{ agent_id: string }>`SELECT agent_id FROM fibril_permits`, (r) => r.map((x) => x.agent_id))
    )
  })
})

export const layerSql: Layer.Layer<ClusterStore, never, SqlClient.SqlClient> = Layer.effect(ClusterStore, makeSql)
