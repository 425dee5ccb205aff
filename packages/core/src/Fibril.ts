/**
 * Fibril — the standard composition of the core services.
 *
 * Workspace, Permission, ToolRegistry with the built-in tools, `task`, the `agent_*` tools
 * and `remember`, Todos, Memory, AgentEvents, Session, SubAgentStore and SubAgentManager,
 * wired together. What stays open is what an application chooses: the model (one
 * `LanguageModel`, or a `Models` catalog) and the platform services (`NodeServices.layer`
 * gives FileSystem, Path and ChildProcessSpawner).
 *
 * @example
 * ```ts
 * const program = Effect.gen(function*() {
 *   const sessions = yield* Session.Session
 *   const root = yield* sessions.create({ role: "general" })
 *   return yield* sessions.prompt(root.id, "Explore the repository")
 * }).pipe(
 *   Effect.provide(Fibril.layer({ cwd: process.cwd() }).pipe(
 *     Layer.provide([ScriptedModel.layer(script), NodeServices.layer])
 *   ))
 * )
 * ```
 */
import type * as LanguageModel from "effect/ai/LanguageModel"
import * as Effect from "effect/Effect"
import type * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import type * as Path from "effect/Path"
import type { ChildProcessSpawner } from "effect/process"
import * as AgentDefinitions from "./AgentDefinitions.ts"
import * as AgentEvents from "./AgentEvents.ts"
import * as BuiltinTools from "./BuiltinTools.ts"
import type * as FibrilConfig from "./FibrilConfig.ts"
import * as McpServers from "./McpServers.ts"
import * as McpTools from "./McpTools.ts"
import * as Memory from "./Memory.ts"
import * as Models from "./Models.ts"
import * as Permission from "./Permission.ts"
import type * as Sandbox from "./Sandbox.ts"
import * as Session from "./Session.ts"
import * as SqliteSubAgentStore from "./SqliteSubAgentStore.ts"
import * as SubAgentManager from "./SubAgentManager.ts"
import * as SubAgentStore from "./SubAgentStore.ts"
import * as ToolRegistry from "./ToolRegistry.ts"
import * as AgentTools from "./tools/Agents.ts"
import * as Remember from "./tools/Remember.ts"
import * as TaskTool from "./tools/Task.ts"
import * as Todo from "./tools/Todo.ts"
import * as Workspace from "./Workspace.ts"
import * as Worktrees from "./Worktrees.ts"

export interface Options {
  /** The workspace root. */
  readonly cwd: string
  readonly session?: Partial<Session.Options> | undefined
  readonly subagents?: Partial<SubAgentManager.Options> | undefined
  readonly tools?: Partial<BuiltinTools.Options> | undefined
  /** Tools denied to every agent (`[permissions] deny`). */
  readonly deny?: ReadonlyArray<string> | undefined
  /** Tool names and postures whose calls wait for a person's answer (`[permissions] ask`). */
  readonly ask?: ReadonlyArray<string> | undefined
  /** The shell's operating-system sandbox (`[sandbox]`). */
  readonly sandbox?: Partial<Sandbox.Options> | undefined
  /**
   * MCP servers whose tools every agent may use as its permissions allow (`McpServers.load`
   * reads `[mcp_servers.*]` and `.mcp.json`); started when the layer is built.
   */
  readonly mcpServers?: ReadonlyArray<McpServers.Server> | undefined
  /**
   * Where sub-agent records and transcripts live: "memory" (default), or "file" for the
   * SQLite store shared by every process, `<cwd>/.fibril/state/fibril.db` (or in an explicit
   * directory).
   */
  readonly store?: "memory" | "file" | { readonly dir: string } | undefined
  /** The file store's limits (its lease, eviction); the defaults otherwise. */
  readonly storeLimits?: SubAgentStore.Limits | undefined
  /** `isolation: "worktree"`: whether merged and discarded agents' worktrees are kept. */
  readonly worktrees?: Worktrees.Options | undefined
  /**
   * Replacements for the events and store layers (the orchestration lab runs experiments
   * against deliberately broken ones); `store` here wins over the `store` option.
   */
  readonly layers?: {
    readonly events?: Layer.Layer<AgentEvents.AgentEvents> | undefined
    readonly store?: Layer.Layer<SubAgentStore.SubAgentStore, SqliteSubAgentStore.OpenError> | undefined
  } | undefined
}

