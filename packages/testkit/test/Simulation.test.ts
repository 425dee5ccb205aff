// Simulation.run in the form ({ seed, tree, faults, schedule }), forked-context nodes and
// the assign operation, each through the real runtime.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { Invariants, Lab, Simulation } from "../src/index.ts"

const provideNode = Effect.provide(NodeServices.layer)

describe("Simulation", () => {
  it.effect("run({ seed, tree, faults, schedule }) is the experiment it describes, byte for byte", () =>
    Effect.gen(function*() {
      const trace = yield* Simulation.run({
        seed: 42,
        config: { cap: 2 },
        tree: [{ work: 1, delayMs: 300 }, { parent: 1, delayMs: 500 }, { detached: true }],
        faults: { n2: "retryable", n3: "fatal" },
        schedule: [{ after: 200, op: "send_input", target: 0 }]
      })
      const experiment = {
        config: { ...Simulation.defaultConfig, cap: 2 },
        nodes: [
          { ...Simulation.defaults, work: 1, delayMs: 300, fault: "none" as const },
          { ...Simulation.defaults, parent: 1, delayMs: 500, fault: "retryable" as const },
          { ...Simulation.defaults, detached: true, fault: "fatal" as const }
        ],
        schedule: [{ after: 200, op: "send_input" as const, target: 0 }]
      }
      assert.deepStrictEqual(trace.experiment, experiment)
      const again = yield* Simulation.run(experiment, { seed: 42 })
      assert.strictEqual(Simulation.encode(trace), Simulation.encode(again))
      assert.deepStrictEqual(trace.records.map((r) => [r.agent, r.status]), [
        ["n1", "completed"],
        ["n2", "completed"],
        ["n3", "failed"]
      ])
      assert.isUndefined(Invariants.firstViolation(trace))
    }).pipe(provideNode))

  it.effect("a fault for an agent that is not in the tree is a SpecError naming the accepted ones", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Simulation.run({ tree: [{}, {}], faults: { n3: "hang" } }))
      assert.strictEqual(error._tag, "SpecError")
      assert.include(error.message, `"n3" is not a sub-agent of the tree; expected n1..n2`)
      const bad = yield* Effect.flip(Simulation.run({ tree: [{ work: 9 }] }))
      assert.include(bad.message, "not a valid experiment")
    }).pipe(provideNode))

  it.effect("a forked-context node starts from its parent's conversation, and its tools are within its parent's", () =>
    Effect.gen(function*() {
      const trace = yield* Simulation.run({
        seed: 1,
        tree: [{ work: 1 }, { parent: 1, fork: true, work: 1 }, { parent: 1 }]
      })
      assert.deepStrictEqual(trace.records.map((r) => [r.agent, r.status, r.forked ?? false]), [
        ["n1", "completed", false],
        ["n2", "completed", true],
        ["n3", "completed", false]
      ])
      const n2 = trace.records.find((r) => r.agent === "n2")!
      const n1 = trace.records.find((r) => r.agent === "n1")!
      assert.isTrue(n2.tools.every((tool) => n1.tools.includes(tool)))
      // Both children of n1 were handed to it once, the fork's result included.
      const carried = trace.requests.filter((r) => r.agent === "n1").flatMap((r) => r.carried)
      assert.deepStrictEqual(carried.filter((m) => m.startsWith("result:")).sort(), ["result:n2", "result:n3"])
      assert.isUndefined(Invariants.firstViolation(trace))
    }).pipe(provideNode))

  it.effect("assign narrows a running agent to explore; a widening back to general is refused", () =>
    Effect.gen(function*() {
      const trace = yield* Simulation.run({
        seed: 3,
        tree: [{ work: 3, delayMs: 1000 }],
        schedule: [{ after: 500, op: "assign", target: 0 }, { after: 1000, op: "assign", target: 1 }]
      })
      assert.deepStrictEqual(trace.ops.map((op) => [op.op, op.agent, op.outcome]), [
        ["assign", "n1", "assigned explore, delivered"],
        ["assign", "n1", "PermissionWidening"]
      ])
      const n1 = trace.records[0]!
      assert.deepStrictEqual([n1.role, n1.status], ["explore", "completed"])
      assert.isUndefined(Invariants.firstViolation(trace))
    }).pipe(provideNode))

  it.effect("a process crash: the restarted process finds the running agents interrupted in the SQLite store and resumes them from their stored transcripts", () =>
    Effect.gen(function*() {
      const trace = yield* Simulation.run({
        seed: 5,
        config: { cap: 2 },
        tree: [{ work: 2, delayMs: 1000 }, { parent: 1, work: 1, delayMs: 700 }],
        schedule: [
          { after: 2500, op: "crash", target: 0 },
          { after: 100, op: "resume", target: 0 },
          { after: 100, op: "resume", target: 1 }
        ]
      })
      // At 2.5 s n2 had completed and n1 was mid-run: the dead process reports nothing more;
      // the restarted one (once the old lease ran out) finds n1 interrupted.
      assert.deepStrictEqual(trace.crashes, [{ t: 2500, interrupted: ["n1"] }])
      assert.deepStrictEqual(trace.ops.map((op) => [op.op, op.agent, op.outcome]), [
        ["crash", "-", "restarted; interrupted: n1"],
        ["resume", "n1", "resumed running"],
        ["resume", "n2", "resumed running"]
      ])
      // The resumed runs start from what the store kept and only add to it.
      assert.deepStrictEqual(trace.resumes.map((r) => [r.agent, r.extends, r.after > r.before]), [
        ["n1", true, true],
        ["n2", true, true]
      ])
      assert.deepStrictEqual(trace.records.map((r) => [r.agent, r.status, r.roundTrip]), [
        ["n1", "completed", true],
        ["n2", "completed", true]
      ])
      assert.isFalse(
        trace.events.some((e) => e.t === 2500 && e.type === "interrupted"),
        "a dead process reports nothing"
      )
      assert.isUndefined(Invariants.firstViolation(trace))
      const again = yield* Simulation.run(trace.experiment, { seed: 5 })
      assert.strictEqual(Simulation.encode(again), Simulation.encode(trace))
    }).pipe(provideNode))

  it.effect("an agent a crash left interrupted: its reason names no pid or host, so the trace is the same in any process", () =>
    Effect.gen(function*() {
      const trace = yield* Simulation.run({
        seed: 5,
        tree: [{ work: 2, delayMs: 1000 }],
        schedule: [{ after: 1500, op: "crash", target: 0 }]
      })
      const n1 = trace.records[0]!
      assert.strictEqual(n1.status, "interrupted")
      assert.strictEqual(
        n1.reason,
        "Interrupted: the process that ran it (pid <pid> on <host>) ended before it finished"
      )
      assert.notInclude(Simulation.encode(trace), `pid ${process.pid}`)
    }).pipe(provideNode))

  it.effect("generated experiments with crashes hold every invariant", () =>
    Effect.gen(function*() {
      const result = yield* Lab.check({
        runs: 120,
        seed: 31,
        bounds: { maxNodes: 4, maxOps: 4, ops: ["crash", "resume", "cancel", "send_input", "jump"] }
      })
      yield* Simulation.reset
      assert.strictEqual(result._tag, "Passed", Lab.describe(result))
    }).pipe(provideNode), 120_000)
})
