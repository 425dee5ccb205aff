/**
 * Two orchestration experiments with the lab (docs/lab.md). Each returns its measurements and
 * an SVG figure of one representative run; a third figure is the picture of a failure, a
 * planted bug found and shrunk. Run directly to write the figures to docs/lab/:
 *
 *   NODE_OPTIONS=--conditions=@fibril/source node examples/lab-experiments.ts
 */
import { NodeServices } from "@effect/platform-node"
import { Lab, LabBugs, LabGenerators, LabReport, Simulation } from "@fibril/testkit"
import { Effect } from "effect"
import { mkdirSync, writeFileSync } from "node:fs"
import { fileURLToPath } from "node:url"

type Node = LabGenerators.Node

const node = (parent: number, fields: Partial<Node> = {}): Node => ({
  parent,
  role: "general",
  detached: false,
  work: 1,
  delayMs: 1000,
  tokens: 100,
  fault: "none",
  ...fields
})

/** A complete tree of `depth` levels below the root with `fanOut` children per agent. */
const completeTree = (depth: number, fanOut: number, fields: Partial<Node> = {}): Array<Node> => {
  const nodes: Array<Node> = []
  let level = [0]
  for (let d = 1; d <= depth; d++) {
    const next: Array<number> = []
    for (const parent of level) {
      for (let c = 0; c < fanOut; c++) {
        nodes.push(node(parent, fields))
        next.push(nodes.length)
      }
    }
    level = next
  }
  return nodes
}

const autoCancelled = (trace: Simulation.Trace) =>
  trace.records.filter((r) => r.status === "cancelled" && /Auto-cancelled/.test(r.reason ?? "")).length

/** The most sub-agents with a model call in flight at once (the lab's measure of working agents). */
const peakWorking = (trace: Simulation.Trace) => Math.max(0, ...trace.requests.map((r) => r.working ?? 0))

/** The most sub-agents running at once (started, not ended), waiting ones included. */
const peakRunning = (trace: Simulation.Trace) => {
  const running = new Set<string>()
  let peak = 0
  for (const event of trace.events) {
    if (event.depth === 0) continue
    if (event.type === "started") running.add(event.agent)
    if (["completed", "failed", "cancelled", "interrupted"].includes(event.type)) running.delete(event.agent)
    peak = Math.max(peak, running.size)
  }
  return peak
}

/**
 * Experiment 1: does queue admission starve deep trees under a cap of 3? Trees of fan-out 2
 * and depth 1-3 (2, 6, 14 sub-agents) under `maxConcurrent = 3`, queue admission, a 300 s
 * heartbeat. A parent waiting for its children lends its permit to one of them that is queued
 * (before that, it kept it, and the depth-3 tree deadlocked until the heartbeat).
 */
export const starvation = Effect.gen(function*() {
  const rows: Array<{
    depth: number
    agents: number
    completed: number
    autoCancelled: number
    neverStarted: number
    peakWorking: number
    peakRunning: number
    /** When the root completed (virtual ms), if it did. */
    rootDoneMs: number | undefined
  }> = []
  let figure = ""
  for (const depth of [1, 2, 3]) {
    const experiment: LabGenerators.Experiment = {
      config: { cap: 3, admission: "queue", maxDepth: depth, maxSteps: 8, heartbeatSecs: 300 },
      nodes: completeTree(depth, 2),
      schedule: []
    }
    const trace = yield* Simulation.run(experiment)
    const started = new Set(trace.events.filter((e) => e.type === "started").map((e) => e.agent))
    rows.push({
      depth,
      agents: experiment.nodes.length,
      completed: trace.records.filter((r) => r.status === "completed").length,
      autoCancelled: autoCancelled(trace),
      neverStarted: experiment.nodes.length - trace.records.filter((r) => started.has(r.agent)).length,
      peakWorking: peakWorking(trace),
      peakRunning: peakRunning(trace),
      rootDoneMs: trace.events.find((e) => e.agent === "n0" && e.type === "completed")?.t
    })
    if (depth === 2) figure = LabReport.svg(trace, { title: "cap 3, queue admission, depth 2, fan-out 2" })
  }
  return { rows, figure }
})

/**
 * Experiment 2: what does a heartbeat of N seconds cost in false cancellations under slow
 * models? A coordinator (depth 1) with three workers, each making 3 tool calls and answering,
 * every model turn taking 5 s (20 s per worker). Nothing is stuck, so every auto-cancellation
 * is a false one.
 */
export const heartbeat = Effect.gen(function*() {
  const rows: Array<{ heartbeatSecs: number; completed: number; autoCancelled: number; virtualMs: number }> = []
  let figure = ""
  for (const heartbeatSecs of [5, 10, 30, 300]) {
    const experiment: LabGenerators.Experiment = {
      config: { cap: 10, admission: "queue", maxDepth: 2, maxSteps: 8, heartbeatSecs },
      nodes: [
        node(0, { work: 0, delayMs: 1000 }),
        node(1, { work: 3, delayMs: 5000 }),
        node(1, { work: 3, delayMs: 5000 }),
        node(1, { work: 3, delayMs: 5000 })
      ],
      schedule: []
    }
    const trace = yield* Simulation.run(experiment)
    rows.push({
      heartbeatSecs,
      completed: trace.records.filter((r) => r.status === "completed").length,
      autoCancelled: autoCancelled(trace),
      virtualMs: trace.end
    })
    if (heartbeatSecs === 10) figure = LabReport.svg(trace, { title: "heartbeat 10 s, model turns of 5 s" })
  }
  return { rows, figure }
})

/**
 * The picture of a failure: the lab against a manager that admits one sub-agent over its cap
 * (`LabBugs.capPlusOne`), as `fibril lab run --tamper cap+1 --seed 7` then `fibril lab report`
 * draw it: the shrunk experiment's run, its violation marked.
 */
export const plantedBug = Effect.gen(function*() {
  const result = yield* Lab.check({ runs: 300, seed: 7, tamper: LabBugs.capPlusOne })
  if (result._tag === "Passed") return yield* Effect.die(new Error("cap+1 was not caught"))
  return { violation: result.violation, figure: LabReport.svg(result.trace, { violation: result.violation }) }
})

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const dir = fileURLToPath(new URL("../docs/lab/", import.meta.url))
  mkdirSync(dir, { recursive: true })
  const program = Effect.gen(function*() {
    const one = yield* starvation
    const two = yield* heartbeat
    const three = yield* plantedBug
    yield* Simulation.reset
    writeFileSync(`${dir}starvation.svg`, one.figure)
    writeFileSync(`${dir}heartbeat.svg`, two.figure)
    writeFileSync(`${dir}cap-plus-one.svg`, three.figure)
    console.table(one.rows)
    console.table(two.rows)
  })
  await Effect.runPromise(program.pipe(Effect.provide(NodeServices.layer)))
}
