import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import type * as AgentDefinitions from "./AgentDefinitions.ts"
import type { AgentEvents } from "./AgentEvents.ts"
import type * as FibrilConfig from "./FibrilConfig.ts"
import type * as EmbeddedEngine from "./internal/manager/embedded.ts"
import type * as McpNarrowing from "./McpNarrowing.ts"
import type { Models, UnknownModel } from "./Models.ts"
import type * as OutputSchema from "./OutputSchema.ts"
import type * as Permission from "./Permission.ts"
import * as ProcessIsolation from "./ProcessIsolation.ts"
import type * as Receipt from "./Receipt.ts"
import * as Roles from "./Roles.ts"
import type { Budgets, PromptError, PromptResult, Session, SessionNotFound } from "./Session.ts"
import type * as SpawnCheck from "./SpawnCheck.ts"
import type { AgentNotFound, CapReached, IsolationUnavailable, NotOwned, NotResumable } from "./SubAgentErrors.ts"
import type { Input, SubAgentRecord } from "./SubAgentRecord.ts"
import type { SubAgentStore } from "./SubAgentStore.ts"
import type { ToolRegistry } from "./ToolRegistry.ts"
import type * as TranscriptView from "./TranscriptView.ts"
import type * as Worktrees from "./Worktrees.ts"

export { bound, defaultMaxResultChars } from "./AgentResult.ts"
export { requestCancel } from "./internal/manager/ForeignAgents.ts"
export { AgentNotFound, CapReached, IsolationUnavailable, NotOwned, NotResumable } from "./SubAgentErrors.ts"

export interface Options {
  readonly maxConcurrent: number
  readonly admission: "reject" | "queue"
  readonly heartbeatTimeoutSecs: number
  /** Per-agent and per-tree budgets of sub-agents. */
  readonly budgets: Partial<Budgets>
  /** Model per role: `[subagents] *_model` and `[subagents.models]`. */
  readonly defaultModel?: string | undefined
  readonly roleModels: Readonly<Record<string, string>>
  /** Agent types defined in markdown files, usable as `subagent_type`. */
  readonly agents?: ReadonlyArray<AgentDefinitions.AgentDefinition> | undefined
  /** Bound on each part of a child's result (summary, each section, the answer kept in the record) and on reasons. */
  readonly maxResultChars?: number | undefined
  /**
   * The workspace whose `.fibril/state` holds this manager's store: receipts then offer a
   * person `fibril agents resume <id> --cwd <workspace>` to take an agent over. Undefined (the
   * memory store, or a store elsewhere): receipts say why no local takeover is possible.
   */
  readonly workspace?: string | undefined
  /** `isolation: "process"`: how a child process is started and capped (ProcessIsolation.ts). */
  readonly processIsolation?: ProcessIsolation.Options | undefined
  /** `isolation` per role when a spawn names none (`[subagents.isolation]`, e.g. implementer = "worktree"). */
  readonly roleIsolation?: Readonly<Record<string, Isolation>> | undefined
  /** The MCP servers per role (`[roles.<name>] mcp_servers`), met with a spawn's own (McpNarrowing). */
  readonly roleMcpServers?: Readonly<Record<string, ReadonlyArray<string>>> | undefined
}

export const defaults: Options = {
  maxConcurrent: 10,
  admission: "reject",
  heartbeatTimeoutSecs: 300,
  budgets: {},
  roleModels: {}
}

