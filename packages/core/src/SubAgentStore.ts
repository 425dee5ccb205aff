/**
 * SubAgentStore — sub-agent records and transcripts, shared by every process on a workspace.
 *
 * The persistent store is one SQLite database, `<dir>/fibril.db` (Node's built-in
 * `node:sqlite`, WAL mode): one row per agent, one row per transcript message, one row per
 * process that owns agents (its lease), and a table of requests from one process to another.
 * Any number of `fibril run` / `fibril mcp` processes can use one workspace at once: each
 * writes only its own agents' rows, in transactions, so nothing is lost to a last writer.
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
 * Writes are group-committed: `put` and `appendTranscript` queue their rows and the queue is
 * committed in one transaction at the end of the current turn of the event loop (or at
 * once by `flush` and before any read). `appendTranscript` returns only after its commit,
 * so a message is durable before the loop makes its next model call; `put` does not wait.
 * A commit survives `kill -9`; WAL keeps the file whole through any crash. A commit that fails
 * (a full disk) keeps its writes queued for the next one; `settle` retries them and, when they
 * still cannot be committed, fails with `StoreWriteFailed` naming the agent whose record is lost.
 *
 * Records keep the JSON fields this version does not know (written by a newer Fibril).
 * Terminal records older than `evictAfterMs`, or beyond `maxRecords`, are dropped with
 * their transcripts; pending and running ones never are. A `subagents.v1.json` state file
 * from an earlier version is imported on first open, then renamed `.migrated`.
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Path from "effect/Path"
import * as Result from "effect/Result"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as SchemaJITCompiler from "effect/schema/SchemaJITCompiler"
import { hostname } from "node:os"
import { nowMillis } from "./internal/clock.ts"
import * as Processes from "./internal/processes.ts"
import * as Sqlite from "./internal/sqlite.ts"
import * as Receipt from "./Receipt.ts"
import { isTerminal, migrate, retiredKeys, type Status, SubAgentRecord } from "./SubAgentRecord.ts"

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

/** The state directory (`.fibril/state`) exists but is not a directory. */
export class StateNotDirectory extends Schema.TaggedError<StateNotDirectory>()("StateNotDirectory", {
  path: Schema.String,
  found: Schema.String
}) {
  override get message() {
    return `${this.path} is a ${this.found}, not a directory: Fibril keeps its records there, in a directory ` +
      `(with ${databaseFileName} inside). Move or remove it, and Fibril creates the directory on its next run`
  }
}

/** Why a store could not be opened. */
export type OpenError = StoreError | StateNotDirectory

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
  readonly kind: "cancel" | "input"
  /** The cancel reason, or the input message. */
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

export interface SqliteOptions extends Limits {
  /** The state directory, e.g. `<cwd>/.fibril/state`; created if missing. */
  readonly dir: string
  /**
   * This process as its records name it, and how it sees the host's processes. Defaults to the
   * real ones; tests that run several "processes" in one give each its own.
   */
  readonly identity?: Identity | undefined
}

/** Who a store's process is, and how it asks the host whether another process lives. */
export interface Identity {
  readonly pid: number
  readonly host: string
  /** The start time of this process (`/proc/<pid>/stat` field 22 on Linux), if known. */
  readonly start: string | undefined
  readonly probe: Processes.Probe
}

/** This process, on this host (the default identity). */
export const thisProcess = (): Identity => ({
  pid: process.pid,
  host: hostname(),
  start: Processes.selfStart(),
  probe: Processes.probe
})

export const defaultLimits = {
  evictAfterMs: 7 * 24 * 60 * 60 * 1000,
  maxRecords: 1000,
  leaseMs: 15_000
} as const

export const databaseFileName = "fibril.db"
/** The state file of Fibril 0.1 (one JSON document), imported on first open. */
export const legacyRecordsFileName = "subagents.v1.json"
export const legacyTranscriptsDirName = "transcripts"

interface ResolvedLimits {
  readonly evictAfterMs: number
  readonly maxRecords: number
  readonly leaseMs: number
}

const resolve = (options: Limits): ResolvedLimits => ({
  evictAfterMs: options.evictAfterMs ?? defaultLimits.evictAfterMs,
  maxRecords: options.maxRecords ?? defaultLimits.maxRecords,
  leaseMs: options.leaseMs ?? defaultLimits.leaseMs
})

const randomBootId = () => Math.random().toString(36).slice(2, 10)

const thisOwner = (): Owner => ({ boot_id: randomBootId(), pid: process.pid, host: hostname() })

const knownKeys: ReadonlyArray<string> = Object.keys(SubAgentRecord.fields)
const isKnownKey: ReadonlySet<string> = new Set(knownKeys)
// The record schema is checked at every finished agent's put and decoded at every read: it
// is compiled to plain JavaScript (Effect's Schema JIT compiler, before first use) rather than
// interpreted, about 6x faster per check (9 µs to 1.6 for a finished record, warm). The
// interpreter stays the fallback where `new Function` is blocked. Its type side is itself
// (no transformations), so one compilation serves `is` and the decoder.
SchemaJITCompiler.enable(SubAgentRecord.ast)
const isValidRecord = Schema.is(SubAgentRecord)
const decodeKnown = Schema.decodeUnknownResult(SubAgentRecord)
/** A stored record, migrated to the current format first (version 1 records have no `record_version`). */
const decodeRecord = (raw: unknown) => decodeKnown(migrate(raw))

