/**
 * SubAgentStore — sub-agent records and transcripts, shared by every process on a workspace:
 * the contract, and `makeMemory` / `layerMemory` (one process, nothing on disk). The store that
 * outlives a process is `SqliteSubAgentStore` (one SQLite file per workspace).
 *
 * Ownership. Each store instance is one *owner* (a boot id, the pid, its start time and the
 * host). A record names the owner that runs it; the owner renews a lease while it has live
 * agents. A record left `pending`/`running` becomes `interrupted` only when its owner is gone,
 * never because another process started (`reconcile`). On this host, an owner is gone when its
 * pid is not running, or runs another process (a different start time): a live owner is never
 * gone here, whatever its lease says (a process stopped with Ctrl-Z, a clock ahead). On another
 * host, only the lease can tell. Should an owner find its agent taken over all the same (by a
 * process on another host), its terminal write is still recorded, with the takeover in the
 * record's events, and `takenOver` says so. Another process asks the owner to cancel or to
 * take input through `request`; the owner reads its requests with `takeRequests`.
 *
 * Writes. `put` queues a record and does not wait; `appendTranscript` returns once its messages
 * are durable (before the loop makes its next model call); `settle` commits what is queued or
 * fails with `StoreWriteFailed` naming the agent whose record is lost. Records keep the JSON
 * fields this version does not know (written by a newer Fibril). Terminal records older than
 * `evictAfterMs`, or beyond `maxRecords`, are dropped with their transcripts; pending and
 * running ones never are.
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { hostname } from "node:os"
import { nowMillis } from "./internal/clock.ts"
import { isTerminal, SubAgentRecord } from "./SubAgentRecord.ts"

export class StoreError extends Schema.TaggedError<StoreError>()("StoreError", {
  path: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `sub-agent store: ${this.path}: ${this.reason}`
  }
}

/**
 * A commit of records failed and could not be made on retries: the record of `agentId` (its
 * terminal state, its answer) is not saved in `store`. What was committed before is intact.
 */
export class StoreWriteFailed extends Schema.TaggedError<StoreWriteFailed>()("StoreWriteFailed", {
  agentId: Schema.String,
  store: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `the record of ${this.agentId} could not be saved in ${this.store}: ${this.reason}`
  }
}

/** A stored record that does not decode: shown as unreadable, never left out silently. */
export interface Unreadable {
  readonly agent_id: string
  /** The row's status column. */
  readonly status: string
  readonly created_at: number
  /** Why it does not decode. */
  readonly error: string
}

/** An agent of this process whose record another process took over while this one lived. */
export interface TakenOver {
  readonly agent_id: string
  /** Who took it over and why, as that process recorded it. */
  readonly by: string
  /** True once this process's terminal write is recorded in spite of it (the outcome is kept). */
  readonly kept: boolean
}

/** A process that owns agents. */
export interface Owner {
  readonly boot_id: string
  readonly pid: number
  readonly host: string
}

/** Whether the owner of a record is this store's process, another live one, or gone. */
export type Liveness = "self" | "alive" | "gone"

/** A request from another process to the owner of an agent. */
export interface Request {
  readonly id: number
  readonly agent_id: string
  readonly kind: "cancel" | "input" | "answer"
  /** The cancel reason, the input message, or an answer to a question (StoredQuestions.ts). */
  readonly payload: string
  /** The boot id of the process that asked. */
  readonly from: string
}

export class SubAgentStore extends Context.Service<SubAgentStore, {
  /** This process, as it is named in the records it owns. */
  readonly owner: Owner
  /** All records, as they are now (every process's). */
  readonly all: Effect.Effect<ReadonlyArray<SubAgentRecord>>
  readonly get: (agentId: string) => Effect.Effect<Option.Option<SubAgentRecord>>
  /** The ids of the records held now (every process's): what eviction has not dropped. One read. */
  readonly ids: Effect.Effect<ReadonlySet<string>, StoreError>
  /** Upsert (this process owns the record). Queued for the next commit; does not wait for it. */
  readonly put: (record: SubAgentRecord) => Effect.Effect<void>
  /** Commits what is queued now. */
  readonly flush: Effect.Effect<void, StoreError>
  /**
   * Commits what is queued, retrying a failed commit a few times (its writes stay queued);
   * fails with `StoreWriteFailed` naming an agent whose record could not be saved.
   */
  readonly settle: Effect.Effect<void, StoreWriteFailed>
  /** The agents of this process whose records were taken over while it lived (see `TakenOver`). */
  readonly takenOver: Effect.Effect<ReadonlyArray<TakenOver>>
  /** The stored rows that do not decode (every process's), with why. */
  readonly unreadable: Effect.Effect<ReadonlyArray<Unreadable>>
  /** Appends messages to a transcript; durable when it returns. */
  readonly appendTranscript: (handle: string, entries: ReadonlyArray<unknown>) => Effect.Effect<void, StoreError>
  /**
   * Appends without waiting: the messages are committed at the end of this turn of the event
   * loop, as `appendTranscript`'s would be; `sync` waits for that commit.
   */
  readonly queueTranscript: (handle: string, entries: ReadonlyArray<unknown>) => Effect.Effect<void, StoreError>
  /** Waits until every transcript message queued so far is committed (a failed commit fails here). */
  readonly sync: Effect.Effect<void, StoreError>
  /** The messages of a transcript, in order; empty if there is none. */
  readonly readTranscript: (handle: string) => Effect.Effect<ReadonlyArray<unknown>, StoreError>
  /** Problems found when opening (a corrupt file moved aside, a migration), to log or show. */
  readonly warnings: ReadonlyArray<string>
  /** True when records outlive the process: transcripts are then written as they grow. */
  readonly durable: boolean
  /** Is the owner with this boot id this process, alive, or gone? */
  readonly liveness: (bootId: string) => Effect.Effect<Liveness>
  /** Marks `pending`/`running` records whose owner is gone `interrupted`; returns them. */
  readonly reconcile: Effect.Effect<ReadonlyArray<SubAgentRecord>>
  /** Leaves a request for the owner of `agentId` (another process). */
  readonly request: (
    owner: string,
    request: { readonly agent_id: string; readonly kind: Request["kind"]; readonly payload: string }
  ) => Effect.Effect<void>
  /** Takes (and removes) the requests addressed to this process; renews its lease. */
  readonly takeRequests: Effect.Effect<ReadonlyArray<Request>>
  /**
   * Makes this process the owner of a finished agent, or of one whose owner is gone, so it
   * can resume it. False when a live process still runs it.
   */
  readonly adopt: (agentId: string) => Effect.Effect<boolean>
}>()("@fibril/core/SubAgentStore") {}

