/**
 * AgentLoop — the agent loop over steps, written once.
 *
 * Each turn: one model step (which first takes the agent's queued input), then the turn's tool
 * calls — each a step of its own, concurrently, or all of them as one step — and again, until
 * the model answers without tool calls and nothing asks for another turn. Between steps it
 * only does arithmetic on the steps' results: no clock reads, no random ids, no I/O. What
 * touches the world is in the steps and the hooks the caller gives.
 *
 * Both runtimes drive this loop. The embedded `Session` gives steps that run in the agent's
 * fiber (a model call that a delivery may cut short, its tool runner with events and
 * permissions) and hooks for what it keeps around the loop (events, the tree's usage and
 * budgets, the durable transcript, background children). `@fibril/cluster` gives steps that
 * are workflow activities (`model/<step>`, `tool/<step>/<index>`), so a replay after a crash
 * takes the same path through the journaled results.
 */
import type * as Prompt from "effect/ai/Prompt"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Result from "effect/Result"
import { type ModelStep, type StepToolCall, toolMessage, type ToolStep, userMessage } from "./AgentSteps.ts"
import { BudgetExceeded } from "./loop/BudgetExceeded.ts"
import * as OutputSchema from "./OutputSchema.ts"
import * as Usage from "./Usage.ts"

export interface LoopInput {
  readonly agentId: string
  /** The conversation so far, ending with the task (or input) this run answers. */
  readonly messages: ReadonlyArray<Prompt.Message>
  readonly maxSteps: number
  /** The run's own token budget (the caller's `afterModel` hook may check others). */
  readonly maxTokens?: number | undefined
  /**
   * The array the run appends to, in place (the session's history, which others read while
   * the run goes on); by default a copy of `messages`.
   */
  readonly history?: Array<Prompt.Message> | undefined
  /**
   * A typed result (`output_schema`): the final answer (its text, or a `final_answer` call's
   * arguments) is decoded here, with one repair turn; still invalid, the run fails closed.
   */
  readonly output?: OutputSchema.Check | undefined
}

/**
 * The steps: a model step, and the tool calls either one at a time (`tool`: each a step of its
 * own, run concurrently) or a turn's calls together (`tools`: one step giving their tool message).
 */
export type LoopSteps<E, R> =
  & {
    /**
     * Model step `step` over the conversation so far. `undefined`: the step was cut short on
     * purpose (new input interrupted it); it is not counted, and the next one is taken.
     */
    readonly model: (
      step: number,
      messages: ReadonlyArray<Prompt.Message>
    ) => Effect.Effect<ModelStep | undefined, E, R>
  }
  & (
    | {
      /** One tool call of model step `step`; `index` is its position in the turn. */
      readonly tool: (step: number, call: StepToolCall, index: number) => Effect.Effect<ToolStep, E, R>
      readonly tools?: undefined
    }
    | {
      readonly tool?: undefined
      /** All the tool calls of model step `step`, giving their tool message. */
      readonly tools: (step: number, calls: ReadonlyArray<StepToolCall>) => Effect.Effect<Prompt.Message, E, R>
    }
  )

export interface LoopHooks<E, R> {
  /** Each delivered input and each model turn, as it is appended (tool results are the tool steps' to hand over). */
  readonly onMessage?: ((message: Prompt.Message) => Effect.Effect<void, E, R>) | undefined
  /**
   * The messages the loop writes itself, after `onMessage`, with the step they follow: a typed
   * answer's tool results (`final_answer` accepted or refused) and its repair request. An
   * engine that records steps itself (the cluster's) writes these with the step's others.
   */
  readonly onLoopMessage?: ((message: Prompt.Message, step: number) => Effect.Effect<void, E, R>) | undefined
  /**
   * After a model turn is appended, with the run's usage so far: the caller's events, its
   * tree's usage and budgets. It runs before the loop's own `maxTokens` check.
   */
  readonly afterModel?: ((turn: ModelStep, usage: Usage.Usage) => Effect.Effect<void, E, R>) | undefined
  /**
   * The model answered without tool calls: `undefined` ends the run; messages (none, to step
   * again on input already queued) are appended and the loop takes another turn.
   */
  readonly beforeFinish?: (() => Effect.Effect<ReadonlyArray<Prompt.Message> | undefined, E, R>) | undefined
}

export interface LoopResult {
  readonly text: string
  readonly steps: number
  readonly toolCalls: number
  readonly usage: Usage.Usage
  /** The conversation at the end: the input messages, then every message this run added. */
  readonly messages: ReadonlyArray<Prompt.Message>
  /** With `output`: the decoded answer (the `text` is then its compact JSON). */
  readonly output?: unknown
}

export const run = <E, R>(
  input: LoopInput,
  steps: LoopSteps<E, R>,
  hooks: LoopHooks<E, R> = {}
): Effect.Effect<LoopResult, E | BudgetExceeded | OutputSchema.OutputInvalid, R> => runAs(input, steps, hooks, identity)