/** Only the schema's keys: callers may pass a wider object (a view). */
const knownOnly = (record: SubAgentRecord): Record<string, unknown> => {
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
const handleRefusal = (handle: string): StoreError | undefined =>
  handle === "" || handle.includes("/") || handle.includes("\\") || handle.includes("..") || handle.includes("\0")
    ? new StoreError({ path: handle, reason: "a transcript handle must be a plain name (no '/', '\\' or '..')" })
    : undefined

const checkHandle = (handle: string): Effect.Effect<void, StoreError> => {
  const refused = handleRefusal(handle)
  return refused === undefined ? Effect.void : Effect.fail(refused)
}

/**
 * The entries as JSON lines, or why one has none: a plain loop, called synchronously (this runs
 * for every message of every agent on a durable store, and a chain of Effects per message cost
 * more than the JSON).
 */
const toLines = (handle: string, entries: ReadonlyArray<unknown>): Array<string> | StoreError => {
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

/** Characters kept of a decode error shown for an unreadable row. */
const maxDecodeError = 500

/** The known record in a stored JSON object, or why it does not decode. */
const readJson = (json: unknown): SubAgentRecord | { readonly error: string } => {
  if (typeof json !== "string") return { error: "the stored record is not text" }
  let raw: unknown
  try {
    raw = JSON.parse(json)
  } catch (cause) {
    return { error: `the stored record is not JSON: ${Sqlite.describe(cause)}`.slice(0, maxDecodeError) }
  }
  const decoded = decodeRecord(raw)
  if (Result.isFailure(decoded)) {
    return {
      error: `the stored record does not match SubAgentRecord: ${decoded.failure.message}`.slice(0, maxDecodeError)
    }
  }
  // Decoding keeps only known keys; the stored row keeps the rest.
  return decoded.success
}

const isDecodeError = (read: SubAgentRecord | { readonly error: string }): read is { readonly error: string } =>
  "error" in read && !("agent_id" in read)

/** The known record in a stored JSON object, or undefined when it does not decode. */
const fromJson = (json: unknown): SubAgentRecord | undefined => {
  const read = readJson(json)
  return isDecodeError(read) ? undefined : read
}

const terminalList = "('completed','failed','cancelled','interrupted')"

const schema = `
CREATE TABLE IF NOT EXISTS fibril_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS fibril_agents (
  agent_id TEXT PRIMARY KEY,
  parent_id TEXT,
  status TEXT NOT NULL,
  owner_boot TEXT NOT NULL,
  handle TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  finished_at INTEGER,
  record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS fibril_agents_status ON fibril_agents (status, owner_boot);
CREATE TABLE IF NOT EXISTS fibril_owners (
  boot_id TEXT PRIMARY KEY,
  pid INTEGER NOT NULL,
  host TEXT NOT NULL,
  started_at INTEGER NOT NULL,
  lease_until INTEGER NOT NULL,
  proc_start TEXT
);
CREATE TABLE IF NOT EXISTS fibril_transcripts (
  id INTEGER PRIMARY KEY,
  handle TEXT NOT NULL,
  message TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS fibril_transcripts_handle ON fibril_transcripts (handle, id);
CREATE TABLE IF NOT EXISTS fibril_requests (
  id INTEGER PRIMARY KEY,
  owner_boot TEXT NOT NULL,
  agent_id TEXT NOT NULL,
  kind TEXT NOT NULL,
  payload TEXT NOT NULL,
  from_boot TEXT NOT NULL,
  created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS fibril_requests_owner ON fibril_requests (owner_boot, id);
INSERT OR IGNORE INTO fibril_meta (key, value) VALUES ('schema_version', '1');
`

/** Rows per multi-row insert of transcript lines. */
const linesPerInsert = 32
const insertLinesSqlCache: Array<string> = []
const insertLinesSql = (rows: number): string =>
  insertLinesSqlCache[rows] ??= `INSERT INTO fibril_transcripts (handle, message) VALUES ${
    Array.from({ length: rows }, () => "(?, ?)").join(", ")
  }`

/** Rows per eviction `DELETE … WHERE … IN (…)`; each size's statement is prepared once. */
const rowsPerDelete = 64
const deleteWhereInSqlCache = new Map<string, string>()
const deleteWhereInSql = (table: string, column: string, rows: number): string => {
  const key = `${table}:${column}:${rows}`
  let sql = deleteWhereInSqlCache.get(key)
  if (sql === undefined) {
    sql = `DELETE FROM ${table} WHERE ${column} IN (${Array.from({ length: rows }, () => "?").join(", ")})`
    deleteWhereInSqlCache.set(key, sql)
  }
  return sql
}

/**
 * Adds the owners' `proc_start` column to a database created before it (the schema version
 * stays: older Fibrils write the row without it, and are then checked by pid alone).
 */
const addProcStart = (db: Sqlite.Database) => {
  if (db.all("PRAGMA table_info(fibril_owners)").some((column) => column["name"] === "proc_start")) return
  try {
    db.exec("ALTER TABLE fibril_owners ADD COLUMN proc_start TEXT")
  } catch (cause) {
    // Another process opening the database at the same moment added it first.
    if (!/duplicate column/i.test(Sqlite.describe(cause))) throw cause
  }
}

const describeType = (type: FileSystem.File.Type): string =>
  type === "File" ? "file" : type === "SymbolicLink" ? "symbolic link" : type.toLowerCase()

/** The schema version this Fibril reads and writes. */
export const schemaVersion = 1

export const goneReason = (owner: { readonly pid: number | undefined; readonly host: string | undefined }) =>
  `Interrupted: the process that ran it (${
    owner.pid === undefined
      ? "an unknown process"
      : `pid ${owner.pid}${owner.host === undefined ? "" : ` on ${owner.host}`}`
  }) ended before it finished`

// ---------------------------------------------------------------------------
// SQLite
// ---------------------------------------------------------------------------

/** Transcript lines waiting for the next commit. */
interface Append {
  readonly handle: string
  readonly lines: ReadonlyArray<string>
}

/** Test control of a SQLite store: `crash` makes it behave like a process killed at that moment. */
export interface Control {
  /** From now on nothing is written (queued writes are dropped, the lease is not renewed). */
  readonly crash: Effect.Effect<void>
}

/** The SQLite store over `options.dir`. Needs a Scope: the database closes with it. */
export const makeSqliteWithControl = Effect.fnUntraced(function*(options: SqliteOptions) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const limits = resolve(options)
  const dir = options.dir
  const file = path.join(dir, databaseFileName)
  const failed = (reason: unknown) => new StoreError({ path: file, reason: Sqlite.describe(reason) })
  const warnings: Array<string> = []

  // A file where the directory should be would otherwise read as "no records" to a reader and
  // fail with a bare AlreadyExists here.
  const found = yield* fs.stat(dir).pipe(Effect.option)
  if (Option.isSome(found) && found.value.type !== "Directory") {
    return yield* new StateNotDirectory({ path: dir, found: describeType(found.value.type) })
  }
  yield* fs.makeDirectory(dir, { recursive: true }).pipe(
    Effect.mapError((error) => new StoreError({ path: dir, reason: error.message }))
  )

  /** Opens the file and creates the tables; the schema version found, to check before use. */
  const openDb = Effect.try({
    try: () => {
      const db = Sqlite.open(file)
      try {
        db.exec(schema)
        addProcStart(db)
        return { db, version: Number(db.get("SELECT value FROM fibril_meta WHERE key = 'schema_version'")?.["value"]) }
      } catch (cause) {
        db.close()
        throw cause
      }
    },
    catch: (cause) => cause
  })

  // Opening a new database while other processes open it too can be refused at once (busy):
  // tried again every 20 ms, for up to 10 s (the busy timeout's own bound).
  // A file that is not a database is moved aside (never overwritten), and a new one started.
  const opened = yield* openDb.pipe(
    Effect.retry({ while: Sqlite.isBusy, schedule: Schedule.spaced("20 millis"), times: 500 }),
    Effect.catch((cause) => {
      if (!Sqlite.isCorruption(cause)) return Effect.fail(failed(cause))
      return Effect.gen(function*() {
        const aside = `${file}.corrupt-${yield* Clock.currentTimeMillis}`
        yield* fs.rename(file, aside).pipe(Effect.mapError((e) => new StoreError({ path: file, reason: e.message })))
        for (const suffix of ["-wal", "-shm"]) yield* Effect.ignore(fs.remove(`${file}${suffix}`, { force: true }))
        warnings.push(
          `${file} is not a readable database (${
            Sqlite.describe(cause)
          }); moved it aside to ${aside} and started a new one`
        )
        return yield* Effect.mapError(openDb, failed)
      })
    })
  )
  const db = opened.db
  if (opened.version !== schemaVersion) {
    db.close()
    return yield* new StoreError({
      path: file,
      reason: `schema version ${opened.version} is not the one this Fibril uses (${schemaVersion}); ` +
        "the database was written by a different Fibril version"
    })
  }
  yield* Effect.addFinalizer(() => Effect.sync(() => db.close()))

  const identity = options.identity ?? thisProcess()
  const owner: Owner = { boot_id: randomBootId(), pid: identity.pid, host: identity.host }
  let crashed = false
  // Never renewed yet, whatever the clock reads (a clock may be behind the epoch in a test).
  let leaseUntil = Number.NEGATIVE_INFINITY
  /** This process's agents whose records another process took over while it lived. */
  const takeovers = new Map<string, TakenOver>()

  // --- group commit ---------------------------------------------------------------------
  let queue: Array<Append> = []
  /** Records waiting for the next commit: the last put of an agent in a turn is the one written. */
  let puts = new Map<string, { readonly record: SubAgentRecord; readonly now: number }>()
  let waiters: Array<(error: StoreError | undefined) => void> = []
  let scheduled = false
  /** A commit that failed with no one waiting on it: the next `sync` reports it. */
  let unreported: StoreError | undefined
  let terminalPuts = 0

  const upsert =
    `INSERT INTO fibril_agents (agent_id, parent_id, status, owner_boot, handle, created_at, finished_at, record)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, json_patch('{}', ?8))
    ON CONFLICT (agent_id) DO UPDATE SET parent_id = ?2, status = ?3, owner_boot = ?4, handle = ?5,
      created_at = ?6, finished_at = ?7, record = json_patch(fibril_agents.record, ?8)`
  // An owner writes a row only while it is still that row's owner: once another process has
  // found it gone (and interrupted its agent) or adopted the agent, a late write from it — a
  // process that was stopped past its lease and woke up — changes nothing.
  const ownerPut = `${upsert} WHERE fibril_agents.owner_boot = ?4`
  // The common case, an agent this process started: its row holds nothing but what this
  // process wrote, so it is inserted, then replaced whole (no merge of unknown fields).
  const insertNew =
    `INSERT OR IGNORE INTO fibril_agents (agent_id, parent_id, status, owner_boot, handle, created_at, finished_at, record)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
  const replaceOwn = `UPDATE fibril_agents SET status = ?, finished_at = ?, record = ?
    WHERE agent_id = ? AND owner_boot = ?`
  /** Agents whose row this process inserted (and so holds no field it did not write), until their run ends. */
  const inserted = new Set<string>()
  /** The changes to `inserted` in the commit under way: undone if it rolls back. */
  let insertedChanges: Array<{ readonly id: string; readonly added: boolean }> = []
  const markInserted = (id: string, added: boolean) => {
    if (added === inserted.has(id)) return
    if (added) inserted.add(id)
    else inserted.delete(id)
    insertedChanges.push({ id, added })
  }

  /** Renews this owner's lease when a third of it has passed (inside the caller's transaction). */
  const renewLease = (now: number) => {
    if (leaseUntil - now > (limits.leaseMs * 2) / 3) return
    leaseUntil = now + limits.leaseMs
    db.run(
      `INSERT INTO fibril_owners (boot_id, pid, host, started_at, lease_until, proc_start) VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT (boot_id) DO UPDATE SET lease_until = excluded.lease_until`,
      owner.boot_id,
      owner.pid,
      owner.host,
      now,
      leaseUntil,
      identity.start ?? null
    )
  }

  /**
   * Writes a record. Without `takeover`, as its owner (see `ownerPut`); with it, whoever owns
   * the row, which then names `takeover` as its owner column: reconcile leaves a tombstone
   * there (`gone:<boot id>`), adopt the adopter.
   */
  const applyPut = (record: SubAgentRecord, now: number, takeover?: string) => {
    if (takeover === undefined && !isTerminal(record.status)) renewLease(now)
    if (takeover === undefined) {
      const own = putOwn(record)
      if (own === "refused") return refusedWrite(record, now)
      if (own === "written") {
        if (isTerminal(record.status)) terminalPuts++
        return
      }
    }
    // Absent optional keys are sent as null, which json_patch removes: a field cleared here
    // (a reason, on resume) is cleared in the row; fields this version does not know stay.
    const patch = knownOnly(record)
    for (const key of knownKeys) if (!(key in patch)) patch[key] = null
    for (const key of retiredKeys) patch[key] = null
    const changes = db.run(
      takeover === undefined ? ownerPut : upsert,
      record.agent_id,
      record.parent_id ?? null,
      record.status,
      takeover ?? record.session_boot_id,
      record.transcript_handle,
      record.created_at,
      record.finished_at ?? null,
      JSON.stringify(patch)
    ).changes
    if (takeover === undefined && Number(changes) === 0) return refusedWrite(record, now)
    if (isTerminal(record.status)) terminalPuts++
  }

  /**
   * A write of this process's that the row refused: another process found this one gone and
   * took the agent over (reconcile's tombstone `gone:<this boot id>`), though it lived — it
   * was stopped past its lease, or the other process's clock is ahead, on another host. A
   * terminal write is recorded all the same, over the tombstone: the outcome is this process's,
   * and the takeover goes into the record's events, at a time no later than this clock's now.
   * A row another process has adopted since (to resume it) is left to that process.
   */
  const refusedWrite = (record: SubAgentRecord, now: number) => {
    const row = db.get("SELECT owner_boot, record FROM fibril_agents WHERE agent_id = ?", record.agent_id)
    if (row === undefined) return
    const stored = fromJson(row["record"])
    const event = stored?.events?.findLast((e) => e.type === "interrupted")
    const by = event?.detail ?? stored?.reason ?? `its record names another owner (${String(row["owner_boot"])})`
    const tombstone = row["owner_boot"] === `gone:${owner.boot_id}`
    // Found gone: its owner row went with it. Registered again now, with a fresh lease.
    leaseUntil = Number.NEGATIVE_INFINITY
    renewLease(now)
    if (!isTerminal(record.status) || !tombstone) {
      takeovers.set(record.agent_id, { agent_id: record.agent_id, by, kept: false })
      return
    }
    const kept: Receipt.Draft = { ...record }
    Receipt.takenOver(kept, {
      at: Math.min(event?.at ?? stored?.finished_at ?? now, now),
      detail: `${by}; this process (pid ${owner.pid} on ${owner.host}) was still running it, and recorded its end`
    })
    applyPut(kept, now, owner.boot_id)
    takeovers.set(record.agent_id, { agent_id: record.agent_id, by, kept: true })
  }

  /**
   * The fast path: a new agent's first write inserts its row, and later writes while its run
   * lasts replace it whole. False when the row existed already (a resumed, adopted or migrated
   * agent): then the merging upsert runs.
   */
  const putOwn = (record: SubAgentRecord): "written" | "existing" | "refused" => {
    const id = record.agent_id
    const terminal = isTerminal(record.status)
    if (inserted.has(id)) {
      const changes = db.run(
        replaceOwn,
        record.status,
        record.finished_at ?? null,
        JSON.stringify(knownOnly(record)),
        id,
        record.session_boot_id
      ).changes
      if (terminal) markInserted(id, false)
      return Number(changes) === 1 ? "written" : "refused"
    }
    const fresh = Number(
      db.run(
        insertNew,
        id,
        record.parent_id ?? null,
        record.status,
        record.session_boot_id,
        record.transcript_handle,
        record.created_at,
        record.finished_at ?? null,
        JSON.stringify(knownOnly(record))
      ).changes
    ) === 1
    if (fresh && !terminal) {
      markInserted(id, true)
      // Its owner row may have been removed by a process that found this one gone (another
      // host, its lease read as expired) while this one still holds its lease: a new live agent
      // is never left with no owner row, which a reader on this host would take for gone.
      db.run(
        `INSERT OR IGNORE INTO fibril_owners (boot_id, pid, host, started_at, lease_until, proc_start)
         VALUES (?, ?, ?, ?, ?, ?)`,
        owner.boot_id,
        owner.pid,
        owner.host,
        record.created_at,
        leaseUntil,
        identity.start ?? null
      )
    }
    return fresh ? "written" : "existing"
  }

  /** Transcript rows, several per statement (a statement per row costs as much again as the row). */
  const insertLines = (appends: ReadonlyArray<Append>) => {
    const values: Array<string> = []
    for (const { handle, lines } of appends) for (const line of lines) values.push(handle, line)
    for (let at = 0; at < values.length; at += 2 * linesPerInsert) {
      const chunk = values.slice(at, at + 2 * linesPerInsert)
      db.run(insertLinesSql(chunk.length / 2), ...chunk)
    }
  }

  const commit = (): StoreError | undefined => {
    scheduled = false
    const appends = queue
    const records = puts
    const resumes = waiters
    queue = []
    puts = new Map()
    waiters = []
    let error: StoreError | undefined
    if (!crashed && (appends.length > 0 || records.size > 0)) {
      const lease = leaseUntil
      insertedChanges = []
      try {
        db.transaction(() => {
          insertLines(appends)
          for (const { record, now } of records.values()) applyPut(record, now)
        })
      } catch (cause) {
        error = failed(cause)
        // Rolled back: nothing of it is in the file, so what this process believes it wrote
        // is undone.
        leaseUntil = lease
        for (const change of insertedChanges.reverse()) {
          if (change.added) inserted.delete(change.id)
          else inserted.add(change.id)
        }
        // A full disk (or an I/O error) may pass: the writes go back in the queue, before
        // those queued since (which replace a record's), to be tried again at the next commit.
        // A write that can never be made (a value with no JSON form) is dropped, not retried.
        if (Sqlite.isTransient(cause)) {
          queue = [...appends, ...queue]
          const newer = puts
          puts = new Map(records)
          for (const [id, put] of newer) puts.set(id, put)
        }
      }
      insertedChanges = []
    }
    if (error !== undefined && resumes.length === 0) unreported = error
    for (const resume of resumes) resume(error)
    return error
  }

  const schedule = () => {
    if (scheduled) return
    scheduled = true
    setImmediate(commit)
  }

  const flushNow = Effect.suspend(() => {
    const error = queue.length === 0 && puts.size === 0 ? undefined : commit()
    return error === undefined ? Effect.void : Effect.fail(error)
  })

  /** The agent whose record a failed commit leaves unsaved: a finished one first. */
  const unsavedAgent = (): string => {
    const records = [...puts.values()].map(({ record }) => record)
    const record = records.find((r) => isTerminal(r.status)) ?? records[0]
    if (record !== undefined) return record.agent_id
    const handle = queue[0]?.handle
    if (handle === undefined) return "(none queued)"
    try {
      const row = db.get("SELECT agent_id FROM fibril_agents WHERE handle = ?", handle)
      return row === undefined ? `the agent of transcript ${handle}` : String(row["agent_id"])
    } catch {
      return `the agent of transcript ${handle}`
    }
  }

  // A full disk may be freed in a moment (a temporary file removed): the queued writes are
  // tried again, 4 times over about 1.5 s, before the record is given up.
  const settle: Effect.Effect<void, StoreWriteFailed> = flushNow.pipe(
    Effect.retry({ times: 4, schedule: Schedule.exponential("100 millis") }),
    Effect.catch((error) =>
      Effect.fail(
        new StoreWriteFailed({ agentId: unsavedAgent(), store: file, reason: Sqlite.plainReason(error.reason) })
      )
    )
  )

  // --- eviction -------------------------------------------------------------------------
  const evict = (now: number) => {
    const victims: Array<Sqlite.Row> = [
      ...db.all(
        `SELECT agent_id, handle FROM fibril_agents WHERE status IN ${terminalList} AND COALESCE(finished_at, created_at) < ?`,
        now - limits.evictAfterMs
      )
    ]
    const count = Number(db.get("SELECT COUNT(*) AS n FROM fibril_agents")?.["n"] ?? 0) - victims.length
    if (count > limits.maxRecords) {
      const aged = new Set(victims.map((row) => row["agent_id"]))
      for (
        const row of db.all(
          `SELECT agent_id, handle FROM fibril_agents WHERE status IN ${terminalList}
           ORDER BY COALESCE(finished_at, created_at) LIMIT ?`,
          count - limits.maxRecords + aged.size
        )
      ) if (!aged.has(row["agent_id"])) victims.push(row)
    }
    if (victims.length === 0) return
    // Several rows per statement: a statement per row costs as much again as the row (an
    // eviction usually takes a few hundred agents and their transcripts).
    db.transaction(() => {
      for (let at = 0; at < victims.length; at += rowsPerDelete) {
        const chunk = victims.slice(at, at + rowsPerDelete)
        db.run(
          deleteWhereInSql("fibril_agents", "agent_id", chunk.length),
          ...chunk.map((row) => row["agent_id"] as string)
        )
        db.run(
          deleteWhereInSql("fibril_transcripts", "handle", chunk.length),
          ...chunk.map((row) => row["handle"] as string)
        )
      }
    })
  }

  const put = (record: SubAgentRecord): Effect.Effect<void> =>
    Clock.clockWith((clock) => {
      if (crashed) return Effect.void
      puts.set(record.agent_id, { record, now: clock.currentTimeMillisUnsafe() })
      schedule()
      // Now and then, at a commit, old terminal records go.
      if (terminalPuts >= 256) {
        terminalPuts = 0
        const now = clock.currentTimeMillisUnsafe()
        return Effect.sync(() => {
          commit()
          try {
            evict(now)
          } catch {
            // Eviction is housekeeping: a busy database retries it at the next round.
          }
        })
      }
      // Checked once per run, at its end (the full check costs more than the write): a record
      // that breaks the schema (a non-integer count, say) would be dropped when read.
      const id = record.agent_id
      return !isTerminal(record.status) || isValidRecord(record) ? Effect.void : Effect.logWarning(
        `sub-agent record ${id} does not match the SubAgentRecord schema; it will be dropped when read`
      )
    })

  // One synchronous step: the handle, the JSON, the queue.
  const queueTranscript = (handle: string, entries: ReadonlyArray<unknown>): Effect.Effect<void, StoreError> =>
    Effect.suspend(() => {
      const refused = handleRefusal(handle)
      if (refused !== undefined) return Effect.fail(refused)
      if (entries.length === 0) return Effect.void
      const lines = toLines(handle, entries)
      if (!Array.isArray(lines)) return Effect.fail(lines)
      if (crashed) return Effect.void
      queue.push({ handle, lines })
      schedule()
      return Effect.void
    })

  const sync: Effect.Effect<void, StoreError> = Effect.suspend(() => {
    if (unreported !== undefined) {
      const error = unreported
      unreported = undefined
      return Effect.fail(error)
    }
    // A killed process never answers: whoever waits on it waits forever, as in real life.
    if (queue.length === 0 && !crashed) return Effect.void
    return Effect.callback<void, StoreError>((resume) => {
      waiters.push((error) => resume(error === undefined ? Effect.void : Effect.fail(error)))
    })
  })

  const appendTranscript = (handle: string, entries: ReadonlyArray<unknown>): Effect.Effect<void, StoreError> =>
    entries.length === 0 ? checkHandle(handle) : Effect.andThen(queueTranscript(handle, entries), sync)

  const read = <A>(f: () => A): Effect.Effect<A, StoreError> =>
    Effect.andThen(flushNow, Effect.try({ try: f, catch: failed }))

  const readTranscript = (handle: string) =>
    Effect.andThen(
      checkHandle(handle),
      read(() =>
        db.all("SELECT message FROM fibril_transcripts WHERE handle = ? ORDER BY id", handle).flatMap((row) => {
          try {
            return [JSON.parse(String(row["message"])) as unknown]
          } catch {
            return []
          }
        })
      )
    )

  const decodeRows = (rows: ReadonlyArray<Sqlite.Row>) =>
    rows.flatMap((row) => {
      const record = fromJson(row["record"])
      return record === undefined ? [] : [record]
    })

  const all = read(() => decodeRows(db.all("SELECT record FROM fibril_agents ORDER BY created_at, agent_id"))).pipe(
    Effect.catch((error) => Effect.as(Effect.logWarning(error.message), []))
  )

  const get = (agentId: string) =>
    read(() => decodeRows(db.all("SELECT record FROM fibril_agents WHERE agent_id = ?", agentId))).pipe(
      Effect.map((records) => Option.fromNullishOr(records[0])),
      Effect.catch((error) => Effect.as(Effect.logWarning(error.message), Option.none()))
    )

  const ids = read(() => new Set(db.all("SELECT agent_id FROM fibril_agents").map((row) => String(row["agent_id"]))))

  const unreadable = read(() =>
    db.all("SELECT agent_id, status, created_at, record FROM fibril_agents ORDER BY created_at, agent_id").flatMap(
      (row): Array<Unreadable> => {
        const decoded = readJson(row["record"])
        return isDecodeError(decoded)
          ? [{
            agent_id: String(row["agent_id"]),
            status: String(row["status"]),
            created_at: Number(row["created_at"]),
            error: decoded.error
          }]
          : []
      }
    )
  ).pipe(Effect.catch((error) => Effect.as(Effect.logWarning(error.message), [])))

  // --- ownership ------------------------------------------------------------------------
  const ownerRow = (bootId: string) =>
    db.get("SELECT pid, host, lease_until, proc_start FROM fibril_owners WHERE boot_id = ?", bootId)

  /** Why an owner is gone (for the record's events), or undefined while it lives. */
  const goneBecause = (bootId: string, now: number): string | undefined => {
    if (bootId === owner.boot_id) return crashed ? "this process stopped writing" : undefined
    const row = ownerRow(bootId)
    if (row === undefined) return "its process exited or was found gone before"
    const pid = Number(row["pid"])
    if (row["host"] === owner.host) {
      // On this host the process itself answers, whatever its lease says: a process stopped
      // past its lease, or a reader whose clock is ahead, never takes a live owner's agents.
      const state = identity.probe(pid)
      if (!state.alive) return `its process (pid ${pid}) is not running`
      const registered = row["proc_start"]
      if (typeof registered === "string" && state.start !== undefined && state.start !== registered) {
        return `pid ${pid} now runs another process (started at ${state.start}, not ${registered})`
      }
      return undefined
    }
    // Another host's processes cannot be asked: its lease decides.
    const until = Number(row["lease_until"])
    return until < now
      ? `its lease ran out at ${new Date(until).toISOString()} (it runs on ${String(row["host"])})`
      : undefined
  }

  const livenessAt = (bootId: string, now: number): Liveness =>
    bootId === owner.boot_id && !crashed ? "self" : goneBecause(bootId, now) === undefined ? "alive" : "gone"

  const liveness = (bootId: string) =>
    Clock.clockWith((clock) =>
      Effect.sync(() => {
        try {
          return livenessAt(bootId, clock.currentTimeMillisUnsafe())
        } catch {
          return "alive" as const // unknown: never declare an owner gone on a failed read
        }
      })
    )

  const reconcileAt = (now: number): ReadonlyArray<SubAgentRecord> => {
    if (crashed) return []
    commit()
    return db.transaction(() => {
      const rows = db.all(
        `SELECT owner_boot, record FROM fibril_agents WHERE status IN ('pending','running') AND owner_boot != ?`,
        owner.boot_id
      )
      const verdicts = new Map<string, Liveness>()
      const because = new Map<string, string>()
      const changed: Array<SubAgentRecord> = []
      for (const row of rows) {
        const boot = String(row["owner_boot"])
        let verdict = verdicts.get(boot)
        if (verdict === undefined) {
          const why = goneBecause(boot, now)
          verdicts.set(boot, verdict = why === undefined ? "alive" : "gone")
          if (why !== undefined) because.set(boot, why)
        }
        if (verdict !== "gone") continue
        const record = fromJson(row["record"])
        if (record === undefined) continue
        // `now` is this process's own clock: nothing written here is later than it.
        const ended: Receipt.Draft = {
          ...record,
          status: "interrupted",
          reason: goneReason({ pid: record.owner_pid, host: record.owner_host }),
          finished_at: now
        }
        Receipt.log(ended, {
          at: now,
          type: "interrupted",
          detail: `recorded interrupted by pid ${owner.pid} on ${owner.host}: ${
            because.get(boot) ?? "its owner is gone"
          }`
        })
        applyPut(ended, now, `gone:${boot}`)
        changed.push(ended)
      }
      // Owners with no live agents left (crashed idle, or exited) are judged too, so their
      // rows and the requests no one will take do not pile up.
      for (const row of db.all("SELECT boot_id FROM fibril_owners WHERE boot_id != ?", owner.boot_id)) {
        const boot = String(row["boot_id"])
        if (!verdicts.has(boot)) verdicts.set(boot, livenessAt(boot, now))
      }
      for (const [boot, verdict] of verdicts) {
        if (verdict === "gone") {
          db.run("DELETE FROM fibril_owners WHERE boot_id = ?", boot)
          db.run("DELETE FROM fibril_requests WHERE owner_boot = ?", boot)
        }
      }
      db.run("DELETE FROM fibril_requests WHERE owner_boot NOT IN (SELECT boot_id FROM fibril_owners)")
      return changed
    })
  }

  const reconcile = Clock.clockWith((clock) =>
    Effect.try({ try: () => reconcileAt(clock.currentTimeMillisUnsafe()), catch: failed }).pipe(
      Effect.catch((error) => Effect.as(Effect.logWarning(error.message), []))
    )
  )

  const request = (
    target: string,
    req: { readonly agent_id: string; readonly kind: Request["kind"]; readonly payload: string }
  ) =>
    Clock.clockWith((clock) =>
      Effect.try({
        try: () =>
          void db.run(
            "INSERT INTO fibril_requests (owner_boot, agent_id, kind, payload, from_boot, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            target,
            req.agent_id,
            req.kind,
            req.payload,
            owner.boot_id,
            clock.currentTimeMillisUnsafe()
          ),
        catch: failed
      }).pipe(Effect.catch((error) => Effect.logWarning(error.message)))
    )

  const takeRequests = Clock.clockWith((clock) =>
    Effect.try({
      try: (): ReadonlyArray<Request> => {
        if (crashed) return []
        const now = clock.currentTimeMillisUnsafe()
        return db.transaction(() => {
          renewLease(now)
          const rows = db.all(
            "DELETE FROM fibril_requests WHERE owner_boot = ? RETURNING id, agent_id, kind, payload, from_boot",
            owner.boot_id
          )
          return rows.map((row) => ({
            id: Number(row["id"]),
            agent_id: String(row["agent_id"]),
            kind: row["kind"] === "input" ? "input" as const : "cancel" as const,
            payload: String(row["payload"]),
            from: String(row["from_boot"])
          })).sort((a, b) => a.id - b.id)
        })
      },
      catch: failed
    }).pipe(Effect.catch((error) => Effect.as(Effect.logWarning(error.message), [])))
  )

  const adopt = (agentId: string) =>
    Clock.clockWith((clock) =>
      Effect.try({
        try: () => {
          commit()
          const now = clock.currentTimeMillisUnsafe()
          return db.transaction(() => {
            const row = db.get("SELECT owner_boot, status, record FROM fibril_agents WHERE agent_id = ?", agentId)
            if (row === undefined) return false
            const boot = String(row["owner_boot"])
            const status = String(row["status"]) as Status
            if (boot === owner.boot_id) return true
            const live = !isTerminal(status)
            if (live && livenessAt(boot, now) !== "gone") return false
            const stored = fromJson(row["record"])
            if (stored === undefined) return false
            // An agent whose owner is gone ends `interrupted` here, in the same transaction:
            // never adopted while still `running` (the manager resumes only finished agents).
            const record: SubAgentRecord = live
              ? {
                ...stored,
                status: "interrupted",
                reason: goneReason({ pid: stored.owner_pid, host: stored.owner_host }),
                finished_at: now
              }
              : stored
            applyPut(
              { ...record, session_boot_id: owner.boot_id, owner_pid: owner.pid, owner_host: owner.host },
              now,
              owner.boot_id
            )
            return true
          })
        },
        catch: failed
      }).pipe(Effect.catch((error) => Effect.as(Effect.logWarning(error.message), false)))
    )

  // --- open: migrate, evict, and forget this owner on close -----------------------------
  const now = yield* Clock.currentTimeMillis
  warnings.push(...(yield* migrateLegacy(db, dir, now)))
  yield* Effect.try({ try: () => evict(now), catch: failed }).pipe(Effect.ignore)
  for (const warning of warnings) yield* Effect.logWarning(warning)

  yield* Effect.addFinalizer(() =>
    Effect.sync(() => {
      if (crashed) return
      commit()
      try {
        db.run("DELETE FROM fibril_owners WHERE boot_id = ?", owner.boot_id)
      } catch {
        // The lease expires by itself.
      }
    })
  )

  const store = SubAgentStore.of({
    owner,
    all,
    get,
    ids,
    put,
    flush: flushNow,
    settle,
    takenOver: Effect.sync(() => [...takeovers.values()]),
    unreadable,
    appendTranscript,
    queueTranscript,
    sync,
    readTranscript,
    warnings,
    durable: true,
    liveness,
    reconcile,
    request,
    takeRequests,
    adopt
  })
  const control: Control = {
    crash: Effect.sync(() => {
      crashed = true
      queue = []
      puts = new Map()
      const resumes = waiters
      waiters = []
      // A killed process never answers: whoever waited on a write waits forever.
      void resumes
    })
  }
  return { store, control }
})

export const makeSqlite = (options: SqliteOptions) => Effect.map(makeSqliteWithControl(options), ({ store }) => store)

/**
 * The store shared by every process on the workspace, in `<dir>/fibril.db`.
 *
 * @example
 * ```ts
 * const StoreLive = SubAgentStore.layerSqlite({ dir: `${cwd}/.fibril/state` })
 * ```
 */
export const layerSqlite = (
  options: SqliteOptions
): Layer.Layer<SubAgentStore, OpenError, FileSystem.FileSystem | Path.Path> =>
  Layer.effect(SubAgentStore, makeSqlite(options))

// ---------------------------------------------------------------------------
// Migration from subagents.v1.json
// ---------------------------------------------------------------------------

const LegacyFile = Schema.fromJsonString(
  Schema.Struct({ version: Schema.Literal(1), records: Schema.Array(Schema.Unknown) })
)
const decodeLegacy = Schema.decodeUnknownResult(LegacyFile)

/**
 * Imports `subagents.v1.json` and its JSONL transcripts into the database, then renames them
 * `.migrated`. Under the database's write lock, so two processes starting at once import once.
 * Records it cannot read are reported; the file is kept either way.
 */
const migrateLegacy = (db: Sqlite.Database, dir: string, now: number) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const legacy = path.join(dir, legacyRecordsFileName)
    if (!(yield* fs.exists(legacy).pipe(Effect.orElseSucceed(() => false)))) return []
    const text = yield* fs.readFileString(legacy).pipe(Effect.option)
    if (Option.isNone(text)) return [`${legacy} could not be read; it was left in place and not imported`]
    const transcriptsDir = path.join(dir, legacyTranscriptsDirName)
    const decoded = decodeLegacy(text.value)
    const warnings: Array<string> = []
    const records: Array<{ record: SubAgentRecord; raw: object }> = []
    if (Result.isFailure(decoded)) {
      warnings.push(`${legacy} is not a readable v1 state file; renamed it ${legacy}.corrupt and imported nothing`)
    } else {
      for (const raw of decoded.success.records) {
        const record = decodeRecord(raw)
        if (Result.isSuccess(record) && typeof raw === "object" && raw !== null) {
          records.push({ record: record.success, raw })
        } else {warnings.push(
            `${legacy}: a record could not be read and was not imported: ${JSON.stringify(raw).slice(0, 200)}`
          )}
      }
    }
    const transcripts = new Map<string, ReadonlyArray<string>>()
    for (const { record } of records) {
      const body = yield* fs.readFileString(path.join(transcriptsDir, record.transcript_handle)).pipe(Effect.option)
      if (Option.isSome(body)) {
        // A crash could cut the last line short: keep the lines that parse.
        transcripts.set(
          record.transcript_handle,
          body.value.split("\n").filter((line) => {
            if (line.trim() === "") {
              return false
            }
            try {
              JSON.parse(line)
              return true
            } catch {
              return false
            }
          })
        )
      }
    }
    const imported = yield* Effect.try({
      try: () =>
        db.transaction(() => {
          let count = 0
          for (const { record, raw } of records) {
            const live = !isTerminal(record.status)
            const json = {
              ...raw,
              ...(live ? { status: "interrupted", reason: "Interrupted by process restart", finished_at: now } : {})
            }
            const inserted = db.run(
              `INSERT INTO fibril_agents (agent_id, parent_id, status, owner_boot, handle, created_at, finished_at, record)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (agent_id) DO NOTHING`,
              record.agent_id,
              record.parent_id ?? null,
              live ? "interrupted" : record.status,
              record.session_boot_id,
              record.transcript_handle,
              record.created_at,
              live ? now : record.finished_at ?? null,
              JSON.stringify(json)
            )
            if (Number(inserted.changes) === 0) continue
            count++
            for (const line of transcripts.get(record.transcript_handle) ?? []) {
              db.run("INSERT INTO fibril_transcripts (handle, message) VALUES (?, ?)", record.transcript_handle, line)
            }
          }
          return count
        }),
      catch: (cause) => new StoreError({ path: legacy, reason: Sqlite.describe(cause) })
    })
    const suffix = Result.isFailure(decoded) ? ".corrupt" : ".migrated"
    yield* fs.rename(legacy, `${legacy}${suffix}`).pipe(Effect.ignore)
    if (yield* fs.exists(transcriptsDir).pipe(Effect.orElseSucceed(() => false))) {
      yield* fs.rename(transcriptsDir, `${transcriptsDir}${suffix}`).pipe(Effect.ignore)
    }
    if (Result.isSuccess(decoded)) {
      warnings.push(
        `imported ${imported} sub-agent record(s) from ${legacy} into ${databaseFileName}; the old file is kept as ${legacy}.migrated`
      )
    }
    return warnings
  })

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------

const finishedAt = (r: SubAgentRecord) => r.finished_at ?? r.created_at

/** The same store with nothing on disk: one process, one owner, nothing outlives it. */
export const makeMemory = Effect.fn("SubAgentStore.makeMemory")(function*(options: Limits = {}) {
  const limits = resolve(options)
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
