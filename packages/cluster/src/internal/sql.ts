/**
 * What the two SQL stores (`PgClusterStore`, `SqliteClusterStore`) share: an agent's row as the
 * database gives it and its decoding, the transcript's message codec, the statements both
 * dialects run alike (the reads of agents, Fibril's step journal), and how a failed statement
 * becomes a `StoreFailure`. It imports `ClusterStore`'s types; nothing there imports it.
 */
import type { AgentStatus } from "@fibril/core/AgentStatus"
import { ClaimsReport } from "@fibril/core/Claims"
import * as Prompt from "effect/ai/Prompt"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type { SqlClient } from "effect/sql"
import {
  type AgentRow,
  type ClusterStore,
  Grant,
  type StepKey,
  type StepOutcome,
  type StepWork,
  StoreFailure
} from "../ClusterStore.ts"

/** An agent's row as a SQL store reads it. */
export interface AgentDbRow {
  readonly agent_id: string
  readonly parent_id: string | null
  readonly root_id: string
  readonly tokens: number
  readonly depth: number
  readonly role: string
  readonly model: string
  readonly description: string
  readonly prompt: string
  readonly detached: boolean
  readonly workspace: string
  readonly status: AgentStatus
  readonly run: number
  readonly execution_id: string
  readonly text: string | null
  readonly reason: string | null
  readonly steps: number
  readonly tool_calls: number
  readonly tokens_input: number
  readonly tokens_output: number
  readonly tokens_cached: number
  readonly run_started_at: unknown
  readonly run_finished_at: unknown
  readonly grants: string | null
  /** The checked claims of a completed answer (JSON), from schema version 5. */
  readonly claims?: string | null
  readonly output_schema?: string | null
}

/** A timestamp as the driver gives it (a Date, or text), in ms since the epoch. */
const millis = (value: unknown): number | null => {
  if (value === null || value === undefined) return null
  if (value instanceof Date) return value.getTime()
  const parsed = typeof value === "number" ? value : Date.parse(String(value))
  return Number.isNaN(parsed) ? null : parsed
}

const decodeOutputSchema = Schema.decodeUnknownSync(
  Schema.fromJsonString(Schema.Record(Schema.String, Schema.Unknown))
)
const decodeGrants = Schema.decodeUnknownSync(Schema.fromJsonString(Schema.Array(Grant)))
const decodeClaims = Schema.decodeUnknownOption(Schema.fromJsonString(ClaimsReport))

/** An update's claims as the `claims` column keeps them (JSON); null clears them. */
export const encodeClaims = (claims: ClaimsReport | null | undefined): string | null =>
  claims === null || claims === undefined ? null : JSON.stringify(claims)

// Claims that no longer decode (a newer writer's shape) are left out, not a failed read.
const claimsOf = (row: AgentDbRow): { readonly claims?: ClaimsReport } => {
  if (row.claims === null || row.claims === undefined) return {}
  const decoded = decodeClaims(row.claims)
  return decoded._tag === "Some" ? { claims: decoded.value } : {}
}

/** An agent's row from its SQL row. */
export const fromDb = (row: AgentDbRow): AgentRow => ({
  agentId: row.agent_id,
  parentId: row.parent_id,
  rootId: row.root_id,
  tokens: Number(row.tokens),
  depth: row.depth,
  role: row.role,
  model: row.model,
  description: row.description,
  prompt: row.prompt,
  detached: Boolean(row.detached),
  workspace: row.workspace,
  status: row.status,
  run: row.run,
  executionId: row.execution_id,
  text: row.text,
  reason: row.reason,
  steps: row.steps,
  toolCalls: row.tool_calls,
  ...(row.grants === null || row.grants === undefined ? {} : { grants: decodeGrants(row.grants) }),
  ...(row.output_schema === null || row.output_schema === undefined
    ? {}
    : { outputSchema: decodeOutputSchema(row.output_schema) }),
  usage: {
    input: Number(row.tokens_input ?? 0),
    output: Number(row.tokens_output ?? 0),
    cached: Number(row.tokens_cached ?? 0)
  },
  startedAt: millis(row.run_started_at),
  finishedAt: millis(row.run_finished_at),
  ...claimsOf(row)
})

/** A transcript message as a SQL store keeps it (JSON). */
export const encodeMessage = Schema.encodeSync(Schema.fromJsonString(Prompt.Message))
export const decodeMessage = Schema.decodeSync(Schema.fromJsonString(Prompt.Message))

/** A failure of `operation`, as the store's callers see it. */
export const failure = (operation: string) => (error: unknown): StoreFailure =>
  new StoreFailure({ operation, reason: error instanceof Error ? error.message : String(error) })

