// Property: owners that pause past their lease, clocks skewed by up to a minute either way,
// and readers that reconcile, in any interleaving, on one SQLite store. Each "process" is a
// store instance with an identity of its own (pid, start time, host) and its own clock (the
// TestClock plus its skew); the host's processes are a table the test keeps (every process
// here lives). After every step the database is read directly:
// - a terminal state written by a live owner is the row's state from then on (a takeover by
//   another host's reader before it does not lose it: the owner's end is kept);
// - no reader on the owner's host ever records a live owner's agent `interrupted`;
// - no time a process writes is later than its own clock.
import { assert, describe, it } from "@effect/vitest"
import { Clock, Effect, FileSystem, Path, Schema, Scope } from "effect"
import { TestClock } from "effect/testing"
import { DatabaseSync } from "node:sqlite"
import * as SqliteSubAgentStore from "../src/SqliteSubAgentStore.ts"
import { isTerminal, type Status, type SubAgentRecord } from "../src/SubAgentRecord.ts"
import * as SubAgentStore from "../src/SubAgentStore.ts"
import { owned } from "./records.ts"
import { provideNode } from "./support.ts"

const leaseMs = 3000
const minute = 60_000
const owners = 3
const readers = 2

const Skew = Schema.Int.pipe(Schema.check(Schema.isBetween({ minimum: -minute, maximum: minute })))
const Step = Schema.Struct({
  // 0-1 spawn, 2-3 finish, 4 pause, 5 resume, 6 reconcile, 7-8 wait
  kind: Schema.Int.pipe(Schema.check(Schema.isBetween({ minimum: 0, maximum: 8 }))),
  who: Schema.Int.pipe(Schema.check(Schema.isBetween({ minimum: 0, maximum: owners + readers - 1 }))),
  target: Schema.Int.pipe(Schema.check(Schema.isBetween({ minimum: 0, maximum: 30 }))),
  ms: Schema.Int.pipe(Schema.check(Schema.isBetween({ minimum: 0, maximum: 3 * leaseMs })))
})
const World = Schema.Struct({
  skews: Schema.Array(Skew).pipe(Schema.check(Schema.isMinLength(owners + readers))),
  /** Which processes run on the shared host (the others each on a host of their own). */
  shared: Schema.Array(Schema.Boolean).pipe(Schema.check(Schema.isMinLength(owners + readers))),
  schedule: Schema.Array(Step).pipe(Schema.check(Schema.isMinLength(10), Schema.isMaxLength(40)))
})

const terminalKinds: ReadonlyArray<"completed" | "failed" | "cancelled"> = ["completed", "failed", "cancelled"]

interface Proc {
  readonly index: number
  readonly store: SubAgentStore.SubAgentStore["Service"]
  readonly host: string
  readonly skew: number
  paused: boolean
}

const record = (
  owner: Proc,
  agentId: string,
  now: number,
  overrides: Partial<SubAgentRecord> = {}
): SubAgentRecord =>
  owned(owner.store, agentId, {
    created_at: now,
    transcript_handle: `t-${agentId}`,
    events: [{ at: now, type: "started" }],
    ...overrides
  })

