// Property: random schedules of spawn / complete / fail / crash / cancel under a random cap.
import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Deferred, Effect, Fiber, Option, PubSub, Schema } from "effect"
import { AgentEvents, isTerminal } from "../src/AgentEvents.ts"
import { Session } from "../src/Session.ts"
import { SubAgentManager } from "../src/SubAgentManager.ts"
import { isTerminal as isTerminalStatus } from "../src/SubAgentRecord.ts"
import { provideNode, report, setup } from "./support.ts"

const Target = Schema.Int.pipe(Schema.check(Schema.isBetween({ minimum: 0, maximum: 30 })))
const Op = Schema.Union([
  Schema.Struct({ op: Schema.Literal("spawn") }),
  Schema.Struct({ op: Schema.Literals(["complete", "fail", "crash", "cancel"]), target: Target })
])
const Cap = Schema.Int.pipe(Schema.check(Schema.isBetween({ minimum: 1, maximum: 4 })))
const Ops = Schema.Array(Op).pipe(Schema.check(Schema.isMaxLength(24)))

const settle = Effect.gen(function*() {
  for (let i = 0; i < 5; i++) yield* Effect.yieldNow
})

describe("SubAgentManager (property)", () => {
  it.effect.prop(
    "running agents never exceed the cap, each agent ends exactly once, interrupting the root leaves nothing running",
    { cap: Cap, queue: Schema.Boolean, ops: Ops },
    ({ cap, queue, ops }) =>
      Effect.gen(function*() {
        const gates = new Map<string, Deferred.Deferred<"complete" | "fail" | "crash">>()
        const gate = (prompt: string) => {
          let found = gates.get(prompt)
          if (found === undefined) {
            found = Deferred.makeUnsafe()
            gates.set(prompt, found)
          }
          return found
        }
        const script: ScriptedModel.ScriptInput = {
          rules: [
            { match: { depth: 0 }, turns: [{ hang: true }] },
            {
              respond: (c) =>
                Effect.flatMap(Deferred.await(gate(c.prompt)), (action): Effect.Effect<ScriptedModel.Turn> =>
                  action === "complete"
                    ? Effect.succeed({ text: report("done") })
                    : action === "fail"
                    ? Effect.succeed({ error: { kind: "fatal", message: "scripted failure" } })
                    : Effect.die("scripted crash"))
            }
          ]
        }
        const { get } = yield* setup(script, { maxRetries: 0 }, {
          subagents: { maxConcurrent: cap, admission: queue ? "queue" : "reject" }
        })
        const manager = get(SubAgentManager)
        const session = get(Session)
        const subscription = yield* get(AgentEvents).subscribe
        const root = yield* session.create()
        const rootFiber = yield* Effect.forkChild(session.prompt(root.id, "root"), { startImmediately: true })
        for (let i = 0; i < 20 && Option.isNone(session.scopeOf(root.id)); i++) {
          yield* Effect.yieldNow
        }
        assert.isTrue(Option.isSome(session.scopeOf(root.id)))

        const spawned: Array<string> = []
        let n = 0
        for (const step of ops) {
          if (step.op === "spawn") {
            const running = yield* manager.running
            const result = yield* Effect.result(manager.spawn(root.id, { prompt: `a${n++}` }))
            if (result._tag === "Success") {
              spawned.push(result.success.agent_id)
            } else {
              assert.isFalse(queue, "queue admission never refuses")
              assert.strictEqual(result.failure._tag, "CapReached")
              assert.strictEqual(running, cap)
            }
          } else if (spawned.length > 0) {
            const id = spawned[step.target % spawned.length]!
            const agent = yield* manager.result(id, { block: false })
            if (step.op === "cancel") {
              yield* manager.cancel(id)
              assert.isTrue(isTerminalStatus((yield* manager.result(id, { block: false })).status))
            } else {
              yield* Deferred.succeed(gate(agent.objective), step.op)
              if (agent.status === "running") {
                yield* manager.wait([id], { mode: "all" })
              }
            }
          }
          yield* settle
          const running = yield* manager.running
          assert.isAtMost(running, cap)
        }

        yield* Fiber.interrupt(rootFiber)
        yield* settle
        const records = yield* manager.list({ includeArchived: true })
        assert.strictEqual(records.length, spawned.length, "a record per admitted spawn, none for refused ones")
        for (const record of records) {
          assert.isTrue(isTerminalStatus(record.status), `${record.agent_id} is ${record.status}`)
        }
        assert.strictEqual(yield* manager.running, 0)

        // Replay the events: concurrency never above the cap, one terminal event per agent.
        const events = yield* PubSub.takeAll(subscription)
        const active = new Set<string>()
        const terminal = new Map<string, number>()
        let peak = 0
        for (const event of events) {
          if (event.agent.depth !== 1) {
            continue
          }
          if (event.type === "started") {
            active.add(event.agent.agentId)
          }
          if (isTerminal(event.type)) {
            active.delete(event.agent.agentId)
            terminal.set(event.agent.agentId, (terminal.get(event.agent.agentId) ?? 0) + 1)
          }
          peak = Math.max(peak, active.size)
        }
        assert.isAtMost(peak, cap)
        for (const id of spawned) {
          assert.strictEqual(terminal.get(id), 1, `terminal events of ${id}`)
        }
      }).pipe(Effect.scoped, provideNode),
    { arbitrary: { runs: 100 } }
  )
})
