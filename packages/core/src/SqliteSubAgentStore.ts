/**
 * SqliteSubAgentStore — the `SubAgentStore` shared by every process on a workspace.
 *
 * One SQLite database, `<dir>/fibril.db` (Node's built-in `node:sqlite`, WAL mode): one row per
 * agent, one row per transcript message, one row per process that owns agents (its lease), and
 * a table of requests from one process to another. Any number of `fibril run` / `fibril mcp`
 * processes can use one workspace at once: each writes only its own agents' rows, in
 * transactions, so nothing is lost to a last writer (ownership: see `SubAgentStore`).
 *
 * Writes are group-committed: `put` and `appendTranscript` queue their rows and the queue is
 * committed in one transaction at the end of the current turn of the event loop (or at
 * once by `flush` and before any read). `appendTranscript` returns only after its commit,
 * so a message is durable before the loop makes its next model call; `put` does not wait.
 * A commit survives `kill -9`; WAL keeps the file whole through any crash. A commit that fails
 * (a full disk) keeps its writes queued for the next one; `settle` retries them and, when they
 * still cannot be committed, fails with `StoreWriteFailed` naming the agent whose record is lost.
 *
 * The store is one `make` wiring named parts over one `StoreContext`: the lease, the writes of
 * records, the commit queue, eviction, the reads, and the requests between processes. A
 * `subagents.v1.json` state file from an earlier version is imported on first open, then renamed
 * `.migrated` (`internal/legacyStore.ts`).
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import type * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Path from "effect/Path"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import { hostname } from "node:os"
import { importLegacy } from "./internal/legacyStore.ts"
import * as Processes from "./internal/processes.ts"
import * as Sqlite from "./internal/sqlite.ts"
import * as Database from "./internal/storeDatabase.ts"
import {
  type Identity,
  type Lease,
  makeLease,
  makeWrites,
  type StoreContext,
  type Writes
} from "./internal/storeOwnership.ts"
import * as Receipt from "./Receipt.ts"
import { isTerminal, type Status, SubAgentRecord } from "./SubAgentRecord.ts"
import {
  checkHandle,
  goneReason,
  handleRefusal,
  type Limits,
  type Liveness,
  newBootId,
  type Request,
  resolveLimits,
  StoreError,
  StoreWriteFailed,
  SubAgentStore,
  toLines,
  type Unreadable
} from "./SubAgentStore.ts"

export {
  databaseFileName,
  legacyRecordsFileName,
  legacyTranscriptsDirName,
  type OpenError,
  schemaVersion,
  StateNotDirectory
} from "./internal/storeDatabase.ts"
export type { Identity } from "./internal/storeOwnership.ts"

export interface SqliteOptions extends Limits {
  /** The state directory, e.g. `<cwd>/.fibril/state`; created if missing. */
  readonly dir: string
  /**
   * This process as its records name it, and how it sees the host's processes. Defaults to the
   * real ones; tests that run several "processes" in one give each its own.
   */
  readonly identity?: Identity | undefined
}

/** This process, on this host (the default identity). */
export const thisProcess = (): Identity => ({
  pid: process.pid,
  host: hostname(),
  start: Processes.selfStart(),
  probe: Processes.probe
})

/** Test control of a SQLite store: `crash` makes it behave like a process killed at that moment. */
export interface Control {
  /** From now on nothing is written (queued writes are dropped, the lease is not renewed). */
  readonly crash: Effect.Effect<void>
}

const isValidRecord = Schema.is(SubAgentRecord)

// --- Eviction ---

