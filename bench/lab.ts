/**
 * The orchestration lab's throughput (`npm run bench` runs it in a fresh process; alone:
 * `NODE_OPTIONS=--conditions=@fibril/source node bench/lab.ts [--quick]`): schedules per
 * second through the real runtime (Session, SubAgentManager, agent tools, memory store,
 * ScriptedModel) under a virtual clock, with the invariants checked on every run.
 *
 * - small: generated experiments of 1-3 sub-agents with faults and up to 4 outside
 *   operations, fixed depth/budget/heartbeat (Lab.check, every invariant).
 * - small, parallel: the same bounds over one worker thread per core (`fibril lab run
 *   --workers 0`, packages/cli/src/LabParallel.ts), timed end to end: starting the workers and
 *   loading the runtime in each is included.
 * - tree50: a tree of 50 agents (fan-out 3, cap 10, queue admission), every invariant checked.
 *
 * Prints one JSON object and writes bench/lab-results.json.
 */
import * as NodeServices from "@effect/platform-node/NodeServices"
import { Invariants, Lab, LabGenerators, Simulation } from "@fibril/testkit"
import * as Effect from "effect/Effect"
import { writeFileSync } from "node:fs"
import { availableParallelism } from "node:os"
import { fileURLToPath } from "node:url"
import * as LabParallel from "../packages/cli/src/LabParallel.ts"

const quick = process.argv.includes("--quick")

const timed = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const cpu = process.cpuUsage()
    const start = performance.now()
    const value = yield* effect
    const used = process.cpuUsage(cpu)
    return { value, wallMs: performance.now() - start, cpuMs: (used.user + used.system) / 1000 }
  })

const main = Effect.gen(function*() {
  const smallRuns = quick ? 500 : 2000
  const bounds = { maxNodes: 3, maxOps: 4, config: { maxDepth: 2, maxSteps: 6, heartbeatSecs: 300 } } as const
  // Warm-up: module loading and the JIT, not measured.
  yield* Lab.check({ runs: 100, seed: 1, bounds })
  const small = yield* timed(Lab.check({ runs: smallRuns, seed: 2, bounds }))
  if (small.value._tag !== "Passed") throw new Error(Lab.describe(small.value))
  const workers = availableParallelism()
  const parallelRuns = quick ? 1000 : 4000
  const parallel = yield* timed(LabParallel.check({ runs: parallelRuns, seed: 2, workers, bounds }))
  if (parallel.value.result._tag !== "Passed") throw new Error(Lab.describe(parallel.value.result))

  const treeRuns = quick ? 10 : 40
  // Cap 50: under a lower cap with queue admission a tree this deep starves (docs/lab.md, experiment 1).
  const tree = LabGenerators.balanced(50, 3, { cap: 50 })
  yield* Simulation.run(tree)
  let violations = 0
  const big = yield* timed(Effect.gen(function*() {
    for (let i = 0; i < treeRuns; i++) {
      const trace = yield* Simulation.run(tree)
      if (Invariants.firstViolation(trace) !== undefined) violations++
      if (trace.records.length !== 49) violations++
    }
  }))
  yield* Simulation.reset
  return {
    ok: violations === 0,
    small_runs: smallRuns,
    small_per_s: smallRuns / (small.wallMs / 1000),
    small_cpu_ms_per_schedule: small.cpuMs / smallRuns,
    parallel_workers: workers,
    small_parallel_runs: parallelRuns,
    small_parallel_per_s: parallelRuns / (parallel.wallMs / 1000),
    tree50_runs: treeRuns,
    tree50_per_s: treeRuns / (big.wallMs / 1000),
    tree50_cpu_ms_per_schedule: big.cpuMs / treeRuns
  }
})

const result = await Effect.runPromise(main.pipe(Effect.provide(NodeServices.layer)))
writeFileSync(
  fileURLToPath(new URL("./lab-results.json", import.meta.url)),
  JSON.stringify({ date: new Date().toISOString(), node: process.version, quick, ...result }, null, 2)
)
console.log(JSON.stringify(result))
