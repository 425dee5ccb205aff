// The store's joined statements do what the separate ones did: `beginStep` with `start` starts
// the run (an agent cancelled before it stays cancelled), `recordStep` with `finish` ends it (a
// cancel recorded meanwhile stands, the tokens still count, the permit is given back); a step
// reads only the budgets that are set. Fibril's step journal (`runStep`): a step runs to a
// journaled result, a journaled one is read back instead of run, of two executions the first
// commit wins, a model step's input is taken by its commit, a cancelled agent's next step does
// not run, a step that dies is not journaled. Checked on the in-memory store and, when
// PostgreSQL's binaries are installed, on the SQL store (there also: a commit that fails leaves
// none of its writes, and three executions of one step at once make their writes once).
import * as PgClient from "@effect/sql-pg/PgClient"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { AgentStatus, AgentSteps, SubAgentRecord, Usage } from "@fibril/core"
import * as Prompt from "effect/ai/Prompt"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql"
import { mkdtempSync, rmSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as ClusterStore from "../src/ClusterStore.ts"
import * as PgClusterStore from "../src/PgClusterStore.ts"
import * as Sqlite from "../src/Sqlite.ts"
import * as SqliteClusterStore from "../src/SqliteClusterStore.ts"
import * as Pg from "./postgres.ts"
import { agentRow } from "./support.ts"

const reason = Pg.skipReason()
let pg: Pg.Postgres | undefined
let dbs = 0
const sqliteDir = mkdtempSync(path.join(os.tmpdir(), "fibril-store-sqlite-"))
let sqliteFiles = 0
afterAll(() => {
  pg?.stop()
  rmSync(sqliteDir, { recursive: true, force: true })
})

/** The SQLite store on a new file, its tables made. */
const sqliteStore = (run: Effect.Effect<void, unknown, ClusterStore.ClusterStore>) =>
  Effect.gen(function*() {
    const file = path.join(sqliteDir, `store${sqliteFiles++}.db`)
    yield* Effect.provide(
      Effect.andThen(SqliteClusterStore.migrate, Effect.provide(run, SqliteClusterStore.layer)),
      Sqlite.layer(file)
    )
  })

const sqlStore = Effect.promise(async () => {
  pg ??= await Pg.start()
  const db = `store${dbs++}`
  pg.createDatabase(db)
  return pg.url(db)
}).pipe(
  Effect.map((url) =>
    PgClusterStore.layerSql.pipe(Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), maxConnections: 2 })))
  )
)

const row = (agentId: string): ClusterStore.AgentRow => agentRow(agentId)
const hour = 3_600_000

const prompt = Prompt.makeMessage("user", { content: [Prompt.makePart("text", { text: "go" })] })
const answer = Prompt.makeMessage("assistant", { content: [Prompt.makePart("text", { text: "done" })] })
const usage = { input: 3, output: 4, cached: 1 }
/** A completed answer's checked claims, as the final step writes them. */
const claims = {
  checked: 2,
  verified: 1,
  unverified: [{ claim: "a.ts:3", why: "it never read, grepped or wrote a.ts" }]
}

