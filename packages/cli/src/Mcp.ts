/**
 * The `fibril mcp` server: Fibril's sub-agent tools (`task`, the `agent_*` tools and
 * `handle_read` of `TaskToolkit`, with their output schemas) served over stdio with Effect's `McpServer`, so any MCP client (Claude Code,
 * opencode, Cursor, the MCP Inspector) gets sub-agents without switching harness.
 *
 * What the server adds to the toolkit:
 * - progress: while a `task` runs, each event of its agent tree (steps, tool calls, spawned
 *   children, the end) is sent as `notifications/progress` when the request carried a
 *   `_meta.progressToken`;
 * - cancellation: McpServer interrupts a request's handler on `notifications/cancelled`;
 *   the `task` handler then cancels its agent and the agent's descendants, which are
 *   recorded as cancelled "by the MCP client";
 * - shutdown: when the server stops (stdin closed, or a signal), every running agent of this
 *   process that is not detached is cancelled with one reason (`shutdownReason`) before the
 *   requests in flight are interrupted and the manager closes, so its record says why;
 * - the id parameters of the agent tools are `required` in their input schemas.
 *
 * stdout carries JSON-RPC only; logs go to stderr (`Logger.LogToStderr`, set by the caller).
 */
import { type AgentEvent, AgentEvents, isTerminal, progressText } from "@fibril/core/AgentEvents"
import type { AgentView } from "@fibril/core/SubAgentManager"
import { SubAgentManager } from "@fibril/core/SubAgentManager"
import { SubAgentStore } from "@fibril/core/SubAgentStore"
import * as TaskToolkit from "@fibril/core/TaskToolkit"
import * as McpProtocol from "effect/ai/McpProtocol"
import * as McpSchema from "effect/ai/McpSchema"
import * as McpServer from "effect/ai/McpServer"
import type * as Toolkit from "effect/ai/Toolkit"
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as PubSub from "effect/PubSub"
import * as Stdio from "effect/Stdio"
import * as Stream from "effect/Stream"
import * as JsonRpcLines from "./JsonRpcLines.ts"
import * as McpApprovals from "./McpApprovals.ts"
import * as McpRuntime from "./McpRuntime.ts"
import * as McpTasks from "./McpTasks.ts"

const encoder = new TextEncoder()

export const cancelReason = "Cancelled by the MCP client"
export const shutdownReason = "Cancelled: the fibril mcp server shut down"

/**
 * Every protocol revision current clients speak; the client's own is chosen (2026-07-28 is
 * stateless: each request carries its revision and capabilities in `_meta`).
 */
export const protocols = [
  McpProtocol.v2026_07_28,
  McpProtocol.v2025_11_25,
  McpProtocol.v2025_06_18,
  McpProtocol.v2025_03_26,
  McpProtocol.v2024_11_05
] as const

type ProgressToken = string | number

const tokenOf = (meta: unknown): ProgressToken | undefined => {
  if (typeof meta !== "object" || meta === null || !("progressToken" in meta)) return undefined
  const token = meta.progressToken
  return typeof token === "string" || typeof token === "number" ? token : undefined
}

/**
 * The progress token of the request being handled, if its client sent one: the request's
 * `_meta` (McpServerClient, on the stateful protocol revisions served here), else the
 * request context's metadata (stateless revisions).
 */
export const currentProgressToken = Effect.gen(function*() {
  const client = yield* Effect.serviceOption(McpSchema.McpServerClient)
  if (Option.isSome(client)) return tokenOf(client.value.requestMetadata)
  const context = yield* Effect.serviceOption(McpSchema.McpRequestContext)
  return Option.isSome(context) ? tokenOf(context.value.requestMetadata) : undefined
})

const label = (event: AgentEvent) =>
  `${event.agent.role}${
    event.agent.description === undefined ? "" : ` "${event.agent.description}"`
  } [${event.agent.agentId}]`

/** One line per event, for the client's progress display. */
export const describe = (event: AgentEvent): string => {
  const who = label(event)
  switch (event.type) {
    case "spawned":
      return `${who} spawned (depth ${event.agent.depth})`
    case "started":
      return `${who} started`
    case "step":
      return `${who} step ${event.agent.step}`
    case "retry":
      return `${who} retrying: ${event.reason ?? "model error"}`
    case "tool_call":
      return `${who} → ${event.tool ?? "tool"}`
    case "tool_result":
      return `${who} ← ${event.tool ?? "tool"}${event.isFailure === true ? " (failed)" : ""}`
    case "tool_progress":
      return `${who} … ${event.tool ?? "tool"}${event.progress === undefined ? "" : ` ${progressText(event.progress)}`}`
    default:
      return `${who} ${event.type}${event.reason === undefined ? "" : `: ${event.reason}`}`
  }
}