export interface Limits {
  /** Terminal records whose `finished_at` is older than this are dropped. Default 7 days. */
  readonly evictAfterMs?: number | undefined
  /** Beyond this many records, the oldest terminal ones are dropped. Default 1000. */
  readonly maxRecords?: number | undefined
  /** How long an owner's lease lasts without renewal. Default 15 s. */
  readonly leaseMs?: number | undefined
}

export const defaultLimits = {
  evictAfterMs: 7 * 24 * 60 * 60 * 1000,
  maxRecords: 1000,
  leaseMs: 15_000
} as const

/** `Limits` with their defaults filled in. */
export interface ResolvedLimits {
  readonly evictAfterMs: number
  readonly maxRecords: number
  readonly leaseMs: number
}

export const resolveLimits = (options: Limits): ResolvedLimits => ({
  evictAfterMs: options.evictAfterMs ?? defaultLimits.evictAfterMs,
  maxRecords: options.maxRecords ?? defaultLimits.maxRecords,
  leaseMs: options.leaseMs ?? defaultLimits.leaseMs
})

/** A new owner's boot id. */
export const newBootId = () => Math.random().toString(36).slice(2, 10)

const thisOwner = (): Owner => ({ boot_id: newBootId(), pid: process.pid, host: hostname() })

/** The reason a store gives a record whose owner is gone. */
export const goneReason = (owner: { readonly pid: number | undefined; readonly host: string | undefined }) =>
  `Interrupted: the process that ran it (${
    owner.pid === undefined
      ? "an unknown process"
      : `pid ${owner.pid}${owner.host === undefined ? "" : ` on ${owner.host}`}`
  }) ended before it finished`

// --- What every implementation checks ---

/** The keys of the record schema. */
export const knownKeys: ReadonlyArray<string> = Object.keys(SubAgentRecord.fields)
const isKnownKey: ReadonlySet<string> = new Set(knownKeys)

/** Only the schema's keys: callers may pass a wider object (a view). */
export const knownOnly = (record: SubAgentRecord): Record<string, unknown> => {
  // Usually every key is the schema's and set: a spread copies it at once (a compact object).
  let clean = true
  for (const key in record) {
    if (!isKnownKey.has(key) || (record as Record<string, unknown>)[key] === undefined) {
      clean = false
      break
    }
  }
  if (clean) return { ...record }
  const out: Record<string, unknown> = {}
  // The record's own keys (a record sets about half the schema's), in the record's order.
  for (const key in record) {
    if (!isKnownKey.has(key)) continue
    const value = (record as Record<string, unknown>)[key]
    if (value !== undefined) out[key] = value
  }
  return out
}

/** Handles are opaque keys; still, nothing that could name a path elsewhere. The refusal, or undefined. */
export const handleRefusal = (handle: string): StoreError | undefined =>
  handle === "" || handle.includes("/") || handle.includes("\\") || handle.includes("..") || handle.includes("\0")
    ? new StoreError({ path: handle, reason: "a transcript handle must be a plain name (no '/', '\\' or '..')" })
    : undefined

export const checkHandle = (handle: string): Effect.Effect<void, StoreError> => {
  const refused = handleRefusal(handle)
  return refused === undefined ? Effect.void : Effect.fail(refused)
}

/**
 * The entries as JSON lines, or why one has none: a plain loop, called synchronously (this runs
 * for every message of every agent on a durable store, and a chain of Effects per message cost
 * more than the JSON).
 */
