/**
 * TaskToolkit — Fibril's sub-agent tools as an `effect/ai` Toolkit, for programs that run
 * their own model loop (`LanguageModel.generateText({ prompt, toolkit })`, `Chat`) and for
 * the `fibril mcp` server, which registers the same definitions with `McpServer`.
 *
 * The tools are `task` (run a sub-agent and wait for its result), the background
 * `agent_*` tools (with `agent_open` / `agent_eval` / `agent_close`, the newer names; `agent_eval`
 * returns the agent's run receipt) and `handle_read` (a transcript by its handle, paged). They reuse the parameter schemas and descriptions of the tools Fibril's
 * own agents get (tools/Task.ts, tools/Agents.ts), add output schemas and honest MCP hints,
 * and go through the `SubAgentManager`: the cap, the records, the events. Agents started
 * here have no parent session: they are depth-1 agents under the root permission rules,
 * living in the manager's scope, so a background agent outlives the call that spawned it.
 *
 * `task` is spawn + wait: if the call is interrupted (a model loop cancelled, an MCP client's
 * `notifications/cancelled`), its agent and the agent's descendants are *cancelled*, with a
 * reason in their records. Failures (an unknown role, the cap, an unknown id) are a
 * `TaskToolError` carrying the readable message: returned to the model as the tool result
 * (`toolkit`, failureMode "return"), or an MCP tool error (`mcpToolkit`, failureMode "error",
 * which McpServer renders as `isError` with the message as text).
 *
 * @example
 * ```ts
 * const program = Effect.gen(function*() {
 *   const toolkit = yield* TaskToolkit.toolkit
 *   return yield* LanguageModel.generateText({ prompt: "Explore src/ with a sub-agent", toolkit })
 * }).pipe(Effect.provide(TaskToolkit.layer)) // then Fibril.layer(...) for the SubAgentManager
 * ```
 */
import * as Tool from "effect/ai/Tool"
import * as Toolkit from "effect/ai/Toolkit"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import { withSpan } from "./internal/span.ts"
import * as Receipt from "./Receipt.ts"
import { agentResultForModel, type AgentView, SubAgentManager } from "./SubAgentManager.ts"
import { Input, ResultSections, Status } from "./SubAgentRecord.ts"
import * as AgentTools from "./tools/Agents.ts"
import * as TaskTool from "./tools/Task.ts"
import * as TranscriptView from "./TranscriptView.ts"
import * as Usage from "./Usage.ts"

// ---------------------------------------------------------------------------
// Output schemas (MCP output schemas must have an object root)
// ---------------------------------------------------------------------------

export const Sections = ResultSections

/** What `task` returns: the parsed result of the finished agent (`TaskTool.taskResult`). */
export const TaskResult = Schema.Struct({
  agent_id: Schema.String,
  description: Schema.String,
  status: Schema.Literals(["completed", "failed", "cancelled"]),
  summary: Schema.String,
  sections: Sections,
  contract_violations: Schema.Array(Schema.String),
  tool_calls: Schema.Int,
  steps: Schema.Int,
  tokens: Usage.Usage,
  duration_ms: Schema.Int,
  model: Schema.String,
  /** Read it with `handle_read`, a page at a time. */
  transcript_handle: Schema.String
})

/** An agent's state or result as a model sees it (`agentResultForModel`). */
export const AgentResult = Schema.Struct({
  agent_id: Schema.String,
  /** Accepted by every agent tool in place of the id. */
  session_name: Schema.String,
  /** The current run: the first, or the latest resume. */
  run_id: Schema.String,
  description: Schema.String,
  role: Schema.String,
  status: Status,
  reason: Schema.optionalKey(Schema.String),
  summary: Schema.String,
  sections: Schema.optionalKey(Sections),
  contract_violations: Schema.Array(Schema.String),
  steps: Schema.Int,
  tool_calls: Schema.Int,
  tokens: Usage.Usage,
  duration_ms: Schema.optionalKey(Schema.Int),
  model: Schema.String,
  transcript_handle: Schema.String,
  from_prior_session: Schema.optionalKey(Schema.Boolean)
})

/** What `agent_spawn` / `agent_open` and `agent_resume` return at once. */
export const Spawned = Schema.Struct({
  agent_id: Schema.String,
  session_name: Schema.String,
  run_id: Schema.String,
  status: Status,
  role: Schema.String,
  model: Schema.String,
  description: Schema.String,
  detached: Schema.Boolean
})