/**
 * For a `task` call whose request carried a progress token: subscribes to the agent events
 * before the agent is spawned, then forwards its tree's events (steps, tool calls, spawned
 * children, the end) as `notifications/progress` until the agent's own terminal event
 * (progress counts events; there is no total). Nothing without a progress token.
 */
export const reportProgress = (server: McpServer.McpServer["Service"], events: AgentEvents["Service"]) =>
  Effect.gen(function*() {
    const progressToken = yield* currentProgressToken
    if (progressToken === undefined) return undefined
    const subscription = yield* events.subscribe
    return (agent: AgentView): Effect.Effect<void> =>
      Effect.gen(function*() {
        const tree = new Set([agent.agent_id])
        let progress = 0
        const send = (message: string) => {
          progress += 1
          return server.notifications["notifications/progress"]({ progressToken, progress, message }).pipe(
            Effect.ignore
          )
        }
        const forward = (event: AgentEvent) => {
          const { agentId, parentId } = event.agent
          if (!tree.has(agentId) && (parentId === undefined || !tree.has(parentId))) return Effect.void
          tree.add(agentId)
          // A streamed answer's pieces are not progress a client lists (the server does not stream).
          return event.type === "text" ? Effect.void : send(describe(event))
        }
        yield* send(`${agent.role} "${agent.description}" [${agent.agent_id}] is ${agent.status}`)
        // Until the agent's own terminal event, which every agent publishes before its record
        // becomes final (the call bounds the wait anyway). No race of `take` against anything
        // else: an interrupted take can lose the event it was just handed.
        while (true) {
          const event = yield* PubSub.take(subscription)
          yield* forward(event)
          if (event.agent.agentId === agent.agent_id && isTerminal(event.type)) break
        }
        // And what its descendants published up to then.
        const rest = yield* PubSub.takeUpTo(subscription, Number.MAX_SAFE_INTEGER)
        yield* Effect.forEach(rest, forward, { discard: true })
      })
  })

/**
 * The toolkit's handlers with MCP progress and the client's cancellation reason, over the
 * runtime (McpRuntime): made once it is built, and each call waits for that.
 */
const handlers = TaskToolkit.mcpToolkit.toLayer(Effect.gen(function*() {
  const server = yield* McpServer.McpServer
  const runtime = yield* McpRuntime.McpRuntime
  // Elicitation of its tree's approval questions, where the process registers calls for it.
  const registry = yield* Effect.serviceOption(McpApprovals.Registry)
  const made = yield* Effect.cached(McpRuntime.use(Effect.gen(function*() {
    const events = yield* AgentEvents
    const elicit = Option.isNone(registry) ? Effect.succeed(undefined) : McpApprovals.watch.pipe(
      Effect.provideService(McpApprovals.Registry, registry.value),
      Effect.provideService(AgentEvents, events)
    )
    return yield* TaskToolkit.makeHandlers({
      cancelReason,
      whileTaskRuns: both(reportProgress(server, events), elicit)
    })
  })))
  const call = (name: string) => (params: never) =>
    McpRuntime.use(Effect.flatMap(made, (ready) => (ready[name as keyof typeof ready] as Handler)(params))).pipe(
      Effect.provideService(McpRuntime.McpRuntime, runtime)
    )
  return Object.fromEntries(TaskToolkit.names.map((name) => [name, call(name)])) as unknown as Toolkit.HandlersFrom<
    typeof TaskToolkit.mcpToolkit.tools
  >
}))

type Handler = (params: never) => Effect.Effect<unknown, TaskToolkit.TaskToolError>

/** Two watchers of a call's agent as one (either may be absent), run side by side. */
const both = <E, R>(
  a: Effect.Effect<((agent: AgentView) => Effect.Effect<void>) | undefined, E, R>,
  b: Effect.Effect<((agent: AgentView) => Effect.Effect<void>) | undefined, E, R>
) =>
  Effect.map(
    Effect.all([a, b]),
    ([first, second]) =>
      first === undefined ?
        second :
        second === undefined ?
        first :
        (agent: AgentView) => Effect.all([first(agent), second(agent)], { concurrency: 2, discard: true })
  )

