import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import {
  Clock,
  Context,
  Effect,
  Exit,
  Fiber,
  FileSystem,
  Layer,
  Logger,
  Option,
  Path,
  Random,
  Result,
  Schema,
  Scope,
  Stream
} from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { TestClock } from "effect/testing"
import { readdirSync, readFileSync, readlinkSync } from "node:fs"
import { hostname } from "node:os"
import { DatabaseSync, type SQLInputValue } from "node:sqlite"
import { fileURLToPath } from "node:url"
import * as SqliteSubAgentStore from "../src/SqliteSubAgentStore.ts"
import { isTerminal, SubAgentRecord } from "../src/SubAgentRecord.ts"
import * as SubAgentStore from "../src/SubAgentStore.ts"
import { owned, sample } from "./records.ts"

type Store = SubAgentStore.SubAgentStore["Service"]

const day = 24 * 60 * 60 * 1000
const never = Number.POSITIVE_INFINITY

/** `a` as it comes back from JSON: the generators produce -0 (a valid Int), and JSON has no negative zero. */
const viaJson = <A>(a: A): A => JSON.parse(JSON.stringify(a))

/** Prefixes keys so generated unknown fields never collide with the schema's fields. */
const future = (fields: Readonly<Record<string, Schema.Json>>): Record<string, unknown> =>
  Object.fromEntries(Object.entries(fields).map(([key, value]) => [`x_future_${key}`, value]))

const failsWithStoreError = <A>(effect: Effect.Effect<A, SubAgentStore.StoreError>) =>
  Effect.map(Effect.result(effect), (result) => Result.isFailure(result) && result.failure._tag === "StoreError")

/** A fresh state dir (removed with the test's scope). */
const sandbox = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const dir = yield* fs.makeTempDirectoryScoped()
  return { fs, path, dir, file: path.join(dir, SqliteSubAgentStore.databaseFileName) }
})

/**
 * Opens a SQLite store in a scope of its own (one "process"): `close` closes it as a clean
 * exit would; `control.crash` makes it behave like a killed one. The test's scope closes it too.
 */
const open = Effect.fnUntraced(function*(options: SqliteSubAgentStore.SqliteOptions) {
  const scope = yield* Scope.fork(yield* Scope.Scope)
  const { store, control } = yield* SqliteSubAgentStore.makeSqliteWithControl({
    identity: elsewhere(),
    ...options
  }).pipe(Scope.provide(scope))
  return { store, control, close: Scope.close(scope, Exit.void) }
})

let hosts = 0
/**
 * Each "process" these tests open runs in this one, with this pid: each gets a host of its own
 * (where only the lease tells whether it lives), so that a crash or a stop past the lease can be
 * simulated. The same-host rules (the pid and its start time decide) have their own tests.
 */
const elsewhere = (): SqliteSubAgentStore.Identity => ({
  pid: process.pid,
  host: `host-${++hosts}.test`,
  start: undefined,
  probe: () => ({ alive: true, start: undefined })
})

/** Runs `f` on a store over `options` (this process, on this host) and closes it. */
const withStore = <A, E, R>(options: SqliteSubAgentStore.SqliteOptions, f: (store: Store) => Effect.Effect<A, E, R>) =>
  Effect.scoped(
    Effect.flatMap(open({ identity: SqliteSubAgentStore.thisProcess(), ...options }), ({ store }) => f(store))
  )

/** The database file through a connection of its own, as another process (or a newer Fibril) sees it. */
const raw = (dir: string) =>
  Effect.map(
    Effect.acquireRelease(
      Effect.sync(() => new DatabaseSync(`${dir}/${SqliteSubAgentStore.databaseFileName}`, { timeout: 5_000 })),
      (db) => Effect.sync(() => db.close())
    ),
    (db) => ({
      all: (sql: string, ...params: ReadonlyArray<SQLInputValue>) =>
        db.prepare(sql).all(...params) as ReadonlyArray<Record<string, unknown>>,
      run: (sql: string, ...params: ReadonlyArray<SQLInputValue>) => void db.prepare(sql).run(...params),
      /** The stored JSON of a record, every field (parsed). */
      record: (agentId: string): Record<string, unknown> | undefined => {
        const row = db.prepare("SELECT record FROM fibril_agents WHERE agent_id = ?").get(agentId)
        return row === undefined ? undefined : JSON.parse(String(row["record"]))
      },
      count: (sql: string, ...params: ReadonlyArray<SQLInputValue>) => Number(db.prepare(sql).get(...params)?.["n"])
    })
  )

/** Runs `f` on a raw connection and closes it. */
const withRaw = <A>(dir: string, f: (db: Effect.Success<ReturnType<typeof raw>>) => A) =>
  Effect.scoped(Effect.map(raw(dir), f))

const ids = (records: ReadonlyArray<SubAgentRecord>) => records.map((r) => r.agent_id).sort()

/** The pid of a process that has exited (and been reaped): certainly not alive. */
const deadPid = Effect.gen(function*() {
  const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
  const handle = yield* spawner.spawn(ChildProcess.make("true", []))
  yield* handle.exitCode
  return Number(handle.pid)
}).pipe(Effect.scoped)