const contract = Effect.gen(function*() {
  const store = yield* ClusterStore.ClusterStore
  yield* store.insertMany([row("ag_a"), row("ag_b")])
  yield* store.sendInput("ag_a", "hello")
  yield* store.update("ag_b", { status: "cancelled", reason: "stop" })

  // A first step's read starts the run: running, its prompt written, the inbox taken, age 0.
  const begin = yield* store.beginStep("ag_a", {
    treeOf: "ag_root",
    runAge: true,
    start: { at: { run: 0, step: -1, slot: 0 }, prompt }
  })
  assert.deepStrictEqual(begin.inbox, ["hello"])
  assert.strictEqual(begin.runSecs, 0)
  assert.strictEqual((yield* store.get("ag_a"))?.status, "running")
  assert.deepStrictEqual(yield* store.transcript("ag_a"), [prompt])
  // Cancelled before its first step: it stays so (the prompt is still written).
  yield* store.beginStep("ag_b", { start: { at: { run: 0, step: -1, slot: 0 }, prompt } })
  assert.strictEqual((yield* store.get("ag_b"))?.status, "cancelled")
  assert.deepStrictEqual(yield* store.transcript("ag_b"), [prompt])

  // A final answer's write ends the run and gives the permit back.
  assert.isTrue(yield* store.acquire("ag_a", 5))
  const finish = {
    update: { status: "completed" as const, text: "done", claims, reason: null, steps: 1, toolCalls: 0 },
    release: true
  }
  yield* store.recordStep("ag_a", [{ at: { run: 0, step: 0, slot: 100 }, message: answer }], usage, finish)
  const a = yield* store.get("ag_a")
  assert.strictEqual(a?.status, "completed")
  assert.strictEqual(a?.text, "done")
  assert.deepStrictEqual(a?.claims, claims)
  assert.strictEqual(a?.steps, 1)
  assert.strictEqual(a?.tokens, 7)
  assert.deepStrictEqual(a?.usage, usage)
  assert.deepStrictEqual(yield* store.transcript("ag_a"), [prompt, answer])
  assert.deepStrictEqual(yield* store.permits, [])

  // Cancelled meanwhile: the cancel stands, the step's tokens and rows count, the permit goes back.
  assert.isTrue(yield* store.acquire("ag_b", 5))
  yield* store.recordStep("ag_b", [{ at: { run: 0, step: 0, slot: 100 }, message: answer }], usage, finish)
  const b = yield* store.get("ag_b")
  assert.strictEqual(b?.status, "cancelled")
  assert.strictEqual(b?.reason, "stop")
  assert.strictEqual(b?.text, null)
  assert.isUndefined(b?.claims)
  assert.strictEqual(b?.tokens, 7)
  assert.deepStrictEqual(yield* store.transcript("ag_b"), [prompt, answer])
  assert.deepStrictEqual(yield* store.permits, [])

  // A resume clears the claims with the answer; an update that does not name them keeps them.
  yield* store.update("ag_a", { steps: 1 })
  assert.deepStrictEqual((yield* store.get("ag_a"))?.claims, claims)
  yield* store.update("ag_a", { text: null, claims: null })
  assert.isUndefined((yield* store.get("ag_a"))?.claims)

  // Without `start` the age is read; without `finish` the status is left alone.
  yield* store.update("ag_a", { status: "running" })
  yield* store.recordStep("ag_a", [], usage)
  assert.strictEqual((yield* store.get("ag_a"))?.status, "running")
  assert.strictEqual((yield* store.get("ag_a"))?.tokens, 14)

  // A step reads only the budgets that are set.
  const both = yield* store.beginStep("ag_a", { treeOf: "ag_root", runAge: true })
  assert.strictEqual(both.treeTokens, 21)
  assert.isAtLeast(both.runSecs, 0)
  const none = yield* store.beginStep("ag_a", {})
  assert.strictEqual(none.treeTokens, 0)
  assert.strictEqual(none.runSecs, 0)
})

