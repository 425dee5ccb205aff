/**
 * AgentEvents — a PubSub of agent lifecycle and progress events.
 *
 * The CLI tree, MCP progress notifications and tests read it. Every event carries a snapshot
 * of the agent (ids, depth, role, model, step, tool calls, last tool, usage) so a consumer
 * can render state from events alone, without querying sessions.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as PubSub from "effect/PubSub"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import type { Answer as ApprovalAnswer, Question as ApprovalQuestion } from "./Approvals.ts"
import type { Usage } from "./Usage.ts"

export type EventType =
  | "spawned"
  | "started"
  | "step"
  | "retry"
  | "text"
  | "tool_call"
  | "tool_result"
  | "tool_progress"
  | "completed"
  | "failed"
  | "cancelled"
  | "interrupted"
  | "question"
  | "answered"

export interface AgentSnapshot {
  readonly agentId: string
  readonly parentId: string | undefined
  readonly depth: number
  readonly role: string
  readonly model: string
  readonly description: string | undefined
  readonly step: number
  readonly toolCalls: number
  readonly lastTool: string | undefined
  readonly usage: Usage
}

/**
 * How far a running tool call is, as the tool says (an MCP server's `notifications/progress`):
 * `progress` grows with each update; `total` when known; `message` when given.
 */
export interface ToolProgress {
  readonly progress: number
  readonly total?: number | undefined
  readonly message?: string | undefined
}

/** `3/10 indexing`: how a progress view shows a call's latest progress. */
export const progressText = (progress: ToolProgress): string =>
  `${progress.progress}${progress.total === undefined ? "" : `/${progress.total}`}${
    progress.message === undefined ? "" : ` ${progress.message}`
  }`

export interface AgentEvent {
  readonly type: EventType
  readonly agent: AgentSnapshot
  /** Epoch milliseconds from the Effect Clock (TestClock in tests). */
  readonly at: number
  /** The tool of a tool_call / tool_result event. */
  readonly tool?: string | undefined
  /** Why an agent failed, was cancelled or interrupted, or why a step is retried. */
  readonly reason?: string | undefined
  /** For tool_result: did the call fail (including denials)? */
  readonly isFailure?: boolean | undefined
  /**
   * For a `text` event (a streamed model call): the answer's text that just arrived. A `retry`
   * of the agent drops what its attempt streamed so far: the next attempt streams anew.
   */
  readonly text?: string | undefined
  /** For a successful tool_result of a writing tool: the workspace paths it was given (as given). */
  readonly changed?: ReadonlyArray<string> | undefined
  /**
   * For `completed`: how many claims of its answer its own record does not back (Claims), when
   * some were checked. A progress view marks such an agent; the claims are in its result.
   */
  readonly unverified?: number | undefined
  /**
   * For `question` (a call waits for a person: `Approvals`) and `answered` (how it ended):
   * the question, with its id for `fibril agents answer`.
   */
  readonly question?: ApprovalQuestion | undefined
  /** For `answered`: the decision, who made it and why. */
  readonly answer?: ApprovalAnswer | undefined
  /** For `tool_progress`: the latest progress of the call of `tool`. */
  readonly progress?: ToolProgress | undefined
}

export const isTerminal = (type: EventType): boolean =>
  type === "completed" || type === "failed" || type === "cancelled" || type === "interrupted"

export class AgentEvents extends Context.Service<AgentEvents, {
  readonly publish: (event: AgentEvent) => Effect.Effect<void>
  /**
   * `publish`, done at once: what the runtime calls for every event it publishes itself (a
   * dozen per agent), so that an event costs no Effect of its own. Whoever wraps this
   * service must wrap both (`publish` may simply run `emit`).
   */
  readonly emit: (event: AgentEvent) => void
  /** A subscription that receives every event published after it is taken. */
  readonly subscribe: Effect.Effect<PubSub.Subscription<AgentEvent>, never, Scope.Scope>
  readonly stream: Stream.Stream<AgentEvent>
}>()("@fibril/core/AgentEvents") {}

export const make = Effect.gen(function*() {
  const pubsub = yield* PubSub.unbounded<AgentEvent>()
  // Unbounded: a publish always succeeds at once, so the synchronous form is the same
  // operation without suspending.
  const emit = (event: AgentEvent): void => void PubSub.publishUnsafe(pubsub, event)
  return AgentEvents.of({
    publish: (event) => Effect.sync(() => emit(event)),
    emit,
    subscribe: PubSub.subscribe(pubsub),
    stream: Stream.fromPubSub(pubsub)
  })
})

export const layer: Layer.Layer<AgentEvents> = Layer.effect(AgentEvents, make)

/**
 * The service with `emit` replaced and `publish` running the new `emit`: how a wrapper (a
 * test's observer, the lab's planted bugs) sees or changes every event, whichever way it is
 * published.
 */
export const withEmit = (
  events: AgentEvents["Service"],
  emit: (event: AgentEvent) => void
): AgentEvents["Service"] => ({ ...events, emit, publish: (event) => Effect.sync(() => emit(event)) })