export const WaitResult = Schema.Struct({
  timed_out: Schema.Boolean,
  completed: Schema.Array(AgentResult),
  still_running: Schema.Array(Schema.String)
})

export const AgentSummary = Schema.Struct({
  agent_id: Schema.String,
  session_name: Schema.String,
  parent_id: Schema.optionalKey(Schema.String),
  depth: Schema.Int,
  description: Schema.String,
  role: Schema.String,
  status: Status,
  reason: Schema.optionalKey(Schema.String),
  detached: Schema.Boolean,
  steps: Schema.Int,
  tool_calls: Schema.Int,
  from_prior_session: Schema.optionalKey(Schema.Boolean)
})

export const ListResult = Schema.Struct({ agents: Schema.Array(AgentSummary) })

export const InputResult = Schema.Struct({
  delivered: Schema.Boolean,
  reason: Schema.optionalKey(Schema.String),
  agent: AgentResult
})

/**
 * What `agent_eval` returns: the agent's result, the delivery of the message it was given
 * (if any), its run receipt at the top level, and the whole receipt as `worker_record`.
 */
export const EvalResult = Schema.Struct({
  ...AgentResult.fields,
  /** With a message: was it delivered (to a running agent, read before its next step)? */
  delivered: Schema.optionalKey(Schema.Boolean),
  /** Why not, or how (queued for another process). */
  delivery_reason: Schema.optionalKey(Schema.String),
  /** The input as the record keeps it. */
  delivery: Schema.optionalKey(Input),
  ...Receipt.receiptFields,
  worker_record: Receipt.WorkerRecord
})

/** What `handle_read` returns: a page of a transcript. */
export const TranscriptPage = TranscriptView.Page

/**
 * Why a call failed, with the message a model or a person reads (`kind` is the tag of the
 * underlying error: UnknownRole, CapReached, AgentNotFound, NotResumable, ...).
 */
export class TaskToolError extends Schema.TaggedError<TaskToolError>()("TaskToolError", {
  tool: Schema.String,
  kind: Schema.String,
  message: Schema.String
}) {}

const failWith = (tool: string) => (error: { readonly _tag: string; readonly message: string }) =>
  new TaskToolError({ tool, kind: error._tag, message: error.message })

// ---------------------------------------------------------------------------
// Definitions
// ---------------------------------------------------------------------------

interface Hints {
  readonly title: string
  readonly readOnly: boolean
  readonly destructive: boolean
  readonly idempotent: boolean
  readonly openWorld: boolean
}

/** MCP hints default to destructive and open-world: every tool states all four. */
interface ToolConfig {
  readonly parameters: Schema.Constraint
  readonly success: Schema.Constraint
  readonly failure: Schema.Constraint
  readonly failureMode: Tool.FailureMode
}

const hinted = <Name extends string, Config extends ToolConfig>(
  tool: Tool.Tool<Name, Config>,
  hints: Hints
): Tool.Tool<Name, Config> =>
  tool
    .annotate(Tool.Title, hints.title)
    .annotate(Tool.Readonly, hints.readOnly)
    .annotate(Tool.Destructive, hints.destructive)
    .annotate(Tool.Idempotent, hints.idempotent)
    .annotate(Tool.OpenWorld, hints.openWorld)

const runsAgents: Omit<Hints, "title"> = { readOnly: false, destructive: true, idempotent: false, openWorld: true }
const reads: Omit<Hints, "title"> = { readOnly: true, destructive: false, idempotent: true, openWorld: false }

const waitDescription =
  "Wait for background sub-agents to finish. Returns the finished ones (with their results) and the ids still running; with no ids, waits for the running agents started through these tools."