const journalContract = Effect.gen(function*() {
  const store = yield* ClusterStore.ClusterStore
  yield* store.insertMany([row("ag_j")])
  yield* store.sendInput("ag_j", "queued")
  const key = { agentId: "ag_j", executionId: "exec-ag_j", name: "model/0" }
  let runs = 0
  const step = (result: string) =>
    Effect.sync(() => {
      runs++
      return {
        result,
        commit: store.recordStep("ag_j", [{ at: { run: 0, step: 0, slot: 100 }, message: answer }], usage)
      }
    })

  // It runs; its writes are made with its result.
  assert.deepStrictEqual(yield* store.runStep(key, step("first")), { _tag: "Ran", result: "first" })
  assert.deepStrictEqual(yield* store.transcript("ag_j"), [answer])
  // Again (a replay, or another execution of the same step): the journaled result; not run.
  assert.deepStrictEqual(yield* store.runStep(key, step("second")), { _tag: "Journaled", result: "first" })
  assert.strictEqual(runs, 1)
  assert.deepStrictEqual(yield* store.journal("exec-ag_j"), new Map([["model/0", "first"]]))
  assert.deepStrictEqual(yield* store.journal("exec-other"), new Map())

  // Another execution commits while this one makes its call: the first commit wins; this
  // one's writes are not made, and it gets the winner's result.
  const raced = { ...key, name: "model/1" }
  const outcome = yield* store.runStep(
    raced,
    Effect.gen(function*() {
      const other = yield* Effect.orDie(store.runStep(raced, step("winner")))
      assert.deepStrictEqual(other, { _tag: "Ran", result: "winner" })
      return {
        result: "loser",
        commit: store.recordStep("ag_j", [{ at: { run: 0, step: 1, slot: 100 }, message: answer }], usage)
      }
    })
  )
  assert.deepStrictEqual(outcome, { _tag: "Journaled", result: "winner" })
  assert.strictEqual((yield* store.get("ag_j"))?.tokens, 14)

  // The input a model step read is taken by its commit, not by the read.
  const begin = yield* store.beginStep("ag_j", {})
  assert.deepStrictEqual(begin.inbox, ["queued"])
  assert.deepStrictEqual((yield* store.beginStep("ag_j", {})).inbox, ["queued"])
  yield* store.recordStep("ag_j", [], usage, undefined, begin.inboxIds)
  assert.deepStrictEqual((yield* store.beginStep("ag_j", {})).inbox, [])

  // A step that dies is not journaled: its next attempt runs.
  const tool = { ...key, name: "tool/0/0" }
  const died = yield* Effect.exit(store.runStep(tool, Effect.die("boom")))
  assert.isTrue(Exit.isFailure(died))
  assert.isFalse((yield* store.journal("exec-ag_j")).has("tool/0/0"))
  assert.deepStrictEqual(
    yield* store.runStep(tool, Effect.succeed({ result: "tool", commit: Effect.void })),
    { _tag: "Ran", result: "tool" }
  )

  // Cancelled: its next step does not run; a journaled step still reads back.
  yield* store.update("ag_j", { status: "cancelled", reason: "stop" })
  runs = 0
  assert.deepStrictEqual(yield* store.runStep({ ...key, name: "model/2" }, step("late")), { _tag: "Cancelled" })
  assert.deepStrictEqual(yield* store.runStep(key, step("third")), { _tag: "Journaled", result: "first" })
  assert.strictEqual(runs, 0)
})

/**
 * The rest of the store, the same on every implementation: the tree's rows and changes, the
 * queue for permits, a parent's wait, the heartbeat's look, the markers.
 */
