/**
 * Session — a conversation with a model, and the agent loop that drives it.
 *
 * A session holds a system prompt, messages, a role, a model, permission rules, a parent
 * and a depth, budgets and usage. `prompt` runs `AgentLoop` — the loop cluster mode runs
 * durably too — to a final answer, over this session's steps (loop/): deliver queued input,
 * call the model (per-attempt timeout, retries), resolve the turn, run its tool calls
 * concurrently, append the results, repeat. Before answering, the loop asks the session's
 * `RunObserver` whether to go on (the SubAgentManager waits there for background children and
 * hands their results back as a new message). The observer is given when the session is
 * created, and what its owner needs of a run that ended comes back from the run (`RunEnd`).
 *
 * The loop runs in the caller's fiber inside a scope of its own: interrupting the caller
 * interrupts the model call, every running tool, and every child forked into that scope.
 */
import type * as LanguageModel from "effect/ai/LanguageModel"
import * as Prompt from "effect/ai/Prompt"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Scope from "effect/Scope"
import { AgentEvents } from "./AgentEvents.ts"
import type * as FibrilConfig from "./FibrilConfig.ts"
import { clockNow } from "./internal/clock.ts"
import * as Parts from "./internal/parts.ts"
import { describeFailure, SessionBusy, SessionNotFound } from "./internal/session/errors.ts"
import * as SessionRun from "./internal/session/run.ts"
import * as SessionStates from "./internal/session/state.ts"
import * as SessionSystem from "./internal/session/system.ts"
import { spanned } from "./internal/span.ts"
import { BudgetExceeded } from "./loop/BudgetExceeded.ts"
import type { ModelCallFailed, RetryPolicy } from "./loop/CallModel.ts"
import type { Budgets, RunObserver, SessionState } from "./loop/State.ts"
import * as McpNarrowing from "./McpNarrowing.ts"
import { Memory } from "./Memory.ts"
import { Models, type UnknownModel } from "./Models.ts"
import * as OutputSchema from "./OutputSchema.ts"
import * as Permission from "./Permission.ts"
import * as Roles from "./Roles.ts"
import * as SpawnPlan from "./SpawnPlan.ts"
import { ToolRegistry } from "./ToolRegistry.ts"
import * as Usage from "./Usage.ts"
import { Workspace } from "./Workspace.ts"

export { BudgetExceeded }
export { ModelCallFailed } from "./loop/CallModel.ts"
export type { Budgets, RunEnd, RunObserver } from "./loop/State.ts"

export interface Options extends RetryPolicy {
  /** Model steps per `prompt` before it fails with BudgetExceeded. */
  readonly maxSteps: number
  /** Step budget of sub-agents (`[subagents] max_steps`); default: maxSteps. */
  readonly childMaxSteps?: number | undefined
  /** Depth at and below which spawning tools are denied (root = 0). */
  readonly maxDepth: number
  /**
   * Stream each model answer (`streamText`): its text is published as `text` events as it
   * arrives. Off by default; `fibril run` turns it on (`--no-stream` turns it off).
   */
  readonly stream: boolean
}

export const defaults: Options = {
  maxSteps: 50,
  maxDepth: 1,
  apiTimeoutSecs: 120,
  maxRetries: 3,
  retryBaseMs: 1000,
  retryMaxMs: 30_000,
  stream: false
}

/** Grants are Permission's (both engines derive rules from them); the names stay here for callers. */
export const childDenied: ReadonlyArray<string> = Permission.childDenied
export type GrantOptions = Permission.GrantOptions
export const grantFor = Permission.grantFor

/** The first user message of a forked child, after the parent's copied history. */
export const forkMarker = "[fork]"

export { describeFailure, SessionBusy, SessionNotFound }

export type PromptError = SessionNotFound | SessionBusy | ModelCallFailed | BudgetExceeded | OutputSchema.OutputInvalid

export interface SessionInfo {
  readonly id: string
  readonly parentId: string | undefined
  readonly depth: number
  readonly role: string
  readonly model: string
  readonly description: string | undefined
  readonly steps: number
  readonly toolCalls: number
  readonly lastTool: string | undefined
  readonly usage: Usage.Usage
  readonly treeUsage: Usage.Usage
  /** Model steps of its tree whose usage the provider reported, and those Fibril estimated. */
  readonly usageSteps: { readonly reported: number; readonly estimated: number }
  readonly running: boolean
  /** True while a model call is in flight (the model is working, not stuck). */
  readonly waitingOnModel: boolean
  /** Its effective permissions now. */
  readonly rules: Permission.Rules
  /** A typed result's schema, and how its model is told to finish (OutputSchema.instruction). */
  readonly output?: OutputSchema.Check | undefined
  /** The budgets its runs are held to. */
  readonly budgets: Budgets
}