/** Drops terminal records older than `evictAfterMs`, then the oldest beyond `maxRecords`, with their transcripts. */
const evict = ({ db, limits }: StoreContext, now: number) => {
  const victims: Array<Sqlite.Row> = [
    ...db.all(
      `SELECT agent_id, handle FROM fibril_agents WHERE status IN ${Database.terminalList} AND COALESCE(finished_at, created_at) < ?`,
      now - limits.evictAfterMs
    )
  ]
  const count = Number(db.get("SELECT COUNT(*) AS n FROM fibril_agents")?.["n"] ?? 0) - victims.length
  if (count > limits.maxRecords) {
    const aged = new Set(victims.map((row) => row["agent_id"]))
    for (
      const row of db.all(
        `SELECT agent_id, handle FROM fibril_agents WHERE status IN ${Database.terminalList}
           ORDER BY COALESCE(finished_at, created_at) LIMIT ?`,
        count - limits.maxRecords + aged.size
      )
    ) if (!aged.has(row["agent_id"])) victims.push(row)
  }
  if (victims.length === 0) return
  // Several rows per statement: a statement per row costs as much again as the row (an
  // eviction usually takes a few hundred agents and their transcripts).
  db.transaction(() => {
    for (let at = 0; at < victims.length; at += Database.rowsPerDelete) {
      const chunk = victims.slice(at, at + Database.rowsPerDelete)
      db.run(
        Database.deleteWhereInSql("fibril_agents", "agent_id", chunk.length),
        ...chunk.map((row) => row["agent_id"] as string)
      )
      db.run(
        Database.deleteWhereInSql("fibril_transcripts", "handle", chunk.length),
        ...chunk.map((row) => row["handle"] as string)
      )
    }
  })
}

// --- Commit queue ---

/** Transcript lines waiting for the next commit. */
interface Append {
  readonly handle: string
  readonly lines: ReadonlyArray<string>
}