describe("liveness under pauses, skewed clocks and reconciling readers (property)", () => {
  it.effect.prop(
    "a live owner's terminal state is never changed, and never recorded interrupted by a reader on its host",
    { world: World },
    ({ world }) =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = path.join(yield* fs.makeTempDirectoryScoped(), "state")
        const scope = yield* Effect.scope
        const base = yield* Clock.Clock
        // The host's processes: all of them live for the whole schedule.
        const running = new Map<number, string>()
        const probe = (pid: number) => {
          const start = running.get(pid)
          return start === undefined ? { alive: false as const } : { alive: true as const, start }
        }
        const procs: Array<Proc> = []
        for (let index = 0; index < owners + readers; index++) {
          const pid = 4000 + index
          running.set(pid, `${100 + index}`)
          const host = world.shared[index] ? "shared.test" : `own-${index}.test`
          const store = yield* Scope.provide(
            SqliteSubAgentStore.makeSqlite({
              dir,
              leaseMs,
              evictAfterMs: 365 * 24 * 60 * minute,
              identity: { pid, host, start: `${100 + index}`, probe }
            }),
            scope
          )
          procs.push({ index, store, host, skew: world.skews[index]!, paused: false })
        }
        /** `effect` as `proc` runs it: on its own clock. */
        const on = <A, E>(proc: Proc, effect: Effect.Effect<A, E>) =>
          Effect.provideService(effect, Clock.Clock, {
            ...base,
            currentTimeMillisUnsafe: () => base.currentTimeMillisUnsafe() + proc.skew,
            currentTimeMillis: Effect.sync(() => base.currentTimeMillisUnsafe() + proc.skew)
          })
        const nowOf = (proc: Proc) => base.currentTimeMillisUnsafe() + proc.skew

        const db = yield* Effect.acquireRelease(
          Effect.sync(() => new DatabaseSync(path.join(dir, SqliteSubAgentStore.databaseFileName))),
          (opened) => Effect.sync(() => opened.close())
        )
        const stored = (agentId: string): SubAgentRecord | undefined => {
          const row = db.prepare("SELECT record FROM fibril_agents WHERE agent_id = ?").get(agentId)
          return row === undefined ? undefined : JSON.parse(String(row["record"])) as SubAgentRecord
        }

        const agents: Array<{ readonly id: string; readonly owner: Proc }> = []
        /** What each live owner ended its agent as: the row must say so from then on. */
        const ended = new Map<string, Status>()
        const trace: Array<string> = []
        const fail = (message: string): never =>
          assert.fail(
            `${message}\nprocesses: ${
              procs.map((p) => `#${p.index} ${p.host} skew ${p.skew}`).join(", ")
            }\nschedule:\n  ${trace.join("\n  ")}`
          )

        const check = Effect.sync(() => {
          for (const agent of agents) {
            const row = stored(agent.id)
            if (row === undefined) fail(`${agent.id} was lost`)
            const status = row!.status
            const end = ended.get(agent.id)
            if (end !== undefined && status !== end) fail(`${agent.id} was ended ${end} by its owner, reads ${status}`)
            if (status === "interrupted") {
              const by = row!.events?.findLast((e) => e.type === "interrupted")?.detail ?? ""
              if (by.includes(` on ${agent.owner.host}:`)) {
                fail(`${agent.id} of live owner #${agent.owner.index} was interrupted on its own host: ${by}`)
              }
            }
          }
        })

        /** Each process that is not paused renews its lease as a live Fibril does (its request loop). */
        const renew = Effect.forEach(
          procs.filter((p) => !p.paused),
          (p) => on(p, Effect.asVoid(p.store.takeRequests)),
          { discard: true }
        )

        const reconcileBy = (reader: Proc) =>
          Effect.gen(function*() {
            const changed = yield* on(reader, reader.store.reconcile)
            const now = nowOf(reader)
            for (const r of changed) {
              const owner = agents.find((a) => a.id === r.agent_id)?.owner
              if (owner !== undefined && owner.host === reader.host) {
                fail(`#${reader.index} interrupted ${r.agent_id} of live owner #${owner.index} on their host`)
              }
              if ((r.finished_at ?? 0) > now) {
                fail(`#${reader.index} wrote finished_at ${r.finished_at} after its now ${now}`)
              }
              for (const e of r.events ?? []) {
                if (e.type === "interrupted" && e.at > now) {
                  fail(`#${reader.index} logged at ${e.at} after its now ${now}`)
                }
              }
            }
          })

        const finish = (agent: { readonly id: string; readonly owner: Proc }, kind: number) =>
          Effect.gen(function*() {
            const owner = agent.owner
            const now = nowOf(owner)
            const status = terminalKinds[kind % terminalKinds.length]!
            yield* on(
              owner,
              owner.store.put(
                record(owner, agent.id, now, {
                  status,
                  finished_at: now,
                  events: [{ at: now, type: "started" }, { at: now, type: status }]
                })
              )
            )
            yield* on(owner, owner.store.flush)
            ended.set(agent.id, status)
            // A takeover kept in the history is dated no later than the owner's own clock.
            for (const e of stored(agent.id)?.events ?? []) {
              if (e.at > now) fail(`${agent.id}'s history has ${e.type} at ${e.at}, after its owner's now ${now}`)
            }
            const taken = (yield* owner.store.takenOver).find((t) => t.agent_id === agent.id)
            if (taken !== undefined && !taken.kept) fail(`${agent.id}'s end was not kept: ${taken.by}`)
          })

        for (const step of world.schedule) {
          const proc = procs[step.who]!
          const ownerProc = procs[step.who % owners]!
          const agent = agents.length === 0 ? undefined : agents[step.target % agents.length]!
          switch (step.kind) {
            case 0:
            case 1: {
              if (ownerProc.paused) break
              const id = `agent_${agents.length}`
              trace.push(`#${ownerProc.index} spawns ${id}`)
              yield* on(ownerProc, ownerProc.store.put(record(ownerProc, id, nowOf(ownerProc))))
              yield* on(ownerProc, ownerProc.store.flush)
              agents.push({ id, owner: ownerProc })
              break
            }
            case 2:
            case 3: {
              if (agent === undefined || agent.owner.paused || ended.has(agent.id)) break
              trace.push(`#${agent.owner.index} ends ${agent.id}`)
              yield* finish(agent, step.target)
              break
            }
            case 4: {
              trace.push(`#${ownerProc.index} paused`)
              ownerProc.paused = true
              break
            }
            case 5: {
              trace.push(`#${ownerProc.index} continues`)
              ownerProc.paused = false
              yield* on(ownerProc, Effect.asVoid(ownerProc.store.takeRequests))
              break
            }
            case 6: {
              if (proc.paused) break
              trace.push(`#${proc.index} reconciles`)
              yield* reconcileBy(proc)
              break
            }
            default: {
              trace.push(`wait ${step.ms} ms`)
              // Time passes in slices of a third of a lease: the processes that run renew.
              for (let left = step.ms; left > 0; left -= leaseMs / 3) {
                yield* TestClock.adjust(Math.min(leaseMs / 3, left))
                yield* renew
              }
            }
          }
          yield* check
        }

        // Everyone wakes, every reader reconciles, every owner ends what it still runs.
        for (const p of procs) p.paused = false
        yield* renew
        for (const p of procs) yield* reconcileBy(p)
        yield* check
        for (const agent of agents) if (!ended.has(agent.id)) yield* finish(agent, 0)
        for (const p of procs) yield* reconcileBy(p)
        yield* check
        for (const agent of agents) assert.isTrue(isTerminal(stored(agent.id)!.status))
      }).pipe(Effect.scoped, provideNode),
    { arbitrary: { runs: 60 } }
  )
})