export interface PromptResult {
  readonly sessionId: string
  readonly text: string
  /** Steps and tool calls of this prompt only. */
  readonly steps: number
  readonly toolCalls: number
  /** Usage of this prompt only (own model calls). */
  readonly usage: Usage.Usage
  /** With an output schema: the decoded answer (`text` is its compact JSON). */
  readonly output?: unknown
}

/** A message of a transcript (the `effect/ai` prompt message). */
export type TranscriptMessage = Prompt.Message

export interface CreateOptions {
  /** Role name or alias; default `general`. */
  readonly role?: string | undefined
  readonly model?: string | undefined
  /** What its events say it is doing (`fibril run` gives its prompt's first line). */
  readonly description?: string | undefined
  /** Replaces the role's prompt (the header line is kept). */
  readonly systemPrompt?: string | undefined
  readonly allowedTools?: ReadonlyArray<string> | undefined
  /** The caller's `ask_tools` (Permission rule 5): only adds asks. */
  readonly askTools?: ReadonlyArray<string> | undefined
  /** The MCP servers it may use (McpNarrowing: checked under the root rules); absent: every one. */
  readonly mcpServers?: ReadonlyArray<string> | undefined
  /** Every name its sources gave (default `mcpServers`): each must be a server it may be given. */
  readonly mcpServersNamed?: ReadonlyArray<string> | undefined
  readonly deny?: ReadonlyArray<string> | undefined
  /** `model` already resolved by the caller (SpawnPlan): it is not resolved again. */
  readonly languageModel?: LanguageModel.LanguageModel | undefined
  /** Who takes part in its runs (the SubAgentManager, for the agents it runs). */
  readonly observer?: RunObserver | undefined
  /**
   * Rules computed elsewhere that this root may not exceed: a process child's (ProcessIsolation),
   * as its parent's engine derived them. Met with the root's own.
   */
  readonly ceiling?: Permission.Ceiling | undefined
  /** Its budgets over the session's own (a process child's, as its parent's engine gave them). */
  readonly budgets?: Partial<Budgets> | undefined
  /** A typed result (`output_schema`): its runs end with an answer decoded against it. */
  readonly output?: OutputSchema.Compiled | undefined
}

export interface ChildOptions {
  readonly role: Roles.RoleSpec
  readonly description?: string | undefined
  /** An id the caller already validated; default the parent's model. */
  readonly model?: string | undefined
  /** `model` already resolved by the caller (SpawnPlan): it is not resolved again. */
  readonly languageModel?: LanguageModel.LanguageModel | undefined
  /** The caller's `allowed_tools`: a ceiling of its own, met with the definition's tools. */
  readonly allowedTools?: ReadonlyArray<string> | undefined
  /** The caller's `ask_tools` (Permission rule 5): only adds asks. */
  readonly askTools?: ReadonlyArray<string> | undefined
  /** A markdown agent definition's tools and denials. */
  readonly definition?: Permission.Ceiling | undefined
  /** The MCP servers it may use (McpNarrowing: within its parent's, else refused); absent: its parent's. */
  readonly mcpServers?: ReadonlyArray<string> | undefined
  /** Every name its sources gave (default `mcpServers`): each must be a server its parent may use. */
  readonly mcpServersNamed?: ReadonlyArray<string> | undefined
  readonly deny?: ReadonlyArray<string> | undefined
  /** Start from the parent's last request, byte-identical, so a prefix cache is reused. */
  readonly forkContext?: boolean | undefined
  readonly budgets?: Partial<Budgets> | undefined
  /** A typed result (`output_schema`): its runs end with an answer decoded against it. */
  readonly output?: OutputSchema.Compiled | undefined
  /**
   * Who takes part in its runs. A parent that has none is observed by its child's from then
   * on: an embedder's own root (`session.create`) waits for the background children a
   * manager runs for it, as that manager's agents do.
   */
  readonly observer?: RunObserver | undefined
}

