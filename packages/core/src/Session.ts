/**
 * Session — a conversation with a model, and the agent loop that drives it.
 *
 * A session holds a system prompt, messages, a role, a model label, permission rules, a
 * parent and a depth, and usage. `prompt` runs the loop to a final answer as small steps
 * (loop/): prepare the request and call the model (per-attempt timeout, retries), resolve
 * the turn, run its tool calls concurrently, append the results, repeat. The loop runs in
 * the caller's fiber, so interrupting the caller interrupts the model call, every running
 * tool and — through the `task` tool — every child session below it.
 */
import { Cause, Clock, Context, Effect, Layer, Schema } from "effect"
import { LanguageModel, Prompt } from "effect/ai"
import { AgentEvents, type AgentEvent } from "./AgentEvents.ts"
import * as Ids from "./Ids.ts"
import { callModel, type ModelCallFailed, type RetryPolicy } from "./loop/CallModel.ts"
import { resolveTurn } from "./loop/ResolveTurn.ts"
import { runTools } from "./loop/RunTools.ts"
import { type SessionState, snapshot } from "./loop/State.ts"
import type * as FibrilConfig from "./FibrilConfig.ts"
import { Permission } from "./Permission.ts"
import * as Roles from "./Roles.ts"
import { ToolRegistry } from "./ToolRegistry.ts"
import * as Usage from "./Usage.ts"
import { Workspace } from "./Workspace.ts"

export { ModelCallFailed } from "./loop/CallModel.ts"

export interface Options extends RetryPolicy {
  /** Model steps per `prompt` before it fails with StepBudgetExceeded. */
  readonly maxSteps: number
  /** Step budget of sub-agents (`[subagents] max_steps`); default: maxSteps. */
  readonly childMaxSteps?: number | undefined
  /** Depth below which spawning tools are denied (root = 0). */
  readonly maxDepth: number
  /** The model label recorded for sessions that do not name one. */
  readonly model: string
}

export const defaults: Options = {
  maxSteps: 50,
  maxDepth: 1,
  model: "default",
  apiTimeoutSecs: 120,
  maxRetries: 3,
  retryBaseMs: 1000,
  retryMaxMs: 30_000
}

/** The tools a child never gets, whatever its role: it cannot delegate or own a todo list. */
export const childDenied: ReadonlyArray<string> = ["task", "todowrite"]

export class SessionNotFound extends Schema.TaggedError<SessionNotFound>()("SessionNotFound", {
  sessionId: Schema.String
}) {
  override get message() {
    return `no session with id "${this.sessionId}"`
  }
}

export class SessionBusy extends Schema.TaggedError<SessionBusy>()("SessionBusy", { sessionId: Schema.String }) {
  override get message() {
    return `session "${this.sessionId}" is already running a prompt; wait for it to finish`
  }
}

export class StepBudgetExceeded extends Schema.TaggedError<StepBudgetExceeded>()("StepBudgetExceeded", {
  sessionId: Schema.String,
  maxSteps: Schema.Int
}) {
  override get message() {
    return `agent ${this.sessionId} used its step budget (max_steps=${this.maxSteps}) without a final answer`
  }
}

/** A message of a transcript (the `effect/ai` prompt message). */
export type TranscriptMessage = Prompt.Message

export type PromptError = SessionNotFound | SessionBusy | ModelCallFailed | StepBudgetExceeded

export interface SessionInfo {
  readonly id: string
  readonly parentId: string | undefined
  readonly depth: number
  readonly role: string
  readonly model: string
  readonly steps: number
  readonly toolCalls: number
  readonly usage: Usage.Usage
  readonly treeUsage: Usage.Usage
}

export interface PromptResult {
  readonly sessionId: string
  readonly text: string
  /** Steps and tool calls of this prompt only. */
  readonly steps: number
  readonly toolCalls: number
  /** Usage of this prompt only (own model calls). */
  readonly usage: Usage.Usage
}

export interface CreateOptions {
  /** Role name or alias; default `general`. */
  readonly role?: string | undefined
  readonly model?: string | undefined
  /** Replaces the role's prompt (the header line is kept). */
  readonly systemPrompt?: string | undefined
  readonly allowedTools?: ReadonlyArray<string> | undefined
  readonly deny?: ReadonlyArray<string> | undefined
}

