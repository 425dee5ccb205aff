/**
 * Loop step: the tool-call pipeline, for both runtimes.
 *
 * For each call, in this order: find the tool (an unknown name lists the available ones; a tool
 * the caller may not use is found, and denied by the check), check name and posture
 * permissions, decode the arguments with the tool's Schema (a string that is not JSON, or
 * arguments that do not fit, become an `InvalidArguments` result), check again with the paths
 * the call touches, then run the handler. Every failure — a denial, bad arguments, a handler
 * error — is a result the model reads (`failurePayload`); nothing here fails the loop.
 *
 * `runTools` runs a turn's calls for the embedded `Session` (concurrently; events, counts and
 * the durable transcript's hand-over as each lands; interrupting the session interrupts every
 * running call). `runCall` runs one call, not tied to a session: `AgentSteps.tool` (the
 * cluster's journaled step) and the cluster's sub-agent tools go through it.
 */
import * as Prompt from "effect/ai/Prompt"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type { AgentEvent, AgentEvents } from "../AgentEvents.ts"
import * as Approvals from "../Approvals.ts"
import * as GenAiTrace from "../GenAiTrace.ts"
import * as Parts from "../internal/parts.ts"
import * as Permission from "../Permission.ts"
import type { Callable, RegisteredTool, ToolErrorLike, ToolRegistry, ToolView } from "../ToolRegistry.ts"
import * as FanOut from "./FanOut.ts"
import type { ToolCall } from "./ResolveTurn.ts"
import { eventOf, type SessionState } from "./State.ts"

export const StepToolCall = Schema.Struct({ id: Schema.String, name: Schema.String, params: Schema.Unknown })
export type StepToolCall = typeof StepToolCall.Type

/** What one tool call produced: its result (a failure is a result the model reads). */
export const ToolStep = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  isFailure: Schema.Boolean,
  result: Schema.Unknown
})
export type ToolStep = typeof ToolStep.Type

export interface RunToolsDeps {
  readonly registry: ToolRegistry["Service"]
  readonly permission: Permission.Permission["Service"]
  /** Where each call's `tool_call` and `tool_result` events are published, if anywhere. */
  readonly events?: AgentEvents["Service"] | undefined
  /** Called with each result as it lands, before the turn's other calls finish (a durable transcript). */
  readonly onResult: ((state: SessionState, part: Prompt.ToolResultPart) => Effect.Effect<void>) | undefined
  /** Called with each event after it is published (the session's observer's `onEvent`). */
  readonly onEvent: ((event: AgentEvent) => void) | undefined
}

/**
 * Who makes a call. Read at each check, not captured: an agent narrowed by `agent_assign`
 * while its turn runs is held to its new rules (a `SessionState` is one).
 */
export interface Caller {
  readonly id: string
  readonly role: string
  readonly depth: number
  readonly rules: Permission.Rules
  /** Its parent, for the path a question shows (a `SessionState`'s). */
  readonly parent?: Caller | undefined
}

