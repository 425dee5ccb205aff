// Property, rebuilt on the orchestration lab (@fibril/testkit Lab): generated agent trees with faults and outside operations (cancel, send_input, resume, kill, clock jumps)
// under a random cap and admission mode, each run through the real runtime and checked
// against every built-in invariant. What the hand-written random-schedule test checked is
// kept: working sub-agents never exceed the cap, nor running ones under reject admission (`cap`;
// with queue admission a waiting parent lends its permit); reject admission refuses only at the
// cap and queue admission never (`admission`); each agent ends exactly once and a cancel
// returns it ended (`terminal`); interrupting the root leaves nothing running (`nothing-left`).
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Lab, Simulation } from "@fibril/testkit"
import { Effect } from "effect"

// The full acceptance count: 10,000 schedules in 39 s on the 2-core machine (3.9 ms each through
// the full runtime, since the ScriptedModel's calls skip effect/ai's response decoding:
// DirectModel). FIBRIL_LAB_RUNS sets another count (docs/lab.md, "Cost").
const runs = Number(process.env["FIBRIL_LAB_RUNS"] ?? 10_000)

describe("SubAgentManager (property, on the lab)", () => {
  it.effect(
    `the invariants hold over ${runs} generated trees, fault and operation schedules`,
    () =>
      Effect.gen(function*() {
        const result = yield* Lab.check({
          runs,
          seed: 20_261_123,
          // Small trees: the manager's cap, admission and cancellation paths are all reached
          // with 1-3 sub-agents; fixed depth, budget and heartbeat keep the services reused.
          bounds: { maxNodes: 3, maxOps: 4, config: { maxDepth: 2, maxSteps: 6, heartbeatSecs: 300 } }
        })
        yield* Simulation.reset
        assert.strictEqual(result._tag, "Passed", Lab.describe(result))
        assert.strictEqual(result._tag === "Passed" ? result.runs : 0, runs)
        console.log(`lab: ${Lab.describe(result)} (${(result.elapsedMs / runs).toFixed(2)} ms per schedule)`)
      }).pipe(Effect.provide(NodeServices.layer)),
    600_000
  )
})
