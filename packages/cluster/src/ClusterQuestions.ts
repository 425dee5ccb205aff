/**
 * ClusterQuestions — approval questions in cluster mode, durable: a row in the cluster's SQL
 * (`fibril_questions`, Postgres or the SQLite file) that the asking tool step waits on.
 *
 * Why a row and not a `DurableDeferred`: a tool call is a step of Fibril's own journal
 * (StepJournal), not a workflow activity, and it runs outside the workflow body's replay; a
 * row keyed by the call (agent, run, step, index) is found again by the replayed step after a
 * worker's kill -9, so the question is asked once and its answer is not lost, and any process
 * on the database lists and answers it with one statement (no workflow client needed).
 *
 * The asking step polls its row (`pollMs`) until it is answered, the timeout (counted from the
 * row's `asked_at`, so a restart does not give it more time) makes it a denial, or its agent is
 * no longer running (a cancelled tree withdraws its questions: they are not listed, and an
 * answer to one is refused). The call's step asks before the marker of a non-idempotent tool
 * (AgentWorkflow), so a call killed while waiting runs after the answer, once.
 */
import * as Approvals from "@fibril/core/Approvals"
import * as Permission from "@fibril/core/Permission"
import * as Receipt from "@fibril/core/Receipt"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql"

const encodeQuestion = Schema.encodeSync(Schema.fromJsonString(Approvals.Question))
const decodeQuestion = Schema.decodeSync(Schema.fromJsonString(Approvals.Question))
const encodeAnswer = Schema.encodeSync(Schema.fromJsonString(Approvals.Answer))
const decodeAnswer = Schema.decodeSync(Schema.fromJsonString(Approvals.Answer))

/** The id of the question a call asks: the same for every execution of its step. */
export const questionId = (
  agentId: string,
  at: { readonly run: number; readonly step: number; readonly slot: number }
) => `q-${agentId}-${at.run}-${at.step}-${at.slot}`

