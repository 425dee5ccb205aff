/**
 * The mutable state of one session, owned by the Session service and handed to the loop
 * steps. Plain fields, because the loop touches them on every step of every agent.
 */
import type * as LanguageModel from "effect/ai/LanguageModel"
import type * as Prompt from "effect/ai/Prompt"
import type * as Clock from "effect/Clock"
import type * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import type * as Scope from "effect/Scope"
import type { AgentEvent, AgentSnapshot } from "../AgentEvents.ts"
import type { ClaimsReport } from "../Claims.ts"
import type * as OutputSchema from "../OutputSchema.ts"
import type * as Permission from "../Permission.ts"
import type { ToolView } from "../ToolRegistry.ts"
import type { MutableUsage, Usage } from "../Usage.ts"

/** Limits on one prompt run of a session; the tree budget is checked against the root's usage. */
export interface Budgets {
  readonly maxSteps: number
  readonly maxTokens?: number | undefined
  readonly maxWallSecs?: number | undefined
  readonly treeMaxTokens?: number | undefined
}

/**
 * What a session's run leaves its owner when it ends, however it ends: the final counts (the
 * owner's record needs no call back into the session) and the input the run never read.
 */
export interface RunEnd {
  /** The model it ran on: an unnamed one has taken the name its provider reported. */
  readonly model: string
  readonly steps: number
  readonly toolCalls: number
  readonly lastTool: string | undefined
  /** Its own usage plus every descendant's. */
  readonly treeUsage: Usage
  readonly usageSteps: { readonly reported: number; readonly estimated: number }
  /** Takes the messages delivered that the run never read (it ended first): the inbox is emptied. */
  readonly takeUnread: () => ReadonlyArray<string>
  /** A completed run's answer, its claims checked against the conversation (Claims.ofAnswer). */
  readonly claims?: ClaimsReport | undefined
}

/**
 * How the owner of a session (the SubAgentManager) takes part in its runs: fixed when the
 * session is created, never replaced. Every member is optional; an absent one costs nothing.
 */
export interface RunObserver {
  /** Called with every event, after it is published, at once (it must not block). */
  readonly onEvent?: ((event: AgentEvent) => void) | undefined
  /**
   * Called when the model gives a final answer. Return a message to hand the model and go on
   * (e.g. the results of background children it must see), or undefined to finish.
   */
  readonly beforeFinish?: ((sessionId: string) => Effect.Effect<string | undefined>) | undefined
  /**
   * Called with every message added to a conversation — each tool result on its own, as it
   * lands — before the loop goes on (a durable store writes it there).
   */
  readonly onMessage?: ((sessionId: string, message: Prompt.Message) => Effect.Effect<void>) | undefined
  /** Called before each model call: what `onMessage` was handed must be durable by then. */
  readonly beforeModelCall?: ((sessionId: string) => Effect.Effect<void>) | undefined
  /** Called once when a run ends (in its finalizer, at once: it must not block). */
  readonly onEnd?: ((sessionId: string, end: RunEnd) => void) | undefined
}

export interface SessionState {
  readonly id: string
  readonly parent: SessionState | undefined
  readonly depth: number
  /** Changed only by a reassignment, which can only narrow `rules` (Session.reassign). */
  role: string
  /** Its model id; an unnamed one (`Models.unnamed`) becomes the name its first answer reports. */
  model: string
  readonly languageModel: LanguageModel.LanguageModel
  /** A short label from the spawner (the `task` description), for progress views. */
  readonly description: string | undefined
  /** Replaced once when a worktree child moves into its worktree (Session.moveTo). */
  system: Prompt.SystemMessage
  readonly messages: Array<Prompt.Message>
  /** Read at every tool call, so a narrowing reaches the running loop at its next call. */
  rules: Permission.Rules
  view: ToolView
  readonly budgets: Budgets
  /** This session's own model usage. */
  readonly usage: MutableUsage
  /** Its own usage plus every descendant's. */
  readonly treeUsage: MutableUsage
  /** Model steps of its tree whose usage the provider reported, and those estimated instead. */
  readonly usageSteps: { reported: number; estimated: number }
  /** Messages waiting to be delivered before the next model step. */
  readonly inbox: Array<string>
  steps: number
  toolCalls: number
  lastTool: string | undefined
  busy: boolean
  /** How many messages the last model request carried (the prefix a fork copies). */
  lastRequestLength: number
  /** The in-flight model call, while there is one. */
  modelCall: Fiber.Fiber<unknown, unknown> | undefined
  /** Set when a delivery interrupted the in-flight model call on purpose. */
  stepInterrupted: boolean
  /** The scope of the running prompt: background children are forked into it. */
  scope: Scope.Scope | undefined
  /** Set before the run is interrupted on purpose: it ends `cancelled` with this reason. */
  cancelReason: string | undefined
  /** The clock events are stamped with: the creating fiber's, then the running prompt's. */
  clock: Clock.Clock
  /**
   * Who takes part in its runs: given at creation, or (an embedder's own root) the observer
   * of the first child a manager creates under it. Never replaced once set.
   */
  observer: RunObserver | undefined
  /** A typed result (`output_schema`): the loop decodes the final answer against it. */
  readonly output: OutputSchema.Check | undefined
}

export const snapshot = (state: SessionState): AgentSnapshot => ({
  agentId: state.id,
  parentId: state.parent?.id,
  depth: state.depth,
  role: state.role,
  model: state.model,
  description: state.description,
  step: state.steps,
  toolCalls: state.toolCalls,
  lastTool: state.lastTool,
  usage: { input: state.treeUsage.input, output: state.treeUsage.output, cached: state.treeUsage.cached }
})

/**
 * An event as published: with the agent's snapshot, stamped by the session's clock; built field
 * by field, the fields the event has, as given (a hand-built literal: `internal/span.ts`).
 */
export const eventOf = (state: SessionState, event: Omit<AgentEvent, "agent" | "at">): AgentEvent => {
  const out: { -readonly [K in keyof AgentEvent]: AgentEvent[K] } = {
    type: event.type,
    agent: snapshot(state),
    at: state.clock.currentTimeMillisUnsafe()
  }
  if ("tool" in event) out.tool = event.tool
  if ("reason" in event) out.reason = event.reason
  if ("isFailure" in event) out.isFailure = event.isFailure
  if ("changed" in event) out.changed = event.changed
  if ("text" in event) out.text = event.text
  if ("unverified" in event) out.unverified = event.unverified
  if ("question" in event) out.question = event.question
  if ("answer" in event) out.answer = event.answer
  if ("progress" in event) out.progress = event.progress
  return out
}
