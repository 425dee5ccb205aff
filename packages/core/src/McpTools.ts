/**
 * McpTools — an MCP server's tools as Fibril tools.
 *
 * Each configured server (McpServers.ts) is started through `effect/ai`'s McpClient (stdio or
 * streamable HTTP), its tools listed, and each registered in the ToolRegistry as
 * `mcp__<server>__<tool>` (Claude Code's naming). Registering there is what makes them tools
 * like any other: both engines, every front end, permissions (checked again at each call) and
 * argument decoding come from the registry. The server's JSON Schema becomes the tool's
 * Schema, so a call is decoded and checked before the server sees it; the posture comes from
 * the annotations (`readOnlyHint` → read, anything else → write), so a read-only role is not
 * offered a server's write tools and a call to one by name is denied. Every call carries the
 * server's timeout: McpClient's `callTool` has none by default.
 */
import type * as McpClientError from "effect/ai/McpClientError"
import type * as McpSchema from "effect/ai/McpSchema"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type * as FileSystem from "effect/FileSystem"
import * as FetchHttpClient from "effect/http/FetchHttpClient"
import type * as HttpClient from "effect/http/HttpClient"
import * as JsonSchema from "effect/JsonSchema"
import * as Layer from "effect/Layer"
import type * as Path from "effect/Path"
import { ChildProcessSpawner } from "effect/process/ChildProcessSpawner"
import * as Schema from "effect/Schema"
import * as SchemaRepresentation from "effect/SchemaRepresentation"
import * as Scope from "effect/Scope"
import * as Semaphore from "effect/Semaphore"
import { confinedSpawner, policyOf, type Posture, postureOf, whereSandboxed } from "./internal/mcpConfined.ts"
import { type Connection, isLost, McpServerUnavailable, supervise } from "./internal/mcpConnection.ts"
import { CurrentProgress } from "./internal/mcpProgress.ts"
import type * as McpServers from "./McpServers.ts"
import * as Permission from "./Permission.ts"
import * as Sandbox from "./Sandbox.ts"
import * as ToolRegistry from "./ToolRegistry.ts"
import type * as Workspace from "./Workspace.ts"

/** `mcp__<server>__<tool>`; characters a model's tool name cannot hold become `_`. */
export const toolName = (server: string, tool: string): string =>
  `mcp__${server}__${tool.replace(/[^A-Za-z0-9_-]/g, "_")}`

export {
  backoff,
  connect,
  type Connection,
  McpServerUnavailable,
  serverMarker,
  supervise
} from "./internal/mcpConnection.ts"

// Parameters that accept any object: for a schema the translation cannot read.
const anyObject = Schema.Record(Schema.String, Schema.Unknown)

/**
 * The server's input schema as a Schema, so arguments are decoded and checked before the call.
 * Patterns are not applied (a server's regular expression is not run on Fibril's side).
 */
export const parametersOf = (tool: McpSchema.Tool): ToolRegistry.Parameters => {
  try {
    const schema = SchemaRepresentation.fromJsonSchemaDocument(
      JsonSchema.fromSchemaDraft07(tool.inputSchema as JsonSchema.JsonSchema),
      { patterns: "ignore" }
    )
    // A translated JSON Schema decodes plain JSON values: it needs no services.
    return schema as unknown as ToolRegistry.Parameters
  } catch {
    return anyObject
  }
}

/** Options for the rendering of results. */
export interface Options {
  /** A result longer than this is cut, saying how much was left out. */
  readonly maxOutputChars: number
}

export const defaults: Options = { maxOutputChars: 30_000 }

const bound = (text: string, max: number): string =>
  text.length <= max ? text : `${text.slice(0, max)}\n[… ${text.length - max} more characters not shown]`

/**
 * A result as the model reads it: text as is, an image or audio clip as a reference (its type
 * and size: bytes are not text), an embedded resource as its URI and text, a link as its URI,
 * `structuredContent` as JSON.
 */
