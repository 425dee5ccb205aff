/**
 * McpRuntime — the agent runtime of `fibril mcp`, built behind the server instead of before it.
 *
 * Why: an MCP client (Claude Code, opencode, Cursor) starts every configured server when a
 * session opens and waits for `initialize` and `tools/list`. Those answers need the tool
 * definitions only; the runtime (the engine, the tools, the store, the model) is about half of
 * what the server loads and builds before it could answer (docs/performance.md, start-up). So
 * the server starts with this service in place of the runtime's services: the runtime's layer
 * is built when first needed (a tool call, a task line), and whatever needs it waits for that
 * build with `use` (the records' settling; the shutdown only if it was built).
 *
 * The command checks what it can before serving (the configuration, the model flags), as
 * `fibril run` does. A runtime that cannot be built (a model script that does not decode, a
 * store that cannot be opened) ends the server with its error at that first call (`failed`,
 * which `Mcp.serve` waits on: exit 2, the message on stderr).
 */
import type { AgentEvents } from "@fibril/core/AgentEvents"
import type { SubAgentManager } from "@fibril/core/SubAgentManager"
import type { SubAgentStore } from "@fibril/core/SubAgentStore"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Scope from "effect/Scope"
import type * as Runtime from "./Runtime.ts"

/** What the server's parts use of the runtime (`Runtime.layer` provides them, and more). */
export type Services = SubAgentManager | SubAgentStore | AgentEvents

/** Why a runtime could not be made (`Runtime.make`) or built (its layer). */
export type BuildError =
  | Effect.Error<ReturnType<typeof Runtime.make>>
  | Layer.Error<ReturnType<typeof Runtime.layer>>

export interface Service {
  /** The runtime's services once built (waits for the build). */
  readonly services: Effect.Effect<Context.Context<Services>>
  /** The services if they are built already (the shutdown has nothing to cancel otherwise). */
  readonly built: Effect.Effect<Option.Option<Context.Context<Services>>>
  /** Fails with the build's error; never succeeds. */
  readonly failed: Effect.Effect<never, BuildError>
}

/** The runtime behind `fibril mcp`'s server. */
export class McpRuntime extends Context.Service<McpRuntime, Service>()("@fibril/cli/McpRuntime") {}

/**
 * Builds `runtime` when something first needs it, in a fiber of this layer's scope (the
 * server's: the runtime is torn down with it); later callers wait for the same build.
 */
export const layer = <RIn>(
  runtime: Layer.Layer<Services, BuildError, RIn>
): Layer.Layer<McpRuntime, never, RIn> =>
  Layer.effect(
    McpRuntime,
    Effect.gen(function*() {
      const scope = yield* Scope.Scope
      const context = yield* Effect.context<RIn>()
      const ready = yield* Deferred.make<Context.Context<Services>>()
      const failure = yield* Deferred.make<never, BuildError>()
      const build = yield* Effect.cached(Effect.forkIn(
        Layer.buildWithScope(runtime, scope).pipe(
          Effect.flatMap((services) => Deferred.succeed(ready, services)),
          Effect.catchCause((cause) => Deferred.failCause(failure, cause)),
          Effect.provideContext(context)
        ),
        scope
      ))
      return McpRuntime.of({
        services: Effect.andThen(build, Deferred.await(ready)),
        built: Effect.flatMap(
          Deferred.isDone(ready),
          (done) => done ? Effect.asSome(Deferred.await(ready)) : Effect.succeedNone
        ),
        failed: Deferred.await(failure)
      })
    })
  )

/** Runs `effect` with the runtime's services, once they are built. */
export const use = <A, E, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E, McpRuntime | Exclude<R, Services>> =>
  Effect.flatMap(
    Effect.service(McpRuntime),
    (runtime) => Effect.flatMap(runtime.services, (services) => Effect.provideContext(effect, services))
  )