/** `effect` with its failure as `operation`'s `StoreFailure`. */
export const attempt = <A, E, R>(
  operation: string,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, StoreFailure, R> => Effect.mapError(effect, failure(operation))

/**
 * The reads of agents and transcripts, the same statements on PostgreSQL and SQLite but for the
 * order of rows created in the same instant (`order`: SQLite's clock has milliseconds, so it
 * adds `rowid`).
 */
export const agentReads = (
  sql: SqlClient.SqlClient,
  order: string
): Pick<ClusterStore["Service"], "get" | "children" | "list" | "transcript" | "parentWaiting"> => {
  const orderBy = sql.literal(`ORDER BY ${order}`)
  return {
    get: (agentId) =>
      attempt(
        "get",
        Effect.map(sql<AgentDbRow>`SELECT * FROM fibril_agents WHERE agent_id = ${agentId}`, (rows) =>
          rows[0] === undefined ? undefined : fromDb(rows[0]))
      ),
    children: (agentId) =>
      attempt(
        "children",
        Effect.map(sql<AgentDbRow>`SELECT * FROM fibril_agents WHERE parent_id = ${agentId} ${orderBy}`, (rows) =>
          rows.map(fromDb))
      ),
    list: attempt(
      "list",
      Effect.map(sql<AgentDbRow>`SELECT * FROM fibril_agents ${orderBy}`, (rows) => rows.map(fromDb))
    ),
    transcript: (agentId) =>
      attempt(
        "transcript",
        Effect.map(
          sql<{ message: string }>`SELECT message FROM fibril_transcript WHERE agent_id = ${agentId}
            ORDER BY run, step, slot`,
          (rows) => rows.map((row) => decodeMessage(row.message))
        )
      ),
    parentWaiting: (agentId) =>
      attempt(
        "parentWaiting",
        Effect.map(
          sql<{ execution_id: string; waiting_on: string | null }>`SELECT p.execution_id, p.waiting_on
            FROM fibril_agents c JOIN fibril_agents p ON p.agent_id = c.parent_id WHERE c.agent_id = ${agentId}`,
          (rows) =>
            rows[0] === undefined ? undefined : { executionId: rows[0].execution_id, waitingOn: rows[0].waiting_on }
        )
      )
  }
}

/** An execution's journaled steps (name to result) on a SQL store: the same statement on PostgreSQL and SQLite. */
export const journalSql = (sql: SqlClient.SqlClient, executionId: string) =>
  attempt(
    "journal",
    Effect.map(
      sql<{ name: string; result: string }>`SELECT name, result FROM fibril_steps
        WHERE execution_id = ${executionId} AND result IS NOT NULL`,
      (rows) => new Map(rows.map((row) => [row.name, row.result]))
    )
  )
/**
 * `runStep` on a SQL store, the same statements on PostgreSQL and SQLite: a read before the call
 * (journaled already? the agent cancelled?), the call, then the claim with the result and the
 * step's writes in one transaction; a claim that finds the step's row gives way to its result.
 */
export const runStepSql = (sql: SqlClient.SqlClient) =>
<R1, R2 = never>(
  { agentId, executionId, name }: StepKey,
  execute: Effect.Effect<StepWork<R2>, never, R1>
): Effect.Effect<StepOutcome, StoreFailure, R1 | R2> =>
  Effect.gen(function*() {
    const journaled = Effect.map(
      sql<{ result: string | null }>`SELECT result FROM fibril_steps
        WHERE execution_id = ${executionId} AND name = ${name}`,
      (rows) => rows[0]?.result ?? undefined
    )
    // Before the call: journaled already (a replay that read the run's journal before another
    // execution committed), or the agent cancelled? (SQLite's EXISTS is 0 or 1.)
    const [before] = yield* sql<{ result: string | null; cancelled: boolean | number }>`
      SELECT (SELECT result FROM fibril_steps WHERE execution_id = ${executionId} AND name = ${name}) AS result,
        EXISTS (SELECT 1 FROM fibril_agents WHERE agent_id = ${agentId} AND status = 'cancelled') AS cancelled`
    if (before?.result !== null && before?.result !== undefined) {
      return { _tag: "Journaled", result: before.result } as StepOutcome
    }
    if (before?.cancelled === true || before?.cancelled === 1) return { _tag: "Cancelled" } as StepOutcome
    const work = yield* execute
    // The claim, with the result: the first execution of the step to commit wins. A claim held
    // by a transaction in flight is waited for; one committed makes this one give way.
    const ran = yield* sql.withTransaction(Effect.gen(function*() {
      const claimed = yield* sql<{ one: number }>`INSERT INTO fibril_steps (execution_id, name, agent_id, result)
        VALUES (${executionId}, ${name}, ${agentId}, ${work.result}) ON CONFLICT DO NOTHING RETURNING 1 AS one`
      if (claimed.length === 0) return false
      yield* work.commit
      return true
    }))
    if (ran) return { _tag: "Ran", result: work.result } as StepOutcome
    const first = yield* journaled
    if (first === undefined) {
      return yield* Effect.die(`step ${name} of ${executionId}: its claim is taken but has no result`)
    }
    return { _tag: "Journaled", result: first } as StepOutcome
  }).pipe(Effect.mapError(failure("runStep")))
