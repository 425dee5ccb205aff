/**
 * ClusterStore — what cluster mode keeps besides the workflow journal: one row per agent
 * (its tree, status and result), its transcript, its inbox (`agent_send_input`) and the
 * permits of the cluster-wide cap.
 *
 * This module is the contract: the service, its rows and errors, and `layerMemory` (one
 * process; with the in-memory `TestRunner`). The SQL implementations are `PgClusterStore`
 * (Postgres) and `SqliteClusterStore` (one machine). On a SQL store every write made inside an
 * activity annotated `ClusterSchema.WithTransaction` commits in the transaction that journals
 * the activity's result: a transcript message is written exactly once per step, an inbox
 * message is taken exactly once, a permit is held exactly when the journal says it was granted.
 *
 * An agent's status is core's one `AgentStatus` (the cluster never writes `interrupted`), its
 * tokens core's one `Usage`.
 */
import { Permission } from "@fibril/core"
import { AgentStatus, isTerminal } from "@fibril/core/AgentStatus"
import { ClaimsReport } from "@fibril/core/Claims"
import * as Usage from "@fibril/core/Usage"
import * as Prompt from "effect/ai/Prompt"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"

/** Has the agent's run ended? (`AgentStatus.isTerminal`, by the name the cluster's callers use.) */
export const finished: (status: AgentStatus) => boolean = isTerminal

/** What one agent of a chain was given: Permission's record of a grant. */
export const Grant = Permission.GrantRecord
export type Grant = Permission.GrantRecord

/** No tokens: what a step that called no model adds. */
export const zeroUsage: Usage.Usage = Usage.none

/** An agent's tokens by kind, every run summed, in whole tokens: what clients report. */
export const tokensOf = (row: { readonly usage?: Usage.Usage | undefined }): Usage.Usage => {
  const usage = row.usage ?? zeroUsage
  return { input: Math.round(usage.input), output: Math.round(usage.output), cached: Math.round(usage.cached) }
}

/** The current run's duration, once it has ended (the store's clock: the same for every worker). */
export const durationOf = (
  row: { readonly startedAt?: number | null | undefined; readonly finishedAt?: number | null | undefined }
): number | undefined =>
  row.startedAt === undefined || row.startedAt === null || row.finishedAt === undefined || row.finishedAt === null
    ? undefined
    : Math.max(0, Math.round(row.finishedAt - row.startedAt))

export const AgentRow = Schema.Struct({
  agentId: Schema.String,
  parentId: Schema.NullOr(Schema.String),
  /** The root of the agent's tree (itself for a root): tree budgets and event following. */
  rootId: Schema.String,
  depth: Schema.Int,
  role: Schema.String,
  model: Schema.String,
  description: Schema.String,
  /** The current run's task (the first run) or input (a resume). */
  prompt: Schema.String,
  detached: Schema.Boolean,
  /** The workspace the agent works in: only a worker serving it runs the agent. */
  workspace: Schema.String,
  status: AgentStatus,
  run: Schema.Int,
  executionId: Schema.String,
  text: Schema.NullOr(Schema.String),
  reason: Schema.NullOr(Schema.String),
  steps: Schema.Int,
  toolCalls: Schema.Int,
  /** Tokens (input + output) of every model step of every run, summed. */
  tokens: Schema.Number,
  /**
   * The grants from the root down to this agent, itself last (its caller's `allowed_tools`
   * among them): its rules are these applied in turn to the worker's root rules. Absent (a row
   * or payload of an older version): its role alone.
   */
  grants: Schema.optionalKey(Schema.Array(Grant)),
  /** `output_schema` (a typed result): the answer in `text` is then the decoded value's JSON. */
  outputSchema: Schema.optionalKey(Schema.Record(Schema.String, Schema.Unknown)),
  /** `tokens` by kind, every model step of every run summed (as read from a store). */
  usage: Schema.optionalKey(Usage.Usage),
  /** When the current run started and ended (ms since the epoch, the store's clock), as read. */
  startedAt: Schema.optionalKey(Schema.NullOr(Schema.Number)),
  finishedAt: Schema.optionalKey(Schema.NullOr(Schema.Number)),
  /** The claims of its answer (`text`) checked against its transcript when its run completed. */
  claims: Schema.optionalKey(ClaimsReport)
})
export type AgentRow = typeof AgentRow.Type