/** The tool definitions; only how a failure is delivered differs between the two toolkits. */
const define = <const Mode extends Tool.FailureMode>(failureMode: Mode) =>
  Toolkit.make(
    hinted(
      Tool.make("task", {
        description: TaskTool.definition.description,
        parameters: TaskTool.TaskParameters,
        success: TaskResult,
        failure: TaskToolError,
        failureMode
      }),
      { title: "Run a sub-agent and wait for its result", ...runsAgents }
    ),
    hinted(
      Tool.make("agent_spawn", {
        description: AgentTools.spawn.description,
        parameters: AgentTools.SpawnParameters,
        success: Spawned,
        failure: TaskToolError,
        failureMode
      }),
      { title: "Start a background sub-agent", ...runsAgents }
    ),
    hinted(
      Tool.make("agent_open", {
        description: AgentTools.open.description,
        parameters: AgentTools.SpawnParameters,
        success: Spawned,
        failure: TaskToolError,
        failureMode
      }),
      { title: "Start a background sub-agent (newer name of agent_spawn)", ...runsAgents }
    ),
    hinted(
      Tool.make("agent_wait", {
        description: waitDescription,
        parameters: AgentTools.WaitParameters,
        success: WaitResult,
        failure: TaskToolError,
        failureMode
      }),
      { title: "Wait for background sub-agents", ...reads }
    ),
    hinted(
      Tool.make("agent_result", {
        description: AgentTools.result.description,
        parameters: AgentTools.result.parameters,
        success: AgentResult,
        failure: TaskToolError,
        failureMode
      }),
      { title: "A sub-agent's state or result", ...reads }
    ),
    hinted(
      Tool.make("agent_cancel", {
        description: AgentTools.cancel.description,
        parameters: AgentTools.cancel.parameters,
        success: AgentResult,
        failure: TaskToolError,
        failureMode
      }),
      {
        title: "Cancel a sub-agent and its descendants",
        readOnly: false,
        destructive: true,
        idempotent: true,
        openWorld: false
      }
    ),
    hinted(
      Tool.make("agent_close", {
        description: AgentTools.close.description,
        parameters: AgentTools.close.parameters,
        success: AgentResult,
        failure: TaskToolError,
        failureMode
      }),
      {
        title: "Cancel a sub-agent (newer name of agent_cancel)",
        readOnly: false,
        destructive: true,
        idempotent: true,
        openWorld: false
      }
    ),
    hinted(
      Tool.make("agent_eval", {
        description: AgentTools.evaluate.description,
        parameters: AgentTools.EvalParameters,
        success: EvalResult,
        failure: TaskToolError,
        failureMode
      }),
      {
        title: "A sub-agent's state and run receipt (optionally deliver a message first)",
        readOnly: false,
        destructive: false,
        idempotent: false,
        openWorld: false
      }
    ),
    hinted(
      Tool.make("handle_read", {
        description: AgentTools.handleRead.description,
        parameters: AgentTools.HandleReadParameters,
        success: TranscriptPage,
        failure: TaskToolError,
        failureMode
      }),
      { title: "Read a sub-agent's transcript by handle, paged", ...reads }
    ),
    hinted(
      Tool.make("agent_list", {
        description: AgentTools.list.description,
        parameters: AgentTools.list.parameters,
        success: ListResult,
        failure: TaskToolError,
        failureMode
      }),
      { title: "List sub-agents", ...reads }
    ),
    hinted(
      Tool.make("agent_send_input", {
        description: AgentTools.sendInput.description,
        parameters: AgentTools.sendInput.parameters,
        success: InputResult,
        failure: TaskToolError,
        failureMode
      }),
      {
        title: "Send a message to a running sub-agent",
        readOnly: false,
        destructive: false,
        idempotent: false,
        openWorld: false
      }
    ),
    hinted(
      Tool.make("agent_resume", {
        description: AgentTools.resume.description,
        parameters: AgentTools.resume.parameters,
        success: Spawned,
        failure: TaskToolError,
        failureMode
      }),
      { title: "Continue a finished sub-agent", ...runsAgents }
    )
  )

/** For a model loop: a failure is the tool result the model reads (failureMode "return"). */
export const toolkit = define("return")

/** For `McpServer.toolkit`: a failure is an MCP tool error whose text is the message. */
export const mcpToolkit = define("error")

export const names = Object.keys(toolkit.tools)

// ---------------------------------------------------------------------------
// Handlers
// ---------------------------------------------------------------------------

export interface Options {
  /** Recorded on a `task` agent cancelled because its call was interrupted. */
  readonly cancelReason?: string | undefined
  /**
   * A watcher for each `task` call (the MCP server sends progress notifications from here).
   * It is run in the call's scope *before* the agent is spawned, so it can subscribe to
   * `AgentEvents` without missing any, and returns what to run beside the call once the agent
   * exists (or `undefined` for nothing). The call waits for that to return before it returns
   * its result (at most 5 s: it ends at the agent's terminal event, so only a starved process
   * waits long), so what it reports comes first. An interrupted call interrupts it.
   */
  readonly whileTaskRuns?:
    | Effect.Effect<((agent: AgentView) => Effect.Effect<void>) | undefined, never, Scope.Scope>
    | undefined
}