const everyMethod = Effect.gen(function*() {
  const store = yield* ClusterStore.ClusterStore
  // Rows made in one statement have one creation time: their order among themselves is not kept.
  const ids = (rows: ReadonlyArray<ClusterStore.AgentRow>) => rows.map((r) => r.agentId).sort()
  const child = (agentId: string): ClusterStore.AgentRow => ({ ...row(agentId), parentId: "ag_p", rootId: "ag_p" })
  yield* store.insert({ ...row("ag_p"), parentId: null, rootId: "ag_p", depth: 0 })
  yield* store.insertMany([child("ag_c1"), child("ag_c2")])
  yield* store.insert({ ...child("ag_c1"), description: "a second insert changes nothing" })
  assert.deepStrictEqual(ids(yield* store.children("ag_p")), ["ag_c1", "ag_c2"])
  assert.strictEqual((yield* store.get("ag_c1"))?.description, "ag_c1")
  assert.deepStrictEqual(ids(yield* store.list), ["ag_c1", "ag_c2", "ag_p"])
  assert.isUndefined(yield* store.get("ag_none"))

  // The client follows the tree from a cursor: the rows and messages since.
  const start = yield* store.changes("ag_p", { transcript: 0, agents: 0 })
  assert.deepStrictEqual(ids(start.agents), ["ag_c1", "ag_c2", "ag_p"])
  yield* store.startRun("ag_c1", { run: 0, step: -1, slot: 0 }, prompt)
  yield* store.append("ag_c1", { run: 0, step: 0, slot: 100 }, answer)
  const next = yield* store.changes("ag_p", start.cursor)
  assert.deepStrictEqual(next.agents.map((r) => [r.agentId, r.status]), [["ag_c1", "running"]])
  assert.deepStrictEqual(next.messages.map((m) => [m.agentId, m.at.slot]), [["ag_c1", 0], ["ag_c1", 100]])
  const idle = yield* store.changes("ag_p", next.cursor)
  assert.deepStrictEqual([idle.agents, idle.messages], [[], []])

  // The queue: over the cap a waiter is recorded; a release hands its permit to the oldest.
  assert.isTrue(yield* store.acquire("ag_c1", 1))
  assert.isFalse(yield* store.acquire("ag_c2", 1, { executionId: "exec-ag_c2", clock: "permit/0" }))
  assert.isFalse(yield* store.acquire("ag_c3", 1, { executionId: "exec-ag_c3", clock: "permit/0" }))
  assert.deepStrictEqual(yield* store.handOff(1, 0), [])
  yield* store.release("ag_c1")
  const woken = [{ executionId: "exec-ag_c2", clock: "permit/0" }]
  assert.deepStrictEqual(yield* store.handOff(1, hour), woken)
  // Handed, the permit is the waiter's: a newcomer cannot take it before the woken agent tries.
  assert.isFalse(yield* store.acquire("ag_new", 1))
  // A wake lost is sent again by a later hand-off, once it is `resendAfterMs` old (not sooner:
  // a wave of releases would each send it again); the next waiter keeps its place.
  assert.deepStrictEqual(yield* store.handOff(1, hour), [])
  assert.deepStrictEqual(yield* store.handOff(1, 0), woken)
  assert.deepStrictEqual(yield* store.permits, ["ag_c2"])
  assert.isTrue(yield* store.acquire("ag_c2", 1))
  assert.deepStrictEqual(yield* store.handOff(1, 0), [])
  // Handed now, woken first; then those handed earlier and not admitted yet.
  assert.isFalse(yield* store.acquire("ag_c4", 1, { executionId: "exec-ag_c4", clock: "permit/1" }))
  yield* store.release("ag_c2")
  assert.deepStrictEqual(yield* store.handOff(1, hour), [{ executionId: "exec-ag_c3", clock: "permit/0" }])
  assert.deepStrictEqual(yield* store.handOff(2, 0), [
    { executionId: "exec-ag_c4", clock: "permit/1" },
    { executionId: "exec-ag_c3", clock: "permit/0" }
  ])
  yield* store.release("ag_c3")
  yield* store.release("ag_c4")

  // A parent's wait: the look records its clock and reads its unfinished children.
  const looked = yield* store.look("ag_p", undefined, "wait/1/0/0")
  assert.deepStrictEqual(ids(looked.rows), ["ag_c1", "ag_c2"])
  assert.isAtLeast(looked.now, 0)
  assert.deepStrictEqual(yield* store.parentWaiting("ag_c1"), { executionId: "exec-ag_p", waitingOn: "wait/1/0/0" })
  const byId = yield* store.look("ag_p", ["ag_c2", "ag_none"], null)
  assert.deepStrictEqual(byId.rows.map((r) => r.agentId), ["ag_c2"])
  assert.deepStrictEqual(yield* store.parentWaiting("ag_c1"), { executionId: "exec-ag_p", waitingOn: null })
  assert.isUndefined(yield* store.parentWaiting("ag_p"))

  // The end of a run gives its permit back; a cancel recorded before it stands.
  yield* store.finishRun("ag_c2", { status: "completed", text: "ok", steps: 1, toolCalls: 0 }, true)
  assert.strictEqual((yield* store.get("ag_c2"))?.status, "completed")
  assert.deepStrictEqual(yield* store.permits, [])
  yield* store.update("ag_c1", { status: "cancelled", reason: "stop" })
  yield* store.finishRun("ag_c1", { status: "completed", text: "late" }, false)
  assert.strictEqual((yield* store.get("ag_c1"))?.status, "cancelled")
  assert.deepStrictEqual(yield* store.cancelledAmong(["ag_c1", "ag_c2", "ag_none"]), ["ag_c1"])
  assert.deepStrictEqual(yield* store.cancelledAmong([]), [])
  assert.deepStrictEqual((yield* store.look("ag_p", undefined, null)).rows, [])

  // The inbox, and a marker that is there once.
  yield* store.sendInput("ag_p", "one")
  yield* store.sendInput("ag_p", "two")
  assert.deepStrictEqual(yield* store.takeInbox("ag_p"), ["one", "two"])
  assert.deepStrictEqual(yield* store.takeInbox("ag_p"), [])
  assert.isTrue(yield* store.startToolCall("ag_p", { run: 0, step: 1, slot: 1000 }))
  assert.isFalse(yield* store.startToolCall("ag_p", { run: 0, step: 1, slot: 1000 }))

  // The heartbeat's look: a running sub-agent without progress for `seconds` (none at 1 hour).
  yield* store.update("ag_p", { status: "running" })
  assert.deepStrictEqual(yield* store.stale(3600), [])
})