/**
 * The McpServer as the toolkit registers with it: every call's records are committed before
 * it is answered — a call whose records cannot be saved (a full disk) is answered with an
 * error that says so, not with a result the store does not have.
 */
export const settlingCalls = Layer.effect(
  McpServer.McpServer,
  Effect.map(Effect.all([McpServer.McpServer, McpRuntime.McpRuntime]), ([server, runtime]) => {
    const settle = McpRuntime.use(Effect.flatMap(Effect.service(SubAgentStore), (store) => store.settle)).pipe(
      Effect.provideService(McpRuntime.McpRuntime, runtime)
    )
    return McpServer.McpServer.of({
      ...server,
      addTool: (options) =>
        server.addTool({
          ...options,
          handle: (payload: unknown) =>
            Effect.flatMap(options.handle(payload), (result) =>
              Effect.match(settle, {
                onFailure: (error) =>
                  new McpSchema.CallToolResult({
                    isError: true,
                    content: [{ type: "text", text: `${error.message}; this call's outcome is not recorded` }]
                  }),
                onSuccess: () => result
              }))
        })
    })
  })
)

/**
 * The McpServer as the toolkit registers with it: a tool whose definition names required
 * arguments (`served.required`: `agent_id`, whose Schema keeps it optional beside its alias
 * `id`, so a call naming the agent `id` is still decoded) is registered with them `required`
 * in its advertised input schema.
 */
export const requiringIds = Layer.effect(
  McpServer.McpServer,
  Effect.map(McpServer.McpServer, (server) =>
    McpServer.McpServer.of({
      ...server,
      addTool: (options) => {
        const names = TaskToolkit.requiredArguments[options.tool.name]
        if (names === undefined) return server.addTool(options)
        const inputSchema = options.tool.inputSchema
        return server.addTool({
          ...options,
          tool: new McpSchema.Tool({
            ...options.tool,
            inputSchema: { ...inputSchema, required: [...new Set([...(inputSchema.required ?? []), ...names])] }
          })
        })
      }
    }))
)

/** Registers `task` and the `agent_*` tools with the McpServer in context. */
export const tools = McpServer.toolkit(TaskToolkit.mcpToolkit).pipe(
  Layer.provide(handlers),
  Layer.provide(requiringIds),
  Layer.provide(McpApprovals.explainingDenials),
  Layer.provide(settlingCalls)
)

/**
 * When the server stops: `serve` opens `stopping` (stdin closed, or a signal) and waits for
 * `stopped` before it interrupts the server, so the agents are cancelled with the shutdown
 * reason before the requests in flight are interrupted (a `task` interrupted first would
 * record "Cancelled by the MCP client").
 */
export class Shutdown extends Context.Service<Shutdown, {
  readonly stopping: Deferred.Deferred<void>
  readonly stopped: Deferred.Deferred<void>
  /** Opened once the server is up: before that there is nothing to cancel. */
  readonly armed: Deferred.Deferred<void>
}>()("@fibril/cli/Mcp/Shutdown") {}

/** Every running agent of this process that is not detached, cancelled with the shutdown reason. */
const cancelBuilt = Effect.gen(function*() {
  const manager = yield* SubAgentManager
  const store = yield* SubAgentStore
  const agents = yield* manager.list({ includeArchived: false })
  const open = agents.filter((a) =>
    !a.detached && a.session_boot_id === store.owner.boot_id && (a.status === "running" || a.status === "pending")
  )
  if (open.length > 0) yield* Effect.logInfo(`fibril mcp: cancelling ${open.length} running agent(s) on shutdown`)
  yield* Effect.forEach(open, (a) => Effect.ignore(manager.cancel(a.agent_id, shutdownReason)), {
    concurrency: "unbounded",
    discard: true
  })
})

/**
 * On shutdown: cancel every running agent of this process that is not detached, with the
 * reason recorded (agents of other processes sharing the store are theirs).
 */