export const toLines = (handle: string, entries: ReadonlyArray<unknown>): Array<string> | StoreError => {
  const lines: Array<string> = []
  for (let i = 0; i < entries.length; i++) {
    let line: string | undefined
    try {
      line = JSON.stringify(entries[i])
    } catch (cause) {
      return new StoreError({ path: handle, reason: `entry ${i} is not JSON-serialisable: ${String(cause)}` })
    }
    // JSON.stringify returns undefined for undefined, functions and symbols.
    if (typeof line !== "string") {
      return new StoreError({ path: handle, reason: `entry ${i} has no JSON representation` })
    }
    lines.push(line)
  }
  return lines
}

// --- Memory ---

const finishedAt = (r: SubAgentRecord) => r.finished_at ?? r.created_at

/** The same store with nothing on disk: one process, one owner, nothing outlives it. */
export const makeMemory = Effect.fn("SubAgentStore.makeMemory")(function*(options: Limits = {}) {
  const limits = resolveLimits(options)
  const owner = thisOwner()
  const records = new Map<string, SubAgentRecord>()
  const transcripts = new Map<string, Array<unknown>>()
  // The terminal records' finish times, in the order they became terminal: what eviction
  // reads, without reading the records (objects of many shapes: each read there is a slow
  // one). Records usually finish in clock order, so the times are usually non-decreasing in
  // that order (`sorted`): then the aged and the earliest finished are a prefix, and an
  // eviction reads only what it drops.
  const finished = new Map<string, number>()
  let sorted = true
  let latest = Number.NEGATIVE_INFINITY // the greatest time set since `finished` was last sorted
  let terminalPuts = 0

  const markFinished = (agentId: string, at: number) => {
    const known = finished.get(agentId)
    if (known === at) return
    if (known !== undefined) finished.delete(agentId)
    if (at < latest) sorted = false
    else latest = at
    finished.set(agentId, at)
  }

  const drop = (agentId: string) => {
    const record = records.get(agentId)
    records.delete(agentId)
    finished.delete(agentId)
    if (record !== undefined) transcripts.delete(record.transcript_handle)
  }

  // Aged terminal records go, then the earliest finished beyond `maxRecords` (equal times in
  // the order they became terminal); pending and running ones never do.
  const evict = (now: number) => {
    if (!sorted) {
      // A stable sort: equal times keep the order they became terminal.
      const entries = [...finished].sort((a, b) => a[1] - b[1])
      finished.clear()
      for (const [agentId, at] of entries) finished.set(agentId, at)
      sorted = true
      latest = entries.at(-1)?.[1] ?? Number.NEGATIVE_INFINITY
    }
    let excess = records.size - limits.maxRecords
    for (const [agentId, at] of finished) {
      if (now - at <= limits.evictAfterMs && excess <= 0) break
      drop(agentId)
      excess--
    }
  }

  const append = (handle: string, entries: ReadonlyArray<unknown>): Effect.Effect<void, StoreError> =>
    Effect.suspend(() => {
      const refused = handleRefusal(handle)
      if (refused !== undefined) return Effect.fail(refused)
      const lines = toLines(handle, entries)
      if (!Array.isArray(lines)) return Effect.fail(lines)
      if (lines.length === 0) return Effect.void
      // Copies through JSON, as a persistent store would (and refuses what it would).
      const copies = lines.map((line) => JSON.parse(line) as unknown)
      const existing = transcripts.get(handle)
      if (existing === undefined) transcripts.set(handle, copies)
      else existing.push(...copies)
      return Effect.void
    })

  return SubAgentStore.of({
    owner,
    all: Effect.sync(() => [...records.values()]),
    get: (agentId) => Effect.sync(() => Option.fromNullishOr(records.get(agentId))),
    ids: Effect.sync(() => new Set(records.keys())),
    put: (record) =>
      Effect.sync(() => {
        records.set(record.agent_id, knownOnly(record) as SubAgentRecord)
        if (!isTerminal(record.status)) {
          finished.delete(record.agent_id)
          return
        }
        markFinished(record.agent_id, finishedAt(record))
        if (++terminalPuts >= 64) {
          terminalPuts = 0
          evict(nowMillis())
        }
      }),
    flush: Clock.clockWith((clock) => Effect.sync(() => evict(clock.currentTimeMillisUnsafe()))),
    settle: Effect.void,
    takenOver: Effect.succeed([]),
    unreadable: Effect.succeed([]),
    appendTranscript: append,
    queueTranscript: append,
    sync: Effect.void,
    readTranscript: (handle) =>
      Effect.andThen(checkHandle(handle), Effect.sync(() => [...(transcripts.get(handle) ?? [])])),
    warnings: [],
    durable: false,
    liveness: (bootId) => Effect.succeed(bootId === owner.boot_id ? "self" : "gone"),
    reconcile: Effect.succeed([]),
    request: () => Effect.void,
    takeRequests: Effect.succeed([]),
    adopt: (agentId) => Effect.sync(() => records.has(agentId))
  })
})

export const layerMemory: Layer.Layer<SubAgentStore> = Layer.effect(SubAgentStore, makeMemory())
