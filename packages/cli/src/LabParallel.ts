/**
 * `fibril lab run --workers N`: an experiment run on N worker threads, one per core by default.
 *
 * The runs are cut into chunks of `chunkRuns` (the last one shorter); chunk `c` is the
 * single-threaded `Lab.check` of its own seed, `chunkSeed(seed, c)`, so what a run finds depends
 * on `seed` and `runs` only — not on how many workers there are, or on which of them ran which
 * chunk. Workers take chunks in order; when one fails, no later chunk is started and the
 * earlier ones are finished, and the failure of the lowest chunk is the run's (shrunk, with its
 * trace, inside its worker). That failure names the chunk's seed and runs: `fibril lab run
 * --seed <that seed> --runs <its runs> --workers 1` finds and shrinks it again in one thread.
 *
 * Invariants and planted bugs cross to the workers by name (functions do not cross threads):
 * the built-in ones only. The worker is `LabWorker.ts` beside this file (`.js` when built).
 */
import { Invariants, type Lab, type LabGenerators, Simulation } from "@fibril/testkit"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import { Worker } from "node:worker_threads"
import { chunkRuns } from "./LabNames.ts"

export { chunkRuns }

/** Chunk `c`'s seed: a 31-bit mix of the run's seed and the chunk's index. */
export const chunkSeed = (seed: number, chunk: number): number => {
  let h = Math.imul((seed >>> 0) ^ Math.imul(chunk + 1, 0x9e3779b1), 0x85ebca6b)
  h ^= h >>> 13
  h = Math.imul(h, 0xc2b2ae35)
  h ^= h >>> 16
  return h >>> 1
}

export interface ParallelOptions {
  readonly runs: number
  readonly seed: number
  readonly workers: number
  readonly bounds?: LabGenerators.Bounds | undefined
  /** Built-in invariants by name (default all). */
  readonly invariants?: ReadonlyArray<string> | undefined
  /** A planted bug (`LabBugs`) by name. */
  readonly tamper?: string | undefined
  readonly onProgress?: ((done: number) => void) | undefined
}

/** What a chunk's worker posts: progress, and at the end its result. */
export type WorkerMessage =
  | { readonly _tag: "Progress"; readonly chunk: number; readonly done: number }
  | { readonly _tag: "Passed"; readonly chunk: number; readonly runs: number }
  // A chunk's `Lab.Failed`, its trace encoded (`Simulation.encode`) to cross the thread.
  | Omit<Lab.Failed, "trace" | "elapsedMs"> & { readonly chunk: number; readonly trace: string }
  | { readonly _tag: "Error"; readonly chunk: number; readonly message: string }

/** A chunk's job, as posted to a worker. */
export interface Job {
  readonly chunk: number
  readonly seed: number
  readonly runs: number
  readonly bounds: LabGenerators.Bounds | undefined
  readonly invariants: ReadonlyArray<string> | undefined
  readonly tamper: string | undefined
}

export class LabWorkerError extends Data.TaggedError("LabWorkerError")<{ readonly message: string }> {}

const workerUrl = new URL(import.meta.url.endsWith(".ts") ? "./LabWorker.ts" : "./LabWorker.js", import.meta.url)

type Outcome = Extract<WorkerMessage, { _tag: "Passed" | "Failed" }>

