/**
 * SimulationTrace — what a lab run records (Simulation.ts): every event with its virtual time,
 * every model request, every outside operation and its outcome, the final records, and what
 * was left once the root was interrupted; its JSON text (`encode`, `decode`); and `Tamper`, a
 * deliberately broken runtime a run can be asked to use, named in the trace.
 *
 * The trace names agents by their place in the tree (`n0` is the root, `n3` the third node),
 * never by their generated ids, and times are virtual milliseconds since the run began: the same
 * experiment gives the same trace, byte for byte, in any process.
 */
import type { SubAgentManager as Manager, SubAgentStore, ToolRegistry } from "@fibril/core"
import type { AgentEvent, AgentEvents } from "@fibril/core/AgentEvents"
import type { Options as SessionOptions } from "@fibril/core/Session"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { Experiment as ExperimentSchema } from "./LabGenerators.ts"
import type { Experiment } from "./LabGenerators.ts"

export interface TraceEvent {
  readonly t: number
  readonly type: AgentEvent["type"]
  readonly agent: string
  readonly depth: number
  readonly tool?: string
  readonly reason?: string
  /** A tool_result that failed. */
  readonly failed?: true
}

export interface TraceRequest {
  readonly t: number
  readonly agent: string
  readonly turn: number
  /** Child results (`result:nK`) and transcripts (`transcript:nK`) in the messages new to this request, one entry per message part. */
  readonly carried: ReadonlyArray<string>
  /** Sub-agents with a model call in flight as this one began, itself included (absent for the root's). */
  readonly working?: number
}

export interface TraceOp {
  readonly t: number
  readonly op: string
  readonly agent: string
  readonly outcome: string
}

export interface TraceRecord {
  readonly agent: string
  readonly parent: string
  readonly depth: number
  readonly role: string
  readonly detached: boolean
  /** Spawned with fork_context (absent when not). */
  readonly forked?: true
  readonly status: string
  readonly steps: number
  readonly toolCalls: number
  readonly outputTokens: number
  readonly reason?: string
  /** The tools offered to its model requests (the union), sorted. */
  readonly tools: ReadonlyArray<string>
  /** Does the stored record equal the manager's, and survive encoding to JSON and back? */
  readonly roundTrip: boolean
}

export interface TraceResume {
  readonly agent: string
  /** Transcript entries before the resume. */
  readonly before: number
  readonly after: number
  /** Are the entries before the resume still the first entries, unchanged? */
  readonly extends: boolean
}

export interface Trace {
  readonly version: 1
  readonly seed?: number | undefined
  /** The deliberately broken runtime it ran on (`LabBugs`), if any. */
  readonly tamper?: string | undefined
  readonly experiment: Experiment
  readonly events: ReadonlyArray<TraceEvent>
  readonly requests: ReadonlyArray<TraceRequest>
  readonly ops: ReadonlyArray<TraceOp>
  readonly records: ReadonlyArray<TraceRecord>
  readonly resumes: ReadonlyArray<TraceResume>
  /** The tools offered to the root's model requests, sorted. */
  readonly rootTools: ReadonlyArray<string>
  /** Once the root was interrupted and everything settled (detached and outside-resumed agents excepted). */
  readonly afterRoot: {
    readonly running: number
    readonly liveModelCalls: number
    readonly notEnded: ReadonlyArray<string>
  }
  /** Virtual milliseconds the run took. */
  readonly end: number
  /** Process crashes (`crash` operations): when, and the agents the restarted process found interrupted. */
  readonly crashes?: ReadonlyArray<{ readonly t: number; readonly interrupted: ReadonlyArray<string> }>
}

/** The trace as JSON text, the same bytes for the same experiment. */
export const encode = (trace: Trace): string => JSON.stringify(trace, null, 1) + "\n"

export class TraceError extends Schema.TaggedError<TraceError>()("TraceError", {
  message: Schema.String
}) {}

/** Reads a trace written by `encode` (or `fibril lab run --out`). */
export const decode = (text: string): Effect.Effect<Trace, TraceError> =>
  Effect.try({
    try: () => JSON.parse(text) as unknown,
    catch: (error) => new TraceError({ message: `not JSON: ${String(error)}` })
  }).pipe(Effect.flatMap((value) => {
    const candidate = value as Partial<Trace> | null
    if (candidate === null || typeof candidate !== "object" || candidate.version !== 1) {
      return Effect.fail(new TraceError({ message: "not a lab trace: expected an object with version 1" }))
    }
    return Effect.mapError(
      Schema.decodeUnknownEffect(ExperimentSchema)(candidate.experiment),
      (error) => new TraceError({ message: `the trace's experiment is not valid: ${error.message}` })
    ).pipe(Effect.as(candidate as Trace))
  }))

// ---------------------------------------------------------------------------------------------
// Tampering: deliberately broken layers

/**
 * A deliberately broken runtime, to show that an invariant catches what it should. Each field
 * replaces one part of the real wiring.
 */
export interface Tamper {
  readonly name: string
  /** Manager options built from the experiment's (e.g. a cap one too high). */
  readonly subagents?: ((config: Experiment["config"]) => Partial<Manager.Options>) | undefined
  /** Wraps the events service every agent publishes to. */
  readonly events?: ((events: AgentEvents["Service"]) => AgentEvents["Service"]) | undefined
  /** Wraps the store. */
  readonly store?:
    | ((store: SubAgentStore.SubAgentStore["Service"]) => SubAgentStore.SubAgentStore["Service"])
    | undefined
  /** Answer model requests from a fiber the caller does not own (interrupting the caller leaves it running). */
  readonly leakModelCalls?: boolean | undefined
  /** Session options built from the experiment's (e.g. a step budget two steps too high). */
  readonly session?: ((config: Experiment["config"]) => Partial<SessionOptions>) | undefined
  /** Tools sub-agents are seen to be offered on top of their own. */
  readonly childTools?: ReadonlyArray<string> | undefined
  /** Extra tools registered in the runtime (e.g. a broken variant of an agent tool). */
  readonly tools?: ReadonlyArray<ToolRegistry.ToolDefinition<any, any>> | undefined
  /** The tool agents wait for their children with (default `agent_wait`). */
  readonly waitTool?: string | undefined
  /** Wraps the manager the outside operations use. */
  readonly manager?: ((manager: Manager.SubAgentManager["Service"]) => Manager.SubAgentManager["Service"]) | undefined
}
