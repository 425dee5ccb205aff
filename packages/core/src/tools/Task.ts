/**
 * The `task` tool: delegate to a sub-agent in the foreground.
 *
 * Goes through the SubAgentManager (the cap, the record, events): a child session with the
 * role's posture, `task` and `todowrite` denied and spawning denied below max_depth, run in
 * a fiber of the calling tool call — so interrupting the parent interrupts the child — and
 * only the parsed result returned. The child's transcript never enters the parent's history.
 * A child that fails (step budget, model errors) is a `failed` result the parent's model can
 * act on, not a failure of the parent; a cap or an unknown role is a tool error.
 *
 * A caller outside a loop (a Toolkit, an MCP client) runs it as `watched`: spawned, then
 * waited for, so that a watcher (MCP progress) can follow the agent from its start, and an
 * interrupted call cancels the agent with a reason instead of interrupting it.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as AgentResult from "../AgentResult.ts"
import { text } from "../internal/resource.ts"
import { spanned, withSpan } from "../internal/span.ts"
import * as OutputSchema from "../OutputSchema.ts"
import * as Roles from "../Roles.ts"
import { type SpawnError, type SpawnRequest, SubAgentManager } from "../SubAgentManager.ts"
import * as ToolRegistry from "../ToolRegistry.ts"

/** `isolation` of task and agent_spawn (SubAgentManager.Isolation). */
export const IsolationParameter = Schema.Literals(["worktree", "process"]).annotate({
  description:
    "worktree: work in a git worktree of your current tree on its own branch (merge it with agent_merge); process: in its own OS process. Default: in your workspace"
})

/** `mcp_servers` on `task` and `agent_spawn` (McpNarrowing). */
export const McpServersParameter = Schema.Array(Schema.String).annotate({
  description:
    "The MCP servers (by name) the sub-agent and its sub-agents may use: some of those you may use (default: all of yours)"
})

export const TaskParameters = Schema.Struct({
  description: Schema.String.annotate({ description: "A 3-8 word label for the task" }),
  prompt: Schema.String.annotate({ description: "The full, self-contained task for the sub-agent" }),
  subagent_type: Schema.optionalKey(
    Schema.String.annotate({ description: `The sub-agent role (default general): ${Roles.acceptedNames}` })
  ),
  allowed_tools: Schema.optionalKey(
    Schema.Array(Schema.String).annotate({ description: "For custom agents: the tool names they may use" })
  ),
  ask_tools: Schema.optionalKey(
    Schema.Array(Schema.String).annotate({
      description:
        "Tool names or postures (read, write, shell, spawn, plan, memory) whose calls wait for a person's approval in this agent and its sub-agents"
    })
  ),
  mcp_servers: Schema.optionalKey(McpServersParameter),
  output_schema: Schema.optionalKey(OutputSchema.Parameter),
  isolation: Schema.optionalKey(IsolationParameter)
})

export type TaskResult = AgentResult.TaskResult

/** The spawn request a `task` call makes. */
export const request = (params: typeof TaskParameters.Type): SpawnRequest => ({
  prompt: params.prompt,
  description: params.description,
  role: params.subagent_type ?? "general",
  allowedTools: params.allowed_tools,
  ...(params.ask_tools === undefined ? {} : { askTools: params.ask_tools }),
  ...(params.mcp_servers === undefined ? {} : { mcpServers: params.mcp_servers }),
  ...(params.output_schema === undefined ? {} : { outputSchema: params.output_schema }),
  isolation: params.isolation
})

export const definition = ToolRegistry.define({
  name: "task",
  description: text("./task.md", import.meta.url),
  parameters: TaskParameters,
  posture: "spawn",
  served: {
    title: "Run a sub-agent and wait for its result",
    success: AgentResult.TaskResult,
    readOnly: false,
    destructive: true,
    idempotent: false,
    openWorld: true
  },
  // A span without `Effect.fn`'s call-site capture (internal/span.ts): this runs once per
  // sub-agent, and the manager is read from the fiber inside the span.
  handler: (params, context) =>
    spanned("tool.task", (fiber) =>
      Effect.mapEager(
        Context.get(fiber.context as Context.Context<SubAgentManager>, SubAgentManager).run(
          context.sessionId,
          request(params)
        ),
        AgentResult.task
      ) as Effect.Effect<TaskResult, SpawnError, SubAgentManager>)
})

export interface WatchOptions {
  /** Recorded on the agent when the call is interrupted. */
  readonly cancelReason: string
  /**
   * Run in the call's scope *before* the agent is spawned (so it can subscribe to events
   * without missing any); returns what to run beside the call once the agent exists. The
   * call waits for that (at most 5 s: it ends at the agent's terminal event) before it
   * returns, so what it reports comes first. An interrupted call interrupts it.
   */
  readonly watch?:
    | Effect.Effect<((agent: AgentResult.AgentView) => Effect.Effect<void>) | undefined, never, Scope.Scope>
    | undefined
}

/**
 * `task` for a caller outside a loop: spawn without interruption (so an interrupt always
 * finds the agent to cancel), then wait; interrupted, the agent and its tree are cancelled.
 */
export const watched = (params: typeof TaskParameters.Type, options: WatchOptions) =>
  Effect.uninterruptibleMask((restore) =>
    Effect.gen(function*() {
      const manager = yield* SubAgentManager
      const watch = options.watch === undefined ? undefined : yield* options.watch
      const agent = yield* manager.spawn(undefined, request(params))
      const watcher = watch === undefined
        ? undefined
        : yield* Effect.forkChild(Effect.interruptible(watch(agent)), { startImmediately: true })
      const done = yield* restore(manager.result(agent.agent_id, { block: true })).pipe(
        Effect.onInterrupt(() => Effect.ignore(manager.cancel(agent.agent_id, options.cancelReason)))
      )
      if (watcher !== undefined) {
        yield* restore(Fiber.await(watcher)).pipe(Effect.timeoutOption("5 seconds"), Effect.ignore)
        yield* Fiber.interrupt(watcher)
      }
      return AgentResult.task(done)
    })
  ).pipe(Effect.scoped, withSpan("tool.task"))

/** Registers `task`; needs the SubAgentManager it delegates through. */
export const layer: Layer.Layer<never, ToolRegistry.DuplicateTool, ToolRegistry.ToolRegistry | SubAgentManager> = Layer
  .effectDiscard(ToolRegistry.ToolRegistry.use((registry) => registry.register(definition)))
