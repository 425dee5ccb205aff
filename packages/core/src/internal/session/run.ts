/**
 * A session's run: `prompt` checks and appends the input, publishes `started`, and runs
 * `AgentLoop` over this session's steps (deliver queued input, the model step, the tools) in
 * a scope of its own, with one finalizer that closes the scope and publishes the one
 * terminal event. Session.ts builds it over a `SessionContext`.
 */
import * as Prompt from "effect/ai/Prompt"
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Scope from "effect/Scope"
import type { AgentEvent, AgentEvents } from "../../AgentEvents.ts"
import * as AgentLoop from "../../AgentLoop.ts"
import * as Claims from "../../Claims.ts"
import * as GenAiTrace from "../../GenAiTrace.ts"
import { BudgetExceeded } from "../../loop/BudgetExceeded.ts"
import type { ModelCallFailed } from "../../loop/CallModel.ts"
import * as ModelSteps from "../../loop/ModelStep.ts"
import type { ModelStep } from "../../loop/ModelStep.ts"
import { eventOf, type RunEnd, type RunObserver, type SessionState } from "../../loop/State.ts"
import { runTools, type RunToolsDeps } from "../../loop/ToolStep.ts"
import { unnamed } from "../../Models.ts"
import type { Permission } from "../../Permission.ts"
import type { Options, PromptError, PromptResult } from "../../Session.ts"
import type { ToolRegistry } from "../../ToolRegistry.ts"
import * as Usage from "../../Usage.ts"
import { clockNow } from "../clock.ts"
import * as Parts from "../parts.ts"
import { describeFailure, SessionBusy, SessionNotFound } from "./errors.ts"

/** What a session's run reads of the service that holds it. */
export interface SessionContext {
  readonly config: Options
  readonly sessions: ReadonlyMap<string, SessionState>
  /** Publishes an event at once (and hands it to the session's observer). */
  readonly emit: (state: SessionState, event: Omit<AgentEvent, "agent" | "at">) => void
  readonly publish: (state: SessionState, event: Omit<AgentEvent, "agent" | "at">) => Effect.Effect<void>
  /** Hands a message to the observer's `onMessage` (a durable transcript). */
  readonly handOver: (state: SessionState, message: Prompt.Message) => Effect.Effect<void>
  /** Adds a message to the conversation and hands it to the observer. */
  readonly addMessage: (state: SessionState, message: Prompt.Message) => Effect.Effect<void>
  /** The tool pipeline's dependencies for an observer. */
  readonly depsFor: (observer: RunObserver | undefined) => RunToolsDeps
  /** What a run leaves its owner (RunObserver.onEnd). */
  readonly runEnd: (state: SessionState, claims?: Claims.ClaimsReport | undefined) => RunEnd
}

const userMessage = Parts.userText

/** How a session talks to its observer and to the events: the pipeline deps, messages, events. */
export const context = (services: {
  readonly registry: ToolRegistry["Service"]
  readonly permission: Permission["Service"]
  readonly events: AgentEvents["Service"]
}): Omit<SessionContext, "config" | "sessions"> => {
  const { events, permission, registry } = services
  // The tool pipeline hands results and events to the session's observer: its deps are built
  // once per observer (a manager gives every session it creates the same one).
  const plainDeps: RunToolsDeps = { registry, permission, events, onResult: undefined, onEvent: undefined }
  const depsByObserver = new WeakMap<RunObserver, RunToolsDeps>()
  const depsFor = (observer: RunObserver | undefined): RunToolsDeps => {
    if (observer === undefined) return plainDeps
    let deps = depsByObserver.get(observer)
    if (deps === undefined) {
      const onMessage = observer.onMessage
      deps = {
        registry,
        permission,
        events,
        onEvent: observer.onEvent,
        onResult: onMessage === undefined ? undefined : (state, part) => onMessage(state.id, Parts.toolMessage([part]))
      }
      depsByObserver.set(observer, deps)
    }
    return deps
  }

  /** Hands a message to the observer's `onMessage` (a durable transcript). */
  const handOver = (state: SessionState, message: Prompt.Message): Effect.Effect<void> => {
    const onMessage = state.observer?.onMessage
    return onMessage === undefined ? Effect.void : onMessage(state.id, message)
  }

  /** Adds a message to the conversation and hands it to the observer. */
  const addMessage = (state: SessionState, message: Prompt.Message): Effect.Effect<void> => {
    state.messages.push(message)
    return handOver(state, message)
  }

  /** What a run leaves its owner (RunObserver.onEnd). */
  const runEnd = (state: SessionState, claims?: Claims.ClaimsReport | undefined): RunEnd => ({
    model: state.model,
    steps: state.steps,
    toolCalls: state.toolCalls,
    lastTool: state.lastTool,
    treeUsage: Usage.snapshot(state.treeUsage),
    usageSteps: { reported: state.usageSteps.reported, estimated: state.usageSteps.estimated },
    takeUnread: () => state.inbox.length === 0 ? [] : state.inbox.splice(0),
    claims
  })

  // Events are published at once, inside the step that has the news (no Effect per event);
  // `publish` is the same as an Effect, for the places that need one.
  const emit = (state: SessionState, event: Omit<AgentEvent, "agent" | "at">): void => {
    const full = eventOf(state, event)
    events.emit(full)
    state.observer?.onEvent?.(full)
  }
  const publish = (state: SessionState, event: Omit<AgentEvent, "agent" | "at">) =>
    Effect.sync(() => emit(state, event))
  return { addMessage, depsFor, emit, handOver, publish, runEnd }
}