/** A transcript position: run, step (-1: the run's prompt), slot within the step. */
export interface Slot {
  readonly run: number
  readonly step: number
  readonly slot: number
}

/** What a model step reads before its call. */
export interface StepStart {
  /**
   * The agent's queued input, oldest first. Read, not taken: the step's commit takes these
   * (`recordStep`'s `taken`), so input read by a step that never commits is read again.
   */
  readonly inbox: ReadonlyArray<string>
  /** The ids of those messages, for `recordStep`'s `taken`. */
  readonly inboxIds: ReadonlyArray<string>
  /** Tokens used so far by every agent of the tree. */
  readonly treeTokens: number
  /** Seconds since this run started (the store's clock, the same for every worker). */
  readonly runSecs: number
}

/** What a model step's first read reads besides the inbox, and whether it starts the run. */
export interface StepRead {
  /** The tree whose tokens to sum (`tree_max_tokens` is set); absent: not read (0). */
  readonly treeOf?: string | undefined
  /** Read the run's age (`max_wall_secs` is set); otherwise 0. */
  readonly runAge?: boolean | undefined
  /**
   * A first run's first step: the run starts in the same statement, as `startRun` starts it;
   * its age is then 0.
   */
  readonly start?: { readonly at: Slot; readonly prompt: Prompt.Message } | undefined
}

/** What changed in a tree since a cursor: new transcript messages and agents whose row changed. */
export interface TreeChanges {
  readonly messages: ReadonlyArray<{ readonly agentId: string; readonly at: Slot; readonly message: Prompt.Message }>
  readonly agents: ReadonlyArray<AgentRow>
  readonly cursor: Cursor
}
export interface Cursor {
  readonly transcript: number
  readonly agents: number
}
export const startCursor: Cursor = { transcript: 0, agents: 0 }