const makeCommitQueue = (ctx: StoreContext, writes: Writes) => {
  const { db } = ctx
  let queue: Array<Append> = []
  /** Records waiting for the next commit: the last put of an agent in a turn is the one written. */
  let puts = new Map<string, { readonly record: SubAgentRecord; readonly now: number }>()
  let waiters: Array<(error: StoreError | undefined) => void> = []
  let scheduled = false
  /** A commit that failed with no one waiting on it: the next `sync` reports it. */
  let unreported: StoreError | undefined

  /** Transcript rows, several per statement (a statement per row costs as much again as the row). */
  const insertLines = (appends: ReadonlyArray<Append>) => {
    const values: Array<string> = []
    for (const { handle, lines } of appends) for (const line of lines) values.push(handle, line)
    for (let at = 0; at < values.length; at += 2 * Database.linesPerInsert) {
      const chunk = values.slice(at, at + 2 * Database.linesPerInsert)
      db.run(Database.insertLinesSql(chunk.length / 2), ...chunk)
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
    if (!ctx.crashed && (appends.length > 0 || records.size > 0)) {
      const lease = ctx.leaseUntil
      writes.begin()
      try {
        db.transaction(() => {
          insertLines(appends)
          for (const { record, now } of records.values()) writes.apply(record, now)
        })
      } catch (cause) {
        error = ctx.failed(cause)
        ctx.leaseUntil = lease
        writes.rollback()
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
      writes.begin()
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

  const flush = Effect.suspend(() => {
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
  const settle: Effect.Effect<void, StoreWriteFailed> = flush.pipe(
    Effect.retry({ times: 4, schedule: Schedule.exponential("100 millis") }),
    Effect.catch((error) =>
      Effect.fail(
        new StoreWriteFailed({ agentId: unsavedAgent(), store: ctx.file, reason: Sqlite.plainReason(error.reason) })
      )
    )
  )

  const put = (record: SubAgentRecord): Effect.Effect<void> =>
    Clock.clockWith((clock) => {
      if (ctx.crashed) return Effect.void
      puts.set(record.agent_id, { record, now: clock.currentTimeMillisUnsafe() })
      schedule()
      // Now and then, at a commit, old terminal records go.
      if (ctx.terminalPuts >= 256) {
        ctx.terminalPuts = 0
        const now = clock.currentTimeMillisUnsafe()
        return Effect.sync(() => {
          commit()
          try {
            evict(ctx, now)
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
      if (ctx.crashed) return Effect.void
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
    if (queue.length === 0 && !ctx.crashed) return Effect.void
    return Effect.callback<void, StoreError>((resume) => {
      waiters.push((error) => resume(error === undefined ? Effect.void : Effect.fail(error)))
    })
  })

  const appendTranscript = (handle: string, entries: ReadonlyArray<unknown>): Effect.Effect<void, StoreError> =>
    entries.length === 0 ? checkHandle(handle) : Effect.andThen(queueTranscript(handle, entries), sync)

  /** From now on nothing is written: the queue is dropped, and whoever waited on a write waits forever. */
  const crash = () => {
    ctx.crashed = true
    queue = []
    puts = new Map()
    waiters = []
  }

  return { commit, flush, settle, put, queueTranscript, sync, appendTranscript, crash }
}

// --- Reads ---

const makeReads = (ctx: StoreContext, flush: Effect.Effect<void, StoreError>) => {
  const { db } = ctx
  const read = <A>(f: () => A): Effect.Effect<A, StoreError> =>
    Effect.andThen(flush, Effect.try({ try: f, catch: ctx.failed }))

  const decodeRows = (rows: ReadonlyArray<Sqlite.Row>) =>
    rows.flatMap((row) => {
      const record = Database.fromJson(row["record"])
      return record === undefined ? [] : [record]
    })

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
        const decoded = Database.readJson(row["record"])
        return Database.isDecodeError(decoded)
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

  return { all, get, ids, unreadable, readTranscript }
}

// --- Requests and takeovers between processes ---

const makeRequests = (ctx: StoreContext, lease: Lease, writes: Writes, commit: () => void) => {
  const { db, owner } = ctx

  const liveness = (bootId: string) =>
    Clock.clockWith((clock) =>
      Effect.sync(() => {
        try {
          return lease.livenessAt(bootId, clock.currentTimeMillisUnsafe())
        } catch {
          return "alive" as const // unknown: never declare an owner gone on a failed read
        }
      })
    )

  /** Records `pending`/`running` of a gone owner, marked `interrupted`; gone owners and their requests removed. */
  const reconcileAt = (now: number): ReadonlyArray<SubAgentRecord> => {
    if (ctx.crashed) return []
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
          const why = lease.goneBecause(boot, now)
          verdicts.set(boot, verdict = why === undefined ? "alive" : "gone")
          if (why !== undefined) because.set(boot, why)
        }
        if (verdict !== "gone") continue
        const record = Database.fromJson(row["record"])
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
        writes.apply(ended, now, `gone:${boot}`)
        changed.push(ended)
      }
      // Owners with no live agents left (crashed idle, or exited) are judged too, so their
      // rows and the requests no one will take do not pile up.
      for (const row of db.all("SELECT boot_id FROM fibril_owners WHERE boot_id != ?", owner.boot_id)) {
        const boot = String(row["boot_id"])
        if (!verdicts.has(boot)) verdicts.set(boot, lease.livenessAt(boot, now))
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
    Effect.try({ try: () => reconcileAt(clock.currentTimeMillisUnsafe()), catch: ctx.failed }).pipe(
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
        catch: ctx.failed
      }).pipe(Effect.catch((error) => Effect.logWarning(error.message)))
    )

  const takeRequests = Clock.clockWith((clock) =>
    Effect.try({
      try: (): ReadonlyArray<Request> => {
        if (ctx.crashed) return []
        const now = clock.currentTimeMillisUnsafe()
        return db.transaction(() => {
          lease.renew(now)
          const rows = db.all(
            "DELETE FROM fibril_requests WHERE owner_boot = ? RETURNING id, agent_id, kind, payload, from_boot",
            owner.boot_id
          )
          return rows.map((row) => ({
            id: Number(row["id"]),
            agent_id: String(row["agent_id"]),
            kind: row["kind"] === "input"
              ? "input" as const
              : row["kind"] === "answer"
              ? "answer" as const
              : "cancel" as const,
            payload: String(row["payload"]),
            from: String(row["from_boot"])
          })).sort((a, b) => a.id - b.id)
        })
      },
      catch: ctx.failed
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
            if (live && lease.livenessAt(boot, now) !== "gone") return false
            const stored = Database.fromJson(row["record"])
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
            writes.apply(
              { ...record, session_boot_id: owner.boot_id, owner_pid: owner.pid, owner_host: owner.host },
              now,
              owner.boot_id
            )
            return true
          })
        },
        catch: ctx.failed
      }).pipe(Effect.catch((error) => Effect.as(Effect.logWarning(error.message), false)))
    )

  return { liveness, reconcile, request, takeRequests, adopt }
}

// --- The store ---

/** The SQLite store over `options.dir`. Needs a Scope: the database closes with it. */
export const makeSqliteWithControl = Effect.fnUntraced(function*(options: SqliteOptions) {
  const warnings: Array<string> = []
  const { db, file } = yield* Database.open(options.dir, warnings)
  const identity = options.identity ?? thisProcess()
  const ctx: StoreContext = {
    db,
    file,
    owner: { boot_id: newBootId(), pid: identity.pid, host: identity.host },
    identity,
    limits: resolveLimits(options),
    failed: (reason) => new StoreError({ path: file, reason: Sqlite.describe(reason) }),
    crashed: false,
    // Never renewed yet, whatever the clock reads (a clock may be behind the epoch in a test).
    leaseUntil: Number.NEGATIVE_INFINITY,
    terminalPuts: 0,
    takeovers: new Map()
  }
  const lease = makeLease(ctx)
  const writes = makeWrites(ctx, lease)
  const queue = makeCommitQueue(ctx, writes)
  const reads = makeReads(ctx, queue.flush)
  const requests = makeRequests(ctx, lease, writes, queue.commit)

  // Open: import an earlier version's state, evict, and forget this owner on close.
  const now = yield* Clock.currentTimeMillis
  warnings.push(...(yield* importLegacy(db, options.dir, now)))
  yield* Effect.try({ try: () => evict(ctx, now), catch: ctx.failed }).pipe(Effect.ignore)
  for (const warning of warnings) yield* Effect.logWarning(warning)
  yield* Effect.addFinalizer(() =>
    Effect.sync(() => {
      if (ctx.crashed) return
      queue.commit()
      try {
        db.run("DELETE FROM fibril_owners WHERE boot_id = ?", ctx.owner.boot_id)
      } catch {
        // The lease expires by itself.
      }
    })
  )

  const store = SubAgentStore.of({
    owner: ctx.owner,
    ...reads,
    put: queue.put,
    flush: queue.flush,
    settle: queue.settle,
    takenOver: Effect.sync(() => [...ctx.takeovers.values()]),
    appendTranscript: queue.appendTranscript,
    queueTranscript: queue.queueTranscript,
    sync: queue.sync,
    warnings,
    durable: true,
    ...requests
  })
  const control: Control = { crash: Effect.sync(queue.crash) }
  return { store, control }
})

export const makeSqlite = (options: SqliteOptions) => Effect.map(makeSqliteWithControl(options), ({ store }) => store)

/**
 * The store shared by every process on the workspace, in `<dir>/fibril.db`.
 *
 * @example
 * ```ts
 * const StoreLive = SqliteSubAgentStore.layerSqlite({ dir: `${cwd}/.fibril/state` })
 * ```
 */
export const layerSqlite = (
  options: SqliteOptions
): Layer.Layer<SubAgentStore, Database.OpenError, FileSystem.FileSystem | Path.Path> =>
  Layer.effect(SubAgentStore, makeSqlite(options))