/** Runs the chunks on `workers` threads; the lowest failing chunk's failure, or every chunk passed. */
const runChunks = (options: ParallelOptions, signal: AbortSignal): Promise<Map<number, Outcome>> =>
  new Promise((resolve, reject) => {
    const chunks = Math.ceil(options.runs / chunkRuns)
    const outcomes = new Map<number, Outcome>()
    const doneByChunk = new Map<number, number>()
    let done = 0
    let next = 0
    /** The lowest chunk that failed: nothing after it is started. */
    let firstFailed = Infinity
    let running = 0
    let settled = false
    const pool: Array<Worker> = []
    const finish = (error?: Error) => {
      if (settled) return
      settled = true
      for (const worker of pool) void worker.terminate()
      if (error === undefined) resolve(outcomes)
      else reject(error)
    }
    const dispatch = (worker: Worker) => {
      if (next >= chunks || next > firstFailed) {
        if (running === 0) finish()
        return
      }
      const chunk = next++
      const job: Job = {
        chunk,
        seed: chunkSeed(options.seed, chunk),
        runs: Math.min(chunkRuns, options.runs - chunk * chunkRuns),
        bounds: options.bounds,
        invariants: options.invariants,
        tamper: options.tamper
      }
      running++
      worker.postMessage(job)
    }
    // Module loading in the workers follows this process's: the sources under the
    // `@fibril/source` condition when this file is one of them, the built files otherwise.
    const execArgv = import.meta.url.endsWith(".ts") && !process.execArgv.includes("--conditions=@fibril/source")
      ? [...process.execArgv, "--conditions=@fibril/source"]
      : process.execArgv
    // Interrupted (Ctrl-C, a timeout around the check): the workers are stopped at once.
    signal.addEventListener("abort", () => finish(new Error("the run was interrupted")), { once: true })
    for (let i = 0; i < Math.min(options.workers, chunks); i++) {
      const worker = new Worker(workerUrl, { execArgv })
      pool.push(worker)
      worker.on("message", (message: WorkerMessage) => {
        if (message._tag === "Progress") {
          done += message.done - (doneByChunk.get(message.chunk) ?? 0)
          doneByChunk.set(message.chunk, message.done)
          options.onProgress?.(done)
          return
        }
        if (message._tag === "Error") {
          finish(new Error(`lab worker, chunk ${message.chunk}: ${message.message}`))
          return
        }
        running--
        outcomes.set(message.chunk, message)
        if (message._tag === "Failed") firstFailed = Math.min(firstFailed, message.chunk)
        dispatch(worker)
      })
      worker.on("error", (error) => finish(error))
      worker.on("exit", (code) => {
        if (!settled) finish(new Error(`a lab worker exited (code ${code}) before the run ended`))
      })
      dispatch(worker)
    }
  })

export interface ParallelResult {
  readonly result: Lab.Result
  /** The failing chunk: `Lab.check({ seed, runs })` (`--seed S --runs R --workers 1`) finds the same failure. */
  readonly chunk: { readonly index: number; readonly seed: number; readonly runs: number } | undefined
}

/**
 * `Lab.check` over `workers` threads (see the module's header). A passed run counts every
 * experiment; a failed one is the lowest failing chunk's, with that chunk's seed.
 */
export const check = (options: ParallelOptions): Effect.Effect<ParallelResult, LabWorkerError> =>
  Effect.gen(function*() {
    if (options.invariants !== undefined) {
      const known = Invariants.byNames(options.invariants)
      if ("unknown" in known) return yield* new LabWorkerError({ message: `unknown invariant "${known.unknown}"` })
    }
    const started = performance.now()
    const outcomes = yield* Effect.tryPromise({
      try: (signal) => runChunks(options, signal),
      catch: (error) => new LabWorkerError({ message: error instanceof Error ? error.message : String(error) })
    })
    const elapsedMs = performance.now() - started
    const failed = [...outcomes.values()].filter((outcome) => outcome._tag === "Failed")
      .sort((a, b) => a.chunk - b.chunk)[0]
    if (failed === undefined) {
      return { result: { _tag: "Passed", runs: options.runs, seed: options.seed, elapsedMs }, chunk: undefined }
    }
    const trace = yield* Effect.mapError(
      Simulation.decode(failed.trace),
      (error) => new LabWorkerError({ message: `chunk ${failed.chunk}'s trace: ${error.message}` })
    )
    return {
      result: {
        _tag: "Failed",
        seed: failed.seed,
        runs: failed.runs,
        shrinks: failed.shrinks,
        violation: failed.violation,
        original: failed.original,
        shrunk: failed.shrunk,
        trace,
        elapsedMs
      },
      chunk: {
        index: failed.chunk,
        seed: failed.seed,
        runs: Math.min(chunkRuns, options.runs - failed.chunk * chunkRuns)
      }
    }
  })