/** A session rebuilt from a persisted transcript (to resume it after a restart). */
export interface RestoreOptions {
  readonly id: string
  readonly parentId?: string | undefined
  readonly depth: number
  readonly role: Roles.RoleSpec
  readonly model: string
  readonly description?: string | undefined
  readonly allowedTools?: ReadonlyArray<string> | undefined
  readonly definition?: Permission.Ceiling | undefined
  /** The permissions it had when recorded: a restored agent never gets more (its parent may be gone). */
  readonly recorded?: Permission.Ceiling | undefined
  /** The transcript: the system message first, then the conversation. */
  readonly transcript: ReadonlyArray<Prompt.Message>
  readonly budgets?: Partial<Budgets> | undefined
  readonly observer?: RunObserver | undefined
  /** Its typed result (`output_schema`), as spawned. */
  readonly output?: OutputSchema.Compiled | undefined
}

export class Session extends Context.Service<Session, {
  readonly create: (
    options?: CreateOptions
  ) => Effect.Effect<
    SessionInfo,
    Roles.UnknownRole | Roles.InvalidRoleRequest | UnknownModel | McpNarrowing.McpServersRefused
  >
  /** A child of `parentId` (or, without a parent, a depth-1 agent under the root rules). */
  readonly createChild: (
    parentId: string | undefined,
    options: ChildOptions
  ) => Effect.Effect<
    SessionInfo,
    SessionNotFound | UnknownModel | Roles.InvalidRoleRequest | McpNarrowing.McpServersRefused
  >
  readonly restore: (options: RestoreOptions) => Effect.Effect<SessionInfo, UnknownModel>
  /** Appends `message` as a user message and runs the loop to a final answer. */
  readonly prompt: (sessionId: string, message: string) => Effect.Effect<PromptResult, PromptError>
  /** Queues a message for the next model step; `interrupt` cancels the step in flight. */
  readonly deliver: (sessionId: string, message: string, interrupt: boolean) => Effect.Effect<void, SessionNotFound>
  /**
   * Takes the messages delivered to a session that its loop has not read yet (it ended first),
   * so they can be recorded as undelivered instead of vanishing.
   */
  readonly takeUnread: (sessionId: string) => Effect.Effect<ReadonlyArray<string>>
  /** Marks the next interruption of this session's run as a cancellation with `reason`. */
  readonly markCancelled: (sessionId: string, reason: string) => Effect.Effect<void>
  /** The scope of the session's running prompt, if it is running. */
  readonly scopeOf: (sessionId: string) => Option.Option<Scope.Scope>
  /** The full conversation: the system message, then every message in order. */
  readonly transcript: (sessionId: string) => Effect.Effect<ReadonlyArray<Prompt.Message>, SessionNotFound>
  readonly info: (sessionId: string) => Effect.Effect<SessionInfo, SessionNotFound>
  /**
   * Moves a session to another role (`agent_assign`): its live rules become their meet with
   * the role's ceiling, and so do its descendants'. The running loop sees them at its next
   * tool call. Refused with `PermissionWidening` if the role would grant anything the
   * session does not have; nothing changes then.
   */
  readonly reassign: (
    sessionId: string,
    options: {
      readonly role: Roles.RoleSpec
      readonly definition?: Permission.Ceiling | undefined
      /** The new role's MCP servers (McpNarrowing): met with the agent's, never adding one. */
      readonly mcpServers?: ReadonlyArray<string> | undefined
    }
  ) => Effect.Effect<SessionInfo, SessionNotFound | Permission.PermissionWidening>
  /**
   * The workspace a new session works in, when it is not this service's: its system message
   * names `root` (a worktree child's worktree, known once the session exists). Before its
   * first run only; a fork keeps its parent's request as it was.
   */
  readonly moveTo: (sessionId: string, root: string) => Effect.Effect<void, SessionNotFound>
  /** Forgets a finished session (its record and transcript live on elsewhere). */
  readonly dispose: (sessionId: string) => Effect.Effect<void>
  /**
   * Counts model usage spent for a session elsewhere (a process child's run, in its own
   * process) in its usage and every ancestor's tree usage, as its own loop would have: the
   * tree budget of the agents that run after it sees it.
   */
  readonly account: (
    sessionId: string,
    usage: Usage.Usage,
    steps: { readonly reported: number; readonly estimated: number }
  ) => Effect.Effect<void>
}>()("@fibril/core/Session") {}