describe("SubAgentStore", () => {
  describe("properties", () => {
    it.effect.prop(
      "any record round-trips through the SQLite store, also across close and reopen",
      [SubAgentRecord],
      ([record]) =>
        Effect.gen(function*() {
          const { dir } = yield* sandbox
          // No eviction: generated records may be terminal with any finished_at.
          const options = { dir, evictAfterMs: never }
          yield* withStore(options, (store) =>
            Effect.gen(function*() {
              yield* store.put(record)
              // No flush: a read sees this process's queued writes.
              assert.deepStrictEqual(Option.getOrUndefined(yield* store.get(record.agent_id)), viaJson(record))
            }))
          const [got, all] = yield* withStore(options, (store) => Effect.all([store.get(record.agent_id), store.all]))
          assert.deepStrictEqual(Option.getOrUndefined(got), viaJson(record))
          assert.deepStrictEqual(all, [viaJson(record)])
        }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
      { arbitrary: { runs: 40 } }
    )

    it.effect.prop(
      "optional fields set then removed are gone; unknown fields (from a newer Fibril) survive later puts",
      [SubAgentRecord, Schema.Record(Schema.String, Schema.Json)],
      ([record, extra]) =>
        Effect.gen(function*() {
          const { dir } = yield* sandbox
          const options = { dir, evictAfterMs: never }
          const db = yield* raw(dir)
          const unknown = future(extra)
          const full: SubAgentRecord = {
            ...record,
            parent_id: "parent",
            reason: "a reason",
            owner_pid: 7,
            owner_host: "host",
            started_at: 1,
            finished_at: 2,
            last_tool: "read",
            outcome: {
              text: "t",
              summary: "s",
              sections: { summary: "s", changes: "c", evidence: "e", risks: "r", blockers: "b" },
              contract_violations: ["v"]
            },
            runs: [{ run_id: "x-r1", kind: "spawn", status: "completed", session_boot_id: "earlier", reason: "r" }],
            events: [{ at: 1, type: "spawned" }],
            inputs: [{ at: 1, preview: "p", chars: 1, delivered: false, reason: "r" }],
            artifacts: [{ kind: "file", ref: "a.ts" }],
            usage: { status: "reported", reported_steps: 1, estimated_steps: 0 },
            verification: {
              status: "verified",
              receipts: [{ kind: "command", verdict: "passed", at: 1, exit_code: 0 }]
            },
            session_name: "amber-heron",
            verifies: "y-r1"
          }
          const updated = { ...record, steps: record.steps + 1, objective: `${record.objective}!` }
          yield* withStore(options, (store) =>
            Effect.gen(function*() {
              yield* store.put(full)
              yield* store.put(record)
              assert.deepStrictEqual(Option.getOrUndefined(yield* store.get(record.agent_id)), viaJson(record))
              assert.deepStrictEqual(db.record(record.agent_id), viaJson(record))

              // A newer Fibril wrote fields this version does not know.
              db.run(
                "UPDATE fibril_agents SET record = ? WHERE agent_id = ?",
                JSON.stringify({ ...record, ...unknown }),
                record.agent_id
              )
              // The service hands out known fields only.
              assert.deepStrictEqual(Option.getOrUndefined(yield* store.get(record.agent_id)), viaJson(record))
            }))
          // A row this process did not insert (another version's, or one written before a
          // restart) is merged, never replaced: its unknown fields survive a later put.
          yield* withStore(options, (store) =>
            Effect.gen(function*() {
              yield* store.put(updated)
              yield* store.flush
              assert.deepStrictEqual(db.record(record.agent_id), viaJson({ ...updated, ...unknown }))
            }))
          yield* withStore(
            options,
            (store) =>
              Effect.map(store.get(record.agent_id), (got) =>
                assert.deepStrictEqual(Option.getOrUndefined(got), viaJson(updated)))
          )
          assert.deepStrictEqual(db.record(record.agent_id), viaJson({ ...updated, ...unknown }))
        }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
      { arbitrary: { runs: 40 } }
    )

    it.effect.prop(
      "reconcile interrupts a gone owner's pending/running record, naming its pid, and never changes a terminal one",
      [SubAgentRecord],
      ([generated]) =>
        Effect.gen(function*() {
          const { dir } = yield* sandbox
          const options = { dir, evictAfterMs: never, leaseMs: 1000 }
          const a = yield* open(options)
          const b = yield* open(options)
          const record: SubAgentRecord = {
            ...generated,
            session_boot_id: a.store.owner.boot_id,
            owner_pid: a.store.owner.pid,
            owner_host: a.store.owner.host
          }
          yield* a.store.put(record)
          yield* a.store.flush
          yield* a.control.crash
          yield* TestClock.adjust(1001)
          const now = yield* Clock.currentTimeMillis
          const changed = yield* b.store.reconcile
          const stored = Option.getOrUndefined(yield* b.store.get(record.agent_id))
          if (isTerminal(record.status)) {
            assert.deepStrictEqual(changed, [])
            assert.deepStrictEqual(stored, viaJson(record))
          } else {
            const expected = viaJson({
              ...record,
              status: "interrupted" as const,
              reason: SubAgentStore.goneReason({ pid: a.store.owner.pid, host: a.store.owner.host }),
              finished_at: now
            })
            assert.include(expected.reason, `pid ${a.store.owner.pid}`)
            // The takeover is in the record's events, at this reader's now.
            const { events: changedEvents, ...changedRest } = viaJson(changed[0]!)
            const { events: storedEvents, ...storedRest } = stored!
            const { events: _events, ...expectedRest } = expected
            assert.deepStrictEqual(changedRest, expectedRest)
            assert.deepStrictEqual(storedRest, expectedRest)
            assert.deepStrictEqual(storedEvents, changedEvents)
            const last = storedEvents?.at(-1)
            assert.deepStrictEqual([last?.type, last?.at], ["interrupted", now])
            assert.include(last?.detail, `recorded interrupted by pid ${b.store.owner.pid} on ${b.store.owner.host}`)
          }
          // Settled: a second pass changes nothing.
          assert.deepStrictEqual(yield* b.store.reconcile, [])
        }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
      { arbitrary: { runs: 30 } }
    )
  })

  describe("records", () => {
    it.effect("an empty dir: empty store, no warnings; the store is durable", () =>
      Effect.gen(function*() {
        const { dir, path } = yield* sandbox
        const state = path.join(dir, "nested", "state")
        yield* withStore({ dir: state }, (store) =>
          Effect.gen(function*() {
            assert.deepStrictEqual(yield* store.all, [])
            assert.deepStrictEqual(store.warnings, [])
            assert.isTrue(store.durable)
            assert.isTrue(Option.isNone(yield* store.get("nope")))
            assert.strictEqual(store.owner.pid, process.pid)
            assert.strictEqual(store.owner.host, hostname())
          }))
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("a view with extra fields stores only the schema's; a `__proto__` key stays a plain field", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const db = yield* raw(dir)
        yield* withStore({ dir }, (store) =>
          Effect.gen(function*() {
            const record = sample("a", { reason: "was here" })
            yield* store.put(record)
            yield* store.flush
            // `__proto__` as an own JSON key (written by something else) must not become a prototype.
            const json = JSON.stringify({ ...record, x_future_plan: { steps: [1, 2, { deep: null }] } })
            db.run(
              "UPDATE fibril_agents SET record = ? WHERE agent_id = 'a'",
              `${json.slice(0, -1)},"__proto__":{"polluted":true}}`
            )
          }))
        // The next process to write the row merges into it.
        yield* withStore({ dir }, (store) =>
          Effect.gen(function*() {
            const { reason: _reason, ...withoutReason } = sample("a", { reason: "was here" })
            yield* store.put({ ...withoutReason, ...{ from_prior_session: true } })
            const got = Option.getOrThrow(yield* store.get("a"))
            assert.deepStrictEqual(got, withoutReason)
            assert.strictEqual(Object.getPrototypeOf(got), Object.prototype)
            assert.isUndefined((got as { polluted?: unknown }).polluted)
          }))
        const written = db.record("a")!
        assert.isFalse("reason" in written)
        assert.isFalse("from_prior_session" in written)
        assert.deepStrictEqual(written["x_future_plan"], { steps: [1, 2, { deep: null }] })
        assert.deepStrictEqual(Object.getOwnPropertyDescriptor(written, "__proto__")?.value, { polluted: true })
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("a row that does not decode is left out of reads, not fatal", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const db = yield* raw(dir)
        const { store } = yield* open({ dir })
        yield* store.put(sample("good"))
        yield* store.put(sample("bad"))
        yield* store.flush
        db.run(
          "UPDATE fibril_agents SET record = ? WHERE agent_id = 'bad'",
          JSON.stringify({ ...sample("bad"), steps: "many" })
        )
        assert.deepStrictEqual(ids(yield* store.all), ["good"])
        assert.isTrue(Option.isNone(yield* store.get("bad")))
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("put is not awaited but committed at the end of the event loop turn", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const db = yield* raw(dir)
        const { store } = yield* open({ dir })
        yield* store.put(sample("a"))
        yield* Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))
        assert.deepStrictEqual(db.record("a"), sample("a"))
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
  })

  describe("two processes on one workspace", () => {
    it.effect("two opens of one dir are two owners that see each other's records; interleaved puts lose nothing", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const a = yield* open({ dir })
        const b = yield* open({ dir })
        assert.notStrictEqual(a.store.owner.boot_id, b.store.owner.boot_id)

        yield* a.store.put(owned(a.store, "from-a"))
        yield* a.store.flush
        assert.deepStrictEqual(Option.getOrUndefined(yield* b.store.get("from-a")), owned(a.store, "from-a"))

        // Both write at once, each its own agents, each updating them; some rounds commit at
        // once, others at the end of the turn, so the two connections' transactions interleave.
        const rounds = 60
        yield* Effect.forEach(
          [a, b],
          ({ store }, k) =>
            Effect.forEach(Array.from({ length: rounds }, (_, i) => i), (i) =>
              Effect.gen(function*() {
                const name = k === 0 ? "a" : "b"
                yield* store.put(owned(store, `${name}-${i}`, { steps: 0 }))
                if (i > 0) {
                  yield* store.put(owned(store, `${name}-${i - 1}`, { steps: 1, status: "completed", finished_at: i }))
                }
                if ((yield* Random.nextIntBetween(0, 3)) === 0) yield* store.flush
                if ((yield* Random.nextIntBetween(0, 1)) === 0) yield* Effect.yieldNow
              }), { discard: true }),
          { concurrency: "unbounded" }
        )
        // The last puts of each are still queued in their own "process" until its turn ends.
        yield* Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))
        for (const { store } of [a, b]) {
          const all = yield* store.all
          assert.strictEqual(all.length, 2 * rounds + 1)
          for (const name of ["a", "b"]) {
            for (let i = 0; i < rounds; i++) {
              const record = all.find((r) => r.agent_id === `${name}-${i}`)
              assert.isDefined(record, `${name}-${i}`)
              assert.strictEqual(record!.steps, i < rounds - 1 ? 1 : 0, `${name}-${i}`)
              assert.strictEqual(record!.session_boot_id, (name === "a" ? a : b).store.owner.boot_id)
            }
          }
        }
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
  })

  describe("ownership", () => {
    const leaseMs = 1000

    it.effect("a crashed owner's live records are interrupted only once its lease has expired", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const a = yield* open({ dir, leaseMs })
        const b = yield* open({ dir, leaseMs })
        const doneRecord = owned(a.store, "done", { status: "completed", finished_at: 0 })
        yield* a.store.put(owned(a.store, "running"))
        yield* a.store.put(owned(a.store, "pending", { status: "pending" }))
        yield* a.store.put(doneRecord)
        yield* a.store.flush
        assert.strictEqual(yield* a.store.liveness(a.store.owner.boot_id), "self")
        assert.strictEqual(yield* b.store.liveness(a.store.owner.boot_id), "alive")

        yield* a.control.crash
        assert.strictEqual(yield* a.store.liveness(a.store.owner.boot_id), "gone")
        // Its lease still holds (and its pid, this test's, is alive): nothing happens.
        assert.deepStrictEqual(yield* b.store.reconcile, [])
        yield* TestClock.adjust(leaseMs - 1)
        assert.strictEqual(yield* b.store.liveness(a.store.owner.boot_id), "alive")
        assert.deepStrictEqual(yield* b.store.reconcile, [])
        assert.strictEqual(Option.getOrThrow(yield* b.store.get("running")).status, "running")

        yield* TestClock.adjust(2)
        assert.strictEqual(yield* b.store.liveness(a.store.owner.boot_id), "gone")
        const changed = yield* b.store.reconcile
        assert.deepStrictEqual(ids(changed), ["pending", "running"])
        for (const id of ["pending", "running"]) {
          const record = Option.getOrThrow(yield* b.store.get(id))
          assert.strictEqual(record.status, "interrupted")
          assert.strictEqual(record.finished_at, leaseMs + 1)
          assert.include(record.reason, `pid ${process.pid}`)
          assert.include(record.reason, a.store.owner.host)
          assert.strictEqual(record.events?.at(-1)?.type, "interrupted")
          assert.include(record.events?.at(-1)?.detail, "its lease ran out")
          // Still named after the process that ran it.
          assert.strictEqual(record.session_boot_id, a.store.owner.boot_id)
        }
        assert.deepStrictEqual(Option.getOrUndefined(yield* b.store.get("done")), doneRecord)
        assert.deepStrictEqual(yield* b.store.reconcile, [])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("a live owner that keeps renewing its lease (takeRequests) is never reconciled", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const a = yield* open({ dir, leaseMs })
        const b = yield* open({ dir, leaseMs })
        yield* a.store.put(owned(a.store, "long"))
        yield* a.store.flush
        // The lease is renewed once a third of it has passed, so an owner that calls at least
        // every two thirds of a lease is always alive: the worst case first, then random gaps.
        const worst = [333, 666, 333, 666]
        let elapsed = 0
        for (let i = 0; i < 40; i++) {
          const step = worst[i] ?? (yield* Random.nextIntBetween(1, Math.floor((leaseMs * 2) / 3)))
          elapsed += step
          yield* TestClock.adjust(step)
          assert.strictEqual(yield* b.store.liveness(a.store.owner.boot_id), "alive")
          assert.deepStrictEqual(yield* b.store.reconcile, [], `after ${elapsed} ms`)
          assert.deepStrictEqual(yield* a.store.takeRequests, [])
        }
        assert.isAbove(elapsed, 5 * leaseMs)
        assert.strictEqual(Option.getOrThrow(yield* b.store.get("long")).status, "running")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("an owner that closed cleanly is gone at once; its live records are interrupted", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const a = yield* open({ dir, leaseMs })
        const b = yield* open({ dir, leaseMs })
        yield* a.store.put(owned(a.store, "left-running"))
        yield* a.close
        assert.strictEqual(yield* b.store.liveness(a.store.owner.boot_id), "gone")
        assert.deepStrictEqual(ids(yield* b.store.reconcile), ["left-running"])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("same host, dead pid: the owner is gone at once, without waiting for its lease", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const pid = yield* deadPid
        const b = yield* open({ dir, leaseMs, identity: SqliteSubAgentStore.thisProcess() })
        const db = yield* raw(dir)
        const insertOwner = (boot: string, host: string) =>
          db.run(
            "INSERT INTO fibril_owners (boot_id, pid, host, started_at, lease_until) VALUES (?, ?, ?, 0, ?)",
            boot,
            pid,
            host,
            100 * day
          )
        insertOwner("dead-here", hostname())
        // The same pid on another host cannot be checked: there only the lease counts.
        insertOwner("elsewhere", "elsewhere.invalid")
        for (
          const [id, boot, host] of [["mine", "dead-here", hostname()], [
            "theirs",
            "elsewhere",
            "elsewhere.invalid"
          ]] as const
        ) {
          yield* b.store.put(sample(id, { session_boot_id: boot, owner_pid: pid, owner_host: host }))
        }
        yield* b.store.flush

        assert.strictEqual(yield* b.store.liveness("dead-here"), "gone")
        assert.strictEqual(yield* b.store.liveness("elsewhere"), "alive")
        const changed = yield* b.store.reconcile
        assert.deepStrictEqual(ids(changed), ["mine"])
        assert.include(changed[0]!.reason, `pid ${pid} on ${hostname()}`)
        assert.strictEqual(Option.getOrThrow(yield* b.store.get("theirs")).status, "running")
        // The gone owner's row is cleared; the other stays.
        const others = db.all("SELECT boot_id FROM fibril_owners WHERE boot_id != ?", b.store.owner.boot_id)
        assert.deepStrictEqual(others.map((r) => r["boot_id"]), ["elsewhere"])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("requests: B asks A's process to cancel; A takes it exactly once, in order with other requests", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const db = yield* raw(dir)
        const a = yield* open({ dir, leaseMs })
        const b = yield* open({ dir, leaseMs })
        yield* a.store.put(owned(a.store, "r"))
        yield* a.store.flush
        const target = a.store.owner.boot_id
        yield* b.store.request(target, { agent_id: "r", kind: "cancel", payload: "stop it" })
        yield* b.store.request(target, { agent_id: "r", kind: "input", payload: "and then this" })
        yield* b.store.request("someone-else", { agent_id: "x", kind: "cancel", payload: "" })

        assert.deepStrictEqual(yield* b.store.takeRequests, [])
        const taken = yield* a.store.takeRequests
        assert.deepStrictEqual(
          taken.map(({ id: _id, ...request }) => request),
          [
            { agent_id: "r", kind: "cancel", payload: "stop it", from: b.store.owner.boot_id },
            { agent_id: "r", kind: "input", payload: "and then this", from: b.store.owner.boot_id }
          ]
        )
        assert.isBelow(taken[0]!.id, taken[1]!.id)
        assert.deepStrictEqual(yield* a.store.takeRequests, [])
        assert.strictEqual(db.count("SELECT COUNT(*) AS n FROM fibril_requests WHERE owner_boot = ?", target), 0)
        // Another owner's requests are not A's.
        assert.strictEqual(db.count("SELECT COUNT(*) AS n FROM fibril_requests WHERE owner_boot = 'someone-else'"), 1)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("requests to a gone owner are dropped by reconcile", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const db = yield* raw(dir)
        const a = yield* open({ dir, leaseMs })
        const b = yield* open({ dir, leaseMs })
        yield* a.store.put(owned(a.store, "r"))
        yield* a.store.flush
        yield* a.control.crash
        yield* b.store.request(a.store.owner.boot_id, { agent_id: "r", kind: "cancel", payload: "stop" })
        const pending = () =>
          db.count("SELECT COUNT(*) AS n FROM fibril_requests WHERE owner_boot = ?", a.store.owner.boot_id)
        assert.deepStrictEqual(yield* b.store.reconcile, [])
        assert.strictEqual(pending(), 1)
        yield* TestClock.adjust(leaseMs + 1)
        assert.deepStrictEqual(ids(yield* b.store.reconcile), ["r"])
        assert.strictEqual(pending(), 0)

        // The same for an owner that exited cleanly (no live records left to reconcile).
        const c = yield* open({ dir, leaseMs })
        yield* c.store.put(owned(c.store, "c-done", { status: "completed", finished_at: 1 }))
        yield* c.close
        yield* b.store.request(c.store.owner.boot_id, { agent_id: "c-done", kind: "input", payload: "late" })
        yield* b.store.reconcile
        assert.strictEqual(db.count("SELECT COUNT(*) AS n FROM fibril_requests"), 0)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("another host's owner stopped past its lease: its agent is taken over, but its late terminal write is kept, with the takeover in its events", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const a = yield* open({ dir, leaseMs })
        const b = yield* open({ dir, leaseMs })
        yield* a.store.put(owned(a.store, "sleeper"))
        yield* a.store.flush
        // A is suspended (Ctrl-Z, a sleeping laptop) on its host: B, on another, can only read
        // its lease, which has run out.
        yield* TestClock.adjust(leaseMs + 1)
        const [ended] = yield* b.store.reconcile
        assert.strictEqual(ended?.status, "interrupted")
        // A wakes up: a live write is still refused (the row is not A's), and noted.
        yield* a.store.put(owned(a.store, "sleeper", { steps: 2 }))
        yield* a.store.flush
        assert.strictEqual(Option.getOrThrow(yield* b.store.get("sleeper")).status, "interrupted")
        const noted = yield* a.store.takenOver
        assert.deepStrictEqual(noted.map((t) => [t.agent_id, t.kept]), [["sleeper", false]])
        assert.include(noted[0]?.by, `recorded interrupted by pid ${b.store.owner.pid} on ${b.store.owner.host}`)
        // Its end is recorded over the takeover: the outcome is A's, the takeover in the events.
        const finished = owned(a.store, "sleeper", {
          status: "completed",
          finished_at: leaseMs + 1,
          events: [{ at: 0, type: "started" }, { at: leaseMs + 1, type: "completed" }]
        })
        yield* a.store.put(finished)
        yield* a.store.flush
        const kept = Option.getOrThrow(yield* b.store.get("sleeper"))
        assert.strictEqual(kept.status, "completed")
        assert.isUndefined(kept.reason)
        assert.deepStrictEqual(kept.events?.map((e) => e.type), ["started", "interrupted", "completed"])
        assert.include(kept.events?.[1]?.detail, "its lease ran out")
        assert.include(kept.events?.[1]?.detail, "was still running it, and recorded its end")
        assert.deepStrictEqual((yield* a.store.takenOver).map((t) => [t.agent_id, t.kept]), [["sleeper", true]])
        // The row is A's again; a reader finds nothing to reconcile.
        assert.deepStrictEqual(yield* b.store.reconcile, [])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("another host's owner whose agent was adopted meanwhile: its late end is not written over the adopter's run", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const a = yield* open({ dir, leaseMs })
        const b = yield* open({ dir, leaseMs })
        yield* a.store.put(owned(a.store, "moved"))
        yield* a.store.flush
        yield* TestClock.adjust(leaseMs + 1)
        assert.isTrue(yield* b.store.adopt("moved"))
        yield* a.store.put(owned(a.store, "moved", { status: "completed", finished_at: 5 }))
        yield* a.store.flush
        const now = Option.getOrThrow(yield* b.store.get("moved"))
        assert.deepStrictEqual([now.status, now.session_boot_id], ["interrupted", b.store.owner.boot_id])
        assert.deepStrictEqual((yield* a.store.takenOver).map((t) => [t.agent_id, t.kept]), [["moved", false]])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    /** A host whose processes the test decides: pid -> start time, absent when not running. */
    const simulatedHost = (host: string) => {
      const running = new Map<number, string>()
      const probe = (pid: number) => {
        const start = running.get(pid)
        return start === undefined ? { alive: false as const } : { alive: true as const, start }
      }
      return {
        running,
        identity: (pid: number, start: string): SqliteSubAgentStore.Identity => {
          running.set(pid, start)
          return { pid, host, start, probe }
        }
      }
    }

    it.effect("same host: an owner whose process runs is alive whatever its lease and the reader's clock say; a dead or reused pid is gone", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const host = simulatedHost("one-host.test")
        const a = yield* open({ dir, leaseMs, identity: host.identity(101, "5000") })
        const b = yield* open({ dir, leaseMs, identity: host.identity(102, "5001") })
        yield* a.store.put(owned(a.store, "paused"))
        yield* a.store.flush
        // A stopped for a minute past its lease (or B's clock a minute ahead: the same for B).
        yield* TestClock.adjust(60_000 + leaseMs)
        assert.strictEqual(yield* b.store.liveness(a.store.owner.boot_id), "alive")
        assert.deepStrictEqual(yield* b.store.reconcile, [])
        assert.isFalse(yield* b.store.adopt("paused"))
        // A goes on and ends it: written as any write, nothing taken over.
        yield* a.store.put(owned(a.store, "paused", { status: "completed", finished_at: 60_000 }))
        yield* a.store.flush
        assert.strictEqual(Option.getOrThrow(yield* b.store.get("paused")).status, "completed")
        assert.deepStrictEqual(yield* a.store.takenOver, [])

        // The pid now runs another process (started later): A is gone, whatever its lease says.
        yield* a.store.put(owned(a.store, "orphan"))
        yield* a.store.flush
        yield* a.control.crash
        host.running.set(101, "7777")
        assert.strictEqual(yield* b.store.liveness(a.store.owner.boot_id), "gone")
        const [reused] = yield* b.store.reconcile
        assert.strictEqual(reused?.status, "interrupted")
        assert.include(reused?.events?.at(-1)?.detail, "pid 101 now runs another process")

        // A dead pid, its lease still good: gone at once.
        const c = yield* open({ dir, leaseMs, identity: host.identity(103, "6000") })
        yield* c.store.put(owned(c.store, "dead"))
        yield* c.store.flush
        yield* c.control.crash
        host.running.delete(103)
        const [dead] = yield* b.store.reconcile
        assert.strictEqual(dead?.agent_id, "dead")
        assert.include(dead?.events?.at(-1)?.detail, "its process (pid 103) is not running")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("the owners table keeps each owner's start time; a database from before it gains the column", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const db = yield* raw(dir)
        db.run("CREATE TABLE fibril_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.run("INSERT INTO fibril_meta VALUES ('schema_version', '1')")
        db.run(
          "CREATE TABLE fibril_owners (boot_id TEXT PRIMARY KEY, pid INTEGER NOT NULL, host TEXT NOT NULL, started_at INTEGER NOT NULL, lease_until INTEGER NOT NULL)"
        )
        const host = simulatedHost("one-host.test")
        const a = yield* open({ dir, leaseMs, identity: host.identity(201, "4242") })
        yield* a.store.put(owned(a.store, "x"))
        yield* a.store.flush
        assert.deepStrictEqual(
          db.all("SELECT pid, proc_start FROM fibril_owners").map((r) => [r["pid"], r["proc_start"]]),
          [[201, "4242"]]
        )
        // The real process's start time is field 22 of /proc/self/stat, as the probe reads it.
        const real = SqliteSubAgentStore.thisProcess()
        if (real.start !== undefined) {
          const stat = readFileSync(`/proc/${process.pid}/stat`, "utf8")
          assert.strictEqual(real.start, stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19])
        }
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("adopt: refused while a live owner runs the agent; granted for a finished one or a gone owner's", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const db = yield* raw(dir)
        const a = yield* open({ dir, leaseMs })
        const b = yield* open({ dir, leaseMs })
        yield* a.store.put(owned(a.store, "running"))
        yield* a.store.put(owned(a.store, "done", { status: "completed", finished_at: 0, reason: "kept" }))
        yield* a.store.flush
        const namesOwner = (record: SubAgentRecord, store: Store) => {
          assert.strictEqual(record.session_boot_id, store.owner.boot_id)
          assert.strictEqual(record.owner_pid, store.owner.pid)
          assert.strictEqual(record.owner_host, store.owner.host)
        }

        assert.isFalse(yield* b.store.adopt("running"))
        namesOwner(Option.getOrThrow(yield* b.store.get("running")), a.store)
        assert.isFalse(yield* b.store.adopt("missing"))
        assert.isTrue(yield* a.store.adopt("running")) // its own

        assert.isTrue(yield* b.store.adopt("done"))
        const adopted = Option.getOrThrow(yield* b.store.get("done"))
        namesOwner(adopted, b.store)
        // Only the owner changed.
        assert.deepStrictEqual(adopted, owned(b.store, "done", { status: "completed", finished_at: 0, reason: "kept" }))
        const column = db.all("SELECT owner_boot FROM fibril_agents WHERE agent_id = 'done'")[0]?.["owner_boot"]
        assert.strictEqual(column, b.store.owner.boot_id)

        // A crashed owner: refused while its lease holds, granted once it has expired — and the
        // agent is interrupted in the same step, never adopted while it still reads running.
        yield* a.control.crash
        assert.isFalse(yield* b.store.adopt("running"))
        yield* TestClock.adjust(leaseMs + 1)
        assert.isTrue(yield* b.store.adopt("running"))
        const taken = Option.getOrThrow(yield* b.store.get("running"))
        namesOwner(taken, b.store)
        assert.strictEqual(taken.status, "interrupted")
        assert.include(taken.reason, `pid ${a.store.owner.pid}`)
        // The crashed owner's late writes change nothing: the row is no longer its own.
        const c = yield* open({ dir, leaseMs })
        assert.deepStrictEqual(yield* c.store.reconcile, [])
        assert.strictEqual(Option.getOrThrow(yield* c.store.get("running")).status, "interrupted")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
  })

  const backends: ReadonlyArray<{
    readonly name: string
    readonly make: (
      dir: string
    ) => Effect.Effect<Store, SqliteSubAgentStore.OpenError, FileSystem.FileSystem | Path.Path | Scope.Scope>
  }> = [
    { name: "sqlite", make: (dir) => SqliteSubAgentStore.makeSqlite({ dir }) },
    { name: "memory", make: () => SubAgentStore.makeMemory() }
  ]

  describe("transcripts", () => {
    for (const backend of backends) {
      it.effect(`${backend.name}: append and read round-trip in order; unknown handles read as empty; bad handles refused`, () =>
        Effect.gen(function*() {
          const { dir } = yield* sandbox
          const store = yield* backend.make(dir)
          const first = [{ role: "user", content: "hi\nthere" }, "text", 42, null, [1, { a: true }]]
          const second = [{ role: "assistant", content: "é ✓ 😀 \u0000" }]
          yield* store.appendTranscript("agent_x", first)
          yield* store.appendTranscript("agent_x", [])
          yield* store.appendTranscript("agent_x", second)
          assert.deepStrictEqual(yield* store.readTranscript("agent_x"), [...first, ...second])
          assert.deepStrictEqual(yield* store.readTranscript("agent_y"), [])

          for (const handle of ["../escape", "a/b", "..", "", "x\\y", "nul\0"]) {
            assert.isTrue(yield* failsWithStoreError(store.appendTranscript(handle, [1])), handle)
            assert.isTrue(yield* failsWithStoreError(store.readTranscript(handle)), handle)
          }
          // Not JSON: a StoreError, nothing written (not even the entries before it).
          assert.isTrue(yield* failsWithStoreError(store.appendTranscript("agent_x", ["ok", 1n])))
          assert.isTrue(yield* failsWithStoreError(store.appendTranscript("agent_x", [undefined])))
          assert.strictEqual((yield* store.readTranscript("agent_x")).length, first.length + second.length)
        }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

      it.effect(`${backend.name}: concurrent appends to one handle keep every entry, each append's entries together`, () =>
        Effect.gen(function*() {
          const { dir } = yield* sandbox
          const store = yield* backend.make(dir)
          const big = "x".repeat(5_000)
          yield* Effect.forEach(
            Array.from({ length: 30 }, (_, i) => i),
            (i) =>
              Effect.all([
                store.appendTranscript("shared", Array.from({ length: 10 }, (_, j) => ({ i, j, big }))),
                store.appendTranscript(`own-${i}`, [i])
              ], { concurrency: 2 }),
            { concurrency: "unbounded" }
          )
          const shared = (yield* store.readTranscript("shared")) as ReadonlyArray<{ i: number; j: number; big: string }>
          assert.strictEqual(shared.length, 300)
          for (let k = 0; k < shared.length; k += 10) {
            const batch = shared.slice(k, k + 10)
            assert.deepStrictEqual(batch.map((e) => e.j), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
            assert.isTrue(batch.every((e) => e.i === batch[0]!.i && e.big === big))
          }
          assert.deepStrictEqual(new Set(shared.map((e) => e.i)).size, 30)
          assert.deepStrictEqual(yield* store.readTranscript("own-7"), [7])
        }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
    }

    it.effect("sqlite: appendTranscript is durable when it returns (another connection sees it, no flush)", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const { store } = yield* open({ dir })
        const other = yield* open({ dir })
        for (let n = 1; n <= 3; n++) {
          yield* store.appendTranscript("h", [{ n }])
          // Straight after it returns, with no turn of the event loop in between.
          const rows = yield* withRaw(
            dir,
            (db) => db.all("SELECT message FROM fibril_transcripts WHERE handle = 'h' ORDER BY id")
          )
          assert.deepStrictEqual(
            rows.map((row) => JSON.parse(String(row["message"]))),
            Array.from({ length: n }, (_, i) => ({ n: i + 1 }))
          )
        }
        assert.deepStrictEqual(yield* other.store.readTranscript("h"), [{ n: 1 }, { n: 2 }, { n: 3 }])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
  })

  describe("eviction", () => {
    const putAll = (store: Store, records: ReadonlyArray<SubAgentRecord>) =>
      Effect.forEach(
        records,
        (record) =>
          Effect.andThen(store.put(record), store.appendTranscript(record.transcript_handle, [record.agent_id])),
        { discard: true }
      )

    it.effect("by age: terminal records past evictAfterMs go with their transcripts; live ones never", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const now = 100 * day
        yield* TestClock.setTime(now)
        const transcriptRows = (handle: string) =>
          withRaw(dir, (db) => db.count("SELECT COUNT(*) AS n FROM fibril_transcripts WHERE handle = ?", handle))
        yield* withStore({ dir }, (store) =>
          putAll(store, [
            sample("old-done", { status: "completed", finished_at: now - 8 * day }),
            sample("old-cancelled", { status: "cancelled", finished_at: now - 7 * day - 1 }),
            sample("recent-failed", { status: "failed", finished_at: now - 1 * day }),
            sample("ancient-running", { status: "running", created_at: 0 }),
            sample("ancient-pending", { status: "pending", created_at: 0, finished_at: 0 })
          ]))
        // Eviction runs at open.
        yield* withStore({ dir }, (store) =>
          Effect.gen(function*() {
            assert.deepStrictEqual(ids(yield* store.all), ["ancient-pending", "ancient-running", "recent-failed"])
            assert.deepStrictEqual(yield* store.readTranscript("old-done"), [])
            assert.deepStrictEqual(yield* store.readTranscript("recent-failed"), ["recent-failed"])
          }))
        assert.strictEqual(yield* transcriptRows("old-cancelled"), 0)

        // 7 days later the failed one has aged out too.
        yield* TestClock.adjust(7 * day)
        yield* withStore(
          { dir },
          (store) =>
            Effect.map(store.all, (all) => assert.deepStrictEqual(ids(all), ["ancient-pending", "ancient-running"]))
        )
        assert.strictEqual(yield* transcriptRows("recent-failed"), 0)
        assert.strictEqual(yield* transcriptRows("ancient-running"), 1)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("by count: beyond maxRecords the oldest terminal records go; live ones stay even over the cap", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        yield* TestClock.setTime(1000)
        yield* withStore({ dir }, (store) =>
          putAll(store, [
            ...[1, 2, 3].map((i) => sample(`run-${i}`, { status: "running" })),
            // Newest first, so "oldest" has to come from finished_at and not from insertion order.
            ...[6, 5, 4, 3, 2, 1].map((i) => sample(`done-${i}`, { status: "completed", finished_at: i }))
          ]))
        yield* withStore({ dir, maxRecords: 5 }, (store) =>
          Effect.gen(function*() {
            assert.deepStrictEqual(ids(yield* store.all), ["done-5", "done-6", "run-1", "run-2", "run-3"])
            // `ids` is what the store holds, in one read: the evicted are not in it.
            assert.deepStrictEqual([...(yield* store.ids)].sort(), ["done-5", "done-6", "run-1", "run-2", "run-3"])
            assert.deepStrictEqual(yield* store.readTranscript("done-1"), [])
            assert.deepStrictEqual(yield* store.readTranscript("done-6"), ["done-6"])
          }))
        yield* withStore(
          { dir, maxRecords: 2 },
          (store) => Effect.map(store.all, (all) => assert.deepStrictEqual(ids(all), ["run-1", "run-2", "run-3"]))
        )
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("a long-running process evicts as it goes, not only at open", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const maxRecords = 10
        const { store } = yield* open({ dir, maxRecords })
        yield* store.put(sample("live", { status: "running" }))
        const total = 800
        for (let i = 0; i < total; i++) {
          yield* store.put(sample(`done-${i}`, { status: "completed", finished_at: i }))
          if (i % 10 === 9) yield* store.flush
        }
        const all = yield* store.all
        assert.isBelow(all.length, total / 2, "records never evicted while the store is open")
        assert.isTrue(all.some((r) => r.agent_id === "live"))
        assert.isTrue(all.some((r) => r.agent_id === `done-${total - 1}`))
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("the memory store evicts the same way (by age and count, terminal only)", () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(30 * day)
        const store = yield* SubAgentStore.makeMemory({ maxRecords: 3 })
        yield* store.put(sample("aged", { status: "interrupted", finished_at: 1 }))
        yield* store.appendTranscript("aged", ["hello"])
        yield* Effect.forEach([1, 2, 3, 4, 5], (i) =>
          store.put(sample(`live-${i}`, { status: i % 2 === 0 ? "pending" : "running" })))
        const total = 300
        for (let i = 0; i < total; i++) {
          yield* store.put(sample(`done-${i}`, { status: "completed", finished_at: 29 * day + i }))
        }
        const all = ids(yield* store.all)
        assert.isFalse(all.includes("aged"))
        assert.deepStrictEqual(yield* store.readTranscript("aged"), [])
        for (let i = 1; i <= 5; i++) {
          assert.isTrue(all.includes(`live-${i}`), `live-${i}`)
        }
        assert.isBelow(all.length, 100)
        assert.isTrue(all.includes(`done-${total - 1}`))
        // `ids` is what it holds, the evicted left out, as the manager's prune reads it.
        assert.deepStrictEqual([...(yield* store.ids)].sort(), [...all].sort())
      }))
  })

  describe("opening", () => {
    it.effect("a corrupt database file is moved aside, never overwritten; a new one is started", () =>
      Effect.gen(function*() {
        const { dir, fs, file } = yield* sandbox
        const garbage = new Uint8Array(8192).map((_, i) => (i * 7919 + 13) % 251)
        const header = new Uint8Array(8192)
        header.set(new TextEncoder().encode("SQLite format 3\0"))
        header.set(garbage.subarray(16, 8192), 16)
        for (const [i, bytes] of [garbage, header].entries()) {
          const time = 5000 + i
          yield* TestClock.setTime(time)
          yield* fs.writeFile(file, bytes)
          const aside = `${file}.corrupt-${time}`
          yield* withStore({ dir }, (store) =>
            Effect.gen(function*() {
              assert.strictEqual(store.warnings.length, 1, store.warnings.join("\n"))
              assert.include(store.warnings[0], "moved it aside")
              assert.include(store.warnings[0], aside)
              assert.deepStrictEqual(yield* fs.readFile(aside), bytes)
              assert.deepStrictEqual(yield* store.all, [])
              yield* store.put(sample(`fresh-${i}`))
              yield* store.appendTranscript(`fresh-${i}`, ["kept"])
            }))
          yield* withStore({ dir }, (store) =>
            Effect.gen(function*() {
              assert.deepStrictEqual(store.warnings, [])
              assert.deepStrictEqual(yield* store.all, [sample(`fresh-${i}`)])
              assert.deepStrictEqual(yield* store.readTranscript(`fresh-${i}`), ["kept"])
            }))
        }
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("a database of another schema version fails the layer with a StoreError naming it, untouched", () =>
      Effect.gen(function*() {
        const { dir, file } = yield* sandbox
        yield* withStore({ dir }, (store) => Effect.andThen(store.put(sample("a")), store.flush))
        yield* withRaw(dir, (db) => db.run("UPDATE fibril_meta SET value = '99' WHERE key = 'schema_version'"))
        const error = yield* Effect.flip(Layer.build(SqliteSubAgentStore.layerSqlite({ dir })))
        assert.strictEqual(error._tag, "StoreError")
        assert.strictEqual(error.path, file)
        assert.include(error.message, "schema version 99")
        assert.include(error.message, `(${SqliteSubAgentStore.schemaVersion})`)
        assert.include(error.message, "the database was written by a different Fibril version")
        // Nothing moved aside or rewritten: the other version's data is still there.
        yield* withRaw(dir, (db) => {
          assert.strictEqual(db.count("SELECT COUNT(*) AS n FROM fibril_agents"), 1)
          assert.strictEqual(db.all("SELECT value FROM fibril_meta WHERE key = 'schema_version'")[0]?.["value"], "99")
        })
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("the layer provides the service and closes the database with its scope", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const scope = yield* Scope.make()
        const context = yield* Layer.buildWithScope(SqliteSubAgentStore.layerSqlite({ dir }), scope)
        const store = Context.get(context, SubAgentStore.SubAgentStore)
        yield* store.put(sample("x", { session_boot_id: store.owner.boot_id }))
        yield* Scope.close(scope, Exit.void)
        // Closing committed the queued put and removed this process from the owners.
        yield* withRaw(dir, (db) => {
          assert.deepStrictEqual(db.record("x"), sample("x", { session_boot_id: store.owner.boot_id }))
          assert.strictEqual(db.count("SELECT COUNT(*) AS n FROM fibril_owners"), 0)
        })
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
  })

  describe("migration from subagents.v1.json", () => {
    const legacy = Effect.fnUntraced(function*(dir: string) {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const records = [
        {
          ...sample("done", { status: "completed", finished_at: 50, created_at: 10 }),
          x_future_note: { keep: [1, null] }
        },
        sample("running", { status: "running", created_at: 20, started_at: 21 }),
        sample("pending", { status: "pending", created_at: 30 })
      ]
      // The v1 format: one JSON document, one record per line.
      yield* fs.writeFileString(
        path.join(dir, SqliteSubAgentStore.legacyRecordsFileName),
        `{"version":1,"records":[\n${records.map((r) => JSON.stringify(r)).join(",\n")}\n]}\n`
      )
      const transcripts = path.join(dir, SqliteSubAgentStore.legacyTranscriptsDirName)
      yield* fs.makeDirectory(transcripts)
      yield* fs.writeFileString(
        path.join(transcripts, "done"),
        `{"role":"user","content":"a"}\n{"role":"assistant","content":"b"}\n`
      )
      // A crash cut the last line short.
      yield* fs.writeFileString(path.join(transcripts, "running"), `{"role":"user","content":"c"}\n{"role":"assis`)
    })

    it.effect("every record imported (live ones interrupted), transcripts readable, the file renamed .migrated", () =>
      Effect.gen(function*() {
        const { dir, fs, path } = yield* sandbox
        yield* TestClock.setTime(1000)
        yield* legacy(dir)
        const restart = "Interrupted by process restart"
        yield* withStore({ dir }, (store) =>
          Effect.gen(function*() {
            assert.strictEqual(store.warnings.length, 1, store.warnings.join("\n"))
            assert.include(store.warnings[0], "imported 3 sub-agent record(s)")
            const all = yield* store.all
            assert.deepStrictEqual(all, [
              sample("done", { status: "completed", finished_at: 50, created_at: 10 }),
              sample("running", {
                status: "interrupted",
                created_at: 20,
                started_at: 21,
                finished_at: 1000,
                reason: restart
              }),
              sample("pending", { status: "interrupted", created_at: 30, finished_at: 1000, reason: restart })
            ])
            assert.deepStrictEqual(yield* store.readTranscript("done"), [
              { role: "user", content: "a" },
              { role: "assistant", content: "b" }
            ])
            assert.deepStrictEqual(yield* store.readTranscript("running"), [{ role: "user", content: "c" }])
            assert.deepStrictEqual(yield* store.readTranscript("pending"), [])
          }))
        const listed = [...yield* fs.readDirectory(dir)].filter((name) =>
          !name.startsWith(SqliteSubAgentStore.databaseFileName)
        ).sort()
        assert.deepStrictEqual(listed, [
          `${SqliteSubAgentStore.legacyRecordsFileName}.migrated`,
          `${SqliteSubAgentStore.legacyTranscriptsDirName}.migrated`
        ])
        // Unknown fields came along.
        assert.deepStrictEqual((yield* withRaw(dir, (db) => db.record("done")))?.["x_future_note"], { keep: [1, null] })
        // Once: the next open imports nothing and says nothing.
        yield* withStore({ dir }, (store) =>
          Effect.gen(function*() {
            assert.deepStrictEqual(store.warnings, [])
            assert.strictEqual((yield* store.all).length, 3)
          }))
        assert.isTrue(
          yield* fs.exists(path.join(dir, `${SqliteSubAgentStore.legacyTranscriptsDirName}.migrated`, "done"))
        )
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("stores opening one legacy dir at once import each record (and its transcript) exactly once", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        yield* legacy(dir)
        const opened = yield* Effect.all(Array.from({ length: 4 }, () => open({ dir })), { concurrency: "unbounded" })
        const imported = opened.flatMap(({ store }) =>
          store.warnings.flatMap((w) => {
            const match = /imported (\d+) sub-agent/.exec(w)
            return match === null ? [] : [Number(match[1])]
          })
        )
        assert.strictEqual(
          imported.reduce((a, b) => a + b, 0),
          3,
          opened.map(({ store }) => store.warnings.join("; ")).join("\n")
        )
        for (const { store } of opened) {
          assert.deepStrictEqual(ids(yield* store.all), ["done", "pending", "running"])
          assert.strictEqual((yield* store.readTranscript("done")).length, 2)
          assert.strictEqual((yield* store.readTranscript("running")).length, 1)
        }
        assert.strictEqual(yield* withRaw(dir, (db) => db.count("SELECT COUNT(*) AS n FROM fibril_transcripts")), 3)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
  })

  describe("processes", () => {
    const fixture = fileURLToPath(new URL("./fixtures/store-writer.ts", import.meta.url))

    const spawnWriter = Effect.fnUntraced(function*(args: ReadonlyArray<string>) {
      const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
      return yield* spawner.spawn(ChildProcess.make(process.execPath, [fixture, ...args]))
    })

    const firstLine = (handle: ChildProcessSpawner.ChildProcessHandle) =>
      handle.stdout.pipe(Stream.decodeText(), Stream.splitLines, Stream.runHead)

    /** Starts the crash writer on `dir`, waits for its first commit, SIGKILLs it 10-150 ms later. */
    const killMidWrite = Effect.fnUntraced(function*(dir: string) {
      const handle = yield* spawnWriter(["crash", dir])
      assert.deepStrictEqual(yield* firstLine(handle), Option.some("ready"), "the writer did not start")
      yield* Effect.sleep(yield* Random.nextIntBetween(10, 150))
      yield* handle.kill({ killSignal: "SIGKILL" })
      yield* Effect.exit(handle.exitCode)
      return Number(handle.pid)
    }, Effect.scoped)

    const runs = 10

    it.live(
      `a writer SIGKILLed at a random moment leaves a database that opens and whose records all decode (${runs} runs)`,
      () =>
        Effect.gen(function*() {
          const fs = yield* FileSystem.FileSystem
          const outcomes = yield* Effect.forEach(Array.from({ length: runs }, (_, i) => i), () =>
            Effect.gen(function*() {
              const dir = yield* fs.makeTempDirectoryScoped()
              const pid = yield* killMidWrite(dir)
              const rows = yield* withRaw(dir, (db) => {
                assert.deepStrictEqual(db.all("PRAGMA integrity_check").map((r) => r["integrity_check"]), ["ok"])
                return {
                  agents: db.count("SELECT COUNT(*) AS n FROM fibril_agents"),
                  live: db.count("SELECT COUNT(*) AS n FROM fibril_agents WHERE status IN ('pending', 'running')"),
                  messages: db.count("SELECT COUNT(*) AS n FROM fibril_transcripts")
                }
              })
              return yield* withStore({ dir }, (store) =>
                Effect.gen(function*() {
                  assert.deepStrictEqual(store.warnings, [])
                  const all = yield* store.all
                  assert.strictEqual(all.length, rows.agents, "a stored record does not decode")
                  let messages = 0
                  for (const record of all) messages += (yield* store.readTranscript(record.transcript_handle)).length
                  assert.strictEqual(messages, rows.messages, "a transcript message does not parse")
                  // The writer's pid is dead on this host: its live records are interrupted at once.
                  const changed = yield* store.reconcile
                  assert.strictEqual(changed.length, rows.live)
                  for (const record of changed) assert.include(record.reason, `pid ${pid}`)
                  assert.isFalse((yield* store.all).some((r) => !isTerminal(r.status)))
                  return Math.max(...all.map((r) => r.steps))
                }))
            }).pipe(Effect.scoped), { concurrency: 5 })
          // The kills landed while commits were happening, not before the first one.
          assert.isTrue(outcomes.some((steps) => steps > 0), `steps: ${outcomes.join(", ")}`)
        }).pipe(Effect.provide(NodeServices.layer)),
      30_000
    )

    it.live("writer processes on one workspace at once lose nothing", () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const dir = yield* fs.makeTempDirectoryScoped()
        const writers = ["p", "q", "r"]
        const n = 40
        const exits = yield* Effect.forEach(writers, (id) =>
          Effect.gen(function*() {
            const handle = yield* spawnWriter(["count", dir, id, String(n)])
            const line = yield* firstLine(handle)
            return { line, code: yield* handle.exitCode }
          }).pipe(Effect.scoped), { concurrency: "unbounded" })
        assert.deepStrictEqual(
          exits.map((e) => [Option.getOrUndefined(e.line), Number(e.code)]),
          writers.map(() => ["done", 0])
        )
        yield* withStore({ dir }, (store) =>
          Effect.gen(function*() {
            const all = yield* store.all
            assert.strictEqual(all.length, writers.length * n)
            assert.isTrue(all.every((r) => r.status === "completed"))
            assert.strictEqual(new Set(all.map((r) => r.session_boot_id)).size, writers.length)
            for (const id of writers) {
              for (let i = 0; i < n; i++) {
                assert.deepStrictEqual(yield* store.readTranscript(`${id}-${i}`), [{ from: id, i }])
              }
            }
          }))
        // Every writer exited cleanly: none is left among the owners.
        assert.strictEqual(yield* withRaw(dir, (db) => db.count("SELECT COUNT(*) AS n FROM fibril_owners")), 0)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 30_000)
  })

  describe("exact texts and edges (tests from the mutation run)", () => {
    it("goneReason names the process it knows of", () => {
      assert.strictEqual(
        SubAgentStore.goneReason({ pid: 42, host: "box" }),
        "Interrupted: the process that ran it (pid 42 on box) ended before it finished"
      )
      assert.strictEqual(
        SubAgentStore.goneReason({ pid: 42, host: undefined }),
        "Interrupted: the process that ran it (pid 42) ended before it finished"
      )
      assert.strictEqual(
        SubAgentStore.goneReason({ pid: undefined, host: "box" }),
        "Interrupted: the process that ran it (an unknown process) ended before it finished"
      )
    })

    for (const backend of backends) {
      it.effect(`${backend.name}: a refused handle or entry says why, naming the handle`, () =>
        Effect.gen(function*() {
          const { dir } = yield* sandbox
          const store = yield* backend.make(dir)
          const handleError = yield* Effect.flip(store.appendTranscript("a/b", [1]))
          assert.strictEqual(
            handleError.message,
            `sub-agent store: a/b: a transcript handle must be a plain name (no '/', '\\' or '..')`
          )
          // An empty append checks the handle too.
          assert.strictEqual((yield* Effect.flip(store.appendTranscript("..", []))).path, "..")
          assert.strictEqual((yield* Effect.flip(store.queueTranscript("x/y", []))).path, "x/y")
          const bigint = yield* Effect.flip(store.appendTranscript("h", ["ok", 1n]))
          assert.deepStrictEqual(
            [bigint.path, bigint.reason.startsWith("entry 1 is not JSON-serialisable: TypeError")],
            [
              "h",
              true
            ]
          )
          const nothing = yield* Effect.flip(store.appendTranscript("h", [1, () => 1]))
          assert.strictEqual(nothing.reason, "entry 1 has no JSON representation")
          assert.deepStrictEqual(yield* store.readTranscript("h"), [])
        }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
    }

    it.effect("sqlite: appends of many lines in one turn keep their order across multi-row inserts", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const { store } = yield* open({ dir })
        const batches = [70, 1, 33, 64].map((n, b) => Array.from({ length: n }, (_, i) => ({ b, i })))
        // Queued in one turn of the event loop: one commit, their lines in chunks of 32 rows.
        yield* Effect.forEach(batches, (batch, b) => store.queueTranscript(b % 2 === 0 ? "even" : "odd", batch))
        yield* store.sync
        assert.deepStrictEqual(yield* store.readTranscript("even"), [...batches[0]!, ...batches[2]!])
        assert.deepStrictEqual(yield* store.readTranscript("odd"), [...batches[1]!, ...batches[3]!])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("memory: one process, one owner: itself alive, every other gone, nothing to reconcile or request", () =>
      Effect.gen(function*() {
        const store = yield* SubAgentStore.makeMemory()
        assert.deepStrictEqual([store.durable, store.warnings], [false, []])
        assert.strictEqual(yield* store.liveness(store.owner.boot_id), "self")
        assert.strictEqual(yield* store.liveness("someone-else"), "gone")
        yield* store.put(owned(store, "a", { status: "running" }))
        assert.deepStrictEqual(yield* store.reconcile, [])
        yield* store.request("other", { agent_id: "a", kind: "cancel", payload: "stop" })
        assert.deepStrictEqual(yield* store.takeRequests, [])
        assert.isTrue(yield* store.adopt("a"))
        assert.isFalse(yield* store.adopt("nobody"))
        assert.deepStrictEqual(Option.getOrUndefined(yield* store.get("a")), owned(store, "a", { status: "running" }))
        assert.isTrue(Option.isNone(yield* store.get("nobody")))
        yield* store.flush
        yield* store.sync
        assert.deepStrictEqual(ids(yield* store.all), ["a"])
      }))

    it.effect("memory: a terminal record is evicted once older than evictAfterMs, not at it; flush evicts too", () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(1000)
        const store = yield* SubAgentStore.makeMemory({ evictAfterMs: 100 })
        yield* store.put(sample("edge", { status: "completed", finished_at: 900 }))
        yield* store.put(sample("old", { status: "failed", finished_at: 899 }))
        yield* store.put(sample("no-finish", { status: "cancelled", created_at: 899 }))
        yield* store.put(sample("live", { status: "running", created_at: 0 }))
        yield* store.flush
        assert.deepStrictEqual(ids(yield* store.all), ["edge", "live"])
      }))

    it.effect("sqlite: a finished record that breaks the schema is written with a warning; a live one is not checked", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const logs: Array<string> = []
        const capture = Logger.layer([
          Logger.make(({ message }) => void logs.push((Array.isArray(message) ? message : [message]).join(" ")))
        ])
        yield* Effect.gen(function*() {
          const { store } = yield* open({ dir })
          yield* store.put(owned(store, "live", { status: "running", steps: 1.5 }))
          yield* store.put(owned(store, "done", { status: "completed", finished_at: 5, steps: 1.5 }))
          yield* store.put(owned(store, "fine", { status: "completed", finished_at: 5 }))
          yield* store.flush
        }).pipe(Effect.provide(capture))
        assert.deepStrictEqual(logs, [
          "sub-agent record done does not match the SubAgentRecord schema; it will be dropped when read"
        ])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
  })

  describe("commits, leases, sweeps and fallbacks (tests from the second mutation run)", () => {
    const nextTurn = Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))

    it.effect("sqlite: a live put renews the lease once a third of it has passed, not before; a finished one never", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const db = yield* raw(dir)
        const { store } = yield* open({ dir, leaseMs: 900 })
        const leaseUntil = () =>
          db.all("SELECT lease_until FROM fibril_owners WHERE boot_id = ?", store.owner.boot_id)
            .map((row) => Number(row["lease_until"]))
        yield* store.put(owned(store, "a"))
        yield* store.flush
        assert.deepStrictEqual(leaseUntil(), [900])
        yield* TestClock.adjust(299)
        yield* store.put(owned(store, "a", { steps: 1 }))
        yield* store.flush
        assert.deepStrictEqual(leaseUntil(), [900], "601 ms of 900 left: not renewed")
        yield* TestClock.adjust(1)
        yield* store.put(owned(store, "b", { status: "completed", finished_at: 300 }))
        yield* store.flush
        assert.deepStrictEqual(leaseUntil(), [900], "a finished agent's write does not renew it")
        yield* store.put(owned(store, "a", { steps: 2 }))
        yield* store.flush
        assert.deepStrictEqual(leaseUntil(), [1200], "600 ms of 900 left: renewed for a whole lease")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("sqlite: at open, aged records go first, then the oldest others until maxRecords is met", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        yield* TestClock.setTime(10 * day)
        yield* withStore({ dir }, (store) =>
          Effect.forEach(
            [
              sample("aged", { status: "completed", finished_at: 1 }),
              sample("aged-too", { status: "cancelled", finished_at: 2 }),
              ...[1, 2, 3, 4].map((i) => sample(`done-${i}`, { status: "failed", finished_at: 9 * day + i }))
            ],
            (record) => store.put(record),
            { discard: true }
          ))
        // 6 records, 2 aged: 4 left for a cap of 2, so the 2 oldest of them go with the aged ones.
        yield* withStore(
          { dir, evictAfterMs: day, maxRecords: 2 },
          (store) => Effect.map(store.all, (all) => assert.deepStrictEqual(ids(all), ["done-3", "done-4"]))
        )
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    // The deletes go several rows to a statement: more victims than one statement takes (and
    // a remainder) must all go, with their transcripts, and nothing else.
    it.effect("sqlite: an eviction of many records deletes each with its transcript, and keeps the rest whole", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const victims = 150
        yield* TestClock.setTime(10 * day)
        yield* withStore({ dir }, (store) =>
          Effect.forEach(
            Array.from({ length: victims + 3 }, (_, i) => i),
            (i) =>
              Effect.andThen(
                store.put(sample(`done-${i}`, { status: "completed", finished_at: 9 * day + i })),
                store.appendTranscript(`done-${i}`, [`line ${i}`, `more ${i}`])
              ),
            { discard: true }
          ))
        yield* withStore({ dir, maxRecords: 3 }, (store) =>
          Effect.gen(function*() {
            const kept = [victims, victims + 1, victims + 2].map((i) => `done-${i}`)
            assert.deepStrictEqual(ids(yield* store.all), kept)
            for (const i of [0, 63, 64, 127, 128, victims - 1]) {
              assert.deepStrictEqual(yield* store.readTranscript(`done-${i}`), [])
            }
            for (const [at, id] of kept.entries()) {
              assert.deepStrictEqual(yield* store.readTranscript(id), [`line ${victims + at}`, `more ${victims + at}`])
            }
          }))
        const db = yield* raw(dir)
        assert.strictEqual(db.count("SELECT COUNT(*) AS n FROM fibril_transcripts"), 6)
        assert.strictEqual(db.count("SELECT COUNT(*) AS n FROM fibril_agents"), 3)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("sqlite: puts in later turns of the event loop are committed in theirs too", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const db = yield* raw(dir)
        const { store } = yield* open({ dir })
        for (const id of ["first", "second", "third"]) {
          yield* store.put(sample(id))
          yield* nextTurn
          assert.deepStrictEqual(db.record(id), sample(id))
        }
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("sqlite: a commit that fails fails its waiters, or else the next sync, once", () =>
      Effect.gen(function*() {
        const { dir, file } = yield* sandbox
        const db = yield* raw(dir)
        const { store } = yield* open({ dir })
        // A BigInt has no JSON form: the commit's transaction throws and is rolled back.
        const unwritable = (id: string) => owned(store, id, { tokens: { input: 1n as never, output: 0, cached: 0 } })

        // No one waits on a put: its failure is kept for the next sync.
        yield* store.put(unwritable("bad"))
        yield* nextTurn
        const kept = yield* Effect.flip(store.sync)
        assert.deepStrictEqual([kept._tag, kept.path], ["StoreError", file])
        assert.include(kept.reason, "BigInt")
        yield* store.sync
        assert.isUndefined(db.record("bad"))

        // An append in the same turn waits on that commit: it fails, and nothing is left to report.
        yield* store.put(unwritable("worse"))
        const appended = yield* Effect.flip(store.appendTranscript("h", ["line"]))
        assert.include(appended.reason, "BigInt")
        yield* store.sync
        assert.deepStrictEqual(yield* store.readTranscript("h"), [])
        assert.isUndefined(db.record("worse"))
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("sqlite: after a crash an append never returns and nothing is written", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const db = yield* raw(dir)
        const { control, store } = yield* open({ dir })
        yield* control.crash
        const fiber = yield* Effect.forkChild(store.appendTranscript("h", ["lost"]), { startImmediately: true })
        yield* nextTurn
        yield* nextTurn
        assert.isUndefined(fiber.pollUnsafe(), "a killed process never answers")
        yield* Fiber.interrupt(fiber)
        assert.strictEqual(db.count("SELECT COUNT(*) AS n FROM fibril_transcripts"), 0)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("sqlite: a finished agent run again keeps the fields a newer Fibril added to its row", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const db = yield* raw(dir)
        const { store } = yield* open({ dir })
        const addField = (id: string) =>
          db.run(
            "UPDATE fibril_agents SET record = json_set(record, '$.x_future_tag', 'kept') WHERE agent_id = ?",
            id
          )
        // Started and finished here, then resumed.
        yield* store.put(owned(store, "resumed"))
        yield* store.flush
        yield* store.put(owned(store, "resumed", { status: "completed", finished_at: 1 }))
        yield* store.flush
        addField("resumed")
        yield* store.put(owned(store, "resumed", { steps: 3 }))
        yield* store.flush
        // First written finished (as an imported or adopted agent is), then resumed.
        yield* store.put(owned(store, "finished-first", { status: "completed", finished_at: 1 }))
        yield* store.flush
        addField("finished-first")
        yield* store.put(owned(store, "finished-first", { steps: 3 }))
        yield* store.flush
        for (const id of ["resumed", "finished-first"]) {
          const written = db.record(id)!
          assert.deepStrictEqual([written["status"], written["steps"], written["x_future_tag"]], ["running", 3, "kept"])
        }
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("sqlite: reconcile clears an idle gone owner and every request no live owner will take", () =>
      Effect.gen(function*() {
        const leaseMs = 1000
        const { dir } = yield* sandbox
        const db = yield* raw(dir)
        const idle = yield* open({ dir, leaseMs })
        const alive = yield* open({ dir, leaseMs })
        const b = yield* open({ dir, leaseMs })
        // The idle owner registered (by taking its requests) and then died with no agents.
        yield* idle.store.takeRequests
        yield* idle.control.crash
        yield* TestClock.adjust(leaseMs + 1)
        // The live one renews its lease by running an agent.
        yield* alive.store.put(owned(alive.store, "busy"))
        yield* alive.store.flush
        for (const target of [idle.store.owner.boot_id, alive.store.owner.boot_id, "never-registered"]) {
          yield* b.store.request(target, { agent_id: "busy", kind: "input", payload: "hello" })
        }
        assert.deepStrictEqual(yield* b.store.reconcile, [])
        const owners = db.all("SELECT boot_id FROM fibril_owners").map((row) => row["boot_id"])
        assert.deepStrictEqual(owners, [alive.store.owner.boot_id])
        const requests = db.all("SELECT owner_boot FROM fibril_requests").map((row) => row["owner_boot"])
        assert.deepStrictEqual(requests, [alive.store.owner.boot_id])
        assert.deepStrictEqual((yield* alive.store.takeRequests).map((r) => r.payload), ["hello"])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("sqlite: a store whose database is closed answers every read with its fallback and a warning", () =>
      Effect.gen(function*() {
        const { dir, file } = yield* sandbox
        const logs: Array<string> = []
        const capture = Logger.layer([
          Logger.make(({ message }) => void logs.push((Array.isArray(message) ? message : [message]).join(" ")))
        ])
        const { close, store } = yield* open({ dir })
        yield* store.put(owned(store, "a", { status: "completed", finished_at: 1 }))
        yield* close
        const answers = yield* Effect.all([
          store.all,
          Effect.map(store.get("a"), Option.isNone),
          store.liveness("someone-else"),
          store.reconcile,
          store.takeRequests,
          store.adopt("a"),
          store.request("someone-else", { agent_id: "a", kind: "cancel", payload: "" })
        ]).pipe(Effect.provide(capture))
        assert.deepStrictEqual(answers, [[], true, "alive", [], [], false, undefined])
        assert.strictEqual(logs.length, 6, logs.join("\n"))
        for (const log of logs) assert.isTrue(log.startsWith(`sub-agent store: ${file}: `), log)
        assert.strictEqual((yield* Effect.flip(store.readTranscript("a")))._tag, "StoreError")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("sqlite: a database path that cannot be opened fails with a StoreError and is not moved aside", () =>
      Effect.gen(function*() {
        const { dir, file, fs } = yield* sandbox
        yield* fs.makeDirectory(file)
        const error = yield* Effect.flip(Layer.build(SqliteSubAgentStore.layerSqlite({ dir })))
        assert.deepStrictEqual([error._tag, error.path], ["StoreError", file])
        assert.include(error.message, "unable to open")
        assert.strictEqual((yield* fs.stat(file)).type, "Directory")
        assert.deepStrictEqual([...yield* fs.readDirectory(dir)], [SqliteSubAgentStore.databaseFileName])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("migration: an unreadable state file is left in place; one of another format is renamed .corrupt", () =>
      Effect.gen(function*() {
        const { dir, fs, path } = yield* sandbox
        const legacy = path.join(dir, SqliteSubAgentStore.legacyRecordsFileName)
        const transcripts = path.join(dir, SqliteSubAgentStore.legacyTranscriptsDirName)
        yield* fs.makeDirectory(legacy)
        yield* withStore({ dir }, (store) =>
          Effect.sync(() =>
            assert.deepStrictEqual(store.warnings, [
              `${legacy} could not be read; it was left in place and not imported`
            ])
          ))
        assert.strictEqual((yield* fs.stat(legacy)).type, "Directory")
        yield* fs.remove(legacy, { recursive: true })

        yield* fs.writeFileString(legacy, `{"version":2,"records":[]}`)
        yield* fs.makeDirectory(transcripts)
        yield* withStore({ dir }, (store) =>
          Effect.gen(function*() {
            assert.deepStrictEqual(store.warnings, [
              `${legacy} is not a readable v1 state file; renamed it ${legacy}.corrupt and imported nothing`
            ])
            assert.deepStrictEqual(yield* store.all, [])
          }))
        const listed = [...yield* fs.readDirectory(dir)].filter((name) =>
          !name.startsWith(SqliteSubAgentStore.databaseFileName)
        ).sort()
        assert.deepStrictEqual(listed, [
          `${SqliteSubAgentStore.legacyRecordsFileName}.corrupt`,
          `${SqliteSubAgentStore.legacyTranscriptsDirName}.corrupt`
        ])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("migration: records that do not decode are named in a warning (cut at 200 characters), the rest imported", () =>
      Effect.gen(function*() {
        const { dir, fs, path } = yield* sandbox
        const legacy = path.join(dir, SqliteSubAgentStore.legacyRecordsFileName)
        const long = { agent_id: "x".repeat(300) }
        yield* fs.writeFileString(
          legacy,
          JSON.stringify({ version: 1, records: [sample("good", { status: "completed", finished_at: 1 }), long, 5] })
        )
        yield* withStore({ dir }, (store) =>
          Effect.gen(function*() {
            assert.deepStrictEqual(store.warnings, [
              `${legacy}: a record could not be read and was not imported: ${JSON.stringify(long).slice(0, 200)}`,
              `${legacy}: a record could not be read and was not imported: 5`,
              `imported 1 sub-agent record(s) from ${legacy} into ${SqliteSubAgentStore.databaseFileName}; the old file is kept as ${legacy}.migrated`
            ])
            assert.deepStrictEqual(ids(yield* store.all), ["good"])
            // No transcripts directory: the record has an empty transcript.
            assert.deepStrictEqual(yield* store.readTranscript("good"), [])
          }))
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("sqlite: a crashed owner's lease outlives its scope and holds up to its last millisecond", () =>
      Effect.gen(function*() {
        const leaseMs = 1000
        const { dir } = yield* sandbox
        const a = yield* open({ dir, leaseMs })
        const b = yield* open({ dir, leaseMs })
        yield* a.store.put(owned(a.store, "r"))
        yield* a.store.flush
        // A killed process runs no finalizer: its owner row stays until its lease ends.
        yield* a.control.crash
        yield* a.close
        yield* TestClock.adjust(leaseMs)
        assert.strictEqual(yield* b.store.liveness(a.store.owner.boot_id), "alive")
        assert.deepStrictEqual(yield* b.store.reconcile, [])
        yield* TestClock.adjust(1)
        assert.strictEqual(yield* b.store.liveness(a.store.owner.boot_id), "gone")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("sqlite: reconcile interrupts a gone owner's agents and skips a row that does not decode", () =>
      Effect.gen(function*() {
        const leaseMs = 1000
        const { dir } = yield* sandbox
        const db = yield* raw(dir)
        const a = yield* open({ dir, leaseMs })
        const b = yield* open({ dir, leaseMs })
        yield* a.store.put(owned(a.store, "good"))
        yield* a.store.put(owned(a.store, "unreadable"))
        yield* a.store.flush
        db.run("UPDATE fibril_agents SET record = '{\"steps\":\"many\"}' WHERE agent_id = 'unreadable'")
        yield* a.control.crash
        yield* TestClock.adjust(leaseMs + 1)
        assert.deepStrictEqual(ids(yield* b.store.reconcile), ["good"])
        assert.strictEqual(Option.getOrThrow(yield* b.store.get("good")).status, "interrupted")
        assert.deepStrictEqual(db.all("SELECT status FROM fibril_agents WHERE agent_id = 'unreadable'"), [{
          status: "running"
        }])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("sqlite: adopt sees this process's puts of the same turn", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const { store } = yield* open({ dir })
        yield* store.put(owned(store, "mine", { status: "completed", finished_at: 1 }))
        assert.isTrue(yield* store.adopt("mine"))
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("sqlite: a stored transcript line that is not JSON is skipped when read", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const db = yield* raw(dir)
        const { store } = yield* open({ dir })
        yield* store.appendTranscript("h", ["first"])
        db.run("INSERT INTO fibril_transcripts (handle, message) VALUES ('h', '{cut sho')")
        yield* store.appendTranscript("h", ["second"])
        assert.deepStrictEqual(yield* store.readTranscript("h"), ["first", "second"])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("memory: a key set to undefined is not kept; beyond maxRecords the earliest finished go, live ones stay", () =>
      Effect.gen(function*() {
        const store = yield* SubAgentStore.makeMemory({ maxRecords: 2 })
        // A view built in plain JavaScript may carry a key set to undefined.
        yield* store.put({ ...sample("live", { created_at: 0 }), reason: undefined } as unknown as SubAgentRecord)
        assert.isFalse("reason" in Option.getOrThrow(yield* store.get("live")))
        for (const finished of [3, 1, 2]) {
          yield* store.put(sample(`done-${finished}`, { status: "completed", finished_at: finished }))
        }
        yield* store.appendTranscript("done-1", ["evicted with its record"])
        yield* store.flush
        assert.deepStrictEqual(ids(yield* store.all), ["done-3", "live"])
        assert.deepStrictEqual(yield* store.readTranscript("done-1"), [])
      }))

    it.effect("sqlite: a crashed store neither reconciles others nor takes its requests", () =>
      Effect.gen(function*() {
        const leaseMs = 1000
        const { dir } = yield* sandbox
        const db = yield* raw(dir)
        const a = yield* open({ dir, leaseMs })
        const b = yield* open({ dir, leaseMs })
        yield* b.store.put(owned(b.store, "orphan"))
        yield* b.store.flush
        yield* b.store.request(a.store.owner.boot_id, { agent_id: "x", kind: "cancel", payload: "stop" })
        yield* b.control.crash
        yield* a.control.crash
        yield* TestClock.adjust(leaseMs + 1)
        assert.deepStrictEqual(yield* a.store.reconcile, [])
        assert.deepStrictEqual(yield* a.store.takeRequests, [])
        assert.deepStrictEqual(db.all("SELECT status FROM fibril_agents"), [{ status: "running" }])
        assert.strictEqual(db.count("SELECT COUNT(*) AS n FROM fibril_requests"), 1)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("sqlite: a key this version retired is removed from a row when it is next written", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const db = yield* raw(dir)
        yield* withStore({ dir }, (store) => Effect.andThen(store.put(sample("a")), store.flush))
        db.run("UPDATE fibril_agents SET record = json_set(record, '$.history', json('[1,2]')) WHERE agent_id = 'a'")
        yield* withStore({ dir }, (store) => Effect.andThen(store.put(sample("a", { steps: 1 })), store.flush))
        const written = db.record("a")!
        assert.deepStrictEqual([written["steps"], "history" in written], [1, false])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
  })

  describe("columns, crashes and counters (tests from the third mutation run)", () => {
    const nextTurn = Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))
    const columns = (db: Effect.Success<ReturnType<typeof raw>>, agentId: string) =>
      db.all(
        "SELECT parent_id, status, owner_boot, handle, created_at, finished_at FROM fibril_agents WHERE agent_id = ?",
        agentId
      ).map((row) => ({ ...row }))
    const captureLogs = () => {
      const logs: Array<string> = []
      const layer = Logger.layer([
        Logger.make(({ message }) => void logs.push((Array.isArray(message) ? message : [message]).join(" ")))
      ])
      return { logs, layer }
    }

    it.effect("sqlite: a failed commit no one waited on stays reported through later good commits, once", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const db = yield* raw(dir)
        const { store } = yield* open({ dir })
        yield* store.put(owned(store, "bad", { tokens: { input: 1n as never, output: 0, cached: 0 } }))
        yield* nextTurn
        // A good commit with no one waiting on it does not clear the failure before it.
        yield* store.put(owned(store, "good"))
        yield* store.flush
        assert.strictEqual(db.record("good")?.["agent_id"], "good")
        assert.include((yield* Effect.flip(store.sync)).reason, "BigInt")
        yield* store.sync
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("sqlite: the columns other processes query follow the record on every write path", () =>
      Effect.gen(function*() {
        const leaseMs = 1000
        const { dir } = yield* sandbox
        const db = yield* raw(dir)
        const a = yield* open({ dir, leaseMs })
        const b = yield* open({ dir, leaseMs })
        const boot = a.store.owner.boot_id
        // A new agent's row (inserted), then replaced as it runs and ends.
        yield* a.store.put(owned(a.store, "child", { parent_id: "root", created_at: 5, transcript_handle: "t-child" }))
        yield* a.store.flush
        assert.deepStrictEqual(columns(db, "child"), [{
          parent_id: "root",
          status: "running",
          owner_boot: boot,
          handle: "t-child",
          created_at: 5,
          finished_at: null
        }])
        yield* a.store.put(
          owned(a.store, "child", {
            parent_id: "root",
            created_at: 5,
            transcript_handle: "t-child",
            status: "completed",
            finished_at: 9
          })
        )
        yield* a.store.flush
        assert.deepStrictEqual(columns(db, "child")[0], {
          parent_id: "root",
          status: "completed",
          owner_boot: boot,
          handle: "t-child",
          created_at: 5,
          finished_at: 9
        })
        // Run again by the same owner: the merging write (the row existed), with no parent.
        yield* a.store.put(owned(a.store, "child", { created_at: 5, transcript_handle: "t-child", status: "running" }))
        yield* a.store.flush
        assert.deepStrictEqual(columns(db, "child")[0], {
          parent_id: null,
          status: "running",
          owner_boot: boot,
          handle: "t-child",
          created_at: 5,
          finished_at: null
        })
        // Its owner dies: reconcile leaves a tombstone naming the gone owner.
        yield* a.control.crash
        yield* TestClock.adjust(leaseMs + 1)
        assert.deepStrictEqual(ids(yield* b.store.reconcile), ["child"])
        assert.deepStrictEqual(columns(db, "child")[0], {
          parent_id: null,
          status: "interrupted",
          owner_boot: `gone:${boot}`,
          handle: "t-child",
          created_at: 5,
          finished_at: leaseMs + 1
        })
        // B adopts it: the row is B's.
        assert.isTrue(yield* b.store.adopt("child"))
        assert.strictEqual(columns(db, "child")[0]?.["owner_boot"], b.store.owner.boot_id)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("migration: an imported record's columns say what the record says (live ones interrupted now)", () =>
      Effect.gen(function*() {
        const { dir, fs, path } = yield* sandbox
        yield* TestClock.setTime(1000)
        yield* fs.writeFileString(
          path.join(dir, SqliteSubAgentStore.legacyRecordsFileName),
          JSON.stringify({
            version: 1,
            records: [
              sample("done", { status: "failed", parent_id: "p", created_at: 10, finished_at: 50 }),
              sample("live", { status: "running", created_at: 20 })
            ]
          })
        )
        yield* withStore({ dir }, () => Effect.void)
        const db = yield* raw(dir)
        assert.deepStrictEqual(columns(db, "done"), [{
          parent_id: "p",
          status: "failed",
          owner_boot: "boot-1",
          handle: "done",
          created_at: 10,
          finished_at: 50
        }])
        assert.deepStrictEqual(columns(db, "live"), [{
          parent_id: null,
          status: "interrupted",
          owner_boot: "boot-1",
          handle: "live",
          created_at: 20,
          finished_at: 1000
        }])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    // 256 finished puts committed: the next put runs the periodic eviction.
    const fillToEviction = (store: Store) =>
      Effect.andThen(
        Effect.forEach(
          Array.from({ length: 256 }, (_, i) => sample(`done-${i}`, { status: "completed", finished_at: 0 })),
          (record) => store.put(record),
          { discard: true }
        ),
        store.flush
      )

    it.effect("sqlite: the put that runs the periodic eviction is committed first, and goes too if aged", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const db = yield* raw(dir)
        const { store } = yield* open({ dir, evictAfterMs: day })
        yield* fillToEviction(store)
        assert.strictEqual(db.count("SELECT COUNT(*) AS n FROM fibril_agents"), 256)
        yield* TestClock.adjust(2 * day)
        yield* store.put(sample("late", { status: "completed", finished_at: 0 }))
        yield* nextTurn
        assert.strictEqual(db.count("SELECT COUNT(*) AS n FROM fibril_agents"), 0)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("sqlite: a crashed store's put does nothing: no eviction, no schema warning", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const db = yield* raw(dir)
        const { control, store } = yield* open({ dir, evictAfterMs: day })
        yield* fillToEviction(store)
        yield* TestClock.adjust(2 * day)
        yield* control.crash
        const { layer, logs } = captureLogs()
        yield* store.put(sample("late", { status: "completed", finished_at: 0, steps: 1.5 })).pipe(
          Effect.provide(layer)
        )
        yield* nextTurn
        assert.deepStrictEqual(logs, [])
        assert.strictEqual(db.count("SELECT COUNT(*) AS n FROM fibril_agents"), 256)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("sqlite: adopting an agent no one recorded is a plain no, with no warning", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const { store } = yield* open({ dir })
        const { layer, logs } = captureLogs()
        assert.isFalse(yield* store.adopt("nobody").pipe(Effect.provide(layer)))
        assert.deepStrictEqual(logs, [])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("an owner's boot id is a short base-36 name, different per store", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const a = yield* open({ dir })
        const b = yield* open({ dir })
        const memory = yield* SubAgentStore.makeMemory()
        const boots = [a.store.owner.boot_id, b.store.owner.boot_id, memory.owner.boot_id]
        for (const boot of boots) assert.match(boot, /^[0-9a-z]{1,8}$/)
        assert.strictEqual(new Set(boots).size, 3)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    /** The targets of this process's open file descriptors that start with `prefix`. */
    const openFiles = (prefix: string) =>
      readdirSync("/proc/self/fd").flatMap((fd) => {
        try {
          const target = readlinkSync(`/proc/self/fd/${fd}`)
          return target.startsWith(prefix) ? [target] : []
        } catch {
          return []
        }
      })

    it.effect("sqlite: a state dir that cannot be created fails with a StoreError naming it", () =>
      Effect.gen(function*() {
        const { fs, path, dir } = yield* sandbox
        const inTheWay = path.join(dir, "not-a-dir")
        yield* fs.writeFileString(inTheWay, "a file")
        const state = path.join(inTheWay, "state")
        const error = yield* Effect.flip(Layer.build(SqliteSubAgentStore.layerSqlite({ dir: state })))
        assert.deepStrictEqual([error._tag, error.path], ["StoreError", state])
        assert.include(error.message, "not-a-dir")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("sqlite: a corrupt file that cannot be moved aside fails with a StoreError and stays where it is", () =>
      Effect.gen(function*() {
        const { fs, dir, file } = yield* sandbox
        yield* fs.writeFileString(file, "not a database at all, and long enough to be read as one".repeat(100))
        // The name it would be moved to is a directory that is not empty: the rename fails.
        yield* fs.makeDirectory(`${file}.corrupt-0/occupied`, { recursive: true })
        const error = yield* Effect.flip(Layer.build(SqliteSubAgentStore.layerSqlite({ dir })))
        assert.deepStrictEqual([error._tag, error.path], ["StoreError", file])
        assert.include(error.message, "rename")
        assert.include(yield* fs.readFileString(file), "not a database at all")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("migration: an import the database refuses fails the store with a StoreError naming the state file", () =>
      Effect.gen(function*() {
        const { fs, path, dir } = yield* sandbox
        // A database (of this schema) whose agents table refuses every insert.
        yield* withStore({ dir }, () => Effect.void)
        yield* withRaw(dir, (db) =>
          db.run(
            "CREATE TRIGGER refuse BEFORE INSERT ON fibril_agents BEGIN SELECT RAISE(ABORT, 'inserts refused'); END"
          ))
        const legacy = path.join(dir, SqliteSubAgentStore.legacyRecordsFileName)
        yield* fs.writeFileString(legacy, JSON.stringify({ version: 1, records: [sample("a")] }))
        const error = yield* Effect.flip(Layer.build(SqliteSubAgentStore.layerSqlite({ dir })))
        assert.deepStrictEqual([error._tag, error.path], ["StoreError", legacy])
        assert.include(error.message, "inserts refused")
        assert.isTrue(yield* fs.exists(legacy), "kept, to be imported once the database takes it")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("migration: a state file or transcripts dir that cannot even be looked at is left alone", () =>
      Effect.gen(function*() {
        const { fs, path, dir } = yield* sandbox
        // Symbolic links to themselves: looking them up fails (ELOOP), which is not "not found".
        const legacy = path.join(dir, SqliteSubAgentStore.legacyRecordsFileName)
        yield* fs.symlink(legacy, legacy)
        yield* withStore({ dir }, (store) => Effect.sync(() => assert.deepStrictEqual(store.warnings, [])))
        yield* fs.remove(legacy)
        const transcripts = path.join(dir, SqliteSubAgentStore.legacyTranscriptsDirName)
        yield* fs.symlink(transcripts, transcripts)
        yield* fs.writeFileString(legacy, JSON.stringify({ version: 1, records: [] }))
        yield* withStore({ dir }, (store) => Effect.sync(() => assert.strictEqual(store.warnings.length, 1)))
        const listed = [...yield* fs.readDirectory(dir)].filter((name) =>
          !name.startsWith(SqliteSubAgentStore.databaseFileName)
        ).sort()
        assert.deepStrictEqual(listed, [
          `${SqliteSubAgentStore.legacyRecordsFileName}.migrated`,
          SqliteSubAgentStore.legacyTranscriptsDirName
        ])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("sqlite: a database refused at open (another schema version, or corrupt) is closed, not left open", () =>
      Effect.gen(function*() {
        const { fs, dir } = yield* sandbox
        const file = `${yield* fs.realPath(dir)}/${SqliteSubAgentStore.databaseFileName}`
        yield* withStore({ dir }, () => Effect.void)
        yield* withRaw(dir, (db) => db.run("UPDATE fibril_meta SET value = '99' WHERE key = 'schema_version'"))
        assert.deepStrictEqual(openFiles(file), [])
        yield* Effect.flip(Layer.build(SqliteSubAgentStore.layerSqlite({ dir })))
        assert.deepStrictEqual(openFiles(file), [], "the refused database is not held open")
        // fibril_meta's page overwritten: SQLite opens the file and fails on the schema's insert.
        yield* withRaw(dir, (db) => db.run("UPDATE fibril_meta SET value = '1' WHERE key = 'schema_version'"))
        const [meta, pageSize] = yield* withRaw(dir, (db): [number, number] => [
          Number(db.all("SELECT rootpage FROM sqlite_master WHERE name = 'fibril_meta'")[0]?.["rootpage"]),
          Number(db.all("PRAGMA page_size")[0]?.["page_size"])
        ])
        const bytes = yield* fs.readFile(file)
        for (let i = (meta - 1) * pageSize; i < meta * pageSize; i++) bytes[i] = (i * 7919 + 13) % 251
        yield* fs.writeFile(file, bytes)
        yield* withStore({ dir }, (store) =>
          Effect.sync(() => {
            assert.include(store.warnings[0], "moved it aside")
            assert.deepStrictEqual(openFiles(`${file}.corrupt`), [], "the corrupt file is not held open")
          }))
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("sqlite: queueing or appending nothing leaves nothing to wait on, even on a crashed store", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const { control, store } = yield* open({ dir })
        yield* store.queueTranscript("h", [])
        const synced = yield* Effect.forkChild(store.sync, { startImmediately: true })
        assert.isDefined(synced.pollUnsafe(), "sync returns at once: nothing was queued")
        yield* control.crash
        const appended = yield* Effect.forkChild(store.appendTranscript("h", []), { startImmediately: true })
        assert.isDefined(appended.pollUnsafe(), "an empty append does not wait on the dead process")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("sqlite: after a crash a read does not answer the writes waiting on the dead process", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const { control, store } = yield* open({ dir })
        yield* control.crash
        const waiting = yield* Effect.forkChild(store.appendTranscript("h", ["lost"]), { startImmediately: true })
        yield* store.flush
        yield* store.all
        yield* nextTurn
        assert.isUndefined(waiting.pollUnsafe())
        yield* Fiber.interrupt(waiting)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("sqlite: a finished agent whose stored record does not decode is not adopted", () =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        const db = yield* raw(dir)
        const a = yield* open({ dir })
        const b = yield* open({ dir })
        yield* a.store.put(owned(a.store, "done", { status: "completed", finished_at: 1 }))
        yield* a.store.flush
        db.run("UPDATE fibril_agents SET record = '{\"steps\":\"many\"}' WHERE agent_id = 'done'")
        const { layer, logs } = captureLogs()
        assert.isFalse(yield* b.store.adopt("done").pipe(Effect.provide(layer)))
        assert.deepStrictEqual(logs, [], "a plain no, not a failed write")
        assert.deepStrictEqual(db.all("SELECT owner_boot, record FROM fibril_agents"), [{
          owner_boot: a.store.owner.boot_id,
          record: "{\"steps\":\"many\"}"
        }])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    // The memory store keeps the finish times beside the records, and reads only a prefix
    // of them while they are in clock order: eviction must still drop exactly what the rule
    // says (aged ones, then the earliest finished beyond maxRecords, equal times in the order
    // they became terminal), whatever the puts and evictions before.
    it.effect.prop(
      "memory: eviction drops what the rule says, after any puts and evictions (a model of it)",
      [
        Schema.Array(Schema.Union([
          Schema.Struct({
            id: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 7 })),
            terminal: Schema.Boolean,
            // Few times, so that equal ones often meet at the eviction's boundary.
            finished: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 4 }))
          }),
          Schema.Struct({ flushAfter: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 3 })) })
        ])).check(Schema.isMaxLength(40)),
        Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 6 }))
      ],
      ([ops, maxRecords]) =>
        Effect.gen(function*() {
          const evictAfterMs = 3
          const store = yield* SubAgentStore.makeMemory({ maxRecords, evictAfterMs })
          // The model: each id's last status, and for terminal ones their finish time, in the
          // order they became terminal; an eviction sorts them all.
          const live = new Set<string>()
          let finished = new Map<string, number>()
          const evict = (now: number) => {
            const kept = [...finished].filter(([, at]) => now - at <= evictAfterMs).sort((a, b) => a[1] - b[1])
            finished = new Map(kept.slice(Math.max(0, live.size + kept.length - maxRecords)))
          }
          for (const op of ops) {
            if ("flushAfter" in op) {
              yield* TestClock.adjust(op.flushAfter)
              yield* store.flush
              evict(yield* Clock.currentTimeMillis)
              assert.deepStrictEqual(ids(yield* store.all), [...live, ...finished.keys()].sort())
              continue
            }
            const id = `a${op.id}`
            yield* store.put(sample(id, op.terminal ? { status: "completed", finished_at: op.finished } : {}))
            if (op.terminal) {
              live.delete(id)
              // Put again finished at another time: it moves to the end of the order.
              if (finished.get(id) !== op.finished) finished.delete(id)
              finished.set(id, op.finished)
            } else {
              finished.delete(id)
              live.add(id)
            }
          }
          yield* TestClock.adjust(2)
          yield* store.flush
          evict(yield* Clock.currentTimeMillis)
          assert.deepStrictEqual(ids(yield* store.all), [...live, ...finished.keys()].sort())
        }),
      { arbitrary: { runs: 500 } }
    )

    it.effect("memory: the periodic eviction runs at the 64th finished put", () =>
      Effect.gen(function*() {
        const store = yield* SubAgentStore.makeMemory({ maxRecords: 1 })
        for (let i = 0; i < 63; i++) {
          yield* store.put(sample(`done-${i}`, { status: "completed", finished_at: i }))
        }
        assert.strictEqual((yield* store.all).length, 63)
        yield* store.put(sample("done-63", { status: "completed", finished_at: 63 }))
        assert.deepStrictEqual(ids(yield* store.all), ["done-63"])
      }))
  })
})