/**
 * A run interrupted while tools ran leaves tool calls without results; providers reject
 * such a history, so before a new prompt each call that has no result gets one saying so.
 * Results that did land (kept as they landed) are not touched: only a call that really did
 * not finish is reported as interrupted.
 */
const closeDanglingCalls = (state: SessionState): Prompt.ToolMessage | undefined => {
  let at = state.messages.length - 1
  while (at >= 0 && state.messages[at]!.role === "tool") at--
  const last = state.messages[at]
  if (last?.role !== "assistant") return undefined
  const answered = new Set<string>()
  for (const message of state.messages.slice(at + 1)) {
    if (message.role !== "tool") continue
    for (const part of message.content) if (part.type === "tool-result") answered.add(part.id)
  }
  const missing = last.content.filter((part) => part.type === "tool-call" && !answered.has(part.id))
  if (missing.length === 0) return undefined
  const message = Prompt.makeMessage("tool", {
    content: missing.flatMap((call) =>
      call.type === "tool-call"
        ? [Prompt.makePart("tool-result", {
          id: call.id,
          name: call.name,
          isFailure: true,
          result: {
            error: "Interrupted",
            message: "the run was interrupted before this call finished; its effects are unknown"
          },
          providerExecuted: false
        })]
        : []
    )
  })
  state.messages.push(message)
  return message
}

/** The event of a completed run whose claims all hold (or that made none): one object for all. */
const completed = { type: "completed" } as const