/**
 * On PostgreSQL: a commit that fails leaves none of its writes and no journal entry; three
 * executions of one step at once make their writes once, and all get one result.
 */
const journalTransactions = Effect.gen(function*() {
  const store = yield* ClusterStore.ClusterStore
  yield* store.insertMany([row("ag_t")])
  const key = { agentId: "ag_t", executionId: "exec-ag_t", name: "model/0" }
  const record = store.recordStep("ag_t", [{ at: { run: 0, step: 0, slot: 100 }, message: answer }], usage)
  const dies = store.runStep(
    key,
    Effect.succeed({ result: "never", commit: Effect.andThen(record, Effect.die("crash after the write")) })
  )
  assert.isTrue(Exit.isFailure(yield* Effect.exit(dies)))
  assert.deepStrictEqual(yield* store.transcript("ag_t"), [])
  assert.strictEqual((yield* store.get("ag_t"))?.tokens, 0)
  assert.deepStrictEqual(yield* store.journal("exec-ag_t"), new Map())

  const outcomes = yield* Effect.all(
    ["a", "b", "c"].map((name) => store.runStep(key, Effect.succeed({ result: name, commit: record }))),
    { concurrency: "unbounded" }
  )
  const ran = outcomes.filter((o) => o._tag === "Ran")
  assert.strictEqual(ran.length, 1)
  const result = ran[0]!._tag === "Ran" ? ran[0]!.result : ""
  assert.deepStrictEqual(outcomes.filter((o) => o._tag === "Journaled"), [
    { _tag: "Journaled", result },
    { _tag: "Journaled", result }
  ])
  assert.deepStrictEqual(yield* store.transcript("ag_t"), [answer])
  assert.strictEqual((yield* store.get("ag_t"))?.tokens, 7)
})

describe("ClusterStore joined statements", () => {
  it.effect("in memory", () => Effect.provide(contract, ClusterStore.layerMemory))

  it.effect.skipIf(reason !== undefined)("on PostgreSQL", () =>
    Effect.gen(function*() {
      const layer = yield* sqlStore
      yield* Effect.provide(Effect.andThen(PgClusterStore.migrate, contract), layer)
    }), 60_000)

  it.live("on SQLite", () => Effect.scoped(sqliteStore(contract)))
})

describe("ClusterStore, every other method", () => {
  it.effect("in memory", () => Effect.provide(everyMethod, ClusterStore.layerMemory))

  it.effect.skipIf(reason !== undefined)("on PostgreSQL", () =>
    Effect.gen(function*() {
      const layer = yield* sqlStore
      yield* Effect.provide(Effect.andThen(PgClusterStore.migrate, everyMethod), layer)
    }), 60_000)

  it.live("on SQLite", () => Effect.scoped(sqliteStore(everyMethod)))
})