export interface SpawnRequest {
  readonly prompt: string
  readonly description?: string | undefined
  readonly role?: string | undefined
  readonly model?: string | undefined
  readonly detached?: boolean | undefined
  readonly forkContext?: boolean | undefined
  readonly allowedTools?: ReadonlyArray<string> | undefined
  /**
   * `ask_tools`: tool names and postures whose calls in this agent (and its children) wait for
   * a person's answer. Added to the asks it inherits, never removing one (Permission rule 5).
   */
  readonly askTools?: ReadonlyArray<string> | undefined
  /**
   * `mcp_servers`: the MCP servers it (and its children) may use, within its parent's; a name
   * its parent may not use is refused (McpNarrowing). Absent: its parent's.
   */
  readonly mcpServers?: ReadonlyArray<string> | undefined
  /**
   * The agent (id or session name) this one checks: when it ends, its result is attached to
   * that agent's record as a verification receipt (Receipt.fromVerifier).
   */
  readonly verifies?: string | undefined
  /** `output_schema`: a typed result (OutputSchema.ts); without it, the five-section contract. */
  readonly outputSchema?: OutputSchema.JsonSchema | undefined
  /**
   * "worktree": the agent works in a git worktree of its parent's tree, on its own branch
   * (Worktrees.ts); "process": in its own OS process. Absent: in its parent's workspace.
   */
  readonly isolation?: Isolation | undefined
}

/** How an agent is kept apart from its parent and siblings (`isolation` on a spawn). */
export type Isolation = "worktree" | "process"

/** Why a run of an agent ended without an answer: its session's, or its child process's. */
export type RunError = PromptError | ProcessIsolation.ChildProcessFailed | IsolationUnavailable

export type SpawnError =
  | OutputSchema.UnsupportedOutputSchema
  | SpawnCheck.SpawnTextTooLong
  | Roles.UnknownRole
  | Roles.InvalidRoleRequest
  | UnknownModel
  | CapReached
  | SessionNotFound
  | AgentNotFound
  | IsolationUnavailable
  | Worktrees.NotAGitWorkspace
  | Worktrees.GitFailed
  | McpNarrowing.McpServersRefused

/** A record as shown to callers (AgentResult.ts): the stored fields plus whether it predates this process. */
import type { AgentView } from "./AgentResult.ts"
export type { AgentView }

export interface WaitResult {
  readonly timed_out: boolean
  readonly completed: ReadonlyArray<AgentView>
  readonly pending: ReadonlyArray<string>
}

export interface InputResult {
  readonly delivered: boolean
  readonly reason?: string | undefined
  readonly agent: AgentView
  /** The input as the agent's record keeps it (absent when another process owns the record). */
  readonly input?: Input | undefined
}

/** Where a message sent to an agent came from (kept in the record's `inputs`). */
export type InputVia = "agent_send_input" | "agent_eval" | "agent_assign" | "request" | "api"

/** A check of an agent's work by a command, to attach to its record. */
export interface CommandCheck {
  readonly command: string
  readonly exitCode: number
  /** What it printed, or a note (kept as a bounded preview). */
  readonly summary?: string | undefined
}

export const restartReason = "Interrupted by process restart"

const roleModelKey: Partial<Record<Roles.RoleName, keyof FibrilConfig.SubagentSettings>> = {
  general: "workerModel",
  implementer: "workerModel",
  tool_agent: "workerModel",
  explore: "explorerModel",
  plan: "awaiterModel",
  review: "reviewModel",
  custom: "customModel"
}

/** Model per role from settings: `[subagents.models]` wins over the `*_model` keys. */
export const roleModelsFrom = (settings: FibrilConfig.SubagentSettings): Record<string, string> => {
  const out: Record<string, string> = {}
  for (const role of Roles.roleNames) {
    const key = roleModelKey[role]
    const value = key === undefined ? undefined : settings[key]
    if (typeof value === "string") out[role] = value
  }
  for (const [name, model] of Object.entries(settings.models)) out[Roles.canonical(name) ?? name] = model
  return out
}