const identity = (result: LoopResult): LoopResult => result

/** A hook's answer decided at once: read as it is, with no `yield*` (an iterator and its results). */
const isSuccess = <A, E, R>(effect: Effect.Effect<A, E, R>): effect is Exit.Success<A, E> =>
  Exit.isExit(effect) && Exit.isSuccess(effect)

/**
 * `run`, its result given to `finish` as the loop returns it: the caller's own shape of the
 * result, made as the loop returns rather than in a scheduler turn of its own.
 */
export const runAs = <E, R, B>(
  input: LoopInput,
  steps: LoopSteps<E, R>,
  hooks: LoopHooks<E, R>,
  finish: (result: LoopResult) => B
): Effect.Effect<B, E | BudgetExceeded | OutputSchema.OutputInvalid, R> =>
  Effect.gen(function*() {
    const messages: Array<Prompt.Message> = input.history ?? [...input.messages]
    const { onMessage, onLoopMessage, afterModel, beforeFinish } = hooks
    // Effect.void when there is nothing to run (no hook): the loop then does not yield it.
    const append = (message: Prompt.Message) => {
      messages.push(message)
      return onMessage === undefined ? Effect.void : onMessage(message)
    }
    const appendOwn = (message: Prompt.Message, step: number) =>
      onLoopMessage === undefined
        ? append(message)
        : Effect.andThen(append(message), onLoopMessage(message, step))
    const usage = Usage.zero()
    let toolCalls = 0
    let repaired = false
    // A typed answer decoded: the run's end, one repair turn, or the run failed closed.
    const typed = (decoded: Result.Result<unknown, string>, step: number) => {
      if (Result.isSuccess(decoded)) {
        return Effect.succeed(finish({
          text: JSON.stringify(decoded.success),
          steps: step,
          toolCalls,
          usage: Usage.snapshot(usage),
          messages,
          output: decoded.success
        }))
      }
      if (repaired) {
        return Effect.fail(new OutputSchema.OutputInvalid({ agentId: input.agentId, errors: decoded.failure }))
      }
      repaired = true
      return Effect.as(
        appendOwn(userMessage(OutputSchema.repairMessage(decoded.failure, output!.via)), step - 1),
        undefined
      )
    }
    const output = input.output
    for (let step = 0;;) {
      if (step >= input.maxSteps) {
        return yield* new BudgetExceeded({ sessionId: input.agentId, budget: "max_steps", limit: input.maxSteps })
      }
      const turn = yield* steps.model(step, messages)
      if (turn === undefined) continue
      for (const text of turn.delivered) yield* append(userMessage(text))
      const appended = append(turn.assistant)
      if (appended !== Effect.void) yield* appended
      Usage.add(usage, turn.usage)
      if (afterModel !== undefined) {
        const after = afterModel(turn, usage)
        if (!isSuccess(after)) yield* after
      }
      if (input.maxTokens !== undefined && Usage.total(usage) > input.maxTokens) {
        return yield* new BudgetExceeded({ sessionId: input.agentId, budget: "max_tokens", limit: input.maxTokens })
      }
      const current = step++
      const final = output === undefined
        ? undefined
        : turn.toolCalls.find((call) => call.name === OutputSchema.finalAnswerTool)
      if (final !== undefined) {
        // The answer is the call's arguments; the turn's other calls are not run.
        toolCalls += turn.toolCalls.length
        const decoded = OutputSchema.decodeAnswer(output!.compiled, final)
        yield* appendOwn(
          toolMessage(turn.toolCalls.map((call) => ({
            id: call.id,
            name: call.name,
            isFailure: call !== final || Result.isFailure(decoded),
            result: call !== final
              ? "Not run: the turn ended with final_answer"
              : Result.isFailure(decoded)
              ? decoded.failure
              : "Accepted"
          }))),
          current
        )
        const done = yield* typed(decoded, step)
        if (done !== undefined) return done
        continue
      }
      if (turn.toolCalls.length > 0) {
        toolCalls += turn.toolCalls.length
        const { tool, tools } = steps
        messages.push(
          tools !== undefined
            ? yield* tools(current, turn.toolCalls)
            : toolMessage(
              yield* Effect.forEach(turn.toolCalls, (call, index) => tool(current, call, index), {
                concurrency: "unbounded"
              })
            )
        )
        continue
      }
      const asked = beforeFinish?.()
      const more = asked === undefined ? undefined : isSuccess(asked) ? asked.value : yield* asked
      if (more === undefined) {
        if (output === undefined) {
          return finish({ text: turn.text, steps: step, toolCalls, usage: Usage.snapshot(usage), messages })
        }
        const done = yield* typed(OutputSchema.decodeAnswer(output.compiled, turn.text), step)
        if (done !== undefined) return done
        continue
      }
      for (const message of more) yield* append(message)
    }
  })
