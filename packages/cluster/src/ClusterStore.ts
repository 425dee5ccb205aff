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
import { Permission } from "@fibril/core"
import * as Prompt from "effect/ai/Prompt"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql"

export const Status = Schema.Literals(["pending", "running", "completed", "failed", "cancelled"])
export type Status = typeof Status.Type

export const finished = (status: Status): boolean =>
  status === "completed" || status === "failed" || status === "cancelled"

/** What one agent of a chain was given: Permission's record of a grant. */
export const Grant = Permission.GrantRecord
export type Grant = Permission.GrantRecord

/** Tokens by kind, every model step of every run summed (as the embedded records report them). */
export const Usage = Schema.Struct({ input: Schema.Number, output: Schema.Number, cached: Schema.Number })
export type Usage = typeof Usage.Type

export const zeroUsage: Usage = { input: 0, output: 0, cached: 0 }

/** An agent's tokens by kind, every run summed, in whole tokens: what clients report. */
export const tokensOf = (row: { readonly usage?: Usage | undefined }): Usage => {
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
  prompt: Schema.String,
  detached: Schema.Boolean,
  workspace: Schema.String,
  status: Status,
  run: Schema.Int,
  executionId: Schema.String,
  text: Schema.NullOr(Schema.String),
  reason: Schema.NullOr(Schema.String),
  steps: Schema.Int,
  toolCalls: Schema.Int,
  /** Tokens (input + output) of every model step of every run, summed. */
  tokens: Schema.Number,
  /** The grants from the root down to this agent (absent: its role alone, from the root's rules). */
  grants: Schema.optionalKey(Schema.Array(Grant)),
  /** `tokens` by kind (as read from a store). */
  usage: Schema.optionalKey(Usage),
  /** When the current run started and ended (ms since the epoch, the store's clock), as read. */
  startedAt: Schema.optionalKey(Schema.NullOr(Schema.Number)),
  finishedAt: Schema.optionalKey(Schema.NullOr(Schema.Number))
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
export const schemaVersion = 4

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
   * wakes it (`waiters`). One admission at a time cluster-wide.
   */
  readonly acquire: (
    agentId: string,
    cap: number,
    waiter?: { readonly executionId: string; readonly clock: string } | undefined
  ) => Effect.Effect<boolean, StoreFailure>
  /**
   * The queued agents a release can admit now (the oldest, as many as permits are free), read
   * after the admissions in progress: the clocks to wake.
   */
  readonly waiters: (
    cap: number
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
    usage: Usage,
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

/**
 * The connections the Postgres store commits tool-call markers on (`startToolCall`) and the
 * worker's cancellation watch reads with (`cancelledAmong`), apart from the pool the steps'
 * reads and commits use, so neither waits behind them. Without it the store's own pool is used,
 * outside any transaction.
 */
export class MarkerClient extends Context.Service<MarkerClient, SqlClient.SqlClient>()(
  "@fibril/cluster/ClusterStore/MarkerClient"
) {}

/** Tokens a step counts against budgets (as the embedded runtime: input + output). */
export const stepTokens = (usage: { readonly input: number; readonly output: number }): number =>
  usage.input + usage.output

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
    const held = new Set<string>()
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
        Effect.sync(() => {
          if (held.has(agentId)) return true
          if (held.size >= cap) {
            if (waiter !== undefined) queue.set(agentId, waiter)
            return false
          }
          queue.delete(agentId)
          held.add(agentId)
          return true
        }),
      waiters: (cap) => Effect.sync(() => [...queue.values()].slice(0, Math.max(0, cap - held.size))),
      release: (agentId) =>
        Effect.sync(() => {
          held.delete(agentId)
          queue.delete(agentId)
        }),
      permits: Effect.sync(() => [...held]),
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

/** An agent's row as a SQL store reads it (the SQLite store's too). */
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
  readonly status: Status
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
}

/** A timestamp as the driver gives it (a Date, or text), in ms since the epoch. */
const millis = (value: unknown): number | null => {
  if (value === null || value === undefined) return null
  if (value instanceof Date) return value.getTime()
  const parsed = typeof value === "number" ? value : Date.parse(String(value))
  return Number.isNaN(parsed) ? null : parsed
}

const decodeGrants = Schema.decodeUnknownSync(Schema.fromJsonString(Schema.Array(Grant)))

/** An agent's row from its SQL row. */
export const fromDb = (r: AgentDbRow): AgentRow => ({
  agentId: r.agent_id,
  parentId: r.parent_id,
  rootId: r.root_id,
  tokens: Number(r.tokens),
  depth: r.depth,
  role: r.role,
  model: r.model,
  description: r.description,
  prompt: r.prompt,
  detached: Boolean(r.detached),
  workspace: r.workspace,
  status: r.status,
  run: r.run,
  executionId: r.execution_id,
  text: r.text,
  reason: r.reason,
  steps: r.steps,
  toolCalls: r.tool_calls,
  ...(r.grants === null || r.grants === undefined ? {} : { grants: decodeGrants(r.grants) }),
  usage: {
    input: Number(r.tokens_input ?? 0),
    output: Number(r.tokens_output ?? 0),
    cached: Number(r.tokens_cached ?? 0)
  },
  startedAt: millis(r.run_started_at),
  finishedAt: millis(r.run_finished_at)
})

/** A transcript message as a SQL store keeps it (JSON). */
export const encodeMessage = Schema.encodeSync(Schema.fromJsonString(Prompt.Message))
export const decodeMessage = Schema.decodeSync(Schema.fromJsonString(Prompt.Message))

/** An execution's journaled steps (name to result) on a SQL store: the same statement on PostgreSQL and SQLite. */
export const journalSql = (sql: SqlClient.SqlClient, executionId: string) =>
  Effect.map(
    sql<{ name: string; result: string }>`SELECT name, result FROM fibril_steps
      WHERE execution_id = ${executionId} AND result IS NOT NULL`,
    (rows) => new Map(rows.map((r) => [r.name, r.result]))
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
  }).pipe(
    Effect.mapError((error) =>
      new StoreFailure({ operation: "runStep", reason: error instanceof Error ? error.message : String(error) })
    )
  )