/** `prompt` over the sessions of `ctx`. */
export const make = (ctx: SessionContext) => {
  const { addMessage, config, depsFor, emit, handOver, publish, runEnd, sessions } = ctx
  const addUsage = (state: SessionState, usage: Usage.Usage, reported: boolean) => {
    Usage.add(state.usage, usage)
    for (let node: SessionState | undefined = state; node !== undefined; node = node.parent) {
      Usage.add(node.treeUsage, usage)
      if (reported) node.usageSteps.reported++
      else node.usageSteps.estimated++
    }
  }

  const rootOf = (state: SessionState): SessionState => {
    let node = state
    while (node.parent !== undefined) node = node.parent
    return node
  }

  const checkTokens = (state: SessionState, own: Usage.Usage): Effect.Effect<void, BudgetExceeded> => {
    const { maxTokens, treeMaxTokens } = state.budgets
    if (maxTokens !== undefined && Usage.total(own) > maxTokens) {
      return Effect.fail(new BudgetExceeded({ sessionId: state.id, budget: "max_tokens", limit: maxTokens }))
    }
    if (treeMaxTokens !== undefined && Usage.total(rootOf(state).treeUsage) > treeMaxTokens) {
      return Effect.fail(new BudgetExceeded({ sessionId: state.id, budget: "tree_max_tokens", limit: treeMaxTokens }))
    }
    return Effect.void
  }

  const retryEvent = (state: SessionState) => (attempt: number, reason: string, delayMs: number) =>
    publish(state, {
      type: "retry",
      reason: `attempt ${attempt} failed (${reason}); retrying in ${Math.round(delayMs)} ms`
    })

  const noMessages: ReadonlyArray<Prompt.Message> = []
  const noneDelivered: ReadonlyArray<string> = []

  // What `ModelStep.runCuttable` hands each attempt to and reads at the end: `state.modelCall`
  // while an attempt runs, so a delivery with `interrupt` can cancel just this step (then
  // there is no turn, and the loop takes the step again).
  const cuttableOf = (state: SessionState): ModelSteps.Cuttable => ({
    onAttempt: (call) => void (state.modelCall = call),
    takeCut: () => {
      const cut = state.stepInterrupted
      state.stepInterrupted = false
      return cut
    }
  })

  // The model step proper (loop/ModelStep), started in this fiber; the request is read when it
  // runs (after the prelude), and an unnamed model takes the name its answer reports.
  // Tools that start on first use (MCP servers) are started for an agent that could use them
  // before its request is built, so the request offers them.
  const prepareTools = (state: SessionState): Effect.Effect<void> => {
    const { registry } = depsFor(state.observer)
    return Effect.andThen(
      registry.prepare(state.rules),
      Effect.sync(() => void (state.view = registry.view(state.rules)))
    )
  }
  const step = (state: SessionState): Effect.Effect<ModelStep | undefined, ModelCallFailed> =>
    Effect.andThen(
      prepareTools(state),
      Effect.withFiber((fiber) => {
        state.lastRequestLength = state.messages.length
        return ModelSteps.runCuttable(fiber, {
          languageModel: state.languageModel,
          prompt: Prompt.fromMessages([state.system, ...state.messages]),
          toolkit: state.view.toolkit,
          policy: config,
          onRetry: retryEvent(state),
          delivered: noneDelivered,
          onText: config.stream ? (text: string) => emit(state, { type: "text", text }) : undefined,
          onModelId: state.model === unnamed ? (modelId) => void (state.model = modelId) : undefined,
          output: state.output,
          model: state.model
        }, cuttableOf(state))
      })
    )

  const deliverInbox = (state: SessionState): Effect.Effect<void> =>
    Effect.suspend(() =>
      state.inbox.length === 0
        ? Effect.void
        : Effect.andThen(addMessage(state, userMessage(state.inbox.shift()!)), deliverInbox(state))
    )

  // The session's model step: deliver queued input, let the store catch up (beforeModelCall),
  // then the model call. The loop asks for it when it is about to run it (no suspension of
  // its own); `step` reads the history when it runs: after the prelude, not before.
  const modelStep = (state: SessionState): Effect.Effect<ModelStep | undefined, ModelCallFailed> => {
    const before = state.observer?.beforeModelCall
    if (state.inbox.length === 0 && before === undefined) return step(state)
    const prelude = before === undefined
      ? deliverInbox(state)
      : Effect.andThen(deliverInbox(state), before(state.id))
    return Effect.andThen(prelude, step(state))
  }

  // The run is AgentLoop's (the same loop cluster mode replays), over this session's steps
  // and observer: the history is appended in place, each message handed to `onMessage`; after
  // each turn the step is counted, the tree's usage added, a `step` event published and the
  // token budgets (own and tree) checked; a turn without tool calls ends the run unless
  // input is queued or background children leave something to say (`beforeFinish`).
  const loop = (state: SessionState): Effect.Effect<PromptResult, PromptError> =>
    AgentLoop.runAs<ModelCallFailed | BudgetExceeded, never, PromptResult>(
      {
        agentId: state.id,
        messages: state.messages,
        history: state.messages,
        maxSteps: state.budgets.maxSteps,
        output: state.output
      },
      {
        model: () => modelStep(state),
        // Each result was handed to `onMessage` as it landed (deps.onResult): only kept here.
        // The loop runs what it gets at once, in this fiber: a single call starts here.
        tools: (_, calls) => runTools(depsFor(state.observer), state, calls, true)
      },
      {
        onMessage: (message) => handOver(state, message),
        // Called when the turn is appended (the loop runs what it returns at once).
        afterModel: (turn, own) => {
          state.steps++
          addUsage(state, turn.usage, turn.usageReported)
          emit(state, { type: "step" })
          return checkTokens(state, own)
        },
        // Usually decided at once (no background child): then read with no step.
        beforeFinish: () => {
          if (state.inbox.length > 0) return Effect.succeed(noMessages)
          const gate = state.observer?.beforeFinish
          return gate === undefined
            ? Effect.succeed(undefined)
            : Effect.mapEager(gate(state.id), (more) => more === undefined ? undefined : [userMessage(more)])
        }
      },
      (result) => ({
        sessionId: state.id,
        text: result.text,
        steps: result.steps,
        toolCalls: result.toolCalls,
        usage: result.usage,
        ...(result.output === undefined ? {} : { output: result.output })
      })
    )

  const withWallBudget = (state: SessionState) => <A, E, R>(effect: Effect.Effect<A, E, R>) => {
    const limit = state.budgets.maxWallSecs
    return limit === undefined ? effect : effect.pipe(
      Effect.timeoutOrElse({
        duration: Duration.seconds(limit),
        orElse: () => Effect.fail(new BudgetExceeded({ sessionId: state.id, budget: "max_wall_secs", limit }))
      })
    )
  }

  // The run from the span's own step (see createChild): input checked and appended, the
  // `started` event, the scope, then the loop, with one finalizer that ends it.
  // Under the agent's `invoke_agent` span (GenAiTrace) when a tracer is installed.
  const prompt = (sessionId: string, message: string): Effect.Effect<PromptResult, PromptError> =>
    Effect.withFiber((fiber) => {
      const state = sessions.get(sessionId)
      if (state === undefined) return Effect.fail(new SessionNotFound({ sessionId }))
      return GenAiTrace.invokeAgentIn(
        fiber,
        {
          agentId: state.id,
          role: state.role,
          model: state.model,
          depth: state.depth,
          parentId: state.parent?.id,
          description: state.description,
          prompt: message
        },
        () => {
          if (state.busy) return Effect.fail(new SessionBusy({ sessionId }))
          state.busy = true
          state.cancelReason = undefined
          const closed = closeDanglingCalls(state)
          return Effect.flatMapEager(
            closed !== undefined ? handOver(state, closed) : Effect.void,
            () => Effect.flatMapEager(addMessage(state, userMessage(message)), () => start(state))
          )
        }
      )
    })

  const start = (state: SessionState): Effect.Effect<PromptResult, PromptError> => {
    // Events of this run are stamped by its clock (the caller's: a TestClock under test).
    state.clock = clockNow()
    emit(state, { type: "started" })
    // The run's scope (background children are forked into it) is closed by the same
    // finalizer that publishes the terminal event, first: one finalizer to unwind, not two.
    const scope = Scope.makeUnsafe()
    state.scope = scope
    return Effect.onExitPrimitive(withWallBudget(state)(loop(state)), (exit) => {
      const ended = () => {
        state.busy = false
        state.scope = undefined
        state.modelCall = undefined
        // A completed answer's claims are checked here, once, over the whole conversation: the
        // event says how many its record does not back, the owner keeps the report (RunEnd).
        const claims = exit._tag === "Success" ? Claims.ofAnswer(exit.value.text, state.messages) : undefined
        const unverified = claims === undefined ? 0 : claims.checked - claims.verified
        if (exit._tag === "Success") emit(state, unverified === 0 ? completed : { type: "completed", unverified })
        else if (!Cause.hasInterruptsOnly(exit.cause)) {
          emit(state, { type: "failed", reason: describeFailure(exit.cause) })
        } else if (state.cancelReason === undefined) emit(state, { type: "interrupted", reason: "interrupted" })
        else emit(state, { type: "cancelled", reason: state.cancelReason })
        state.observer?.onEnd?.(state.id, runEnd(state, claims))
      }
      // Run uninterruptibly (the default of `onExitPrimitive`, as of `onExit`), as `closeUnsafe`
      // asks. A scope nothing was forked into (the usual run: no background child) is closed at
      // once, and then there is no effect to run at all (`undefined`: no step to unwind).
      const closing = Scope.closeUnsafe(scope, exit)
      if (closing !== undefined) return Effect.map(closing, ended)
      ended()
      return undefined
    })
  }
  return { prompt }
}