export const render = (result: McpSchema.CallToolResult, options: Options = defaults): string => {
  const parts = result.content.map((block) => {
    switch (block.type) {
      case "text":
        return block.text
      case "image":
        return `[image ${block.mimeType}, ${block.data.length} bytes]`
      case "audio":
        return `[audio ${block.mimeType}, ${block.data.length} bytes]`
      case "resource":
        return "text" in block.resource
          ? `[resource ${block.resource.uri}]\n${block.resource.text}`
          : `[resource ${block.resource.uri}, binary]`
      case "resource_link":
        return `[link ${block.name}: ${block.uri}]`
    }
  })
  if (result.structuredContent !== undefined) {
    parts.push(`structuredContent: ${JSON.stringify(result.structuredContent)}`)
  }
  return bound(parts.join("\n"), options.maxOutputChars)
}

const reasonOf = (error: McpClientError.McpClientError, timeoutSecs: number): string =>
  error.reason._tag === "TimeoutError"
    ? `no answer within ${timeoutSecs} s (the server's timeout_secs); the call was abandoned`
    : error.reason._tag === "ToolError"
    ? `the server reported an error: ${error.message}`
    : error.message

const lostReason = (server: string) =>
  `the MCP server "${server}" stopped during the call, so its outcome is unknown; it is started again for the next call`

/**
 * A server whose calls go to the instance for the caller (see `layer`): the connection each
 * call uses, chosen from its context.
 */
export interface Routed {
  readonly server: McpServers.Server
  readonly route: (context: ToolRegistry.ToolCallContext) => Effect.Effect<Connection, McpServerUnavailable>
}

const routeOf = (target: Connection | Routed): Routed["route"] =>
  "route" in target ? target.route : () => Effect.succeed(target)

/** The Fibril definition of one tool of a server (called through `target`). */
export const definition = (
  target: Connection | Routed,
  tool: McpSchema.Tool,
  options: Options = defaults,
  timeoutSecs = target.server.timeoutSecs
): ToolRegistry.ToolDefinition => {
  const server = target.server
  const route = routeOf(target)
  const name = toolName(server.name, tool.name)
  const readOnly = tool.annotations?.readOnlyHint === true
  const failure = (reason: string) => new ToolRegistry.ToolFailure({ tool: name, reason })
  return ToolRegistry.define({
    name,
    description: `${tool.description ?? tool.title ?? tool.name} (MCP server ${server.name})`,
    parameters: parametersOf(tool),
    posture: readOnly ? "read" : "write",
    idempotent: readOnly || tool.annotations?.idempotentHint === true,
    handler: (params, context) =>
      Effect.gen(function*() {
        const connection = yield* Effect.mapError(route(context), (error) => failure(error.message))
        const client = yield* Effect.mapError(connection.client, (error) => failure(error.message))
        const result = yield* client.callTool({ tool, arguments: params as Record<string, unknown> }, {
          timeout: Duration.seconds(timeoutSecs)
        }).pipe(
          Effect.provideService(CurrentProgress, context.progress),
          Effect.tapError((error) => isLost(error) ? connection.lost(client) : Effect.void),
          Effect.mapError((error) => failure(isLost(error) ? lostReason(server.name) : reasonOf(error, timeoutSecs)))
        )
        yield* connection.healthy
        // A result with `isError` is the tool's own failure (MCP: errors a model should see and
        // may recover from): a failed call, as any tool's, with what the server said.
        if (result.isError === true) return yield* failure(`the server reported an error: ${render(result, options)}`)
        return render(result, options)
      })
  })
}

/** A started server: its connection, its tools as listed, and their Fibril definitions. */
export interface Started {
  readonly connection: Connection
  readonly tools: ReadonlyArray<McpSchema.Tool>
  readonly definitions: ReadonlyArray<ToolRegistry.ToolDefinition>
}

