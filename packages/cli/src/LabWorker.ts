/**
 * A worker thread of `fibril lab run --workers N` (LabParallel.ts): it runs the chunks it is
 * posted, each a single-threaded `Lab.check` of the chunk's seed, and posts progress and the
 * result (a failure already shrunk, its trace encoded). One world per worker, reused across
 * its chunks, as in one process.
 */
import * as NodeServices from "@effect/platform-node/NodeServices"
import { Invariants, Lab, LabBugs, Simulation } from "@fibril/testkit"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import { parentPort } from "node:worker_threads"
import type { Job, WorkerMessage } from "./LabParallel.ts"

const post = (message: WorkerMessage) => parentPort?.postMessage(message)

const runJob = (job: Job) =>
  Effect.gen(function*() {
    const invariants = job.invariants === undefined ? Invariants.all : Invariants.byNames(job.invariants)
    if ("unknown" in invariants) return post({ _tag: "Error", chunk: job.chunk, message: "unknown invariant" })
    const tamper = job.tamper === undefined ? undefined : LabBugs.all.find((bug) => bug.tamper.name === job.tamper)
    if (job.tamper !== undefined && tamper === undefined) {
      return post({ _tag: "Error", chunk: job.chunk, message: `unknown planted bug "${job.tamper}"` })
    }
    const step = Math.max(1, Math.floor(job.runs / 10))
    const result = yield* Lab.check({
      runs: job.runs,
      seed: job.seed,
      bounds: job.bounds,
      invariants,
      tamper: tamper?.tamper,
      onProgress: (done) => {
        if (done % step === 0 && done <= job.runs) post({ _tag: "Progress", chunk: job.chunk, done })
      }
    })
    if (result._tag === "Passed") return post({ _tag: "Passed", chunk: job.chunk, runs: result.runs })
    post({
      _tag: "Failed",
      chunk: job.chunk,
      seed: result.seed,
      runs: result.runs,
      shrinks: result.shrinks,
      violation: result.violation,
      original: result.original,
      shrunk: result.shrunk,
      trace: Simulation.encode(result.trace)
    })
  }).pipe(
    Effect.catchCause((cause) =>
      Effect.sync(() => post({ _tag: "Error", chunk: job.chunk, message: Cause.pretty(cause) }))
    ),
    Effect.provide(NodeServices.layer)
  )

// One job at a time, in the order posted (outside a worker thread, nothing).
let queue: Promise<void> = Promise.resolve()
parentPort?.on("message", (job: Job) => {
  queue = queue.then(() => Effect.runPromise(runJob(job)))
})
