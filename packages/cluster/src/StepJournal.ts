/**
 * StepJournal — Fibril's journal of an agent run's model and tool steps, behind one entry
 * point: `step(name, codec, execute)` runs a step to a journaled result, once.
 *
 * Why steps are not effect/workflow activities: the model and tool steps are the loop's hot
 * path, and an activity is a persisted cluster message, its read-back, a lock check and its
 * reply (about 12 statements and 4 commits), holding a connection for its whole call. A step
 * here is the call, outside any transaction, then its claim, writes and result in one short
 * transaction (`ClusterStore.runStep`). The run's journal is read once, at its first step: a
 * replay returns the journaled results without running them. A cancelled agent's next step
 * does not run: the run suspends as at an activity boundary, and the cancel's interrupt (sent
 * again here, should the cancel have stopped before sending it) ends it.
 *
 * A step's outcome as the journal keeps it: a success (with its writes) or a typed failure
 * (with none) is journaled; a defect or an interruption is not (nothing is committed, and the
 * step runs again, at most `maxAttempts` times). A step run here returns the value it computed
 * (encoded once, for the journal); only a journaled one is decoded.
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Schema from "effect/Schema"
import { Workflow, WorkflowEngine } from "effect/workflow"
import { AgentWorkflow } from "./AgentRun.ts"
import { ClusterStore, type StepWork, type StoreFailure } from "./ClusterStore.ts"

/** How a step's outcome is written in the journal (JSON, as an activity's reply). */
export interface Codec<A, E> {
  readonly encode: (exit: Exit.Exit<A, E>) => string
  readonly decode: (encoded: string) => Exit.Exit<A, E>
}

/** The codec of a step whose success is `success` and whose typed failure is `failure`. */
export const codec = <A, I, E, EI>(
  success: Schema.Codec<A, I>,
  failure: Schema.Codec<E, EI>
): Codec<A, E> => {
  const json = Schema.fromJsonString(Schema.toCodecJson(Schema.Exit(success, failure, Schema.Defect())))
  return { encode: Schema.encodeSync(json), decode: Schema.decodeSync(json) }
}

/** What a step's call gives: its result, and the writes its commit makes. */
export interface Done<A, R> {
  readonly value: A
  readonly commit: Effect.Effect<void, StoreFailure, R>
}

/** Who runs the steps: the agent's run, and an observer of each step's execution (not its replay). */
export interface Run {
  readonly agentId: string
  readonly run: number
  readonly executionId: string
  readonly onStep?:
    | ((event: "start" | "end", agentId: string, run: number, name: string) => Effect.Effect<void>)
    | undefined
}

/** How many times a step interrupted from within runs before its run fails. */
export const maxAttempts = 5

export interface Journal {
  /** Runs the step `name` to its journaled result: `execute` only when it is not journaled yet. */
  readonly step: <A, E, R1, R2>(
    name: string,
    codec: Codec<A, E>,
    execute: Effect.Effect<Done<A, R2>, E, R1>
  ) => Effect.Effect<A, E, R1 | R2 | ClusterStore | WorkflowEngine.WorkflowEngine | WorkflowEngine.WorkflowInstance>
}

/** The journal of one run's execution (read once, at its first step). */
export const make = (run: Run): Journal => {
  const { agentId, executionId, onStep } = run
  let journal: ReadonlyMap<string, string> | undefined
  const observed = <A, E, R>(name: string, effect: Effect.Effect<A, E, R>) =>
    onStep === undefined
      ? effect
      : Effect.andThen(
        onStep("start", agentId, run.run, name),
        Effect.tap(effect, () => onStep("end", agentId, run.run, name))
      )
  const step = <A, E, R1, R2>(name: string, format: Codec<A, E>, execute: Effect.Effect<Done<A, R2>, E, R1>) =>
    Effect.gen(function*() {
      const store = yield* ClusterStore
      journal ??= yield* Effect.orDie(store.journal(executionId))
      const found = journal.get(name)
      if (found !== undefined) return yield* format.decode(found)
      // The step's own outcome, kept as computed: returned as it is when this run journals it.
      let computed: Exit.Exit<A, E> | undefined
      const work = Effect.flatMap(Effect.exit(observed(name, execute)), (exit): Effect.Effect<StepWork<R2>> => {
        if (Exit.isSuccess(exit)) {
          const value = Exit.succeed(exit.value.value)
          computed = value
          return Effect.sync(() => ({ result: format.encode(value), commit: exit.value.commit }))
        }
        if (exit.cause.reasons.every(Cause.isFailReason)) {
          const failure: Exit.Exit<A, E> = Exit.failCause(exit.cause)
          computed = failure
          return Effect.sync(() => ({ result: format.encode(failure), commit: Effect.void }))
        }
        return Cause.hasInterruptsOnly(exit.cause)
          ? Effect.failCause(exit.cause as Cause.Cause<never>)
          : Effect.die(Cause.squash(exit.cause))
      })
      const outcome = yield* runOnce(store, { agentId, executionId, name }, work)
      if (outcome._tag === "Cancelled") {
        yield* AgentWorkflow.interrupt(executionId)
        return yield* Workflow.suspend(yield* WorkflowEngine.WorkflowInstance)
      }
      return yield* (outcome._tag === "Ran" && computed !== undefined ? computed : format.decode(outcome.result))
    })
  return { step }
}

// A step interrupted from within (nothing of it committed) runs again, as effect/workflow runs
// an interrupted activity again; an interruption of the run itself stops the run.
const runOnce = <R1, R2>(
  store: ClusterStore["Service"],
  key: { readonly agentId: string; readonly executionId: string; readonly name: string },
  execute: Effect.Effect<StepWork<R2>, never, R1>
) =>
  Effect.gen(function*() {
    for (let attempt = 1;; attempt++) {
      const exit = yield* Effect.exit(Effect.orDie(store.runStep(key, execute)))
      if (Exit.isSuccess(exit) || !Cause.hasInterruptsOnly(exit.cause)) return yield* exit
      if (attempt === maxAttempts) {
        return yield* Effect.die(`step ${key.name} of ${key.agentId} was interrupted ${attempt} times`)
      }
    }
  })
