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

const publish = (deps: RunToolsDeps, state: SessionState, event: Omit<AgentEvent, "agent" | "at">) =>
  Clock.clockWith((clock) =>
    deps.events.publish({ ...event, agent: snapshot(state), at: clock.currentTimeMillisUnsafe() })
  )

// Combinators rather than generators: this runs for every tool call of every agent, and a
// generator costs an iterator object and an extra step per `yield*`.
const execute = (deps: RunToolsDeps, state: SessionState, call: ToolCall): Effect.Effect<unknown, ToolErrorLike> => {
  const tool = state.view.byName.get(call.name) ?? Option.getOrUndefined(deps.registry.get(call.name))
  if (tool === undefined) {
    return Effect.fail(new UnknownTool({ name: call.name, available: state.view.tools.map((t) => t.name) }))
  }
  // The rules are read at each check, not captured: an agent narrowed by `agent_assign`
  // while this turn ran is held to its new rules. The full check (with the paths the call
  // touches) runs for every call: a writing tool that names no path is denied under a
  // write scope rather than let through.
  return Effect.flatMap(
    deps.permission.checkTool(state.rules, tool),
    () =>
      Effect.flatMap(parseArguments(tool, call.params), (params) =>
        Effect.andThen(
          deps.permission.check(state.rules, tool, tool.paths(params)),
          () => tool.handler(params, { sessionId: state.id, callId: call.id, role: state.role, depth: state.depth })
        ))
  )
}

const runOne = (deps: RunToolsDeps, state: SessionState, call: ToolCall): Effect.Effect<Prompt.ToolResultPart> =>
  Effect.suspend(() => {
    state.toolCalls++
    state.lastTool = call.name
    return Effect.andThen(
      publish(deps, state, { type: "tool_call", tool: call.name }),
      Effect.flatMap(Effect.result(Effect.suspend(() => execute(deps, state, call))), (result) => {
        const isFailure = result._tag === "Failure"
        return Effect.as(
          publish(deps, state, {
            type: "tool_result",
            tool: call.name,
            isFailure,
            reason: isFailure ? result.failure.message : undefined
          }),
          Prompt.makePart("tool-result", {
            id: call.id,
            name: call.name,
            isFailure,
            result: isFailure ? failurePayload(result.failure) : result.success,
            providerExecuted: false
          })
        )
      })
    )
  })

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