export class UnknownTool extends Schema.TaggedError<UnknownTool>()("UnknownTool", {
  name: Schema.String,
  available: Schema.Array(Schema.String)
}) {
  override get message() {
    // `mcp__<server>__<tool>`: the server is what is missing, here (each process, and each
    // worker of a cluster, starts the servers of its own workspace's configuration).
    const server = /^mcp__(.+?)__/.exec(this.name)?.[1]
    const why = server === undefined
      ? ""
      : ` (no MCP server "${server}" is running for this agent here: servers come from [mcp_servers.*] or .mcp.json of this process's workspace, in cluster mode of each worker's)`
    return `there is no tool named "${this.name}"${why}; available tools: ${this.available.join(", ") || "none"}`
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

/** A failed call as the model reads it: the error's tag and message. */
export const failurePayload = (error: ToolErrorLike): { readonly error: string; readonly message: string } => ({
  error: error._tag,
  message: error.message
})

/**
 * A call's arguments as the tool's parameters decode them: a JSON string is parsed first (an
 * empty one is no arguments), and a refusal says what was wrong and what the tool accepts.
 */
export const parseArguments = <R>(tool: Callable<R>, params: unknown): Effect.Effect<unknown, InvalidArguments> => {
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
const accepted = <R>(tool: Callable<R>, input: unknown): string => {
  const names = tool.arguments
  if (names === undefined || typeof input !== "object" || input === null || Array.isArray(input)) return ""
  const unexpected = Object.keys(input).filter((key) => !names.includes(key))
  if (unexpected.length === 0) return ""
  return names.length === 0
    ? " (this tool takes no arguments: call it with {})"
    : ` (unexpected: ${unexpected.join(", ")}; accepted: ${names.join(", ")})`
}

// Published at once, where the news is: an event is no Effect of its own.
const emit = (deps: RunToolsDeps, state: SessionState, event: Omit<AgentEvent, "agent" | "at">): void => {
  if (deps.events === undefined && deps.onEvent === undefined) return
  const full = eventOf(state, event)
  deps.events?.emit(full)
  deps.onEvent?.(full)
}

/**
 * The tool a call names: the caller's view first, then the registry, so a tool the caller may
 * not use is denied by the permission check (which says why) rather than called unknown.
 */
export const find = (registry: ToolRegistry["Service"], view: ToolView, name: string): RegisteredTool | undefined =>
  view.byName.get(name) ?? Option.getOrUndefined(registry.get(name))

/**
 * A call of a tool that is not registered. A tool of an MCP server there is but that the caller
 * may not use (McpNarrowing: its server was never started for it) is a denial saying which
 * servers it may use, not an unknown tool.
 */
const unknownTool = (registry: ToolRegistry["Service"], view: ToolView, rules: Permission.Rules, name: string) => {
  const server = Permission.mcpServerOf(name)
  if (server !== undefined && !Permission.mayUseServer(rules, server)) {
    const servers = registry.mcpServers()
    if (servers.includes(server)) {
      const decision = Permission.decideTool(rules, name, "read")
      const usable = servers.filter((other) => Permission.mayUseServer(rules, other))
      return new Permission.PermissionDenied({
        tool: name,
        reason: `${decision.allowed ? `the MCP server "${server}" is not among its servers` : decision.reason} (${
          usable.length === 0 ? "it may use no MCP server" : `its MCP servers: ${usable.join(", ")}`
        })`
      })
    }
  }
  return new UnknownTool({ name, available: view.tools.map((tool) => tool.name) })
}

/**
 * A call whose rules say ask (Permission rule 5) waits here for a person (`Approvals`): this
 * fiber only, so the turn's other calls and every other agent go on. A denial — answered,
 * timed out, or the default approver's — fails the call with the reason the model reads.
 */
const approve = (
  caller: Caller,
  tool: { readonly name: string; readonly posture: string },
  params: unknown,
  reason: string,
  notify: FanOut.Notify | undefined
): Effect.Effect<void, Approvals.ApprovalDenied> =>
  Effect.flatMap(Effect.service(Approvals.Approvals), (approvals) =>
    Effect.flatMap(
      approvals.ask({
        kind: "tool",
        agentId: caller.id,
        path: Approvals.pathOf(caller),
        role: caller.role,
        depth: caller.depth,
        tool: tool.name,
        posture: tool.posture,
        arguments: Approvals.boundArguments(params),
        reason
      }, (question) => notify?.({ type: "question", tool: tool.name, question })),
      (decided) => {
        notify?.({ type: "answered", tool: tool.name, question: decided.question, answer: decided.answer })
        return decided.answer.decision === "allow" ? Effect.void : Effect.fail(
          new Approvals.ApprovalDenied({
            tool: tool.name,
            asked: reason,
            reason: decided.answer.reason ?? "denied",
            by: decided.answer.by
          })
        )
      }
    ))

const commandOf = (params: unknown): string | undefined =>
  typeof params === "object" && params !== null && "command" in params && typeof params.command === "string"
    ? params.command
    : undefined

/** Checks, decoding and handler of one call of a tool found. `touched` gets what a writing tool changes. */
const execute = <R>(
  permission: Permission.Permission["Service"],
  caller: Caller,
  tool: Callable<R>,
  call: ToolCall,
  touched: { paths: ReadonlyArray<string> | undefined } | undefined,
  notify?: FanOut.Notify | undefined
): Effect.Effect<unknown, ToolErrorLike, R> =>
  // The full check (with the paths the call touches) runs for every call: a writing tool that
  // names no path is denied under a write scope rather than let through. With a tracer, the
  // call is an `execute_tool {tool}` span (GenAiTrace).
  GenAiTrace.executeTool(call, () =>
    Effect.flatMapEager(
      permission.checkTool(caller.rules, tool),
      () =>
        Effect.flatMapEager(parseArguments(tool, call.params), (params) => {
          const paths = tool.paths(params)
          if (touched !== undefined && tool.posture === "write" && paths.length > 0) touched.paths = paths
          const handle = () =>
            tool.handler(params, {
              sessionId: caller.id,
              callId: call.id,
              role: caller.role,
              depth: caller.depth,
              rules: caller.rules,
              progress: notify === undefined
                ? undefined
                : (progress) => notify({ type: "tool_progress", tool: tool.name, progress })
            })
          // A shell tool's command is what its rule patterns (`shell(git push *)`) are judged on.
          const command = tool.posture === "shell" ? commandOf(params) : undefined
          return Effect.flatMapEager(permission.check(caller.rules, tool, paths, command), () => {
            // Allowed by rules 1-3; rule 5 may still want a person's answer (the common case: no).
            if (caller.rules.ask.size === 0) return handle()
            return Effect.flatMap(permission.askedBy(caller.rules, tool, paths, command), (asked) => {
              if (asked === undefined) return handle()
              const reason = Permission.askReason(caller.rules, asked, tool.name)
              return Effect.flatMap(approve(caller, tool, params, reason, notify), handle)
            })
          })
        })
    ))

const stepOf = (call: ToolCall, isFailure: boolean, result: unknown): ToolStep => ({
  id: call.id,
  name: call.name,
  isFailure,
  result
})

/** A call that did not run (it was cancelled or interrupted, say), as the model reads it. */
export const failedStep = (call: ToolCall, error: ToolErrorLike): ToolStep => stepOf(call, true, failurePayload(error))

/**
 * One call of `tool` through the pipeline (checks, decoding, handler), as the step result the
 * model reads. Not tied to a session: the handler may need services of its own (`R`), which
 * the caller provides.
 */
export const runCall = <R>(
  permission: Permission.Permission["Service"],
  caller: Caller,
  tool: Callable<R>,
  call: ToolCall
): Effect.Effect<ToolStep, never, R> =>
  Effect.matchEager(Effect.suspend(() => execute(permission, caller, tool, call, undefined)), {
    onFailure: (failure) => failedStep(call, failure),
    onSuccess: (success) => stepOf(call, false, success)
  })

/** One call of a registered tool, found as `runTools` finds it (`AgentSteps.tool`). */
export const runRegistered = (
  registry: ToolRegistry["Service"],
  permission: Permission.Permission["Service"],
  caller: Caller,
  call: ToolCall
): Effect.Effect<ToolStep> =>
  // A worker restarted after the model step may not have started the call's MCP server yet.
  Effect.andThen(registry.prepare(caller.rules), () => {
    const view = registry.view(caller.rules)
    const tool = find(registry, view, call.name)
    return tool === undefined
      ? Effect.succeed(failedStep(call, unknownTool(registry, view, caller.rules, call.name)))
      : runCall(permission, caller, tool, call)
  })

const lookupAndExecute = (
  deps: RunToolsDeps,
  state: SessionState,
  call: ToolCall,
  touched: { paths: ReadonlyArray<string> | undefined }
): Effect.Effect<unknown, ToolErrorLike> => {
  const tool = find(deps.registry, state.view, call.name)
  return tool === undefined
    ? Effect.fail(unknownTool(deps.registry, state.view, state.rules, call.name))
    : execute(deps.permission, state, tool, call, touched, (event) => emit(deps, state, event))
}

/** One call with its bookkeeping, events and hand-over; `wrap` shapes the result part for the caller. */
const runOne = <A>(
  deps: RunToolsDeps,
  state: SessionState,
  call: ToolCall,
  landed: Array<Prompt.ToolResultPart> | undefined,
  wrap: (part: Prompt.ToolResultPart) => A,
  now: boolean,
  refusal?: ToolErrorLike | undefined
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
    // A spawn of a fan-out a person refused (FanOut.ts) fails without running.
    if (refusal !== undefined && FanOut.spawnTools.has(call.name)) return Effect.fail(refusal)
    return lookupAndExecute(deps, state, call, touched)
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

const runCalls = (
  deps: RunToolsDeps,
  state: SessionState,
  calls: ReadonlyArray<ToolCall>,
  landed: Array<Prompt.ToolResultPart> | undefined,
  now: boolean,
  refusal: ToolErrorLike | undefined
): Effect.Effect<Prompt.ToolMessage> =>
  // A single call runs in the loop's own fiber: a fiber forked for it alone is one more to
  // start, and to interrupt and unwind on cancellation.
  calls.length === 1
    ? runOne(deps, state, calls[0]!, landed, asMessage, now, refusal)
    : Effect.map(
      Effect.forEach(calls, (call) => runOne(deps, state, call, landed, asPart, false, refusal), {
        concurrency: "unbounded"
      }),
      Parts.toolMessage
    )

const run = (
  deps: RunToolsDeps,
  state: SessionState,
  calls: ReadonlyArray<ToolCall>,
  landed: Array<Prompt.ToolResultPart> | undefined,
  now: boolean
): Effect.Effect<Prompt.ToolMessage> =>
  // A turn that spawns may be one question first (approval before a fan-out).
  calls.some((call) => FanOut.spawnTools.has(call.name))
    ? Effect.flatMap(
      FanOut.gate(state, calls, (event) => emit(deps, state, event)),
      (refusal) => runCalls(deps, state, calls, landed, false, refusal)
    )
    : runCalls(deps, state, calls, landed, now, undefined)

/**
 * The turn's results as one tool message. With `deps.onResult` (a durable transcript), each
 * result is handed over as it lands, and if the turn is interrupted, the results that did
 * land are kept in the conversation: a resumed run then reports as interrupted only the
 * calls that really did not finish.
 *
 * `now`: the caller runs the returned effect next, in its own fiber (the agent loop does): a
 * single call then starts at once rather than in a scheduler turn of its own.
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