/** Creates the table (the same statement on both dialects); run by every user, idempotent. */
export const migrate = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS fibril_questions (id TEXT PRIMARY KEY, agent_id TEXT NOT NULL,
    question TEXT NOT NULL, answer TEXT, asked_at BIGINT NOT NULL, answered_at BIGINT)`
})

interface Row {
  readonly question: string
  readonly answer: string | null
  readonly asked_at: number | string
  readonly status: string | null
}

/** A question as its row keeps it: asked, and decided once `answer` is there. */
export interface Stored {
  readonly question: Approvals.Question
  readonly answer: Approvals.Answer | undefined
  /** Epoch ms of the answer (the timeout's, a cancel's, a person's). */
  readonly answeredAt: number | undefined
}

export interface Service {
  /** The approver of one call: its question's id is `id`, whichever execution of the step asks. */
  readonly forCall: (id: string) => Approvals.Service
  /** The questions waiting now, oldest first (a cancelled or finished agent's are withdrawn). */
  readonly pending: Effect.Effect<ReadonlyArray<Approvals.Question>>
  /** Answers a waiting question; the step waiting on it sees the answer at its next poll. */
  readonly decide: (id: string, answer: Approvals.Answer) => Effect.Effect<void, Approvals.UnknownQuestion>
  /**
   * Which of these agents wait on a person, or were answered within `withinMs` (their call may
   * still be running): the heartbeat does not count that time as a stall.
   */
  readonly waitingAmong: (agentIds: ReadonlyArray<string>, withinMs: number) => Effect.Effect<ReadonlyArray<string>>
  /**
   * Every question these agents asked, oldest first, with its answer when decided: what their
   * receipts (`record`) and a client's `question`/`answered` events are made of.
   */
  readonly ofAgents: (agentIds: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<Stored>>
  /** Every question the agents of the tree of `rootId` asked, as `ofAgents` (one query, whatever its size). */
  readonly ofTree: (rootId: string) => Effect.Effect<ReadonlyArray<Stored>>
}

/**
 * An agent's questions into its receipt, through core's Receipt (the embedded runtime records
 * the same from its `question`/`answered` events): decided ones under `approvals`, those still
 * waiting under `questions`.
 */
export const record = (draft: Receipt.Decisions, stored: ReadonlyArray<Stored>): void => {
  for (const entry of stored) {
    if (entry.answer === undefined) Receipt.waiting(draft, entry.question)
    else {
      Receipt.decided(draft, {
        question: entry.question,
        answer: entry.answer,
        at: entry.answeredAt ?? entry.question.askedAt
      })
    }
  }
}

/** An agent's decisions and waiting questions, as its receipt's fields (none: `{}`). */
export const receiptFields = (stored: ReadonlyArray<Stored>): Receipt.Decisions => {
  const fields: Receipt.Decisions = {}
  record(fields, stored)
  return fields
}

/** The cluster's durable questions; undefined (the default): nobody answers, the call is denied. */
export const ClusterQuestions: Context.Reference<Service | undefined> = Context.Reference<Service | undefined>(
  "@fibril/cluster/ClusterQuestions",
  { defaultValue: () => undefined }
)

export interface Options {
  /** How long a question waits before it is a denial (`[permissions] ask_timeout_secs`); default 300 s. */
  readonly timeoutSecs?: number | undefined
  /** Between two reads of a waiting question's row; default 500 ms. */
  readonly pollMs?: number | undefined
  /**
   * Tool names and postures whose questions are answered "allow" as they are asked (`[permissions]
   * allow` of the worker's configuration; never a fan-out), as the embedded approver does.
   */
  readonly allow?: ReadonlyArray<string> | undefined
}

export const make = Effect.fnUntraced(function*(options: Options = {}) {
  const sql = yield* SqlClient.SqlClient
  // `fibril cluster migrate` creates the table; a database migrated before it existed gets it
  // here. Two workers starting together both create it: on PostgreSQL the loser of that race
  // fails ("duplicate key … pg_type"), and trying again finds the table there.
  yield* Effect.orDie(Effect.retry(migrate, { times: 5, schedule: Schedule.spaced("100 millis") }))
  const timeoutMs = (options.timeoutSecs ?? 300) * 1000
  const pollMs = options.pollMs ?? 500
  const read = (id: string) =>
    Effect.orDie(sql<Row>`SELECT q.question, q.answer, q.asked_at, a.status FROM fibril_questions q
      LEFT JOIN fibril_agents a ON a.agent_id = q.agent_id WHERE q.id = ${id}`)
  const timedOut: Approvals.Answer = {
    decision: "deny",
    reason: `no answer within ${Duration.format(Duration.millis(timeoutMs))}`,
    by: "timeout"
  }
  const withdrawn: Approvals.Answer = {
    decision: "deny",
    reason: "the question was withdrawn: the agent is no longer running",
    by: "cancel"
  }

  // The agent's ancestors' ids and its own, root first (a question's `path`): a standing answer
  // given for a subtree covers the agents whose path names it.
  const pathOf = Effect.fnUntraced(function*(agentId: string) {
    const path = [agentId]
    for (;;) {
      const parent = (yield* Effect.orDie(
        sql<{ parent_id: string | null }>`SELECT parent_id FROM fibril_agents WHERE agent_id = ${path[0]!}`
      ))[0]?.parent_id
      if (parent === undefined || parent === null || path.includes(parent)) return path
      path.unshift(parent)
    }
  })

  // An answer the asking step found on its own (the timeout, a cancel), written only if the row
  // is still unanswered (an answer that came first wins, and is read next round): the decision
  // is then in the agent's receipt like a person's.
  const settle = (id: string, answer: Approvals.Answer, at: number) =>
    Effect.orDie(
      sql`UPDATE fibril_questions SET answer = ${encodeAnswer(answer)}, answered_at = ${at}
        WHERE id = ${id} AND answer IS NULL`
    )

  // The "always" answers given in the tree of `rootId` (Approvals.standingOf: the embedded
  // runtime keeps the same in memory): durable, so they hold on every worker and after a restart.
  const standingIn = (rootId: string) =>
    Effect.orDie(sql<{ question: string; answer: string }>`SELECT q.question, q.answer FROM fibril_questions q
      JOIN fibril_agents a ON a.agent_id = q.agent_id
      WHERE a.root_id = ${rootId} AND q.answer LIKE ${"%\"always\":true%"}`).pipe(
      Effect.map((rows) =>
        rows.flatMap((row) => {
          const standing = Approvals.standingOf(decodeQuestion(row.question), decodeAnswer(row.answer))
          return standing === undefined ? [] : [standing]
        })
      )
    )

  const forCall = (id: string): Approvals.Service => ({
    ...Approvals.denyAll,
    ask: (request, onAsked) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const path = yield* pathOf(request.agentId)
        const fresh: Approvals.Question = { ...request, path, id, askedAt: now }
        // An "always" answer for this tool in a subtree on its path, or `[permissions] allow`,
        // decides it as it is asked (recorded all the same, answered when asked: no one was asked).
        const configured = request.kind === "tool" &&
          (options.allow?.includes(request.tool) === true || options.allow?.includes(request.posture) === true)
        const standing = Approvals.covers(yield* standingIn(path[0]!), path, request.tool)
          ? encodeAnswer({ decision: "allow", by: "standing answer" })
          : configured
          ? encodeAnswer({ decision: "allow", by: Approvals.allowedByConfig })
          : null
        // A replayed step finds its row: the question is asked once, an answer given meanwhile is kept.
        const inserted = yield* Effect.orDie(sql<{ id: string }>`INSERT INTO fibril_questions
          (id, agent_id, question, answer, asked_at, answered_at)
          VALUES (${id}, ${request.agentId}, ${encodeQuestion(fresh)}, ${standing}, ${now},
            ${standing === null ? null : now})
          ON CONFLICT (id) DO NOTHING RETURNING id`)
        if (inserted.length > 0 && standing === null) onAsked?.(fresh)
        for (;;) {
          const row = (yield* read(id))[0]
          if (row === undefined) return { question: fresh, answer: withdrawn, at: now }
          const question = decodeQuestion(row.question)
          const at = yield* Clock.currentTimeMillis
          if (row.answer !== null) return { question, answer: decodeAnswer(row.answer), at }
          if (row.status !== "running") {
            yield* settle(id, withdrawn, at)
            return { question, answer: withdrawn, at }
          }
          if (at >= Number(row.asked_at) + timeoutMs) {
            yield* settle(id, timedOut, at)
            continue
          }
          yield* Effect.sleep(Duration.millis(pollMs))
        }
      }),
    waiting: () => false
  })

  const pending = Effect.orDie(
    sql<{ question: string }>`SELECT q.question FROM fibril_questions q
      JOIN fibril_agents a ON a.agent_id = q.agent_id
      WHERE q.answer IS NULL AND a.status = 'running' ORDER BY q.asked_at, q.id`
  ).pipe(Effect.map((rows) => rows.map((row) => decodeQuestion(row.question))))

  const decide = Effect.fn("ClusterQuestions.decide")(function*(id: string, answer: Approvals.Answer) {
    const now = yield* Clock.currentTimeMillis
    const updated = yield* Effect.orDie(sql<{ id: string }>`UPDATE fibril_questions
      SET answer = ${encodeAnswer(answer)}, answered_at = ${now}
      WHERE id = ${id} AND answer IS NULL
        AND agent_id IN (SELECT agent_id FROM fibril_agents WHERE status = 'running')
      RETURNING id`)
    if (updated.length === 0) {
      return yield* new Approvals.UnknownQuestion({ id, pending: (yield* pending).map((question) => question.id) })
    }
  })

  const waitingAmong = (agentIds: ReadonlyArray<string>, withinMs: number) =>
    agentIds.length === 0 ?
      Effect.succeed([]) :
      Effect.flatMap(Clock.currentTimeMillis, (now) =>
        Effect.orDie(sql<{ agent_id: string }>`SELECT DISTINCT agent_id FROM fibril_questions
        WHERE agent_id IN ${sql.in(agentIds)} AND (answer IS NULL OR answered_at > ${now - withinMs})`).pipe(
          Effect.map((rows) =>
            rows.map((row) => row.agent_id)
          )
        ))

  type StoredRow = { question: string; answer: string | null; answered_at: number | string | null }
  const storedOf = (rows: ReadonlyArray<StoredRow>) =>
    rows.map((row): Stored => ({
      question: decodeQuestion(row.question),
      answer: row.answer === null ? undefined : decodeAnswer(row.answer),
      answeredAt: row.answered_at === null ? undefined : Number(row.answered_at)
    }))
  const ofAgents = (agentIds: ReadonlyArray<string>) =>
    agentIds.length === 0 ? Effect.succeed([]) : Effect.orDie(
      sql<StoredRow>`SELECT question, answer, answered_at FROM fibril_questions
        WHERE agent_id IN ${sql.in(agentIds)} ORDER BY asked_at, id`
    ).pipe(Effect.map(storedOf))
  const ofTree = (rootId: string) =>
    Effect.orDie(
      sql<StoredRow>`SELECT q.question, q.answer, q.answered_at FROM fibril_questions q
        JOIN fibril_agents a ON a.agent_id = q.agent_id WHERE a.root_id = ${rootId} ORDER BY q.asked_at, q.id`
    ).pipe(Effect.map(storedOf))

  const service: Service = { forCall, pending, decide, waitingAmong, ofAgents, ofTree }
  return service
})

/** The durable questions on the database in context (a worker, or a process that answers). */
export const layer = (options: Options = {}): Layer.Layer<never, never, SqlClient.SqlClient> =>
  Layer.effect(ClusterQuestions, make(options))

/**
 * Runs a tool call's step with its durable approver. When the call's rules ask, the question is
 * asked (and waited on) first, before `execute` (which commits a non-idempotent tool's marker):
 * the approval inside the call then reads the answered row at once.
 */
export const guard = <A, E, R>(
  id: string,
  asks: Effect.Effect<{ readonly request: Approvals.Ask } | undefined>,
  execute: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  Effect.flatMap(Effect.service(ClusterQuestions), (questions) => {
    if (questions === undefined) return execute
    const approver = questions.forCall(id)
    return Effect.andThen(
      Effect.flatMap(asks, (ask) => ask === undefined ? Effect.void : approver.ask(ask.request)),
      Effect.provideService(execute, Approvals.Approvals, approver)
    )
  })

/**
 * What a call asks, when its rules ask a person about it: nothing for a tool its rules deny (the
 * call's own check refuses it) or allow. Its paths are checked by the call itself, after.
 */
export const askOf = (
  permission: Permission.Permission["Service"],
  caller: { readonly id: string; readonly role: string; readonly depth: number; readonly rules: Permission.Rules },
  tool: { readonly name: string; readonly posture: Permission.Posture } | undefined,
  params: unknown
): Effect.Effect<{ readonly request: Approvals.Ask } | undefined> => {
  if (tool === undefined) return Effect.succeed(undefined)
  const asked = Permission.askedBy(caller.rules, tool.name, tool.posture)
  if (asked === undefined) return Effect.succeed(undefined)
  return permission.checkTool(caller.rules, tool).pipe(
    Effect.as({
      request: {
        kind: "tool" as const,
        agentId: caller.id,
        path: [caller.id],
        role: caller.role,
        depth: caller.depth,
        tool: tool.name,
        posture: tool.posture,
        arguments: Approvals.boundArguments(params),
        reason: Permission.askReason(caller.rules, asked, tool.name)
      }
    }),
    Effect.orElseSucceed(() => undefined)
  )
}
