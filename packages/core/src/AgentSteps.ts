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
 * journaled step again. The embedded `Session` drives the same `AgentLoop` with steps of its
 * own that give the same `ModelStep` (a model call a delivery may cut short, its tool runner
 * with events and the durable transcript's hand-over).
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
import { callModel, ModelCallFailed, type RetryPolicy } from "./loop/CallModel.ts"
import { resolveTurn } from "./loop/ResolveTurn.ts"
import { parseArguments, UnknownTool } from "./loop/RunTools.ts"
import { Models, UnknownModel } from "./Models.ts"
import * as Permission from "./Permission.ts"
import { ToolRegistry } from "./ToolRegistry.ts"
import type { ToolErrorLike } from "./ToolRegistry.ts"
import * as Usage from "./Usage.ts"

export const StepToolCall = Schema.Struct({ id: Schema.String, name: Schema.String, params: Schema.Unknown })
export type StepToolCall = typeof StepToolCall.Type

/** What one model step produced: the input it took from the inbox, then the model's turn. */
export const ModelStep = Schema.Struct({
  /** Messages queued for the agent, delivered (as user messages) before this request. */
  delivered: Schema.Array(Schema.String),
  text: Schema.String,
  toolCalls: Schema.Array(StepToolCall),
  usage: Usage.Usage,
  /** Did the provider report the usage (otherwise it is an estimate of zero here)? */
  usageReported: Schema.Boolean,
  assistant: Prompt.Message
})
export type ModelStep = typeof ModelStep.Type

/** What one tool call produced: its result (a failure is a result the model reads). */
export const ToolStep = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  isFailure: Schema.Boolean,
  result: Schema.Unknown
})
export type ToolStep = typeof ToolStep.Type

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

/** The steps run directly, in the caller's fiber: the embedded runtime. */
export const make = (policy: RetryPolicy) =>
  Effect.gen(function*() {
    const models = yield* Models
    const registry = yield* ToolRegistry
    const permission = yield* Permission.Permission
    const model = Effect.fnUntraced(function*(input: ModelStepInput) {
      const languageModel = yield* models.resolve(input.model)
      const delivered = input.takeInbox === undefined ? [] : yield* input.takeInbox
      const request = Prompt.fromMessages([input.system, ...input.messages, ...delivered.map(userMessage)])
      const response = yield* callModel(
        languageModel,
        request,
        registry.view(input.rules).toolkit,
        policy,
        () => Effect.void
      )
      const turn = resolveTurn(response)
      return {
        delivered,
        text: turn.text,
        toolCalls: turn.toolCalls,
        usage: turn.usage,
        usageReported: turn.usageReported,
        assistant: turn.assistant
      } satisfies ModelStep
    })
    const run = (input: ToolStepInput): Effect.Effect<unknown, ToolErrorLike> => {
      const { call, rules } = input
      const view = registry.view(rules)
      const tool = view.byName.get(call.name)
      if (tool === undefined) {
        return Effect.fail(new UnknownTool({ name: call.name, available: view.tools.map((t) => t.name) }))
      }
      return permission.checkTool(rules, tool).pipe(
        Effect.andThen(parseArguments(tool, call.params)),
        Effect.tap((params) => permission.check(rules, tool, tool.paths(params))),
        Effect.flatMap((params) =>
          tool.handler(params, {
            sessionId: input.agentId,
            callId: call.id,
            role: input.role,
            depth: input.depth,
            rules
          })
        )
      )
    }
    const tool = (input: ToolStepInput): Effect.Effect<ToolStep> =>
      Effect.map(Effect.result(Effect.suspend(() => run(input))), (result) => ({
        id: input.call.id,
        name: input.call.name,
        isFailure: result._tag === "Failure",
        result: result._tag === "Failure"
          ? { error: result.failure._tag, message: result.failure.message }
          : result.success
      }))
    return AgentSteps.of({ model, tool })
  })

export const layer = (
  policy: RetryPolicy
): Layer.Layer<AgentSteps, never, Models | ToolRegistry | Permission.Permission> =>
  Layer.effect(AgentSteps, make(policy))