/** Lists the tools of `connection`'s server; their definitions call through `target`. */
const list = (connection: Connection, options: Options, target: Connection | Routed = connection) =>
  Effect.gen(function*() {
    const server = connection.server
    const client = yield* connection.client
    const tools = yield* client.listTools({ timeout: Duration.seconds(server.timeoutSecs) }).pipe(
      Effect.mapError((error) =>
        new McpServerUnavailable({ server: server.name, source: server.source, reason: error.message })
      )
    )
    const definitions = tools.map((tool) => definition(target, tool, options))
    return { connection, tools, definitions } satisfies Started
  })

/** Starts `server` and lists its tools (used by `fibril doctor`). */
export const start = (server: McpServers.Server, options: Options = defaults) =>
  Effect.flatMap(supervise(server), (connection) => list(connection, options))

/**
 * The configured servers and those agent definitions define inline (Claude Code's
 * `mcpServers`). A configured server of the same name wins; of two agents defining one
 * name, the first (in load order) does.
 */
export const withAgents = (
  configured: ReadonlyArray<McpServers.Server>,
  agents: ReadonlyArray<{ readonly mcpServers?: { readonly inline: ReadonlyArray<McpServers.Server> } | undefined }>
): ReadonlyArray<McpServers.Server> => {
  const byName = new Map(configured.map((server) => [server.name, server]))
  for (const agent of agents) {
    for (const server of agent.mcpServers?.inline ?? []) if (!byName.has(server.name)) byName.set(server.name, server)
  }
  return [...byName.values()]
}

/** Could an agent with `rules` use any tool of `server` (its name allowed, the server not denied)? */
export const usedBy: (rules: Permission.Rules, server: string) => boolean = Permission.mayUseServer

/** The instance of a stdio `server` that agents that may not write call: in the read-only sandbox. */
const readOnlyInstance = (server: McpServers.Server, confinement: Sandbox.Sandbox["Service"]) => {
  const policy = policyOf(confinement.options, server)
  return Effect.map(
    supervise(server).pipe(Effect.provideService(ChildProcessSpawner, confinedSpawner(confinement, policy))),
    (connection) => whereSandboxed(connection, confinement, policy, server)
  )
}

/**
 * Each server's tools, registered when first needed (a ToolRegistry source): a server starts
 * when an agent whose rules could use it is about to make a model request (the tools must be
 * known when the request that offers them is built; listing then, not at the first call, is
 * what lets the model see them at all), and is then shared by every agent of the process. A
 * command or run whose agents may use no server starts none. Each server lives, process group
 * and all, until the layer's scope closes. A server that cannot start is logged and left out
 * for the process (not tried again at every model request), so one broken entry does not stop
 * every agent; `fibril doctor` says why it failed.
 *
 * A stdio server has two instances, each started on its first use: agents that may write call
 * it as configured; agents that may not call their own instance inside the shell's read-only
 * sandbox (`internal/mcpConfined.ts` says why two), so it cannot write where they cannot. Its
 * tools are listed once, by the instance of the first agent that needs them.
 *
 * @example
 * ```ts
 * const servers = yield* McpServers.load({ cwd, home })
 * McpTools.layer(servers).pipe(Layer.provide(NodeServices.layer))
 * ```
 */
export const layer = (
  servers: ReadonlyArray<McpServers.Server>,
  options: Options = defaults,
  sandbox: Partial<Sandbox.Options> = {}
): Layer.Layer<
  never,
  never,
  ToolRegistry.ToolRegistry | ChildProcessSpawner | FileSystem.FileSystem | Path.Path | Workspace.Workspace