export interface ChildOptions {
  readonly role: Roles.RoleSpec
  readonly description?: string | undefined
  readonly model?: string | undefined
  readonly allowedTools?: ReadonlyArray<string> | undefined
  readonly deny?: ReadonlyArray<string> | undefined
}

export class Session extends Context.Service<Session, {
  readonly create: (options?: CreateOptions) => Effect.Effect<SessionInfo, Roles.UnknownRole | Roles.InvalidRoleRequest>
  readonly createChild: (parentId: string, options: ChildOptions) => Effect.Effect<SessionInfo, SessionNotFound>
  /** Appends `message` as a user message and runs the loop to a final answer. */
  readonly prompt: (sessionId: string, message: string) => Effect.Effect<PromptResult, PromptError>
  /** The full conversation: the system message, then every message in order. */
  readonly transcript: (sessionId: string) => Effect.Effect<ReadonlyArray<Prompt.Message>, SessionNotFound>
  readonly info: (sessionId: string) => Effect.Effect<SessionInfo, SessionNotFound>
}>()("@fibril/core/Session") {}

/** The message of a typed failure, or a short form of a defect. */
export const describeFailure = (cause: Cause.Cause<unknown>): string => {
  const error = Cause.squash(cause)
  return error instanceof Error ? error.message : String(error)
}

const info = (state: SessionState): SessionInfo => ({
  id: state.id,
  parentId: state.parent?.id,
  depth: state.depth,
  role: state.role,
  model: state.model,
  steps: state.steps,
  toolCalls: state.toolCalls,
  usage: Usage.snapshot(state.usage),
  treeUsage: Usage.snapshot(state.treeUsage)
})

