/**
 * Lab — property-tested orchestration experiments: generate experiments (`LabGenerators`),
 * run each through the real runtime (`Simulation`), check invariants (`Invariants`), and on a
 * failure shrink it to the smallest failing experiment and return its trace.
 *
 * @example
 * ```ts
 * const result = yield* Lab.check({ runs: 10_000, seed: 42 })
 * if (result._tag === "Failed") console.log(Lab.describe(result))
 * ```
 *
 * The same `seed` (with the same bounds and invariants) finds the same failure and shrinks it
 * to the same case; the failure's trace replays byte for byte (`Lab.replay`).
 */
import * as Arbitrary from "effect/Arbitrary"
import * as Effect from "effect/Effect"
import * as Invariants from "./Invariants.ts"
import * as LabGenerators from "./LabGenerators.ts"
import * as Simulation from "./Simulation.ts"

export interface CheckOptions {
  readonly runs?: number | undefined
  readonly seed?: number | undefined
  readonly bounds?: LabGenerators.Bounds | undefined
  readonly invariants?: ReadonlyArray<Invariants.Invariant> | undefined
  /** Run against a deliberately broken runtime. */
  readonly tamper?: Simulation.Tamper | undefined
  /** Called after every run with the number done so far. */
  readonly onProgress?: ((done: number) => void) | undefined
  readonly maxShrinks?: number | undefined
}

export interface Passed {
  readonly _tag: "Passed"
  readonly runs: number
  readonly seed: number
  readonly elapsedMs: number
}

export interface Failed {
  readonly _tag: "Failed"
  readonly seed: number
  /** Runs until the first failure (before shrinking). */
  readonly runs: number
  readonly shrinks: number
  readonly violation: Invariants.Violation
  /** The experiment that failed first, and the smallest one that still fails. */
  readonly original: LabGenerators.Experiment
  readonly shrunk: LabGenerators.Experiment
  /** The shrunk experiment's trace. */
  readonly trace: Simulation.Trace
  readonly elapsedMs: number
}

export type Result = Passed | Failed

/** Runs `runs` generated experiments (default 100) and checks every invariant on each. */
export const check = Effect.fn("Lab.check")(function*(options: CheckOptions = {}) {
  const seed = options.seed ?? Math.floor(Math.random() * 2 ** 31)
  const runs = options.runs ?? 100
  const invariants = options.invariants ?? Invariants.all
  const started = performance.now()
  let done = 0
  const result = yield* Arbitrary.checkEffect(
    LabGenerators.experiment(options.bounds),
    (experiment) =>
      Effect.map(Simulation.run(experiment, { tamper: options.tamper }), (trace) => {
        done++
        options.onProgress?.(done)
        return Invariants.firstViolation(trace, invariants) === undefined
      }),
    { runs, seed, maxShrinks: options.maxShrinks ?? 500 }
  )
  const elapsedMs = performance.now() - started
  if (result._tag === "Passed") return { _tag: "Passed", runs: result.runs, seed, elapsedMs } satisfies Result as Result
  if (result._tag !== "Falsified") {
    return yield* Effect.die(new Error(`Lab.check: the property check ended ${result._tag}`))
  }
  const raw = yield* Simulation.run(result.shrunkInput, { tamper: options.tamper })
  const rawViolation = Invariants.firstViolation(raw, invariants)
  // The shrunk experiment as a person reads it (nodes in tree order, values resolved), kept
  // when it fails the same way: its retry jitter is seeded from its text, which differs.
  const normalised = LabGenerators.normalise(result.shrunkInput)
  const again = yield* Simulation.run(normalised, { tamper: options.tamper })
  const againViolation = Invariants.firstViolation(again, invariants)
  const useNormalised = againViolation !== undefined && againViolation.invariant === rawViolation?.invariant
  const shrunk = useNormalised ? normalised : result.shrunkInput
  const trace = useNormalised ? again : raw
  const violation = (useNormalised ? againViolation : rawViolation) ?? {
    invariant: "?",
    message: "the shrunk experiment passed when run again (a nondeterministic failure)"
  }
  return {
    _tag: "Failed",
    seed,
    runs: result.runs,
    shrinks: result.shrinks,
    violation,
    original: result.initialInput,
    shrunk,
    trace,
    elapsedMs
  } satisfies Result as Result
})

/** Runs a trace's experiment again; `identical` when the new trace is byte for byte the same. */
export const replay = Effect.fn("Lab.replay")(function*(
  trace: Simulation.Trace,
  options: {
    readonly tamper?: Simulation.Tamper | undefined
    readonly invariants?: ReadonlyArray<Invariants.Invariant>
  } = {}
) {
  const again = yield* Simulation.run(trace.experiment, { seed: trace.seed, tamper: options.tamper })
  const before = Simulation.encode(trace)
  const after = Simulation.encode(again)
  return {
    trace: again,
    identical: before === after,
    firstDifference: before === after ? undefined : firstDifferentLine(before, after),
    violation: Invariants.firstViolation(again, options.invariants ?? Invariants.all)
  }
})

const firstDifferentLine = (a: string, b: string) => {
  const left = a.split("\n")
  const right = b.split("\n")
  for (let i = 0; i < Math.max(left.length, right.length); i++) {
    if (left[i] !== right[i]) return { line: i + 1, expected: left[i] ?? "", actual: right[i] ?? "" }
  }
  return undefined
}

/** A failure as text: the invariant, the counterexample, the seed and the shrunk experiment. */
export const describe = (result: Result): string => {
  if (result._tag === "Passed") {
    return `passed: ${result.runs} experiments, seed ${result.seed}, ${(result.elapsedMs / 1000).toFixed(1)} s`
  }
  const v = result.violation
  return [
    `FAILED ${v.invariant}: ${v.message}`,
    ...whereAndEvidence(v),
    `  seed ${result.seed} (failed after ${result.runs} runs, ${result.shrinks} shrinks)`,
    `  shrunk experiment: ${JSON.stringify(result.shrunk)}`,
    `  replay: save the trace (fibril lab run --seed ${result.seed} --out trace.json) and run fibril lab replay trace.json`
  ].join("\n")
}

/** The counterexample's lines: what the invariant gave (agent, time, evidence), nothing it did not. */
export const whereAndEvidence = (violation: Invariants.Violation): ReadonlyArray<string> => {
  const where = [
    ...(violation.agent === undefined ? [] : [`agent ${violation.agent}`]),
    ...(violation.at === undefined ? [] : [`at ${violation.at} ms (virtual)`])
  ]
  return [
    ...(where.length === 0 ? [] : [`  counterexample: ${where.join(" ")}`]),
    ...(violation.evidence === undefined ? [] : [`  evidence: ${printable(violation.evidence)}`])
  ]
}

/** JSON where it can be (bigints as numbers' text); otherwise the value's own text. */
const printable = (value: unknown): string => {
  try {
    return JSON.stringify(value, (_, inner) => (typeof inner === "bigint" ? inner.toString() : inner)) ?? String(value)
  } catch {
    return String(value)
  }
}