export type Services =
  | Session.Session
  | SubAgentManager.SubAgentManager
  | SubAgentManager.Embedded
  | SubAgentStore.SubAgentStore
  | ToolRegistry.ToolRegistry
  | Permission.Permission
  | AgentEvents.AgentEvents
  | Workspace.Workspace
  | Memory.Memory
  | Todo.Todos
  | Worktrees.Worktrees

type Platform = FileSystem.FileSystem | Path.Path | ChildProcessSpawner.ChildProcessSpawner

/** The workspace's agent definitions; bad files are logged, the rest load (a cluster worker's too). */
export const loadAgents = (cwd: string) =>
  Effect.gen(function*() {
    const loaded = yield* AgentDefinitions.load(cwd)
    for (const problem of loaded.problems) yield* Effect.logWarning(problem.message)
    for (const warning of loaded.warnings) yield* Effect.logWarning(warning)
    return loaded.definitions
  })

const stateDirOf = (cwd: string) => `${cwd}/.fibril/state`

const storeLayer = (options: Options) => {
  const store = options.store ?? "memory"
  if (store === "memory") return Layer.fresh(SubAgentStore.layerMemory)
  const dir = store === "file" ? stateDirOf(options.cwd) : store.dir
  return SqliteSubAgentStore.layerSqlite({ ...options.storeLimits, dir })
}

/**
 * The workspace a person can take agents over in (`fibril agents resume <id> --cwd <it>`):
 * only when the store is that workspace's `.fibril/state`, which is where `fibril agents` looks.
 */
const takeoverWorkspace = (options: Options): string | undefined => {
  const store = options.store ?? "memory"
  if (store === "memory") return undefined
  if (store === "file") return options.cwd
  return store.dir.replace(/\/+$/, "") === stateDirOf(options.cwd) ? options.cwd : undefined
}

/** Every core service the agent loop needs, over a model catalog (`Models`) from context. */
export const layerWithModels = (
  options: Options
): Layer.Layer<Services, ToolRegistry.DuplicateTool | SqliteSubAgentStore.OpenError, Models.Models | Platform> => {
  const workspace = Workspace.layer(options.cwd)
  const base = Layer.mergeAll(
    ToolRegistry.layer,
    options.layers?.events ?? AgentEvents.layer,
    Todo.layer,
    options.layers?.store ?? storeLayer(options),
    Permission.layer({ deny: options.deny ?? [], ask: options.ask ?? [] }),
    Memory.layer(),
    Worktrees.layer(options.worktrees)
  ).pipe(Layer.provideMerge(workspace))
  const session = Session.layer(options.session).pipe(Layer.provideMerge(base))
  // Agent types defined in markdown files under the workspace; bad files are logged, the rest load.
  return Layer.unwrap(Effect.map(loadAgents(options.cwd), (agents) => {
    const manager = SubAgentManager.layer({ workspace: takeoverWorkspace(options), ...options.subagents, agents })
      .pipe(Layer.provideMerge(session))
    return Layer.mergeAll(
      BuiltinTools.layer({ ...options.tools, sandbox: options.sandbox }),
      TaskTool.layer,
      AgentTools.layer,
      Remember.layer,
      McpTools.layer(
        McpTools.withAgents(options.mcpServers ?? [], agents),
        { ...McpTools.defaults, ...options.tools },
        options.sandbox
      )
    ).pipe(Layer.provideMerge(manager))
  }))
}

/** Every core service, over the one `LanguageModel` in context (serving every model id). */
export const layer = (
  options: Options & { readonly model?: string | undefined }
): Layer.Layer<
  Services | Models.Models,
  ToolRegistry.DuplicateTool | SqliteSubAgentStore.OpenError,
  LanguageModel.LanguageModel | Platform
> => layerWithModels(options).pipe(Layer.provideMerge(Models.fromLanguageModel(options.model)))

/** The same, with every setting taken from a resolved `FibrilConfig`. */
export const layerFromSettings = (
  cwd: string,
  settings: FibrilConfig.Settings,
  options: Pick<Options, "store"> = {}
) =>
  layer({
    cwd,
    model: settings.model,
    session: Session.optionsFrom(settings),
    subagents: SubAgentManager.optionsFrom(settings),
    tools: settings.tools,
    deny: settings.permissions.deny,
    ask: settings.permissions.ask,
    sandbox: settings.sandbox,
    store: options.store
  })