describe("ClusterStore step journal", () => {
  it.effect("in memory", () => Effect.provide(journalContract, ClusterStore.layerMemory))

  it.effect.skipIf(reason !== undefined)("on PostgreSQL", () =>
    Effect.gen(function*() {
      const layer = yield* sqlStore
      yield* Effect.provide(
        Effect.andThen(PgClusterStore.migrate, Effect.andThen(journalContract, journalTransactions)),
        layer
      )
    }), 60_000)

  it.live("on SQLite", () => Effect.scoped(sqliteStore(Effect.andThen(journalContract, journalTransactions))))
})

// One status enum and one usage schema for both runtimes: a cluster row, an embedded record and
// a journaled model step use core's `AgentStatus` and `Usage`, so their encoded forms agree.
describe("ClusterStore rows share core's AgentStatus and Usage", () => {
  it("a row's status is AgentStatus (with interrupted, which ends a run), as a record's is", () => {
    assert.strictEqual(ClusterStore.AgentRow.fields.status, AgentStatus.AgentStatus)
    assert.strictEqual(SubAgentRecord.SubAgentRecord.fields.status, AgentStatus.AgentStatus)
    assert.strictEqual(Schema.decodeUnknownSync(ClusterStore.AgentRow.fields.status)("interrupted"), "interrupted")
    assert.isTrue(ClusterStore.finished("interrupted"))
    assert.isFalse(ClusterStore.finished("running"))
  })

  it("a row's usage, a record's tokens and a model step's usage are one Usage: whole tokens, the same JSON", () => {
    assert.strictEqual(AgentSteps.ModelStep.fields.usage, Usage.Usage)
    assert.strictEqual(SubAgentRecord.SubAgentRecord.fields.tokens, Usage.Usage)
    const decodeRow = Schema.decodeUnknownResult(ClusterStore.AgentRow)
    const decoded = decodeRow({ ...row("ag_a"), usage: { input: 3, output: 2, cached: 1 } })
    assert.isTrue(Result.isSuccess(decoded) && decoded.success.usage !== undefined)
    if (Result.isSuccess(decoded)) {
      assert.deepStrictEqual(Schema.encodeSync(Usage.Usage)(decoded.success.usage!), { input: 3, output: 2, cached: 1 })
    }
    const fractional = { input: 1.5, output: 0, cached: 0 }
    assert.isTrue(Result.isFailure(decodeRow({ ...row("ag_a"), usage: fractional })))
    assert.isTrue(Result.isFailure(Schema.decodeUnknownResult(SubAgentRecord.SubAgentRecord.fields.tokens)(fractional)))
    assert.strictEqual(ClusterStore.stepTokens({ input: 3, output: 2, cached: 1 }), 5)
  })
})

// Schema version 5 added the `claims` column: `migrate` adds it to a version 4 SQLite file.
describe("ClusterStore schema version 5", () => {
  it.live("migrate adds the claims column to a version 4 SQLite file, and rows keep claims", () =>
    Effect.gen(function*() {
      const file = path.join(sqliteDir, `store${sqliteFiles++}.db`)
      yield* Effect.provide(
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          yield* SqliteClusterStore.migrate
          yield* sql`ALTER TABLE fibril_agents DROP COLUMN claims`
          yield* sql`UPDATE fibril_meta SET value = '4' WHERE key = 'schema_version'`
          assert.isTrue(Exit.isFailure(yield* Effect.exit(SqliteClusterStore.checkSchema)))
          yield* SqliteClusterStore.migrate
          yield* SqliteClusterStore.checkSchema
          yield* Effect.provide(
            Effect.gen(function*() {
              const store = yield* ClusterStore.ClusterStore
              yield* store.insert(row("ag_v5"))
              yield* store.finishRun("ag_v5", { status: "completed", text: "done", claims }, false)
              assert.deepStrictEqual((yield* store.get("ag_v5"))?.claims, claims)
            }),
            SqliteClusterStore.layer
          )
        }),
        Sqlite.layer(file)
      )
    }))
})