> =>
  servers.length === 0 ? Layer.empty : Layer.effectDiscard(Effect.gen(function*() {
    const registry = yield* ToolRegistry.ToolRegistry
    const confinement = yield* Sandbox.Sandbox
    const scope = yield* Scope.Scope
    // The start runs in the layer's context, not the first agent's: the tools' handlers
    // capture what their registration ran with, and the server outlives that agent.
    const context = yield* Effect.context<ToolRegistry.ToolRegistry | ChildProcessSpawner | HttpClient.HttpClient>()
    for (const server of servers) {
      const writer = yield* supervise(server)
      // A server over HTTP is no process of ours: there is nothing to confine.
      const readOnly = server.transport === "http" ? writer : yield* readOnlyInstance(server, confinement)
      const instance = (posture: Posture) => posture === "write" ? writer : readOnly
      const routed: Routed = {
        server,
        route: (call) => Effect.map(postureOf(registry, call.rules), instance)
      }
      const lock = yield* Semaphore.make(1)
      let running: Fiber.Fiber<void> | undefined
      // In a fiber of the layer's scope: an agent cancelled while waiting does not cancel the
      // start the other agents wait for.
      const launch = (posture: Posture) =>
        list(instance(posture), options, routed).pipe(
          Effect.flatMap((ready) => Effect.forEach(ready.definitions, registry.register, { discard: true })),
          Effect.catchTag(["McpServerUnavailable", "DuplicateTool"], (error) => Effect.logWarning(error.message)),
          Effect.provideContext(context)
        )
      const startOnce = (rules: Permission.Rules) =>
        Semaphore.withPermit(
          lock,
          Effect.suspend(() =>
            running === undefined
              ? postureOf(registry, rules).pipe(
                Effect.flatMap((posture) => Effect.forkIn(launch(posture), scope)),
                Effect.tap((fiber) => Effect.sync(() => void (running = fiber)))
              )
              : Effect.succeed(running)
          )
        ).pipe(Effect.flatMap(Fiber.join))
      const prefix = toolName(server.name, "")
      yield* registry.addSource({
        server: server.name,
        covers: (name) => name.startsWith(prefix),
        usedBy: (rules) => usedBy(rules, server.name),
        start: startOnce
      })
    }
  })).pipe(Layer.provide(Sandbox.layer(sandbox)), Layer.provide(FetchHttpClient.layer))

/** What `fibril doctor` says of one server: its tools, or why it could not start. */
export type Probe =
  | { readonly _tag: "Ready"; readonly server: McpServers.Server; readonly tools: ReadonlyArray<string> }
  | { readonly _tag: "Unavailable"; readonly server: McpServers.Server; readonly reason: string }

const probed = <R>(server: McpServers.Server, started: Effect.Effect<Started, McpServerUnavailable, R>) =>
  Effect.scoped(started).pipe(
    Effect.map((ready): Probe => ({ _tag: "Ready", server, tools: ready.tools.map((tool) => tool.name) })),
    Effect.catchTag(
      "McpServerUnavailable",
      (error) => Effect.succeed<Probe>({ _tag: "Unavailable", server, reason: error.reason })
    ),
    Effect.provide(FetchHttpClient.layer)
  )

/** Starts `server`, lists its tools and stops it again (`fibril doctor`). */
export const probe = (server: McpServers.Server): Effect.Effect<Probe, never, ChildProcessSpawner> =>
  probed(server, start(server))

/**
 * The same for the instance of a stdio `server` that agents that may not write use: started in
 * the read-only sandbox under `sandbox` (`[sandbox]`), where a server that writes as it starts
 * (a cache, a log in the workspace) fails though its writer's instance starts.
 */
export const probeReadOnly = (
  server: McpServers.StdioServer,
  sandbox: Partial<Sandbox.Options> = {}
): Effect.Effect<Probe, never, ChildProcessSpawner | FileSystem.FileSystem | Path.Path | Workspace.Workspace> =>
  probed(
    server,
    Effect.flatMap(Effect.service(Sandbox.Sandbox), (confinement) =>
      Effect.flatMap(readOnlyInstance(server, confinement), (connection) => list(connection, defaults)))
  ).pipe(Effect.provide(Sandbox.layer(sandbox)))
