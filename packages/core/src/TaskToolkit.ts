/**
 * TaskToolkit — Fibril's sub-agent tools as an `effect/ai` Toolkit, for programs that run
 * their own model loop (`LanguageModel.generateText({ prompt, toolkit })`, `Chat`) and for
 * the `fibril mcp` server, which registers the same definitions with `McpServer`.
 *
 * The tools are the sub-agent tools Fibril's own agents get, from their one definition
 * (`AgentTools.definitions`: `task`, the background `agent_*` tools and `handle_read`): the
 * same parameters, descriptions, handlers and results (AgentResult.ts), with the output
 * schema and MCP hints each definition states (`served`). They go through the
 * `SubAgentManager` in context — the embedded one, or the cluster's — so the cap, the
 * records and the events are the engine's. Agents started here have no parent: they are
 * depth-1 agents under the root permission rules, living in the manager's scope, so a
 * background agent outlives the call that spawned it.
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
import type * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as AgentResult from "./AgentResult.ts"
import { SubAgentManager } from "./SubAgentManager.ts"
import type * as ToolRegistry from "./ToolRegistry.ts"
import * as AgentTools from "./tools/Agents.ts"
import * as Task from "./tools/Task.ts"

/**
 * Why a call failed, with the message a model or a person reads (`kind` is the tag of the
 * underlying error: UnknownRole, CapReached, AgentNotFound, NotResumable, InvalidArguments, ...).
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

type Definitions = typeof AgentTools.definitions

/** The Toolkit's tool of a definition: its name and parameters, the result its `served` states. */
type Served<D, Mode extends Tool.FailureMode> = D extends
  ToolRegistry.ToolDefinition<infer P, infer _R> & { readonly name: infer Name extends string } ? Tool.Tool<Name, {
    readonly parameters: P
    readonly success: ToolRegistry.Parameters
    readonly failure: typeof TaskToolError
    readonly failureMode: Mode
  }>
  : never

type ServedAll<T extends ReadonlyArray<unknown>, Mode extends Tool.FailureMode> = {
  readonly [K in keyof T]: Served<T[K], Mode>
}

const served = <Mode extends Tool.FailureMode>(definition: Definitions[number], failureMode: Mode) => {
  const hints = definition.served!
  return Tool.make(definition.name, {
    description: definition.description,
    parameters: definition.parameters,
    success: hints.success,
    failure: TaskToolError,
    failureMode
  })
    .annotate(Tool.Title, hints.title)
    .annotate(Tool.Readonly, hints.readOnly)
    .annotate(Tool.Destructive, hints.destructive)
    .annotate(Tool.Idempotent, hints.idempotent)
    .annotate(Tool.OpenWorld, hints.openWorld)
}

/** The toolkit of the definitions; only how a failure is delivered differs between the two. */
const define = <const Mode extends Tool.FailureMode>(failureMode: Mode) =>
  Toolkit.make(
    ...AgentTools.definitions.map((definition) => served(definition, failureMode)) as unknown as ServedAll<
      Definitions,
      Mode
    >
  )

/** For a model loop: a failure is the tool result the model reads (failureMode "return"). */
export const toolkit = define("return")

/** For `McpServer.toolkit`: a failure is an MCP tool error whose text is the message. */
export const mcpToolkit = define("error")

export const names = AgentTools.names

/** What an MCP server marks required in a tool's advertised input schema (`served.required`). */
export const requiredArguments: Readonly<Record<string, ReadonlyArray<string>>> = Object.fromEntries(
  AgentTools.definitions.flatMap((definition) => {
    const required = definition.served?.required
    return required === undefined ? [] : [[definition.name, required]]
  })
)

// ---------------------------------------------------------------------------
// Handlers
// ---------------------------------------------------------------------------

export interface Options {
  /** Recorded on a `task` agent cancelled because its call was interrupted. */
  readonly cancelReason?: string | undefined
  /** A watcher for each `task` call (the MCP server sends progress from here): see `Task.WatchOptions`. */
  readonly whileTaskRuns?:
    | Effect.Effect<((agent: AgentResult.AgentView) => Effect.Effect<void>) | undefined, never, Scope.Scope>
    | undefined
}

export const defaultCancelReason = "Cancelled: the task call was interrupted"

/** The caller of a Toolkit or MCP call: not an agent, so the agents it starts have no parent. */
const caller: ToolRegistry.ToolCallContext = { sessionId: undefined, callId: "", role: "", depth: 0 }

/** The handlers, over the `SubAgentManager` in context: each definition's own, `task` watched. */
export const makeHandlers = Effect.fn("TaskToolkit.makeHandlers")(function*(options: Options = {}) {
  const manager = yield* SubAgentManager
  const watch: Task.WatchOptions = {
    cancelReason: options.cancelReason ?? defaultCancelReason,
    watch: options.whileTaskRuns
  }
  const handlers: Record<string, (params: never) => Effect.Effect<unknown, TaskToolError>> = {}
  for (const definition of AgentTools.definitions) {
    const run = definition.name === Task.definition.name
      ? (params: typeof Task.TaskParameters.Type) => Task.watched(params, watch)
      : (params: never) => (definition.handler as ToolRegistry.RegisteredTool["handler"])(params, caller)
    handlers[definition.name] = (params) =>
      run(params).pipe(Effect.provideService(SubAgentManager, manager), Effect.mapError(failWith(definition.name)))
  }
  return toolkit.of(handlers as never)
})

/** The handlers with options (a cancellation reason, a watcher beside each `task`). */
export const layerWith = (options: Options) => toolkit.toLayer(makeHandlers(options))

/** The handlers of `toolkit` (and `mcpToolkit`: the same tool names), over the SubAgentManager. */
export const layer: Layer.Layer<Tool.HandlersFor<typeof toolkit.tools>, never, SubAgentManager> = layerWith({})
