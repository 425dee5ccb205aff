/**
 * The embedded SQLite store's ownership (`SqliteSubAgentStore`): what its parts share
 * (`StoreContext`), this owner's lease and how it judges another owner gone, and the writes of
 * records, each made only while this process owns the row (a late write of a process found gone
 * is refused, or recorded over the tombstone when it is a terminal one).
 */
import * as Receipt from "../Receipt.ts"
import { isTerminal, retiredKeys, type SubAgentRecord } from "../SubAgentRecord.ts"
import {
  knownKeys,
  knownOnly,
  type Liveness,
  type Owner,
  type ResolvedLimits,
  type StoreError,
  type TakenOver
} from "../SubAgentStore.ts"
import * as Processes from "./processes.ts"
import type * as Sqlite from "./sqlite.ts"
import * as Database from "./storeDatabase.ts"

/** Who a store's process is, and how it asks the host whether another process lives. */
export interface Identity {
  readonly pid: number
  readonly host: string
  /** The start time of this process (`/proc/<pid>/stat` field 22 on Linux), if known. */
  readonly start: string | undefined
  readonly probe: Processes.Probe
}

/** What the parts of one store share: its database, its process, and its mutable state. */
export interface StoreContext {
  readonly db: Sqlite.Database
  readonly file: string
  readonly owner: Owner
  readonly identity: Identity
  readonly limits: ResolvedLimits
  readonly failed: (reason: unknown) => StoreError
  /** From `crash` on, nothing is written. */
  crashed: boolean
  /** Until when this owner's lease runs (never renewed yet: whatever the clock reads). */
  leaseUntil: number
  /** Terminal records written since the last eviction. */
  terminalPuts: number
  /** This process's agents whose records another process took over while it lived. */
  readonly takeovers: Map<string, TakenOver>
}

// --- Lease ---

export const makeLease = (ctx: StoreContext) => {
  const { db, owner, identity } = ctx

  /** Renews this owner's lease when a third of it has passed (inside the caller's transaction). */
  const renew = (now: number) => {
    if (ctx.leaseUntil - now > (ctx.limits.leaseMs * 2) / 3) return
    ctx.leaseUntil = now + ctx.limits.leaseMs
    db.run(
      `INSERT INTO fibril_owners (boot_id, pid, host, started_at, lease_until, proc_start) VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT (boot_id) DO UPDATE SET lease_until = excluded.lease_until`,
      owner.boot_id,
      owner.pid,
      owner.host,
      now,
      ctx.leaseUntil,
      identity.start ?? null
    )
  }

  /** Why an owner is gone (for the record's events), or undefined while it lives. */
  const goneBecause = (bootId: string, now: number): string | undefined => {
    if (bootId === owner.boot_id) return ctx.crashed ? "this process stopped writing" : undefined
    const row = db.get("SELECT pid, host, lease_until, proc_start FROM fibril_owners WHERE boot_id = ?", bootId)
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
    bootId === owner.boot_id && !ctx.crashed ? "self" : goneBecause(bootId, now) === undefined ? "alive" : "gone"

  return { renew, goneBecause, livenessAt }
}
export type Lease = ReturnType<typeof makeLease>

// --- Writes of records ---

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

export const makeWrites = (ctx: StoreContext, lease: Lease) => {
  const { db, owner, identity } = ctx
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

  /**
   * Writes a record. Without `takeover`, as its owner (see `ownerPut`); with it, whoever owns
   * the row, which then names `takeover` as its owner column: reconcile leaves a tombstone
   * there (`gone:<boot id>`), adopt the adopter.
   */
  const apply = (record: SubAgentRecord, now: number, takeover?: string) => {
    if (takeover === undefined && !isTerminal(record.status)) lease.renew(now)
    if (takeover === undefined) {
      const own = putOwn(record)
      if (own === "refused") return refusedWrite(record, now)
      if (own === "written") {
        if (isTerminal(record.status)) ctx.terminalPuts++
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
    if (isTerminal(record.status)) ctx.terminalPuts++
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
    const stored = Database.fromJson(row["record"])
    const event = stored?.events?.findLast((e) => e.type === "interrupted")
    const by = event?.detail ?? stored?.reason ?? `its record names another owner (${String(row["owner_boot"])})`
    const tombstone = row["owner_boot"] === `gone:${owner.boot_id}`
    // Found gone: its owner row went with it. Registered again now, with a fresh lease.
    ctx.leaseUntil = Number.NEGATIVE_INFINITY
    lease.renew(now)
    if (!isTerminal(record.status) || !tombstone) {
      ctx.takeovers.set(record.agent_id, { agent_id: record.agent_id, by, kept: false })
      return
    }
    const kept: Receipt.Draft = { ...record }
    Receipt.takenOver(kept, {
      at: Math.min(event?.at ?? stored?.finished_at ?? now, now),
      detail: `${by}; this process (pid ${owner.pid} on ${owner.host}) was still running it, and recorded its end`
    })
    apply(kept, now, owner.boot_id)
    ctx.takeovers.set(record.agent_id, { agent_id: record.agent_id, by, kept: true })
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
        ctx.leaseUntil,
        identity.start ?? null
      )
    }
    return fresh ? "written" : "existing"
  }

  return {
    apply,
    /** Starts tracking the commit under way (its changes to `inserted`). */
    begin: () => void (insertedChanges = []),
    /** The commit rolled back: nothing of it is in the file, so what this process believes it wrote is undone. */
    rollback: () => {
      for (const change of insertedChanges.reverse()) {
        if (change.added) inserted.delete(change.id)
        else inserted.add(change.id)
      }
      insertedChanges = []
    }
  }
}
export type Writes = ReturnType<typeof makeWrites>
