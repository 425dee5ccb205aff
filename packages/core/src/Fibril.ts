/**
 * Fibril — the standard composition of the core services.
 *
 * Workspace, Permission, ToolRegistry with the built-in tools and `task`, Todos,
 * AgentEvents and Session, wired together. What stays open is what an application chooses:
 * the `LanguageModel` (a real provider, or the ScriptedModel in tests) and the platform
 * services (`NodeServices.layer` gives FileSystem, Path and ChildProcessSpawner).
 *
 * @example
 * ```ts
 * const program = Effect.gen(function*() {
 *   const session = yield* Session.Session
 *   const root = yield* session.create({ role: "general" })
 *   return yield* session.prompt(root.id, "Explore the repository")
 * }).pipe(
 *   Effect.provide(Fibril.layer({ cwd: process.cwd() }).pipe(
 *     Layer.provide([ScriptedModel.layer(script), NodeServices.layer])
 *   ))
 * )
 * ```
 */
import { type FileSystem, Layer, type Path } from "effect"
import type { LanguageModel } from "effect/ai"
import type { ChildProcessSpawner } from "effect/process"
import * as AgentEvents from "./AgentEvents.ts"
import * as BuiltinTools from "./BuiltinTools.ts"
import type * as FibrilConfig from "./FibrilConfig.ts"
import * as Permission from "./Permission.ts"
import * as Session from "./Session.ts"
import * as ToolRegistry from "./ToolRegistry.ts"
import * as Todo from "./tools/Todo.ts"
import * as TaskTool from "./tools/Task.ts"
import * as Workspace from "./Workspace.ts"

export interface Options {
  /** The workspace root. */
  readonly cwd: string
  readonly session?: Partial<Session.Options> | undefined
  readonly tools?: Partial<BuiltinTools.Options> | undefined
  /** Tools denied to every agent (`[permissions] deny`). */
  readonly deny?: ReadonlyArray<string> | undefined
}

/** Every core service the agent loop needs, from `options`. */
export const layer = (options: Options): Layer.Layer<
  | Session.Session
  | ToolRegistry.ToolRegistry
  | Permission.Permission
  | AgentEvents.AgentEvents
  | Workspace.Workspace
  | Todo.Todos,
  ToolRegistry.DuplicateTool,
  LanguageModel.LanguageModel | FileSystem.FileSystem | Path.Path | ChildProcessSpawner.ChildProcessSpawner
> => {
  const workspace = Workspace.layer(options.cwd)
  const services = Layer.mergeAll(
    ToolRegistry.layer,
    AgentEvents.layer,
    Todo.layer,
    workspace,
    Permission.layer({ deny: options.deny ?? [] }).pipe(Layer.provide(workspace))
  )
  const session = Session.layer(options.session).pipe(Layer.provideMerge(services))
  return Layer.mergeAll(BuiltinTools.layer(options.tools), TaskTool.layer).pipe(Layer.provideMerge(session))
}

/** The same, with every setting taken from a resolved `FibrilConfig`. */
export const layerFromSettings = (cwd: string, settings: FibrilConfig.Settings) =>
  layer({
    cwd,
    session: Session.optionsFrom(settings),
    tools: settings.tools,
    deny: settings.permissions.deny
  })
