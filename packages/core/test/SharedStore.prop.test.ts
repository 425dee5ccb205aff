// Property: processes sharing one SQLite store, under random schedules of spawn, finish,
// cross-process cancel, crash (a kill: nothing more is written) and restart, with time on
// the TestClock. Each "process" is its own stack (store instance, Session, SubAgentManager)
// on the same state directory. After every step the database is read directly: no record is
// lost, a terminal state never changes, only a crashed owner's agents are ever interrupted,
// they all are once its lease has expired and a live process reconciled, and a cancel sent
// from another process ends a live owner's agent cancelled.
import { assert, describe, it } from "@effect/vitest"
import { ScriptedModel } from "@fibril/testkit"
import { Clock, Context, Deferred, Effect, Exit, FileSystem, Layer, Path, Schema, Scope } from "effect"
import { TestClock } from "effect/testing"
import { DatabaseSync } from "node:sqlite"
import * as AgentEvents from "../src/AgentEvents.ts"
import * as Models from "../src/Models.ts"
import * as Permission from "../src/Permission.ts"
import * as Session from "../src/Session.ts"
import * as SqliteSubAgentStore from "../src/SqliteSubAgentStore.ts"
import * as SubAgentManager from "../src/SubAgentManager.ts"
import { isTerminal, type Status } from "../src/SubAgentRecord.ts"
import * as SubAgentStore from "../src/SubAgentStore.ts"
import * as ToolRegistry from "../src/ToolRegistry.ts"
import * as Workspace from "../src/Workspace.ts"
import { provideNode, report } from "./support.ts"

/** Short, so a schedule crosses lease expiries often. */
const leaseMs = 3000

/**
 * The core of Fibril.layerWithModels (the agents here only answer, so no tools), with the
 * store given: the test keeps its crash control. Each process is built with a MemoMap of its
 * own, so two processes never share a layer instance (Effect 4 memoizes across provides).
 */
const processLayer = (
  root: string,
  store: SubAgentStore.SubAgentStore["Service"],
  script: ScriptedModel.ScriptInput
) => {
  const base = Layer.mergeAll(
    ToolRegistry.layer,
    AgentEvents.layer,
    Layer.succeed(SubAgentStore.SubAgentStore, store),
    Permission.layer()
  ).pipe(Layer.provideMerge(Workspace.layer(root)))
  // Agents wait on their gates across many simulated seconds: no model timeout, no watchdog.
  const session = Session.layer({ maxRetries: 0, apiTimeoutSecs: 1_000_000 }).pipe(Layer.provideMerge(base))
  return SubAgentManager.layer({ maxConcurrent: 64, heartbeatTimeoutSecs: 1_000_000 }).pipe(
    Layer.provideMerge(session),
    Layer.provideMerge(Models.fromLanguageModel()),
    Layer.provide(ScriptedModel.layer(script))
  )
}

interface Process {
  readonly boot: string
  readonly scope: Scope.Closeable
  readonly control: SqliteSubAgentStore.Control
  readonly manager: SubAgentManager.SubAgentManager["Service"]
}

let hosts = 0

/** One real turn of the event loop: the stores group-commit on `setImmediate`. */
const macrotask = Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))

const settle = Effect.gen(function*() {
  for (let i = 0; i < 4; i++) {
    yield* Effect.yieldNow
    yield* macrotask
  }
})

// One step of a schedule. `kind` is weighted below; `on` picks a process slot, `target` an
// agent (modulo the agents spawned), `ms` a wait.
const Step = Schema.Struct({
  kind: Schema.Int.pipe(Schema.check(Schema.isBetween({ minimum: 0, maximum: 11 }))),
  on: Schema.Int.pipe(Schema.check(Schema.isBetween({ minimum: 0, maximum: 1 }))),
  target: Schema.Int.pipe(Schema.check(Schema.isBetween({ minimum: 0, maximum: 30 }))),
  ms: Schema.Int.pipe(Schema.check(Schema.isBetween({ minimum: 0, maximum: 2 * leaseMs })))
})
const Schedule = Schema.Array(Step).pipe(Schema.check(Schema.isMinLength(8), Schema.isMaxLength(20)))

type Action = "spawn" | "finish" | "cancel" | "crash" | "start" | "wait"
const actions: ReadonlyArray<Action> = [
  "spawn",
  "spawn",
  "spawn",
  "spawn",
  "finish",
  "finish",
  "cancel",
  "cancel",
  "crash",
  "start",
  "wait",
  "wait"
]