export const optionsFrom = (settings: FibrilConfig.Settings): Options => ({
  maxConcurrent: settings.subagents.maxConcurrent,
  admission: settings.subagents.admission,
  heartbeatTimeoutSecs: settings.subagents.heartbeatTimeoutSecs,
  budgets: {
    ...(settings.subagents.maxSteps === undefined ? {} : { maxSteps: settings.subagents.maxSteps }),
    maxTokens: settings.subagents.maxTokens,
    maxWallSecs: settings.subagents.maxWallSecs,
    treeMaxTokens: settings.subagents.treeMaxTokens
  },
  defaultModel: settings.subagents.defaultModel,
  roleModels: roleModelsFrom(settings.subagents),
  maxResultChars: settings.subagents.maxResultChars,
  processIsolation: { ...ProcessIsolation.defaults, maxOldSpaceMb: settings.subagents.processMemoryMb },
  roleIsolation: Object.fromEntries(
    Object.entries(settings.subagents.isolation ?? {}).map(([name, mode]) => [Roles.canonical(name) ?? name, mode])
  ),
  roleMcpServers: Object.fromEntries(
    Object.entries(settings.roles).flatMap(([name, role]) =>
      role.mcpServers === undefined ? [] : [[Roles.canonical(name) ?? name, role.mcpServers]]
    )
  )
})

export class SubAgentManager extends Context.Service<SubAgentManager, {
  readonly bootId: string
  readonly options: Options
  /** Starts a background agent and returns at once. `parentId`: the agent that spawns it. */
  readonly spawn: (parentId: string | undefined, request: SpawnRequest) => Effect.Effect<AgentView, SpawnError>
  /** Starts an agent and waits for it in the caller's fiber (the `task` tool). */
  readonly run: (parentId: string | undefined, request: SpawnRequest) => Effect.Effect<AgentView, SpawnError>
  /**
   * Waits for agents. `caller`: the agent (session id) that waits; with queue admission it
   * lends its permit to one of them that is queued while it waits.
   */
  readonly wait: (
    ids: ReadonlyArray<string>,
    options: {
      readonly mode: "any" | "all"
      readonly timeoutMs?: number | undefined
      readonly caller?: string | undefined
    }
  ) => Effect.Effect<WaitResult, AgentNotFound>
  readonly result: (
    id: string,
    options: { readonly block: boolean; readonly timeoutMs?: number | undefined; readonly caller?: string | undefined }
  ) => Effect.Effect<AgentView, AgentNotFound>
  readonly cancel: (id: string, reason?: string) => Effect.Effect<AgentView, AgentNotFound>
  readonly list: (options: {
    readonly includeArchived: boolean
    readonly parentId?: string | undefined
  }) => Effect.Effect<ReadonlyArray<AgentView>>
  /** Delivers a message to a running agent; either way the record keeps it (preview, time, reason). */
  readonly sendInput: (
    id: string,
    message: string,
    interrupt: boolean,
    via?: InputVia
  ) => Effect.Effect<InputResult, AgentNotFound | SpawnCheck.SpawnTextTooLong>
  /**
   * What `agent_wait` without ids waits for: the caller's children still live, and those
   * finished whose result the caller has not been handed yet (each is handed over once).
   */
  readonly unreadChildren: (parentId: string | undefined) => Effect.Effect<ReadonlyArray<string>>
  /**
   * Records that these agents' results were handed to `parentId`, if it is their parent
   * (undefined: the embedder's own top-level agents, e.g. an MCP client's).
   */
  readonly markRead: (parentId: string | undefined, ids: ReadonlyArray<string>) => Effect.Effect<void>
  readonly resume: (
    callerId: string | undefined,
    id: string,
    message?: string
  ) => Effect.Effect<
    AgentView,
    | AgentNotFound
    | NotResumable
    | CapReached
    | UnknownModel
    | Roles.UnknownRole
    | Roles.InvalidRoleRequest
    | SpawnCheck.SpawnTextTooLong
  >
  readonly assign: (
    id: string,
    update: {
      readonly objective?: string | undefined
      readonly role?: string | undefined
      readonly message?: string | undefined
    }
  ) => Effect.Effect<
    InputResult,
    | AgentNotFound
    | Roles.UnknownRole
    | Roles.InvalidRoleRequest
    | Permission.PermissionWidening
    | SpawnCheck.SpawnTextTooLong
  >
  /** Running sub-agents right now (with queue admission, one that lent its permit while it waits counts too). */
  readonly running: Effect.Effect<number>
  /** The agent id behind an id, a session name or a run id (`id` itself when nothing matches). */
  readonly resolve: (id: string) => Effect.Effect<string>
  /** A page of an agent's transcript, by its handle (or the agent's id or session name). */
  readonly readTranscript: (
    handle: string,
    page: { readonly offset?: number | undefined; readonly limit?: number | undefined }
  ) => Effect.Effect<TranscriptView.Page, AgentNotFound>
  /** Attaches a command's exit code to the agent's record as a check of its current run. */
  readonly attachVerification: (id: string, check: CommandCheck) => Effect.Effect<AgentView, AgentNotFound | NotOwned>
  /** The worker record (the whole receipt, with follow-up and takeover) of an agent, as seen from here. */
  readonly workerRecord: (agent: SubAgentRecord) => Effect.Effect<Receipt.WorkerRecord>
}>()("@fibril/core/SubAgentManager") {}

