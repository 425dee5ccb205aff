/**
 * AgentLoop — the agent loop over `AgentSteps`, written once.
 *
 * Each turn: one model step (which first takes the agent's queued input), then each of its
 * tool calls as a step of its own, concurrently; repeat until the model answers without
 * tool calls. Between steps it only does arithmetic on the steps' results: no clock reads,
 * no random ids, no I/O. So the same loop runs directly (the steps run in the caller's
 * fiber) or durably (`@fibril/cluster` hands it steps that are workflow activities, and a
 * replay after a crash takes the same path through the journaled results).
 */
import type * as Prompt from "effect/ai/Prompt"
import * as Effect from "effect/Effect"
import {
  type ModelStep,
  type ModelStepError,
  type StepToolCall,
  toolMessage,
  type ToolStep,
  userMessage
} from "./AgentSteps.ts"
import { BudgetExceeded } from "./Session.ts"
import * as Usage from "./Usage.ts"

export interface LoopInput {
  readonly agentId: string
  /** The conversation so far, ending with the task (or input) this run answers. */
  readonly messages: ReadonlyArray<Prompt.Message>
  readonly maxSteps: number
  readonly maxTokens?: number | undefined
}

export interface LoopSteps<E, R> {
  /** Model step `step` over the conversation so far. */
  readonly model: (step: number, messages: ReadonlyArray<Prompt.Message>) => Effect.Effect<ModelStep, E, R>
  /** One tool call of model step `step`; `index` is its position in the turn. */
  readonly tool: (step: number, call: StepToolCall, index: number) => Effect.Effect<ToolStep, E, R>
}

export interface LoopResult {
  readonly text: string
  readonly steps: number
  readonly toolCalls: number
  readonly usage: Usage.Usage
  /** The conversation at the end: the input messages, then every message this run added. */
  readonly messages: ReadonlyArray<Prompt.Message>
}

export const run = <E, R>(
  input: LoopInput,
  steps: LoopSteps<E, R>
): Effect.Effect<LoopResult, E | BudgetExceeded | ModelStepError, R> =>
  Effect.gen(function*() {
    const messages: Array<Prompt.Message> = [...input.messages]
    const usage = Usage.zero()
    let toolCalls = 0
    for (let step = 0;; step++) {
      if (step >= input.maxSteps) {
        return yield* new BudgetExceeded({ sessionId: input.agentId, budget: "max_steps", limit: input.maxSteps })
      }
      const turn = yield* steps.model(step, messages)
      for (const text of turn.delivered) messages.push(userMessage(text))
      messages.push(turn.assistant)
      Usage.add(usage, turn.usage)
      if (input.maxTokens !== undefined && Usage.total(usage) > input.maxTokens) {
        return yield* new BudgetExceeded({ sessionId: input.agentId, budget: "max_tokens", limit: input.maxTokens })
      }
      if (turn.toolCalls.length === 0) {
        return { text: turn.text, steps: step + 1, toolCalls, usage: Usage.snapshot(usage), messages }
      }
      toolCalls += turn.toolCalls.length
      const results = yield* Effect.forEach(turn.toolCalls, (call, index) => steps.tool(step, call, index), {
        concurrency: "unbounded"
      })
      messages.push(toolMessage(results))
    }
  })