describe("SubAgentStore shared by processes (property)", () => {
  it.effect.prop(
    "no record lost, terminal states final, only gone owners' agents interrupted, cross-process cancels land",
    { schedule: Schedule },
    ({ schedule }) =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const runScope = yield* Effect.scope
        const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
        const dir = path.join(root, ".fibril", "state")

        // The model: each agent waits on its gate, then answers.
        const gates = new Map<string, Deferred.Deferred<void>>()
        const gate = (prompt: string) => {
          let found = gates.get(prompt)
          if (found === undefined) gates.set(prompt, found = Deferred.makeUnsafe())
          return found
        }
        const script: ScriptedModel.ScriptInput = {
          rules: [{ respond: (c) => Effect.as(Deferred.await(gate(c.prompt)), { text: report(`done ${c.prompt}`) }) }]
        }

        const start = Effect.fnUntraced(function*() {
          const scope = yield* Scope.fork(runScope, "sequential")
          // Each process on a host of its own: a crash is then seen through its lease (on one
          // host, its pid — this test's, alive — would keep it alive; SharedLiveness.prop.test.ts).
          const identity: SqliteSubAgentStore.Identity = {
            pid: process.pid,
            host: `host-${++hosts}.test`,
            start: undefined,
            probe: () => ({ alive: true, start: undefined })
          }
          const { control, store } = yield* Scope.provide(
            SqliteSubAgentStore.makeSqliteWithControl({ dir, leaseMs, identity }),
            scope
          )
          const context = yield* Layer.buildWithMemoMap(
            processLayer(root, store, script),
            yield* Layer.makeMemoMap,
            scope
          )
          return {
            boot: store.owner.boot_id,
            scope,
            control,
            manager: Context.get(context, SubAgentManager.SubAgentManager)
          } satisfies Process
        })

        // The model of what the database must say.
        const slots: Array<Process | undefined> = [yield* start(), yield* start()]
        const liveOwners = new Set(slots.map((p) => p!.boot))
        assert.strictEqual(liveOwners.size, 2, "two owners")
        assert.notStrictEqual(slots[0]!.manager, slots[1]!.manager, "two stacks, nothing shared")
        /** Crashed owners: when, and the status of each of their agents at that moment. */
        const crashed = new Map<string, { readonly at: number; readonly statuses: Map<string, Status> }>()
        const agents: Array<{ readonly id: string; readonly owner: string; readonly prompt: string }> = []
        /** What each agent's record must end as. */
        const expected = new Map<string, Status>()
        /** The first terminal status seen for each agent. */
        const terminal = new Map<string, Status>()
        const trace: Array<string> = []

        const db = yield* Effect.acquireRelease(
          Effect.sync(() => new DatabaseSync(path.join(dir, SqliteSubAgentStore.databaseFileName))),
          (opened) => Effect.sync(() => opened.close())
        )
        const rows = () =>
          new Map(
            (db.prepare("SELECT agent_id, status, owner_boot FROM fibril_agents").all() as Array<
              Record<string, unknown>
            >)
              // A reconciled row's owner column is a tombstone, `gone:<boot id>`, of its last owner.
              .map((row) => [String(row["agent_id"]), {
                status: String(row["status"]) as Status,
                owner: String(row["owner_boot"]).replace(/^gone:/, "")
              }])
          )
        const fail = (message: string): never => assert.fail(`${message}\nschedule:\n  ${trace.join("\n  ")}`)

        /** Checks what holds at every moment, on the database as it is now. */
        const observe = Effect.sync(() => {
          for (const [id, row] of rows()) {
            const seen = terminal.get(id)
            if (seen !== undefined && seen !== row.status) fail(`${id} was ${seen}, is now ${row.status}`)
            if (isTerminal(row.status)) terminal.set(id, row.status)
            if (row.status === "interrupted" && liveOwners.has(row.owner)) {
              fail(`${id} is interrupted while its owner ${row.owner} is alive`)
            }
          }
        })

        const waitUntil = (done: () => boolean) =>
          Effect.gen(function*() {
            for (let i = 0; i < 200 && !done(); i++) yield* settle
            yield* observe
            return done()
          })

        /** Moves the TestClock in small steps, letting the stores commit in between. */
        const advance = (ms: number) =>
          Effect.gen(function*() {
            for (let left = ms; left > 0; left -= 250) {
              yield* TestClock.adjust(Math.min(250, left))
              yield* settle
              yield* observe
            }
          })

        /** Every live process reconciles (`list` does), as any call that looks at the store would. */
        const reconcileAll = Effect.forEach(
          slots,
          (p) => p === undefined ? Effect.void : Effect.asVoid(p.manager.list({ includeArchived: true })),
          { discard: true }
        )

        /** A crashed owner's agents once its lease has surely expired: all ended as the model says. */
        const checkExpired = Effect.gen(function*() {
          const now = yield* Clock.currentTimeMillis
          const stored = rows()
          for (const agent of agents) {
            const gone = crashed.get(agent.owner)
            if (gone === undefined || now <= gone.at + leaseMs) continue
            const status = stored.get(agent.id)?.status
            if (status !== expected.get(agent.id)) {
              fail(`${agent.id} of crashed ${agent.owner} is ${status}, expected ${expected.get(agent.id)}`)
            }
          }
        })

        for (const step of schedule) {
          const action = actions[step.kind]!
          const slot = slots[step.on]
          const agent = agents.length === 0 ? undefined : agents[step.target % agents.length]!
          trace.push(
            action === "finish" || action === "cancel"
              ? `${action} ${agent?.id ?? "(none)"} on=${step.on}`
              : action === "wait"
              ? `wait ${step.ms} ms`
              : `${action} on=${step.on}`
          )
          switch (action) {
            case "spawn": {
              if (slot === undefined) break
              const prompt = `job ${agents.length}`
              const view = yield* slot.manager.spawn(undefined, { prompt })
              agents.push({ id: view.agent_id, owner: slot.boot, prompt })
              expected.set(view.agent_id, "running")
              if (!(yield* waitUntil(() => rows().get(view.agent_id)?.status === "running"))) {
                fail(`${view.agent_id} never recorded running`)
              }
              break
            }
            case "finish": {
              if (agent === undefined) break
              yield* Deferred.succeed(gate(agent.prompt), undefined)
              if (!liveOwners.has(agent.owner) || isTerminal(expected.get(agent.id)!)) {
                // A dead process answers nothing; a finished agent asks nothing more.
                yield* settle
                yield* observe
                break
              }
              expected.set(agent.id, "completed")
              if (!(yield* waitUntil(() => rows().get(agent.id)?.status === "completed"))) {
                fail(`${agent.id} did not complete: ${rows().get(agent.id)?.status}`)
              }
              break
            }
            case "cancel": {
              if (agent === undefined) break
              // Through another process than the owner: the one in slot `on`, else the other.
              const canceller = [slot, slots[1 - step.on]].find((p) => p !== undefined && p.boot !== agent.owner)
              if (canceller === undefined) break
              const before = expected.get(agent.id)!
              const fiber = yield* Effect.forkChild(
                canceller.manager.cancel(agent.id, "cancelled from the other process"),
                {
                  startImmediately: true
                }
              )
              for (let i = 0; i < 40 && fiber.pollUnsafe() === undefined; i++) {
                yield* TestClock.adjust(250)
                yield* settle
                yield* observe
              }
              const exit = fiber.pollUnsafe()
              if (exit === undefined || !Exit.isSuccess(exit)) fail(`cancel of ${agent.id} did not return: ${exit}`)
              const returned = (exit as Exit.Success<SubAgentManager.AgentView>).value.status
              // A live owner cancels it; a crashed owner's lease runs out within the wait, and
              // the canceller's reconcile interrupts it.
              const after = isTerminal(before) ? before : liveOwners.has(agent.owner) ? "cancelled" : "interrupted"
              expected.set(agent.id, after)
              if (returned !== after) {
                fail(`cancel of ${agent.id} (was ${before}) returned ${returned}, expected ${after}`)
              }
              yield* settle
              yield* observe
              break
            }
            case "crash": {
              if (slot === undefined) break
              yield* slot.control.crash
              const at = yield* Clock.currentTimeMillis
              const stored = rows()
              const statuses = new Map<string, Status>()
              for (const a of agents) {
                if (a.owner !== slot.boot) continue
                const status = stored.get(a.id)!.status
                statuses.set(a.id, status)
                if (!isTerminal(status)) expected.set(a.id, "interrupted")
                else if (status !== expected.get(a.id)) {
                  fail(`${a.id} is ${status} at the crash, expected ${expected.get(a.id)}`)
                }
              }
              crashed.set(slot.boot, { at, statuses })
              liveOwners.delete(slot.boot)
              // Its finalizers run (its fibers end), but a crashed store writes nothing more.
              yield* Scope.close(slot.scope, Exit.void)
              slots[step.on] = undefined
              yield* settle
              yield* observe
              for (const [id, status] of statuses) {
                if (rows().get(id)!.status !== status) fail(`${id} changed after its owner crashed`)
              }
              break
            }
            case "start": {
              if (slot !== undefined) break
              // A new process: it reconciles as it starts.
              const started = yield* start()
              slots[step.on] = started
              liveOwners.add(started.boot)
              yield* settle
              yield* observe
              yield* checkExpired
              break
            }
            case "wait": {
              yield* advance(step.ms)
              yield* reconcileAll
              yield* settle
              yield* observe
              if (slots.some((p) => p !== undefined)) yield* checkExpired
              break
            }
          }
        }

        // Every lease of a crashed owner runs out; live processes and a new one reconcile.
        yield* advance(leaseMs + 200)
        yield* reconcileAll
        yield* Effect.scoped(
          Effect.flatMap(SqliteSubAgentStore.makeSqlite({ dir, leaseMs }), (store) => store.reconcile)
        )
        yield* settle
        yield* observe
        const stored = rows()
        for (const agent of agents) {
          const row = stored.get(agent.id)
          if (row === undefined) fail(`${agent.id} was lost`)
          if (row!.status !== expected.get(agent.id)) {
            fail(`${agent.id} is ${row!.status}, expected ${expected.get(agent.id)}`)
          }
          if (row!.owner !== agent.owner) fail(`${agent.id} changed owner`)
        }
        // Each live process reads the same states, for its own agents and the other's.
        for (const p of slots) {
          if (p === undefined) continue
          for (const agent of agents) {
            const view = yield* p.manager.result(agent.id, { block: false })
            if (view.status !== expected.get(agent.id)) fail(`${p.boot} reads ${agent.id} as ${view.status}`)
          }
        }
        return true
      }).pipe(Effect.scoped, provideNode),
    { arbitrary: { runs: 50, seed: 10 }, timeout: 60_000 }
  )
})