export const make = Effect.fn("Session.make")(function*(options: Partial<Options> = {}) {
  const config: Options = { ...defaults, ...options }
  const model = yield* LanguageModel.LanguageModel
  const registry = yield* ToolRegistry
  const permission = yield* Permission
  const events = yield* AgentEvents
  const workspace = yield* Workspace
  const sessions = new Map<string, SessionState>()
  const deps = { registry, permission, events }

  const lookup = (sessionId: string): Effect.Effect<SessionState, SessionNotFound> => {
    const state = sessions.get(sessionId)
    return state ? Effect.succeed(state) : Effect.fail(new SessionNotFound({ sessionId }))
  }

  const publish = (state: SessionState, event: Omit<AgentEvent, "agent" | "at">) =>
    Effect.flatMap(Clock.currentTimeMillis, (at) => events.publish({ ...event, agent: snapshot(state), at }))

  const register = (
    parent: SessionState | undefined,
    role: Roles.RoleSpec,
    rules: SessionState["rules"],
    modelLabel: string,
    prompt: string,
    description: string | undefined
  ): SessionState => {
    const depth = parent === undefined ? 0 : parent.depth + 1
    const state: SessionState = {
      id: Ids.next("agent"),
      parent,
      depth,
      role: role.name,
      model: modelLabel,
      description,
      system: Prompt.makeMessage("system", {
        content: `${Roles.header(role.name, depth)}\nWorkspace: ${workspace.root}\n\n${prompt}`
      }),
      messages: [],
      rules,
      view: registry.view(rules),
      usage: Usage.zero(),
      treeUsage: Usage.zero(),
      steps: 0,
      toolCalls: 0,
      lastTool: undefined,
      busy: false
    }
    sessions.set(state.id, state)
    return state
  }

  const create = Effect.fn("Session.create")(function*(options: CreateOptions = {}) {
    const role = yield* Roles.forRequest(options.role ?? "general", options.allowedTools)
    const rules = permission.derive(permission.root, {
      label: `${role.name} agent`,
      allow: options.allowedTools,
      deny: options.deny,
      postures: config.maxDepth < 1 ? [...role.postures].filter((p) => p !== "spawn") : role.postures,
      writeScope: role.writeScope
    })
    const state = register(undefined, role, rules, options.model ?? config.model, options.systemPrompt ?? role.prompt, undefined)
    yield* publish(state, { type: "spawned" })
    return info(state)
  })

  const createChild = Effect.fn("Session.createChild")(function*(parentId: string, options: ChildOptions) {
    const parent = yield* lookup(parentId)
    const depth = parent.depth + 1
    const role = options.role
    const mayNotSpawn = depth >= config.maxDepth
    const rules = permission.derive(parent.rules, {
      label: `${role.name} sub-agent at depth ${depth}`,
      allow: options.allowedTools,
      deny: options.deny === undefined ? childDenied : [...childDenied, ...options.deny],
      postures: mayNotSpawn ? [...role.postures].filter((p) => p !== "spawn") : role.postures,
      writeScope: role.writeScope
    })
    const state = register(parent, role, rules, options.model ?? parent.model, role.prompt, options.description)
    yield* publish(state, { type: "spawned" })
    return info(state)
  })

  const addUsage = (state: SessionState, usage: Usage.Usage) => {
    Usage.add(state.usage, usage)
    for (let node: SessionState | undefined = state; node !== undefined; node = node.parent) {
      Usage.add(node.treeUsage, usage)
    }
  }

  const loop = (state: SessionState) =>
    Effect.gen(function*() {
      const startSteps = state.steps
      const startToolCalls = state.toolCalls
      const own = Usage.zero()
      const maxSteps = state.depth > 0 ? config.childMaxSteps ?? config.maxSteps : config.maxSteps
      while (true) {
        if (state.steps - startSteps >= maxSteps) {
          return yield* new StepBudgetExceeded({ sessionId: state.id, maxSteps })
        }
        const request = Prompt.fromMessages([state.system, ...state.messages])
        const response = yield* callModel(
          model,
          request,
          state.view.toolkit,
          config,
          (attempt, reason, delayMs) =>
            publish(state, { type: "retry", reason: `attempt ${attempt} failed (${reason}); retrying in ${Math.round(delayMs)} ms` })
        )
        const turn = resolveTurn(response)
        state.steps++
        addUsage(state, turn.usage)
        Usage.add(own, turn.usage)
        state.messages.push(turn.assistant)
        yield* publish(state, { type: "step" })
        if (turn.toolCalls.length === 0) {
          return {
            sessionId: state.id,
            text: turn.text,
            steps: state.steps - startSteps,
            toolCalls: state.toolCalls - startToolCalls,
            usage: Usage.snapshot(own)
          } satisfies PromptResult
        }
        state.messages.push(yield* runTools(deps, state, turn.toolCalls))
      }
    })

  const prompt = Effect.fn("Session.prompt")(function*(sessionId: string, message: string) {
    const state = yield* lookup(sessionId)
    if (state.busy) return yield* new SessionBusy({ sessionId })
    state.busy = true
    state.messages.push(Prompt.makeMessage("user", { content: [Prompt.makePart("text", { text: message })] }))
    yield* publish(state, { type: "started" })
    return yield* loop(state).pipe(
      Effect.onExit((exit) => {
        state.busy = false
        if (exit._tag === "Success") return publish(state, { type: "completed" })
        return Cause.hasInterruptsOnly(exit.cause)
          ? publish(state, { type: "interrupted", reason: "interrupted" })
          : publish(state, { type: "failed", reason: describeFailure(exit.cause) })
      })
    )
  })

  return Session.of({
    create,
    createChild,
    prompt,
    transcript: (sessionId) => Effect.map(lookup(sessionId), (state) => [state.system, ...state.messages]),
    info: (sessionId) => Effect.map(lookup(sessionId), info)
  })
})

/** Session options from `FibrilConfig` (`[agent]`, `[subagents] max_depth / max_steps`, `model`). */
export const optionsFrom = (settings: FibrilConfig.Settings): Partial<Options> => ({
  maxSteps: settings.agent.maxSteps,
  apiTimeoutSecs: settings.agent.apiTimeoutSecs,
  maxRetries: settings.agent.maxRetries,
  retryBaseMs: settings.agent.retryBaseMs,
  retryMaxMs: settings.agent.retryMaxMs,
  maxDepth: settings.subagents.maxDepth,
  childMaxSteps: settings.subagents.maxSteps,
  ...(settings.model === undefined ? {} : { model: settings.model })
})

/** Sessions over the LanguageModel, tools, permissions, events and workspace in context. */
export const layer = (
  options: Partial<Options> = {}
): Layer.Layer<Session, never, LanguageModel.LanguageModel | ToolRegistry | Permission | AgentEvents | Workspace> =>
  Layer.effect(Session, make(options))