export const defaultCancelReason = "Cancelled: the task call was interrupted"

/** The first non-empty string among `keys` (the accepted spellings of one parameter). */
const pickOptional = (params: Readonly<Record<string, unknown>>, keys: ReadonlyArray<string>): string | undefined => {
  for (const key of keys) {
    const value = params[key]
    if (typeof value === "string" && value !== "") return value
  }
  return undefined
}

const pick = (tool: string, params: Readonly<Record<string, unknown>>, keys: ReadonlyArray<string>) => {
  const value = pickOptional(params, keys)
  return value !== undefined ? Effect.succeed(value) : Effect.fail(
    new TaskToolError({
      tool,
      kind: "MissingParameter",
      message: `"${keys[0]}" is required${keys.length > 1 ? ` (also accepted as ${keys.slice(1).join(", ")})` : ""}`
    })
  )
}

const idKeys = ["agent_id", "id"]
const messageKeys = ["message", "input"]

/** `agentResultForModel` without its undefined-valued keys (structured MCP content is JSON). */
const agentResult = (agent: AgentView): typeof AgentResult.Type => {
  const { sections, duration_ms, ...rest } = agentResultForModel(agent)
  return {
    ...rest,
    ...(sections === undefined ? {} : { sections }),
    ...(duration_ms === undefined ? {} : { duration_ms })
  }
}

const spawned = (agent: AgentView): typeof Spawned.Type => AgentTools.spawned(agent)

const summary = (agent: AgentView): typeof AgentSummary.Type => ({
  agent_id: agent.agent_id,
  session_name: Receipt.sessionName(agent),
  ...(agent.parent_id === undefined ? {} : { parent_id: agent.parent_id }),
  depth: agent.depth,
  description: agent.description,
  role: agent.role,
  status: agent.status,
  ...(agent.reason === undefined ? {} : { reason: agent.reason }),
  detached: agent.detached,
  steps: agent.steps,
  tool_calls: agent.tool_calls,
  ...(agent.from_prior_session ? { from_prior_session: true } : {})
})