export interface AgentUpdate {
  readonly status?: AgentStatus
  readonly run?: number
  readonly executionId?: string
  readonly prompt?: string
  readonly text?: string | null
  /** With a completed answer: its claims checked (core's Claims); null clears them. */
  readonly claims?: ClaimsReport | null
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
export const schemaVersion = 5

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
  /**
   * Takes a permit for `agentId` if fewer than `cap` are held (holding one already: true).
   * Refused with `waiter`, the agent is queued: it sleeps on that durable clock until a release
   * hands it a permit and wakes it (`handOff`). One admission at a time cluster-wide.
   */
  readonly acquire: (
    agentId: string,
    cap: number,
    waiter?: { readonly executionId: string; readonly clock: string } | undefined
  ) => Effect.Effect<boolean, StoreFailure>
  /**
   * After a release: hands the permits free under `cap` to the oldest queued agents, and returns
   * the clocks to wake: the agents handed one now, oldest first, then those handed one at least
   * `resendAfterMs` earlier and not admitted yet (a wake lost is sent again by a later hand-off).
   * Under the admission lock, after the admissions in progress. A handed permit is reserved: a
   * newcomer cannot take it while its waiter wakes, so a woken agent is admitted at its next
   * try instead of queueing again.
   */
  readonly handOff: (
    cap: number,
    resendAfterMs: number
  ) => Effect.Effect<ReadonlyArray<{ readonly executionId: string; readonly clock: string }>, StoreFailure>
  readonly release: (agentId: string) => Effect.Effect<void, StoreFailure>
  readonly permits: Effect.Effect<ReadonlyArray<string>, StoreFailure>
  /**
   * Marks a run started (running, its clock starts, progress now) and writes its prompt. An agent
   * cancelled before its first step began stays cancelled (its step in flight sees it and stops).
   */
  readonly startRun: (agentId: string, at: Slot, prompt: Prompt.Message) => Effect.Effect<void, StoreFailure>
  /**
   * A model step's first read, before its call: the inbox (read, not taken) and what `read` asks
   * for (the tree's tokens, the run's age: only the budgets that are set cost a read); with
   * `read.start` it also starts the run, in the same statement.
   */
  readonly beginStep: (agentId: string, read: StepRead) => Effect.Effect<StepStart, StoreFailure>
  /**
   * Writes a step's transcript messages (idempotently), adds its tokens, marks progress, and
   * takes the queued input it delivered (`taken`: ids from `beginStep`). With `finish` it also
   * ends the run as `finishRun` does, in the same statement.
   */
  readonly recordStep: (
    agentId: string,
    messages: ReadonlyArray<{ readonly at: Slot; readonly message: Prompt.Message }>,
    usage: Usage.Usage,
    finish?: { readonly update: AgentUpdate; readonly release: boolean } | undefined,
    taken?: ReadonlyArray<string> | undefined
  ) => Effect.Effect<void, StoreFailure>
  /** Inserts rows unless their agents exist (a replayed step changes nothing). */
  readonly insertMany: (rows: ReadonlyArray<AgentRow>) => Effect.Effect<void, StoreFailure>
  /** Ends the run with its outcome (unless it was cancelled meanwhile); gives its permit back when `release`. */
  readonly finishRun: (agentId: string, update: AgentUpdate, release: boolean) => Effect.Effect<void, StoreFailure>
  /** What changed in the tree of `rootId` after `cursor` (the client follows a run with it). */
  readonly changes: (rootId: string, cursor: Cursor) => Effect.Effect<TreeChanges, StoreFailure>
  /**
   * Running sub-agents (depth > 0) without progress for `seconds` and without a running child:
   * the heartbeat's candidates. A running child counts as its parent's progress: a parent with
   * one has its progress set to now (so it is not stale the moment its last child ends).
   */
  readonly stale: (seconds: number) => Effect.Effect<ReadonlyArray<string>, StoreFailure>
  /**
   * A waiting parent's look (in its step's transaction): records the durable clock it will sleep
   * on (`waitingOn`; its children's ends wake it early), then reads the children it waits for —
   * `ids`, or its unfinished children — locked against a concurrent end until the look commits,
   * so a child that ends meanwhile is either seen ended or sees the record. With the store's time.
   */
  readonly look: (
    agentId: string,
    ids: ReadonlyArray<string> | undefined,
    waitingOn: string | null
  ) => Effect.Effect<{ readonly rows: ReadonlyArray<AgentRow>; readonly now: number }, StoreFailure>
  /** The parent of `agentId`: its execution and the clock it waits on, if it waits. */
  readonly parentWaiting: (
    agentId: string
  ) => Effect.Effect<{ readonly executionId: string; readonly waitingOn: string | null } | undefined, StoreFailure>
  /**
   * The marker that a non-idempotent tool call is starting (`at`: run, step, the call's index),
   * committed before the tool runs and outside the step's transaction, so it stays when the
   * step's result never commits. True: this is the call's first start. False: a marker was
   * already there: an earlier execution of the step started the tool and was interrupted (a
   * crash, a lost lock) before its result was journaled.
   */
  readonly startToolCall: (agentId: string, at: Slot) => Effect.Effect<boolean, StoreFailure>
  /**
   * Which of these agents have been cancelled? Read outside any step's transaction: a worker
   * looks, for the agents whose steps it runs, to stop a model or tool call in flight.
   */
  readonly cancelledAmong: (agentIds: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<string>, StoreFailure>
  /** Fibril's journal of an execution's steps: each journaled step's result (encoded), by name. */
  readonly journal: (executionId: string) => Effect.Effect<ReadonlyMap<string, string>, StoreFailure>
  /**
   * Runs a step of an agent's execution to a journaled result. A step already journaled is not
   * run (its result is returned), nor is a cancelled agent's. Otherwise `execute` runs, outside
   * any transaction (its model or tool call holds no connection), and gives the step's result
   * (encoded) and its writes; then one short transaction claims the step's name with that result
   * and makes the writes, committed together. Two executions of one step may both run
   * `execute`: the first commit wins, the other's writes are not made and it gets the winner's
   * result. `execute` dying or interrupted journals nothing: the step runs again.
   */
  readonly runStep: <R1, R2 = never>(
    step: StepKey,
    execute: Effect.Effect<StepWork<R2>, never, R1>
  ) => Effect.Effect<StepOutcome, StoreFailure, R1 | R2>
}>()("@fibril/cluster/ClusterStore") {}

/** A step of Fibril's journal: the agent, its workflow execution, the step's name. */
export interface StepKey {
  readonly agentId: string
  readonly executionId: string
  readonly name: string
}

/** What a step's execution gives `runStep`: its result, encoded, and its writes. */
export interface StepWork<R> {
  readonly result: string
  /** The step's writes, made in the transaction that journals `result`. */
  readonly commit: Effect.Effect<void, StoreFailure, R>
}

/**
 * What `runStep` did: ran the step and journaled `result`, found it journaled (`result` from
 * the journal: before it ran, or by another execution that committed first), or found the
 * agent cancelled (nothing ran).
 */
export type StepOutcome =
  | { readonly _tag: "Ran"; readonly result: string }
  | { readonly _tag: "Journaled"; readonly result: string }
  | { readonly _tag: "Cancelled" }

/** Tokens a step counts against budgets (as the embedded runtime: input + output). */
export const stepTokens: (usage: Usage.Usage) => number = Usage.total

const applyUpdate = (row: AgentRow, update: AgentUpdate): AgentRow => {
  // A row has `claims` only as a key with a value: null in an update clears them.
  const { claims, ...rest } = row
  const kept = update.claims === undefined ? claims : update.claims ?? undefined
  return {
    ...rest,
    ...(update.status === undefined ? {} : { status: update.status }),
    ...(update.run === undefined ? {} : { run: update.run }),
    ...(update.executionId === undefined ? {} : { executionId: update.executionId }),
    ...(update.prompt === undefined ? {} : { prompt: update.prompt }),
    ...(update.text === undefined ? {} : { text: update.text }),
    ...(kept === undefined ? {} : { claims: kept }),
    ...(update.reason === undefined ? {} : { reason: update.reason }),
    ...(update.steps === undefined ? {} : { steps: update.steps }),
    ...(update.toolCalls === undefined ? {} : { toolCalls: update.toolCalls })
  }
}

const slotKey = (
  at: { readonly run: number; readonly step: number; readonly slot: number }
) => [at.run, at.step, at.slot]

const compareKeys = (a: ReadonlyArray<number>, b: ReadonlyArray<number>) =>
  a[0]! - b[0]! || a[1]! - b[1]! || a[2]! - b[2]!

/** One process's store (tests, and the in-memory engine); its clock is Effect's Clock. */
export const makeMemory = Effect.suspend(() => makeMemoryClocked(Clock.currentTimeMillis))

/**
 * The memory store on a clock of the caller's (tests move it to check budgets of wall time
 * and the heartbeat without waiting).
 */
export const makeMemoryClocked = (currentTimeMillis: Effect.Effect<number>) =>
  Effect.sync(() => {
    const agents = new Map<string, AgentRow>()
    /** Per agent: when its run started and when it last made progress (ms), its change number. */
    const times = new Map<string, { started: number; progress: number; changed: number }>()
    const transcripts = new Map<
      string,
      Map<string, { key: ReadonlyArray<number>; at: Slot; message: Prompt.Message; seq: number }>
    >()
    const inboxes = new Map<string, Array<{ readonly id: string; readonly text: string }>>()
    let inboxSeq = 0
    /** The permits held, each with when it was taken or handed. */
    const held = new Map<string, number>()
    const waiting = new Map<string, string | null>()
    /** Queued for a permit, oldest first. */
    const queue = new Map<string, { readonly executionId: string; readonly clock: string }>()
    const toolCalls = new Set<string>()
    /** Fibril's step journal: execution id, then step name, to the encoded result. */
    const journals = new Map<string, Map<string, string>>()
    let seq = 0
    let changes = 0
    const timesOf = (agentId: string) => {
      let t = times.get(agentId)
      if (t === undefined) times.set(agentId, t = { started: 0, progress: 0, changed: 0 })
      return t
    }
    const touch = (agentId: string) => void (timesOf(agentId).changed = ++changes)
    const append = (agentId: string, at: Slot, message: Prompt.Message) => {
      let rows = transcripts.get(agentId)
      if (rows === undefined) transcripts.set(agentId, rows = new Map())
      const key = slotKey(at)
      if (!rows.has(key.join("/"))) rows.set(key.join("/"), { key, at, message, seq: ++seq })
    }
    const update = (agentId: string, u: AgentUpdate, now?: number) => {
      const row = agents.get(agentId)
      if (row !== undefined) {
        const ended = u.status !== undefined && finished(u.status) && now !== undefined ? { finishedAt: now } : {}
        agents.set(agentId, { ...applyUpdate(row, u), ...ended })
        touch(agentId)
      }
    }
    const startRun = (agentId: string, at: Slot, prompt: Prompt.Message, now: number) => {
      const row = agents.get(agentId)
      if (row !== undefined && row.status !== "cancelled") {
        update(agentId, { status: "running", reason: null })
        agents.set(agentId, { ...agents.get(agentId)!, startedAt: now, finishedAt: null })
      }
      const t = timesOf(agentId)
      t.started = now
      t.progress = now
      append(agentId, at, prompt)
    }
    const finishRun = (agentId: string, u: AgentUpdate, release: boolean, now: number) => {
      // A cancel recorded meanwhile stands (its interrupt reaches the run at its next boundary).
      if (agents.get(agentId)?.status !== "cancelled") update(agentId, u, now)
      if (release) held.delete(agentId)
    }
    const insert = (row: AgentRow) => {
      if (agents.has(row.agentId)) return
      agents.set(row.agentId, row)
      touch(row.agentId)
    }
    return ClusterStore.of({
      insert: (row) => Effect.sync(() => insert(row)),
      insertMany: (rows) => Effect.sync(() => rows.forEach(insert)),
      update: (agentId, u) => Effect.map(currentTimeMillis, (now) => update(agentId, u, now)),
      get: (agentId) => Effect.sync(() => agents.get(agentId)),
      children: (agentId) => Effect.sync(() => [...agents.values()].filter((row) => row.parentId === agentId)),
      list: Effect.sync(() => [...agents.values()]),
      append: (agentId, at, message) => Effect.sync(() => append(agentId, at, message)),
      transcript: (agentId) =>
        Effect.sync(() =>
          [...(transcripts.get(agentId)?.values() ?? [])].sort((a, b) => compareKeys(a.key, b.key)).map((r) =>
            r.message
          )
        ),
      sendInput: (agentId, text) =>
        Effect.sync(() => {
          const entry = { id: String(++inboxSeq), text }
          const inbox = inboxes.get(agentId)
          if (inbox === undefined) inboxes.set(agentId, [entry])
          else inbox.push(entry)
        }),
      takeInbox: (agentId) =>
        Effect.sync(() => {
          const inbox = inboxes.get(agentId)
          if (inbox === undefined) return []
          inboxes.delete(agentId)
          return inbox.map((entry) => entry.text)
        }),
      acquire: (agentId, cap, waiter) =>
        Effect.map(currentTimeMillis, (now) => {
          if (held.has(agentId)) {
            queue.delete(agentId)
            return true
          }
          if (held.size >= cap) {
            if (waiter !== undefined) queue.set(agentId, waiter)
            return false
          }
          queue.delete(agentId)
          held.set(agentId, now)
          return true
        }),
      handOff: (cap, resendAfterMs) =>
        Effect.map(currentTimeMillis, (now) => {
          const earlier = [...queue].filter(([agentId]) => {
            const at = held.get(agentId)
            return at !== undefined && at <= now - resendAfterMs
          })
          const handed: Array<{ readonly executionId: string; readonly clock: string }> = []
          for (const [agentId, waiter] of queue) {
            if (held.size >= cap) break
            if (held.has(agentId)) continue
            held.set(agentId, now)
            handed.push(waiter)
          }
          return [...handed, ...earlier.map(([, waiter]) => waiter)]
        }),
      release: (agentId) =>
        Effect.sync(() => {
          held.delete(agentId)
          queue.delete(agentId)
        }),
      permits: Effect.sync(() => [...held.keys()]),
      startRun: (agentId, at, prompt) => Effect.map(currentTimeMillis, (now) => startRun(agentId, at, prompt, now)),
      beginStep: (agentId, { runAge, start, treeOf }) =>
        Effect.map(currentTimeMillis, (now) => {
          if (start !== undefined) startRun(agentId, start.at, start.prompt, now)
          const inbox = inboxes.get(agentId) ?? []
          let treeTokens = 0
          if (treeOf !== undefined) {
            for (const row of agents.values()) if (row.rootId === treeOf) treeTokens += row.tokens
          }
          return {
            inbox: inbox.map((entry) => entry.text),
            inboxIds: inbox.map((entry) => entry.id),
            treeTokens,
            runSecs: runAge === true ? (now - timesOf(agentId).started) / 1000 : 0
          }
        }),
      recordStep: (agentId, messages, usage, finish, taken) =>
        Effect.map(currentTimeMillis, (now) => {
          if (taken !== undefined && taken.length > 0) {
            const gone = new Set(taken)
            const left = (inboxes.get(agentId) ?? []).filter((entry) => !gone.has(entry.id))
            if (left.length === 0) inboxes.delete(agentId)
            else inboxes.set(agentId, left)
          }
          for (const m of messages) append(agentId, m.at, m.message)
          const row = agents.get(agentId)
          if (row !== undefined) {
            const before = row.usage ?? zeroUsage
            agents.set(agentId, {
              ...row,
              tokens: row.tokens + stepTokens(usage),
              usage: {
                input: before.input + usage.input,
                output: before.output + usage.output,
                cached: before.cached + usage.cached
              }
            })
          }
          timesOf(agentId).progress = now
          if (finish !== undefined) finishRun(agentId, finish.update, finish.release, now)
        }),
      finishRun: (agentId, u, release) => Effect.map(currentTimeMillis, (now) => finishRun(agentId, u, release, now)),
      changes: (rootId, cursor) =>
        Effect.sync(() => {
          const tree = [...agents.values()].filter((row) => row.rootId === rootId)
          const messages = tree.flatMap((row) =>
            [...(transcripts.get(row.agentId)?.values() ?? [])]
              .filter((m) => m.seq > cursor.transcript)
              .map((m) => ({ agentId: row.agentId, at: m.at, message: m.message, seq: m.seq }))
          ).sort((a, b) => a.seq - b.seq)
          const changed = tree.filter((row) => timesOf(row.agentId).changed > cursor.agents)
            .sort((a, b) => timesOf(a.agentId).changed - timesOf(b.agentId).changed)
          return {
            messages: messages.map(({ agentId, at, message }) => ({ agentId, at, message })),
            agents: changed,
            cursor: {
              transcript: messages.at(-1)?.seq ?? cursor.transcript,
              agents: changed.length === 0 ? cursor.agents : timesOf(changed.at(-1)!.agentId).changed
            }
          }
        }),
      look: (agentId, ids, waitingOn) =>
        Effect.map(currentTimeMillis, (now) => {
          waiting.set(agentId, waitingOn)
          const rows = ids === undefined
            ? [...agents.values()].filter((row) => row.parentId === agentId && !finished(row.status))
            : ids.flatMap((id) => {
              const row = agents.get(id)
              return row === undefined ? [] : [row]
            })
          return { rows, now }
        }),
      parentWaiting: (agentId) =>
        Effect.sync(() => {
          const parentId = agents.get(agentId)?.parentId
          const parent = parentId === undefined || parentId === null ? undefined : agents.get(parentId)
          return parent === undefined
            ? undefined
            : { executionId: parent.executionId, waitingOn: waiting.get(parent.agentId) ?? null }
        }),
      stale: (seconds) =>
        Effect.map(currentTimeMillis, (now) => {
          const running = [...agents.values()].filter((row) => row.status === "running")
          const out: Array<string> = []
          for (const row of running) {
            // A running child is its parent's progress (as embedded).
            if (running.some((child) => child.parentId === row.agentId)) timesOf(row.agentId).progress = now
            else if (row.depth > 0 && now - timesOf(row.agentId).progress >= seconds * 1000) out.push(row.agentId)
          }
          return out
        }),
      cancelledAmong: (agentIds) =>
        Effect.sync(() => agentIds.filter((agentId) => agents.get(agentId)?.status === "cancelled")),
      startToolCall: (agentId, at) =>
        Effect.sync(() => {
          const key = `${agentId}/${at.run}/${at.step}/${at.slot}`
          if (toolCalls.has(key)) return false
          toolCalls.add(key)
          return true
        }),
      journal: (executionId) => Effect.sync(() => new Map(journals.get(executionId))),
      runStep: ({ agentId, executionId, name }, execute) =>
        Effect.gen(function*() {
          const journaled = () => journals.get(executionId)?.get(name)
          const before = journaled()
          if (before !== undefined) return { _tag: "Journaled", result: before } as StepOutcome
          if (agents.get(agentId)?.status === "cancelled") return { _tag: "Cancelled" } as StepOutcome
          const work = yield* execute
          // Another execution committed first: its result stands, these writes are not made.
          const first = journaled()
          if (first !== undefined) return { _tag: "Journaled", result: first } as StepOutcome
          yield* work.commit
          let journal = journals.get(executionId)
          if (journal === undefined) journals.set(executionId, journal = new Map())
          journal.set(name, work.result)
          return { _tag: "Ran", result: work.result } as StepOutcome
        })
    })
  })

export const layerMemory: Layer.Layer<ClusterStore> = Layer.effect(ClusterStore, makeMemory)