/**
 * What a root agent may be given beyond a spawn request: the rules and budgets another engine
 * derived for it (a process child's, ProcessIsolation: its parent's engine computed them, and
 * the root of the child's process may not exceed them).
 */
export interface RootOptions {
  readonly ceiling?: Permission.Ceiling | undefined
  readonly budgets?: Partial<Budgets> | undefined
}

/**
 * The embedded engine's own surface, beside the contract: what only agents that are fibers of
 * this process can do. Provided by `layer` with the SubAgentManager.
 */
export class Embedded extends Context.Service<Embedded, {
  /**
   * Starts the root agent of a tree (no parent, depth 0, no sub-agent permit) and records it
   * like any other; the fiber runs its prompt (`fibril run`).
   */
  readonly startRoot: (request: SpawnRequest, options?: RootOptions) => Effect.Effect<
    { readonly agent: AgentView; readonly fiber: Fiber.Fiber<PromptResult, RunError> },
    SpawnError
  >
  /**
   * `agent_merge`: an isolated agent's branch (`isolation: "worktree"`, which only this engine
   * gives) merged into `into` (the caller's tree) or discarded, by its parent (`callerId`;
   * undefined: the embedder or client, for a top-level agent); its record keeps the outcome.
   */
  readonly mergeWorktree: (request: {
    readonly callerId: string | undefined
    readonly agentId: string
    readonly into: string
    readonly action: "merge" | "discard"
  }) => Effect.Effect<
    Worktrees.MergeResult,
    | AgentNotFound
    | NotOwned
    | IsolationUnavailable
    | Worktrees.NotMergeable
    | Worktrees.NotTheParent
    | Worktrees.WorktreeError
  >
}>()("@fibril/core/SubAgentManager/Embedded") {}

/**
 * The embedded engine: agents as fibers of this process, recorded in the SubAgentStore
 * (internal/manager/). Provides the contract and its `Embedded` surface.
 *
 * The engine's modules are imported when the layer is built, not with this one: what only
 * names the contract (its tools' definitions, `fibril mcp` answering `tools/list`) does not
 * load the engine (docs/performance.md, start-up).
 */
export const layer = (
  options: Partial<Options> = {}
): Layer.Layer<SubAgentManager | Embedded, never, Session | Models | SubAgentStore | AgentEvents | ToolRegistry> =>
  Layer.effectContext(
    Effect.flatMap(
      Effect.promise((): Promise<typeof EmbeddedEngine> => import("./internal/manager/embedded.ts")),
      (engine) =>
        Effect.map(
          engine.make({ ...defaults, ...options }),
          ({ embedded, manager }) => Context.make(SubAgentManager, manager).pipe(Context.add(Embedded, embedded))
        )
    )
  )