/** The handlers, over the `SubAgentManager` in context. */
export const makeHandlers = Effect.fn("TaskToolkit.makeHandlers")(function*(options: Options = {}) {
  const manager = yield* SubAgentManager
  const cancelReason = options.cancelReason ?? defaultCancelReason
  const whileTaskRuns = options.whileTaskRuns

  // Spawn without interruption, so an interrupt always finds the agent to cancel.
  const task = (params: typeof TaskTool.TaskParameters.Type) =>
    Effect.uninterruptibleMask((restore) =>
      Effect.gen(function*() {
        const watch = whileTaskRuns === undefined ? undefined : yield* whileTaskRuns
        const agent = yield* manager.spawn(undefined, {
          prompt: params.prompt,
          description: params.description,
          role: params.subagent_type ?? "general",
          allowedTools: params.allowed_tools
        }).pipe(Effect.mapError(failWith("task")))
        const watcher = watch === undefined
          ? undefined
          : yield* Effect.forkChild(Effect.interruptible(watch(agent)), { startImmediately: true })
        const done = yield* restore(manager.result(agent.agent_id, { block: true })).pipe(
          Effect.mapError(failWith("task")),
          Effect.onInterrupt(() => Effect.ignore(manager.cancel(agent.agent_id, cancelReason)))
        )
        if (watcher !== undefined) {
          yield* restore(Fiber.await(watcher)).pipe(Effect.timeoutOption("5 seconds"), Effect.ignore)
          yield* Fiber.interrupt(watcher)
        }
        return TaskTool.taskResult(done)
      })
    ).pipe(Effect.scoped, withSpan("TaskToolkit.task"))

  const spawnAgent = Effect.fn("TaskToolkit.agent_spawn")(function*(
    tool: string,
    params: typeof AgentTools.SpawnParameters.Type
  ) {
    const prompt = yield* pick(tool, params, ["prompt", "message", "input", "objective"])
    const agent = yield* manager.spawn(undefined, {
      prompt,
      description: params.description,
      role: pickOptional(params, ["subagent_type", "type", "agent_type"]),
      model: params.model,
      detached: params.detached,
      forkContext: params.fork_context ?? params.inherit_context,
      allowedTools: params.allowed_tools,
      verifies: params.verifies
    }).pipe(Effect.mapError(failWith(tool)))
    return spawned(agent)
  })

  const cancelAgent = Effect.fn("TaskToolkit.agent_cancel")(function*(
    tool: string,
    params: typeof AgentTools.cancel.parameters.Type
  ) {
    const id = yield* pick(tool, params, idKeys)
    const agent = yield* manager.cancel(id, params.reason ?? `Cancelled by request (${tool})`)
      .pipe(Effect.mapError(failWith(tool)))
    return agentResult(agent)
  })

  return toolkit.of({
    task,
    agent_spawn: (params) => spawnAgent("agent_spawn", params),
    agent_open: (params) => spawnAgent("agent_open", params),
    agent_wait: Effect.fn("TaskToolkit.agent_wait")(function*(params) {
      const single = pickOptional(params, idKeys)
      const ids = params.ids ?? (single === undefined ? undefined : [single])
      // Without ids: the agents started here still running, and those finished whose results
      // were not handed over yet (each is handed over once).
      const targets = ids ?? (yield* manager.unreadChildren(undefined))
      const result = yield* manager.wait(targets, { mode: params.wait_mode ?? "any", timeoutMs: params.timeout_ms })
        .pipe(Effect.mapError(failWith("agent_wait")))
      yield* manager.markRead(undefined, result.completed.map((agent) => agent.agent_id))
      return {
        timed_out: result.timed_out,
        completed: result.completed.map(agentResult),
        still_running: result.pending
      }
    }),
    agent_result: Effect.fn("TaskToolkit.agent_result")(function*(params) {
      const id = yield* pick("agent_result", params, idKeys)
      const agent = yield* manager.result(id, { block: params.block ?? false, timeoutMs: params.timeout_ms })
        .pipe(Effect.mapError(failWith("agent_result")))
      yield* manager.markRead(undefined, [agent.agent_id])
      return agentResult(agent)
    }),
    agent_cancel: (params) => cancelAgent("agent_cancel", params),
    agent_close: (params) => cancelAgent("agent_close", params),
    agent_eval: Effect.fn("TaskToolkit.agent_eval")(function*(params) {
      const id = yield* pick("agent_eval", params, idKeys)
      return yield* AgentTools.runEval(params, id, pickOptional(params, messageKeys)).pipe(
        Effect.provideService(SubAgentManager, manager),
        Effect.mapError(failWith("agent_eval"))
      )
    }),
    handle_read: Effect.fn("TaskToolkit.handle_read")(function*(params) {
      const handle = yield* pick("handle_read", params, ["handle", ...idKeys])
      return yield* manager.readTranscript(handle, { offset: params.offset, limit: params.limit })
        .pipe(Effect.mapError(failWith("handle_read")))
    }),
    agent_list: Effect.fn("TaskToolkit.agent_list")(function*(params) {
      const agents = yield* manager.list({ includeArchived: params.include_archived ?? false })
      return { agents: agents.map(summary) }
    }),
    agent_send_input: Effect.fn("TaskToolkit.agent_send_input")(function*(params) {
      const id = yield* pick("agent_send_input", params, idKeys)
      const message = yield* pick("agent_send_input", params, messageKeys)
      const outcome = yield* manager.sendInput(id, message, params.interrupt ?? false, "agent_send_input")
        .pipe(Effect.mapError(failWith("agent_send_input")))
      return {
        delivered: outcome.delivered,
        ...(outcome.reason === undefined ? {} : { reason: outcome.reason }),
        agent: agentResult(outcome.agent)
      }
    }),
    agent_resume: Effect.fn("TaskToolkit.agent_resume")(function*(params) {
      const id = yield* pick("agent_resume", params, idKeys)
      const agent = yield* manager.resume(undefined, id, pickOptional(params, messageKeys))
        .pipe(Effect.mapError(failWith("agent_resume")))
      return spawned(agent)
    })
  })
})

/** The handlers with options (a cancellation reason, a hook beside each `task`). */
export const layerWith = (options: Options) => toolkit.toLayer(makeHandlers(options))

/** The handlers of `toolkit` (and `mcpToolkit`: the same tool names), over the SubAgentManager. */
export const layer: Layer.Layer<Tool.HandlersFor<typeof toolkit.tools>, never, SubAgentManager> = layerWith({})
