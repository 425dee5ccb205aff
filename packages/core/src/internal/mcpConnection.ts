/**
 * One MCP server's connection, supervised: started on the first call that needs it, and when
 * the server goes away (its process exited, its HTTP endpoint closed) started again on the next
 * call, after a backoff that grows with failures in a row (the first restart is immediate, then
 * 1 s, 2 s, ... up to 30 s). Calls in flight when it went away fail with a clear error; each
 * connection lives in a scope of its own, closed (process group and all) when it is replaced
 * or when the owner's scope closes.
 */
import type * as McpClient from "effect/ai/McpClient"
import type * as McpClientError from "effect/ai/McpClientError"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as HttpClient from "effect/http/HttpClient"
import * as ChildProcess from "effect/process/ChildProcess"
import { ChildProcessSpawner } from "effect/process/ChildProcessSpawner"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as Semaphore from "effect/Semaphore"
import type { Server } from "./mcpEntry.ts"
import { makeRouter } from "./mcpProgress.ts"

/** A server could not be started or did not list its tools. */
export class McpServerUnavailable extends Schema.TaggedError<McpServerUnavailable>()("McpServerUnavailable", {
  server: Schema.String,
  source: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `MCP server "${this.server}" (${this.source}) is unavailable: ${this.reason}`
  }
}

import { serverMarker } from "./mcpEntry.ts"

export { serverMarker }

const clientInfo = { name: "fibril", version: "0.1.0" }

/** A connected client for `server`, closed (and a stdio server's process ended) with the scope. */
export const connect = (
  server: Server
): Effect.Effect<
  McpClient.McpClient,
  McpServerUnavailable,
  Scope.Scope | ChildProcessSpawner | HttpClient.HttpClient
> =>
  Effect.gen(function*() {
    // Loaded when a server is first started: the MCP client (and the RPC modules under it)
    // costs every command's start-up otherwise.
    const [Client, Protocol] = yield* Effect.promise(() =>
      Promise.all([import("effect/ai/McpClient"), import("effect/ai/McpProtocol")])
    )
    const progress = makeRouter()
    const spawner = yield* ChildProcessSpawner
    const transport = server.transport === "stdio"
      ? yield* Client.stdio({
        command: ChildProcess.make(server.command, [...server.args], {
          // The marker tells a Fibril started as a server (a `.mcp.json` written for Claude
          // Code often runs `fibril mcp`) not to start the servers again, endlessly.
          env: { ...server.env, [serverMarker]: "1" },
          extendEnv: true,
          // The server's diagnostics are not Fibril's output.
          stderr: "ignore"
        }),
        protocol: Protocol.v2025_11_25
      }).pipe(Effect.provideService(ChildProcessSpawner, progress.spawner(spawner)))
      : yield* Client.http({ url: server.url, headers: server.headers, protocol: Protocol.v2025_11_25 })
    return yield* Client.make({ ...clientInfo, timeout: Duration.seconds(server.timeoutSecs) }).pipe(
      // Over HTTP the notifications arrive inside the client's own response streams, unseen.
      Effect.provideService(Client.Transport, server.transport === "stdio" ? progress.transport(transport) : transport)
    )
  }).pipe(
    Effect.mapError((error) =>
      new McpServerUnavailable({ server: server.name, source: server.source, reason: error.message })
    )
  )

/** Did the call fail because the server went away (rather than the call itself failing)? */
export const isLost = (error: McpClientError.McpClientError): boolean =>
  error.reason._tag === "TransportError" || error.reason._tag === "ClosedError"

export interface Connection {
  readonly server: Server
  /** The live client, (re)started when there is none. */
  readonly client: Effect.Effect<McpClient.McpClient, McpServerUnavailable>
  /** A call through `client` found the server gone: the next call starts it again. */
  readonly lost: (client: McpClient.McpClient) => Effect.Effect<void>
  /** A call through `client` succeeded: the backoff starts over. */
  readonly healthy: Effect.Effect<void>
}

/** The delay before restart number `failures` in a row (the first is immediate). */
export const backoff = (failures: number): Duration.Duration =>
  failures <= 1 ? Duration.zero : Duration.seconds(Math.min(30, 2 ** (failures - 2)))

/** A supervised connection; its clients live until the current scope closes. */
export const supervise = Effect.fnUntraced(function*(server: Server) {
  const owner = yield* Scope.Scope
  const services = yield* Effect.context<ChildProcessSpawner | HttpClient.HttpClient>()
  const lock = yield* Semaphore.make(1)
  let current: { readonly client: McpClient.McpClient; readonly scope: Scope.Closeable } | undefined
  let failures = 0
  const open = Effect.gen(function*() {
    yield* Effect.sleep(backoff(failures))
    const scope = yield* Scope.fork(owner)
    const client = yield* connect(server).pipe(
      Scope.provide(scope),
      Effect.provideContext(services),
      Effect.onError(() => Effect.andThen(Scope.close(scope, Exit.void), Effect.sync(() => failures++)))
    )
    current = { client, scope }
    return client
  })
  const connection: Connection = {
    server,
    client: Semaphore.withPermit(
      lock,
      Effect.suspend(() => current === undefined ? open : Effect.succeed(current.client))
    ),
    lost: (client) =>
      Effect.suspend(() => {
        if (current?.client !== client) return Effect.void
        const { scope } = current
        current = undefined
        failures++
        return Scope.close(scope, Exit.void)
      }),
    healthy: Effect.sync(() => {
      failures = 0
    })
  }
  return connection
})
