/**
 * AgentSteps — the agent loop's two kinds of step as a service: one model step (take what
 * is queued for the agent, call the model, resolve the turn) and one tool call (find the
 * tool, check permissions, decode the arguments, run the handler).
 *
 * Everything that touches the world — the clock, randomness, the network, the file system —
 * happens inside a step; the loop between steps (`AgentLoop`) is a deterministic function of
 * the steps' results. `layer` runs the steps directly; cluster mode (`@fibril/cluster`) runs
 * each one as a durable activity (`model/<step>`, `tool/<step>/<callId>`) whose result is
 * journaled, so a workflow replayed after a crash reaches the same state without running a
 * journaled step again. The steps are the embedded `Session`'s too: both go through
 * `loop/ModelStep.ts` and `loop/ToolStep.ts`, so a turn, its usage (estimated when the provider
 * reports none) and a tool call's result or refusal are the same in both runtimes.
 *
 * A step's result is plain data with a Schema (`ModelStep`, `ToolStep`), so a journal can
 * store it and give it back.
 */
import * as Prompt from "effect/ai/Prompt"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Parts from "./internal/parts.ts"
import { ModelCallFailed, type RetryPolicy } from "./loop/CallModel.ts"
import * as ModelSteps from "./loop/ModelStep.ts"
import type { ModelStep } from "./loop/ModelStep.ts"
import * as ToolSteps from "./loop/ToolStep.ts"
import type { StepToolCall, ToolStep } from "./loop/ToolStep.ts"
import { Models, UnknownModel } from "./Models.ts"
import * as OutputSchema from "./OutputSchema.ts"
import * as Permission from "./Permission.ts"
import { ToolRegistry } from "./ToolRegistry.ts"

export { ModelStep } from "./loop/ModelStep.ts"
export { StepToolCall, ToolStep } from "./loop/ToolStep.ts"

/** The step's failure: the model call failed for good, or the agent's model is unknown. */
export const ModelStepError = Schema.Union([ModelCallFailed, UnknownModel])
export type ModelStepError = ModelCallFailed | UnknownModel

export interface ModelStepInput {
  readonly agentId: string
  /** The step's number in this run (0-based): a durable runner names the step after it. */
  readonly step: number
  readonly model: string
  readonly system: Prompt.SystemMessage
  readonly messages: ReadonlyArray<Prompt.Message>
  readonly rules: Permission.Rules
  /** Takes the messages queued for the agent; they are put before the request. */
  readonly takeInbox?: Effect.Effect<ReadonlyArray<string>> | undefined
  /** A typed result (`output_schema`): the final-answer tool or the provider's response format. */
  readonly output?: OutputSchema.Compiled | undefined
}

export interface ToolStepInput {
  readonly agentId: string
  readonly step: number
  readonly role: string
  readonly depth: number
  readonly rules: Permission.Rules
  readonly call: StepToolCall
}

export class AgentSteps extends Context.Service<AgentSteps, {
  readonly model: (input: ModelStepInput) => Effect.Effect<ModelStep, ModelStepError>
  readonly tool: (input: ToolStepInput) => Effect.Effect<ToolStep>
}>()("@fibril/core/AgentSteps") {}

export const userMessage = (text: string): Prompt.Message => Parts.userText(text)

/** The tool message that carries one step's results, in call order. */
export const toolMessage = (results: ReadonlyArray<ToolStep>): Prompt.Message =>
  Parts.toolMessage(results.map((r) => Parts.toolResultPart(r.id, r.name, r.isFailure, r.result)))

/** The steps run directly, in the caller's fiber (a cluster worker runs them inside its journaled steps). */
export const make = (policy: RetryPolicy) =>
  Effect.gen(function*() {
    const models = yield* Models
    const registry = yield* ToolRegistry
    const permission = yield* Permission.Permission
    const model = Effect.fnUntraced(function*(input: ModelStepInput) {
      const languageModel = yield* models.resolve(input.model)
      const delivered = input.takeInbox === undefined ? [] : yield* input.takeInbox
      // Tools that start on first use (MCP servers) must be registered before the request offers them.
      yield* registry.prepare(input.rules)
      return yield* ModelSteps.run({
        languageModel,
        prompt: Prompt.fromMessages([input.system, ...input.messages, ...delivered.map(userMessage)]),
        toolkit: registry.view(input.rules).toolkit,
        output: input.output === undefined
          ? undefined
          : { compiled: input.output, via: OutputSchema.viaOf(languageModel) },
        policy,
        onRetry: () => Effect.void,
        delivered,
        model: input.model
      })
    })
    const tool = (input: ToolStepInput): Effect.Effect<ToolStep> =>
      ToolSteps.runRegistered(
        registry,
        permission,
        { id: input.agentId, role: input.role, depth: input.depth, rules: input.rules },
        input.call
      )
    return AgentSteps.of({ model, tool })
  })

export const layer = (
  policy: RetryPolicy
): Layer.Layer<AgentSteps, never, Models | ToolRegistry | Permission.Permission> =>
  Layer.effect(AgentSteps, make(policy))