export const makeSql = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const markers = yield* Effect.serviceOption(MarkerClient)
  // A step's transaction is the SqlClient's transaction connection in the context: without it, a
  // statement takes a connection of its own and commits at once.
  const omitTransaction = Context.omit(sql.transactionService)
  const outsideTransaction = (context: Context.Context<never>): Context.Context<never> => omitTransaction(context)
  const fail = (operation: string) => (error: unknown) =>
    new StoreFailure({ operation, reason: error instanceof Error ? error.message : String(error) })
  const q = <A>(operation: string, effect: Effect.Effect<A, unknown>) => Effect.mapError(effect, fail(operation))
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
    grants: row.grants === undefined ? null : JSON.stringify(row.grants)
  })
  const insertMany = (rows: ReadonlyArray<AgentRow>) =>
    rows.length === 0 ? Effect.void : q(
      "insert",
      sql`INSERT INTO fibril_agents ${sql.insert(rows.map(dbRow) as [ReturnType<typeof dbRow>])}
        ON CONFLICT (agent_id) DO NOTHING`
    )
  /** Starts a run (a CTE named `a`): an agent cancelled before its first step stays cancelled. */
  const startRunCte = (agentId: string) =>
    sql`a AS (UPDATE fibril_agents SET status = 'running', reason = NULL, run_started_at = now(),
            run_finished_at = NULL,
            last_progress = now(), changed = nextval('fibril_changes'), updated_at = now()
            WHERE agent_id = ${agentId} AND status <> 'cancelled')`
  const transcriptRow = (agentId: string, at: Slot, message: Prompt.Message) => ({
    agent_id: agentId,
    run: at.run,
    step: at.step,
    slot: at.slot,
    message: encodeMessage(message),
    pid: process.pid
  })
  return ClusterStore.of({
    insert: (row) => insertMany([row]),
    insertMany,
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
          run_finished_at = CASE WHEN ${u.status !== undefined && finished(u.status)} THEN clock_timestamp()
            ELSE run_finished_at END,
          changed = nextval('fibril_changes'),
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
    acquire: (agentId, cap, waiter) =>
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
          const ok = rows[0]?.ok === true
          if (ok) yield* sql`DELETE FROM fibril_waiters WHERE agent_id = ${agentId}`
          else if (waiter !== undefined) {
            yield* sql`INSERT INTO fibril_waiters (agent_id, execution_id, clock)
              VALUES (${agentId}, ${waiter.executionId}, ${waiter.clock})
              ON CONFLICT (agent_id) DO UPDATE SET clock = excluded.clock`
          }
          return ok
        })
      ),
    waiters: (cap) =>
      q(
        "waiters",
        sql.withTransaction(Effect.gen(function*() {
          // After the admissions in progress: a waiter they queue is seen here.
          yield* sql`SELECT pg_advisory_xact_lock(4242)`
          return yield* sql<{ execution_id: string; clock: string }>`SELECT execution_id, clock FROM fibril_waiters
            ORDER BY at, agent_id LIMIT GREATEST(${cap} - (SELECT count(*) FROM fibril_permits), 0)`
        })).pipe(Effect.map((rows) => rows.map((r) => ({ executionId: r.execution_id, clock: r.clock }))))
      ),
    // A queued agent that ends (cancelled) leaves the queue with its permit, if any.
    release: (agentId) =>
      q(
        "release",
        sql`WITH w AS (DELETE FROM fibril_waiters WHERE agent_id = ${agentId})
          DELETE FROM fibril_permits WHERE agent_id = ${agentId}`
      ),
    permits: q(
      "permits",
      Effect.map(sql<{ agent_id: string }>`SELECT agent_id FROM fibril_permits`, (r) => r.map((x) => x.agent_id))
    ),
    startRun: (agentId, at, prompt) =>
      q(
        "startRun",
        sql`WITH ${startRunCte(agentId)}
          INSERT INTO fibril_transcript ${sql.insert(transcriptRow(agentId, at, prompt))} ON CONFLICT DO NOTHING`
      ),
    beginStep: (agentId, { runAge, start, treeOf }) =>
      q(
        "beginStep",
        Effect.map(
          // With `start`, the run starts in this statement (its CTEs' writes are not visible to the
          // SELECT, which reads the rows as they were: the run's age is then 0, as it starts now).
          sql<{ inbox: string; tree_tokens: number; run_secs: number | null }>`
            ${
            start === undefined ? sql`` : sql`WITH ${startRunCte(agentId)},
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
        return q(
          "recordStep",
          sql`${ctes.length === 0 ? sql`` : sql`WITH ${sql.csv(ctes)}`}
            UPDATE fibril_agents SET ${tokens}, last_progress = now() WHERE agent_id = ${agentId}`
        )
      }
      // One UPDATE of the row for both (a statement changes a row once): the tokens always, the
      // outcome unless a cancel was recorded meanwhile (it stands, as in finishRun).
      const u = finish.update
      const live = sql.literal("status <> 'cancelled'")
      return q(
        "recordStep",
        sql`WITH ${ctes.length === 0 ? sql`` : sql`${sql.csv(ctes)},`}
            r AS (DELETE FROM fibril_permits WHERE agent_id = ${agentId} AND ${finish.release})
          UPDATE fibril_agents SET ${tokens}, last_progress = now(),
          status = CASE WHEN ${live} THEN COALESCE(${u.status ?? null}, status) ELSE status END,
          text = CASE WHEN ${live} AND ${u.text !== undefined} THEN ${u.text ?? null} ELSE text END,
          reason = CASE WHEN ${live} AND ${u.reason !== undefined} THEN ${u.reason ?? null} ELSE reason END,
          steps = CASE WHEN ${live} THEN COALESCE(${u.steps ?? null}, steps) ELSE steps END,
          tool_calls = CASE WHEN ${live} THEN COALESCE(${u.toolCalls ?? null}, tool_calls) ELSE tool_calls END,
          run_finished_at = CASE WHEN ${live} THEN clock_timestamp() ELSE run_finished_at END,
          changed = CASE WHEN ${live} THEN nextval('fibril_changes') ELSE changed END,
          updated_at = CASE WHEN ${live} THEN now() ELSE updated_at END
          WHERE agent_id = ${agentId}`
      )
    },
    finishRun: (agentId, u, release) =>
      q(
        "finishRun",
        sql`WITH r AS (DELETE FROM fibril_permits WHERE agent_id = ${agentId} AND ${release})
          UPDATE fibril_agents SET
          status = COALESCE(${u.status ?? null}, status),
          text = CASE WHEN ${u.text !== undefined} THEN ${u.text ?? null} ELSE text END,
          reason = CASE WHEN ${u.reason !== undefined} THEN ${u.reason ?? null} ELSE reason END,
          steps = COALESCE(${u.steps ?? null}, steps),
          tool_calls = COALESCE(${u.toolCalls ?? null}, tool_calls),
          run_finished_at = clock_timestamp(),
          changed = nextval('fibril_changes'),
          updated_at = now()
          WHERE agent_id = ${agentId} AND status <> 'cancelled'`
      ),
    changes: (rootId, cursor) =>
      q(
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
      q(
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
    parentWaiting: (agentId) =>
      q(
        "parentWaiting",
        Effect.map(
          sql<{ execution_id: string; waiting_on: string | null }>`SELECT p.execution_id, p.waiting_on
            FROM fibril_agents c JOIN fibril_agents p ON p.agent_id = c.parent_id WHERE c.agent_id = ${agentId}`,
          (rows) =>
            rows[0] === undefined ? undefined : { executionId: rows[0].execution_id, waitingOn: rows[0].waiting_on }
        )
      ),
    stale: (seconds) =>
      q(
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
      return q("cancelledAmong", Effect.map(statement, (rows) => rows.map((r) => r.agent_id)))
    },
    startToolCall: (agentId, at) => {
      const insert = (client: SqlClient.SqlClient) =>
        client<{ one: number }>`INSERT INTO fibril_tool_calls (agent_id, run, step, slot, pid)
          VALUES (${agentId}, ${at.run}, ${at.step}, ${at.slot}, ${process.pid})
          ON CONFLICT DO NOTHING RETURNING 1 AS one`
      const statement = markers._tag === "Some"
        ? insert(markers.value)
        : Effect.updateContext(insert(sql), outsideTransaction)
      return q("startToolCall", Effect.map(statement, (rows) => rows.length === 1))
    },
    journal: (executionId) => q("journal", journalSql(sql, executionId)),
    runStep: runStepSql(sql)
  })
})

export const layerSql: Layer.Layer<ClusterStore, never, SqlClient.SqlClient> = Layer.effect(ClusterStore, makeSql)
