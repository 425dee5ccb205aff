/**
 * `fibril mcp --cluster <url>` (or FIBRIL_CLUSTER_URL, `[cluster] url`): the same MCP tools,
 * the same handlers (TaskToolkit's, over core's definitions), with every agent run in the
 * cluster: the SubAgentManager they are given is the cluster's (`ClusterSubAgents.client`).
 * `task` starts a root agent on the workers and waits for it (its tree's steps are sent as
 * progress); the other tools act on the cluster's agents. The agents are durable: closing the
 * server does not cancel background agents; an interrupted `task` cancels its tree.
 */
import * as ClusterClient from "@fibril/cluster/ClusterClient"
import type { ClusterStore } from "@fibril/cluster/ClusterStore"
import * as ClusterSubAgents from "@fibril/cluster/ClusterSubAgents"
import { SubAgentManager } from "@fibril/core/SubAgentManager"
import * as TaskToolkit from "@fibril/core/TaskToolkit"
import * as McpServer from "effect/ai/McpServer"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ClusterEvents from "./ClusterEvents.ts"
import * as Mcp from "./Mcp.ts"
import * as McpTasks from "./McpTasks.ts"

export interface Options extends ClusterSubAgents.ClientOptions {
  readonly version: string
}

/** The handlers over the cluster client in context (engine and store). */
export const handlers = (options: Options) =>
  TaskToolkit.toolkit.toLayer(Effect.gen(function*() {
    const context = yield* Effect.context<ClusterStore | ClusterClient.ClientServices>()
    const server = yield* McpServer.McpServer
    const manager = yield* ClusterSubAgents.client(options)
    // Progress: the tree's events, from the agent's start until it has ended (then a last look).
    const whileTaskRuns = Effect.succeed((agent: { readonly agent_id: string }) =>
      Effect.gen(function*() {
        const finish = yield* ClusterEvents.mcpProgress(server, agent.agent_id)
        yield* Effect.ignore(ClusterClient.await_(agent.agent_id, options.pollMs))
        yield* finish
      }).pipe(Effect.provide(context))
    )
    return yield* TaskToolkit.makeHandlers({ cancelReason: Mcp.cancelReason, whileTaskRuns }).pipe(
      Effect.provideService(SubAgentManager, manager)
    )
  }))

/** The stdio server over the cluster client in context. */
export const layerStdio = (options: Options) =>
  McpServer.layerStdio({
    name: "fibril",
    version: options.version,
    description: "Fibril sub-agents in a cluster: task (run one and wait) and agent_* (background agents)",
    instructions: "Use `task` to delegate a self-contained piece of work to a sub-agent and get its result; it runs " +
      "durably on the cluster's workers. Use `agent_spawn` to start one in the background, then " +
      "`agent_wait`/`agent_result` to collect it and `handle_read` to page through its transcript.",
    protocols: Mcp.protocols,
    extensions: { [McpTasks.extension]: {} },
    registrations: McpServer.toolkit(TaskToolkit.mcpToolkit).pipe(
      Layer.provide(handlers(options)),
      Layer.provide(Mcp.requiringIds)
    )
  }).pipe(
    // Task calls as MCP tasks, over the cluster's agents (durable across server restarts).
    Layer.provide(McpTasks.stdio.pipe(Layer.provide(Layer.effect(SubAgentManager, ClusterSubAgents.client(options)))))
  )