export const cancelOnShutdown = Layer.effectDiscard(Effect.gen(function*() {
  const runtime = yield* McpRuntime.McpRuntime
  const shutdown = yield* Shutdown
  // Agents are started by calls, which wait for the runtime: none before it is built.
  const cancelAll = Effect.flatMap(
    runtime.built,
    Option.match({
      onNone: () => Effect.void,
      onSome: (services) => Effect.provideContext(cancelBuilt, services)
    })
  )
  yield* Effect.forkScoped(
    Deferred.await(shutdown.stopping).pipe(
      Effect.andThen(cancelAll),
      Effect.ensuring(Deferred.succeed(shutdown.stopped, undefined))
    )
  )
  yield* Deferred.succeed(shutdown.armed, undefined)
  yield* Effect.addFinalizer(() => cancelAll)
}))

/** The stdio server; needs the runtime (McpRuntime: `Runtime.layer`, built behind it) and `Stdio`. */
export const layerStdio = (options: { readonly version: string }) =>
  Layer.merge(
    McpServer.layerStdio({
      name: "fibril",
      version: options.version,
      description: "Fibril sub-agents: task (run one and wait) and agent_* (background agents)",
      instructions: "Use `task` to delegate a self-contained piece of work to a sub-agent and get its structured " +
        "result. Use `agent_spawn` (or `agent_open`) to start one in the background, then `agent_wait`/`agent_result` " +
        "to collect it; `agent_eval` returns its run receipt (runs, events, artifacts, follow_up, takeover) and " +
        "`handle_read` pages through its transcript. Agent tools accept an agent's session name in place of its id.",
      protocols,
      extensions: { [McpTasks.extension]: {} },
      registrations: tools
    }).pipe(Layer.provide(McpTasks.stdioWithin<McpRuntime.McpRuntime>(McpRuntime.use))),
    cancelOnShutdown
  )

/**
 * Serves until stdin ends, then tears everything down (agents cancelled, records flushed).
 *
 * The stdio transport's own end-of-input handling interrupts the fiber that built it, which
 * is a short-lived fiber once layers are built concurrently (`Layer.merge`): the server
 * would outlive its client. So the end of stdin is watched here and ends the launch, after
 * the running agents are cancelled with the shutdown reason (`Shutdown`); an interruption (a
 * signal) does the same. Succeeds when stdin closes; fails if the layers cannot be built.
 * stdin reaches the server through `JsonRpcLines.guard`, which answers what it cannot serve.
 */
export const serve = <A, E, R>(server: Layer.Layer<A, E, R>) =>
  Effect.gen(function*() {
    const stdio = yield* Stdio.Stdio
    const shutdown = Shutdown.of({
      stopping: yield* Deferred.make<void>(),
      stopped: yield* Deferred.make<void>(),
      armed: yield* Deferred.make<void>()
    })
    // Cancels the agents first (at most 10 s), when the server got as far as having any.
    const stop = Effect.gen(function*() {
      if (!(yield* Deferred.isDone(shutdown.armed))) return
      yield* Deferred.succeed(shutdown.stopping, undefined)
      yield* Deferred.await(shutdown.stopped).pipe(Effect.timeout("10 seconds"), Effect.ignore)
    })
    const closed = yield* Deferred.make<void>()
    // Lines are split and checked before the server decodes them: what it could not serve (not
    // JSON, too long, too deep) is answered here, the rest of the read still served.
    const watched = JsonRpcLines.withStdin(
      stdio,
      JsonRpcLines.guard(
        stdio.stdin,
        (line) => Stream.run(Stream.make(encoder.encode(line)), stdio.stdout()).pipe(Effect.ignore)
      ).pipe(Stream.onEnd(Deferred.succeed(closed, undefined)))
    )
    // Up until stopped, or until its runtime, built behind it, fails (McpRuntime).
    const launched = Layer.build(
      server.pipe(Layer.provide(Layer.mergeAll(Layer.succeed(Stdio.Stdio, watched), Layer.succeed(Shutdown, shutdown))))
    ).pipe(
      Effect.flatMap((built) =>
        Option.match(Context.getOption(built, McpRuntime.McpRuntime), {
          onNone: () => Effect.never,
          onSome: (runtime) => runtime.failed
        })
      ),
      Effect.scoped
    )
    const fiber = yield* Effect.forkChild(Effect.raceFirst(launched, Deferred.await(closed).pipe(Effect.andThen(stop))))
    const exit = yield* Fiber.await(fiber).pipe(Effect.onInterrupt(() => stop))
    if (Exit.isFailure(exit) && !Cause.hasInterruptsOnly(exit.cause)) return yield* Effect.failCause(exit.cause)
  })
