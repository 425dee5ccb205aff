/**
 * Loop step: run the tool calls of one turn, concurrently.
 *
 * For each call, in this order: find the tool (an unknown name lists the available ones),
 * check name and posture permissions, decode the arguments with the tool's Schema (a
 * string that is not JSON, or arguments that do not fit, become an `InvalidArguments`
 * result), check again with the paths the call touches, then run the handler. Every
 * failure — a denial, bad arguments, a handler error — is a tool result the model reads;
 * nothing here fails the loop. Interrupting the session interrupts every running call.
 */
import * as Prompt from "effect/ai/Prompt"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type { AgentEvent, AgentEvents } from "../AgentEvents.ts"
import * as Parts from "../internal/parts.ts"
import type { Permission } from "../Permission.ts"
import type { RegisteredTool, ToolErrorLike, ToolRegistry } from "../ToolRegistry.ts"
import type { ToolCall } from "./ResolveTurn.ts"
import { eventOf, type SessionState } from "./State.ts"

export interface RunToolsDeps {
  readonly registry: ToolRegistry["Service"]
  readonly permission: Permission["Service"]
  readonly events: AgentEvents["Service"]
  /** Called with each result as it lands, before the turn's other calls finish (a durable transcript). */
  readonly onResult: ((state: SessionState, part: Prompt.ToolResultPart) => Effect.Effect<void>) | undefined
  /** Called with each event after it is published (the session's observer's `onEvent`). */
  readonly onEvent: ((event: AgentEvent) => void) | undefined
}

export class UnknownTool extends Schema.TaggedError<UnknownTool>()("UnknownTool", {
  name: Schema.String,
  available: Schema.Array(Schema.String)
}) {
  override get message() {
    return `there is no tool named "${this.name}"; available tools: ${this.available.join(", ") || "none"}`
  }
}

export class InvalidArguments extends Schema.TaggedError<InvalidArguments>()("InvalidArguments", {
  tool: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `invalid arguments for "${this.tool}": ${this.reason}. Fix the arguments and call it again.`
  }
}

const failurePayload = (error: ToolErrorLike) => ({ error: error._tag, message: error.message })

/**
 * A call's arguments as the tool's parameters decode them: a JSON string is parsed first (an
 * empty one is no arguments), and a refusal says what was wrong and what the tool accepts.
 */
export const parseArguments = (tool: RegisteredTool, params: unknown): Effect.Effect<unknown, InvalidArguments> => {
  let input = params
  if (typeof params === "string") {
    try {
      input = params.trim() === "" ? {} : JSON.parse(params)
    } catch (cause) {
      return Effect.fail(
        new InvalidArguments({ tool: tool.name, reason: `arguments are not valid JSON (${String(cause)})` })
      )
    }
  }
  return Effect.mapErrorEager(
    tool.decode(input),
    (error) => new InvalidArguments({ tool: tool.name, reason: error.message + accepted(tool, input) })
  )
}

/**
 * For a refusal of an argument the tool does not declare, what it does accept: a model
 * that guessed a name gets the right ones in the same answer.
 */
const accepted = (tool: RegisteredTool, input: unknown): string => {
  const names = tool.arguments
  if (names === undefined || typeof input !== "object" || input === null || Array.isArray(input)) return ""
  const unexpected = Object.keys(input).filter((key) => !names.includes(key))
  if (unexpected.length === 0) return ""
  return names.length === 0
    ? " (this tool takes no arguments: call it with {})"
    : ` (unexpected: ${unexpected.join(", ")}; accepted: ${names.join(", ")})`
}

// Done at once, inside the step that has the news: an event costs no Effect of its own.
const emit = (deps: RunToolsDeps, state: SessionState, event: Omit<AgentEvent, "agent" | "at">): void => {
  const full = eventOf(state, event)
  deps.events.emit(full)
  deps.onEvent?.(full)
}

// Combinators rather than generators: this runs for every tool call of every agent, and a
// generator costs an iterator object and an extra step per `yield*`.
const execute = (
  deps: RunToolsDeps,
  state: SessionState,
  call: ToolCall,
  touched: { paths: ReadonlyArray<string> | undefined }
): Effect.Effect<unknown, ToolErrorLike> => {
  const tool = state.view.byName.get(call.name) ?? Option.getOrUndefined(deps.registry.get(call.name))
  if (tool === undefined) {
    return Effect.fail(new UnknownTool({ name: call.name, available: state.view.tools.map((t) => t.name) }))
  }
  // The rules are read at each check, not captured: an agent narrowed by `agent_assign`
  // while this turn ran is held to its new rules. The full check (with the paths the call
  // touches) runs for every call: a writing tool that names no path is denied under a
  // write scope rather than let through. The checks and the decoding are done at once when
  // they can be (the eager forms): this runs inside the call's own step.
  return Effect.flatMapEager(
    deps.permission.checkTool(state.rules, tool),
    () =>
      Effect.flatMapEager(parseArguments(tool, call.params), (params) => {
        const paths = tool.paths(params)
        // What a writing tool changes, for the agent's record (artifact references).
        if (tool.posture === "write" && paths.length > 0) touched.paths = paths
        return Effect.flatMapEager(
          deps.permission.check(state.rules, tool, paths),
          () =>
            tool.handler(params, {
              sessionId: state.id,
              callId: call.id,
              role: state.role,
              depth: state.depth,
              rules: state.rules
            })
        )
      })
  )
}