const info = (state: SessionState): SessionInfo => ({
  id: state.id,
  parentId: state.parent?.id,
  depth: state.depth,
  role: state.role,
  model: state.model,
  description: state.description,
  steps: state.steps,
  toolCalls: state.toolCalls,
  lastTool: state.lastTool,
  usage: Usage.snapshot(state.usage),
  treeUsage: Usage.snapshot(state.treeUsage),
  usageSteps: { reported: state.usageSteps.reported, estimated: state.usageSteps.estimated },
  running: state.busy,
  waitingOnModel: state.modelCall !== undefined,
  rules: state.rules,
  budgets: state.budgets,
  ...(state.output === undefined ? {} : { output: state.output })
})

const userMessage = Parts.userText

export const make = Effect.fn("Session.make")(function*(given: Partial<Options> = {}) {
  const config: Options = { ...defaults, ...given }
  const models = yield* Models
  const registry = yield* ToolRegistry
  const permission = yield* Permission.Permission
  const events = yield* AgentEvents
  const workspace = yield* Workspace
  const memory = yield* Effect.serviceOption(Memory)
  const sessions = new Map<string, SessionState>()
  const { addMessage, depsFor, emit, handOver, publish, runEnd } = SessionRun.context({
    registry,
    permission,
    events
  })

  const lookup = (sessionId: string): Effect.Effect<SessionState, SessionNotFound> => {
    const state = sessions.get(sessionId)
    return state ? Effect.succeed(state) : Effect.fail(new SessionNotFound({ sessionId }))
  }

  const systemFor = SessionSystem.make(workspace, memory)

  const register = (init: SessionStates.Init): SessionState => SessionStates.register(sessions, registry, init)

  const childBudgets = (budgets: Partial<Budgets> | undefined): Budgets => ({
    maxSteps: config.childMaxSteps ?? config.maxSteps,
    ...budgets
  })

  /** `allowed_tools` may name only tools that exist (SpawnPlan). */
  const checkAllowedTools = (role: string, allowedTools: ReadonlyArray<string> | undefined) =>
    SpawnPlan.checkAllowedTools(registry, role, allowedTools)

  // create and createChild run in one step when everything they need is known at once (the
  // usual case): an eager generator (each yield of an Exit read on the spot) inside the span's
  // own step; whatever has to wait (a memory file to read) runs as an effect from there.
  const createNow = Effect.fnUntracedEager(function*(options: CreateOptions) {
    const role = yield* Roles.forRequest(options.role ?? "general", options.allowedTools)
    yield* checkAllowedTools(role.name, options.allowedTools)
    const model = options.model ?? models.defaultModel
    const languageModel = options.languageModel ?? (yield* models.resolve(model))
    const servers = yield* McpNarrowing.grantOf(role.name, permission.root, registry.mcpServers, options)
    const granted = childRules(permission.root, 0, role, servers === undefined ? options : { ...options, servers })
    const rules = options.ceiling === undefined ? granted : Permission.derive(granted, options.ceiling)
    const state = register({
      clock: clockNow(),
      parent: undefined,
      depth: 0,
      role,
      rules,
      model,
      languageModel,
      system: yield* systemFor(role, 0, options.systemPrompt ?? role.prompt),
      messages: [],
      description: options.description,
      budgets: { maxSteps: config.maxSteps, ...options.budgets },
      observer: options.observer,
      output: options.output === undefined
        ? undefined
        : { compiled: options.output, via: OutputSchema.viaOf(languageModel) }
    })
    emit(state, { type: "spawned" })
    return info(state)
  })
  const create = (options: CreateOptions = {}) => spanned("Session.create", () => createNow(options))

  // Siblings given the same grant (same role, depth and allowed_tools, no definition or extra
  // denials) get the same rules, and so do root agents given the same grant: rules are
  // immutable (a reassignment replaces them), so a fan-out derives them once, and the
  // registry's view and the record's JSON of them are computed once too (both are cached per
  // rules object).
  const siblingRules = new WeakMap<Permission.Rules, Map<string, { role: Roles.RoleSpec; rules: Permission.Rules }>>()
  const childRules = (parentRules: Permission.Rules, depth: number, role: Roles.RoleSpec, options: GrantOptions) => {
    if (
      options.definition !== undefined || options.deny !== undefined || options.askTools !== undefined ||
      options.servers !== undefined
    ) {
      return Permission.effective(parentRules, grantFor(depth, config.maxDepth, role, options))
    }
    let byGrant = siblingRules.get(parentRules)
    if (byGrant === undefined) siblingRules.set(parentRules, byGrant = new Map())
    const key = `${role.name}\u0000${depth}\u0000${options.allowedTools?.join("\u0000") ?? "\u0001"}`
    const cached = byGrant.get(key)
    if (cached !== undefined && cached.role === role) return cached.rules
    const rules = Permission.effective(parentRules, grantFor(depth, config.maxDepth, role, options))
    if (byGrant.size >= 64) byGrant.clear()
    byGrant.set(key, { role, rules })
    return rules
  }

  // createChild and prompt run once per sub-agent: spans without `Effect.fn`'s per-call
  // stack capture, which measured ~3 µs a call on the spawn path.
  const createChildNow = Effect.fnUntracedEager(function*(parentId: string | undefined, options: ChildOptions) {
    yield* checkAllowedTools(options.role.name, options.allowedTools)
    const parent = parentId === undefined ? undefined : yield* lookup(parentId)
    const depth = parent === undefined ? 1 : parent.depth + 1
    const role = options.role
    const model = options.model ?? parent?.model ?? models.defaultModel
    const languageModel = options.languageModel ??
      (model === parent?.model ? parent.languageModel : yield* models.resolve(model))
    const parentRules = parent?.rules ?? permission.root
    const servers = yield* McpNarrowing.grantOf(role.name, parentRules, registry.mcpServers, options)
    const rules = childRules(parentRules, depth, role, servers === undefined ? options : { ...options, servers })
    const fork = options.forkContext === true && parent !== undefined
    // A fork starts with the parent's last request, byte-identical (same message objects),
    // then says it is a fork and who it is now; the task follows as the prompt.
    const system = fork ? parent.system : yield* systemFor(role, depth, role.prompt)
    const messages: Array<Prompt.Message> = fork
      ? [
        ...parent.messages.slice(0, parent.lastRequestLength),
        userMessage(
          `${forkMarker} You are a forked sub-agent: the conversation above is your parent's, shared for context. ` +
            "Do not continue the parent's work; do only the task that follows."
        ),
        userMessage(
          `${Roles.header(role.name, depth)}\nWorkspace: ${workspace.root}\n\n${role.prompt}`
        )
      ]
      : []
    const state = register({
      clock: clockNow(),
      parent,
      depth,
      role,
      rules,
      model,
      languageModel,
      system,
      messages,
      description: options.description,
      budgets: childBudgets(options.budgets),
      observer: options.observer,
      output: options.output === undefined
        ? undefined
        : { compiled: options.output, via: OutputSchema.viaOf(languageModel) }
    })
    // An embedder's own root is observed by the manager that runs its first child from then
    // on (it waits for its background children); an observer, once set, is never replaced.
    if (parent !== undefined && parent.observer === undefined) parent.observer = options.observer
    emit(state, { type: "spawned" })
    return info(state)
  })
  const createChild = (parentId: string | undefined, options: ChildOptions) =>
    spanned("Session.createChild", () => createChildNow(parentId, options))

  const restore = Effect.fn("Session.restore")(function*(options: RestoreOptions) {
    const existing = sessions.get(options.id)
    if (existing !== undefined) return info(existing)
    const parent = options.parentId === undefined ? undefined : sessions.get(options.parentId)
    const [first, ...rest] = options.transcript
    const role = options.role
    const system = first?.role === "system" ? first : yield* systemFor(role, options.depth, role.prompt)
    const rules = Permission.derive(
      Permission.effective(parent?.rules ?? permission.root, grantFor(options.depth, config.maxDepth, role, options)),
      options.recorded ?? {}
    )
    const languageModel = yield* models.resolve(options.model)
    const state = register({
      clock: clockNow(),
      id: options.id,
      parent,
      depth: options.depth,
      role,
      rules,
      model: options.model,
      languageModel,
      system,
      messages: first?.role === "system" ? rest : [...options.transcript],
      description: options.description,
      budgets: childBudgets(options.budgets),
      observer: options.observer,
      output: options.output === undefined
        ? undefined
        : { compiled: options.output, via: OutputSchema.viaOf(languageModel) }
    })
    state.lastRequestLength = state.messages.length
    return info(state)
  })

  const { prompt } = SessionRun.make({ config, sessions, emit, publish, handOver, addMessage, depsFor, runEnd })

  const setRules = (state: SessionState, rules: Permission.Rules) => SessionStates.setRules(registry, state, rules)

  const reassign = Effect.fn("Session.reassign")(function*(
    sessionId: string,
    options: {
      readonly role: Roles.RoleSpec
      readonly definition?: Permission.Ceiling | undefined
      /** The new role's MCP servers (McpNarrowing): met with the agent's, never adding one. */
      readonly mcpServers?: ReadonlyArray<string> | undefined
    }
  ) {
    const state = yield* lookup(sessionId)
    const grant = grantFor(state.depth, config.maxDepth, options.role, {
      definition: options.definition,
      servers: options.mcpServers === undefined
        ? undefined
        : McpNarrowing.ceiling(options.mcpServers, registry.mcpServers())
    })
    const next = Permission.reassign(state.rules, state.parent?.rules ?? permission.root, grant)
    if (Result.isFailure(next)) {
      return yield* new Permission.PermissionWidening({
        agentId: sessionId,
        from: state.role,
        to: options.role.name,
        grants: next.failure
      })
    }
    setRules(state, next.success)
    state.role = options.role.name
    // Descendants never keep more than their parent: each meets its parent's new rules.
    const narrowChildren = (parent: SessionState) => {
      for (const child of sessions.values()) {
        if (child.parent !== parent) continue
        setRules(child, Permission.intersect(child.rules, parent.rules))
        narrowChildren(child)
      }
    }
    narrowChildren(state)
    return info(state)
  })

  const moveTo = Effect.fn("Session.moveTo")(function*(sessionId: string, root: string) {
    const state = yield* lookup(sessionId)
    if (state.messages.length > 0) return
    state.system = Parts.systemMessage(
      state.system.content.replace(`\nWorkspace: ${workspace.root}\n`, `\nWorkspace: ${root}\n`)
    )
  })

  const deliver = Effect.fn("Session.deliver")(function*(sessionId: string, message: string, interrupt: boolean) {
    const state = yield* lookup(sessionId)
    state.inbox.push(message)
    const call = state.modelCall
    if (interrupt && call !== undefined) {
      state.stepInterrupted = true
      yield* Fiber.interrupt(call)
    }
  })

  return Session.of({
    create,
    createChild,
    restore,
    prompt,
    deliver,
    takeUnread: (sessionId) =>
      Effect.sync(() => {
        const state = sessions.get(sessionId)
        return state === undefined || state.inbox.length === 0 ? [] : state.inbox.splice(0)
      }),
    markCancelled: (sessionId, reason) =>
      Effect.sync(() => {
        const state = sessions.get(sessionId)
        if (state !== undefined) state.cancelReason = reason
      }),
    scopeOf: (sessionId) => Option.fromNullishOr(sessions.get(sessionId)?.scope),
    transcript: (sessionId) => Effect.map(lookup(sessionId), (state) => [state.system, ...state.messages]),
    // Eager: the lookup is decided at once, and so is the snapshot (a caller reads it with no step).
    info: (sessionId) => Effect.mapEager(lookup(sessionId), info),
    reassign,
    moveTo,
    dispose: (sessionId) => Effect.sync(() => void sessions.delete(sessionId)),
    account: (sessionId, usage, steps) =>
      Effect.sync(() => {
        const state = sessions.get(sessionId)
        if (state === undefined) return
        Usage.add(state.usage, usage)
        for (let node: SessionState | undefined = state; node !== undefined; node = node.parent) {
          Usage.add(node.treeUsage, usage)
          node.usageSteps.reported += steps.reported
          node.usageSteps.estimated += steps.estimated
        }
      })
  })
})

/** Session options from `FibrilConfig` (`[agent]`, `[subagents] max_depth / max_steps`). */
export const optionsFrom = (settings: FibrilConfig.Settings): Partial<Options> => ({
  maxSteps: settings.agent.maxSteps,
  apiTimeoutSecs: settings.agent.apiTimeoutSecs,
  maxRetries: settings.agent.maxRetries,
  retryBaseMs: settings.agent.retryBaseMs,
  retryMaxMs: settings.agent.retryMaxMs,
  maxDepth: settings.subagents.maxDepth,
  childMaxSteps: settings.subagents.maxSteps
})

/** Sessions over the models, tools, permissions, events and workspace in context. */
export const layer = (
  options: Partial<Options> = {}
): Layer.Layer<Session, never, Models | ToolRegistry | Permission.Permission | AgentEvents | Workspace> =>
  Layer.effect(Session, make(options))
