/**
 * Loop step: run the tool calls of one turn, concurrently.
 *
 * For each call, in this order: find the tool (an unknown name lists the available ones),
 * check name and posture permissions, decode the arguments with the tool's Schema (a
 * string that is not JSON, or arguments that do not fit, become an `InvalidArguments`
 * result), check path scopes, then run the handler. Every failure — a denial, bad
 * arguments, a handler error — is a tool result the model reads; nothing here fails the
 * loop. Interrupting the session interrupts every running call.
 */
import { Clock, Effect, Option, Schema } from "effect"
import { Prompt } from "effect/ai"
import type { AgentEvents, AgentEvent } from "../AgentEvents.ts"
import type { Permission } from "../Permission.ts"
import type { RegisteredTool, ToolErrorLike, ToolRegistry } from "../ToolRegistry.ts"
import type { ToolCall } from "./ResolveTurn.ts"
import { type SessionState, snapshot } from "./State.ts"

export interface RunToolsDeps {
  readonly registry: ToolRegistry["Service"]
  readonly permission: Permission["Service"]
  readonly events: AgentEvents["Service"]
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

const parseArguments = (tool: RegisteredTool, params: unknown): Effect.Effect<unknown, InvalidArguments> => {
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
  return Effect.mapError(tool.decode(input), (error) => new InvalidArguments({ tool: tool.name, reason: error.message }))
}

const runOne = (deps: RunToolsDeps, state: SessionState, call: ToolCall): Effect.Effect<Prompt.ToolResultPart> => {
  const publish = (event: Omit<AgentEvent, "agent" | "at">) =>
    Clock.clockWith((clock) =>
      deps.events.publish({ ...event, agent: snapshot(state), at: clock.currentTimeMillisUnsafe() })
    )

  const execute: Effect.Effect<unknown, ToolErrorLike> = Effect.gen(function*() {
    const tool = state.view.byName.get(call.name) ?? Option.getOrUndefined(deps.registry.get(call.name))
    if (tool === undefined) {
      return yield* new UnknownTool({ name: call.name, available: state.view.tools.map((t) => t.name) })
    }
    yield* deps.permission.check(state.rules, tool, [])
    const params = yield* parseArguments(tool, call.params)
    const paths = tool.paths(params)
    if (paths.length > 0) yield* deps.permission.check(state.rules, tool, paths)
    return yield* tool.handler(params, { sessionId: state.id, callId: call.id, role: state.role, depth: state.depth })
  })

  return Effect.gen(function*() {
    state.toolCalls++
    state.lastTool = call.name
    yield* publish({ type: "tool_call", tool: call.name })
    const result = yield* Effect.result(execute)
    const isFailure = result._tag === "Failure"
    yield* publish({
      type: "tool_result",
      tool: call.name,
      isFailure,
      reason: isFailure ? result.failure.message : undefined
    })
    return Prompt.makePart("tool-result", {
      id: call.id,
      name: call.name,
      isFailure,
      result: isFailure ? failurePayload(result.failure) : result.success,
      providerExecuted: false
    })
  })
}

export const runTools = (
  deps: RunToolsDeps,
  state: SessionState,
  calls: ReadonlyArray<ToolCall>
): Effect.Effect<Prompt.ToolMessage> =>
  Effect.map(
    // A single call runs in the loop's own fiber: forking one to run it alone would add a
    // fiber to start, and to interrupt and unwind on cancellation, for nothing.
    calls.length === 1
      ? Effect.map(runOne(deps, state, calls[0]!), (part) => [part])
      : Effect.forEach(calls, (call) => runOne(deps, state, call), { concurrency: "unbounded" }),
    (content) => Prompt.makeMessage("tool", { content })
  )