// One step for the call and one for its outcome: the bookkeeping runs in the step that starts
// the call, and success and failure are matched in one frame (no `Effect.result` and then a
// `flatMap`). `wrap` shapes what the caller wants of the part (a single call's whole message).
// `now`: the caller runs the call next, in the step it is made in (the loop's single call), so
// the bookkeeping is done here and a call that is done at once is read with no step at all.
const runOne = <A>(
  deps: RunToolsDeps,
  state: SessionState,
  call: ToolCall,
  landed: Array<Prompt.ToolResultPart> | undefined,
  wrap: (part: Prompt.ToolResultPart) => A,
  now: boolean
): Effect.Effect<A> => {
  const touched: { paths: ReadonlyArray<string> | undefined } = { paths: undefined }
  const landing = (isFailure: boolean, result: unknown, reason: string | undefined): Effect.Effect<A> => {
    const part = Parts.toolResultPart(call.id, call.name, isFailure, result)
    emit(deps, state, {
      type: "tool_result",
      tool: call.name,
      isFailure,
      reason,
      changed: isFailure ? undefined : touched.paths
    })
    if (landed === undefined || deps.onResult === undefined) return Effect.succeed(wrap(part))
    landed.push(part)
    return Effect.as(deps.onResult(state, part), wrap(part))
  }
  const start = () => {
    state.toolCalls++
    state.lastTool = call.name
    emit(deps, state, { type: "tool_call", tool: call.name })
    return execute(deps, state, call, touched)
  }
  const outcome = {
    onFailure: (failure: ToolErrorLike) => landing(true, failurePayload(failure), failure.message),
    onSuccess: (success: unknown) => landing(false, success, undefined)
  }
  if (!now) return Effect.matchEffect(Effect.suspend(start), outcome)
  const started = start()
  return Exit.isExit(started) && Exit.isSuccess(started)
    ? outcome.onSuccess(started.value)
    : Effect.matchEffect(started, outcome)
}

const asPart = (part: Prompt.ToolResultPart) => part
const asMessage = (part: Prompt.ToolResultPart) => Parts.toolMessage([part])

const run = (
  deps: RunToolsDeps,
  state: SessionState,
  calls: ReadonlyArray<ToolCall>,
  landed: Array<Prompt.ToolResultPart> | undefined,
  now: boolean
): Effect.Effect<Prompt.ToolMessage> =>
  // A single call runs in the loop's own fiber: forking one to run it alone would add a
  // fiber to start, and to interrupt and unwind on cancellation, for nothing.
  calls.length === 1
    ? runOne(deps, state, calls[0]!, landed, asMessage, now)
    : Effect.map(
      Effect.forEach(calls, (call) => runOne(deps, state, call, landed, asPart, false), {
        concurrency: "unbounded"
      }),
      Parts.toolMessage
    )

/**
 * The turn's results as one tool message. With `deps.onResult` (a durable transcript), each
 * result is handed over as it lands, and if the turn is interrupted, the results that did
 * land are kept in the conversation: a resumed run then reports as interrupted only the
 * calls that really did not finish.
 *
 * `now`: the caller runs the returned effect next, in the fiber whose step this is (the agent
 * loop's step): a single call then starts here, in the caller's step, rather than in a step
 * of its own.
 */
export const runTools = (
  deps: RunToolsDeps,
  state: SessionState,
  calls: ReadonlyArray<ToolCall>,
  now = false
): Effect.Effect<Prompt.ToolMessage> => {
  if (deps.onResult === undefined) return run(deps, state, calls, undefined, now)
  const landed: Array<Prompt.ToolResultPart> = []
  // With `now`, a single call that is done at once lands before the handler below is installed.
  // Nothing is lost: the caller runs this effect next, so an interruption can only be seen once
  // it runs, inside the handler, which keeps what landed (LoopSteps.test.ts checks it).
  return Effect.onInterrupt(run(deps, state, calls, landed, now), () =>
    Effect.sync(() => {
      if (landed.length > 0) state.messages.push(Parts.toolMessage(landed))
    }))
}
