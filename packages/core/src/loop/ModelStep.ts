/**
 * Loop step: one model step, for both runtimes.
 *
 * The request is sent (CallModel: each attempt in a fiber of its own, with its timeout and
 * retries), the answer is resolved into a turn (ResolveTurn), and a turn whose usage the
 * provider did not report gets an estimate from what was sent and answered (`usageReported`
 * says which it is). The embedded `Session` runs it interruptibly: a delivery that asks to
 * cut the step short interrupts the attempt in flight, and the step then has no turn
 * (`undefined`: the loop takes it again). `AgentSteps.model` (the cluster's journaled step)
 * runs it as is.
 *
 * Its result, `ModelStep`, is plain data with a Schema, so a journal can store it.
 */
import type * as LanguageModel from "effect/ai/LanguageModel"
import * as Prompt from "effect/ai/Prompt"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import * as Schema from "effect/Schema"
import type * as OutputSchema from "../OutputSchema.ts"
import * as Usage from "../Usage.ts"
import { callModelIn, type ModelCallFailed, type Response, type RetryPolicy, type Toolkit } from "./CallModel.ts"
import { resolveTurn } from "./ResolveTurn.ts"
import { StepToolCall } from "./ToolStep.ts"

/** What one model step produced: the input it took from the inbox, then the model's turn. */
export const ModelStep = Schema.Struct({
  /** Messages queued for the agent, delivered (as user messages) before this request. */
  delivered: Schema.Array(Schema.String),
  text: Schema.String,
  toolCalls: Schema.Array(StepToolCall),
  /** The provider's figures, or (`usageReported` false) an estimate from the request and the answer. */
  usage: Usage.Usage,
  usageReported: Schema.Boolean,
  assistant: Prompt.Message
})
export type ModelStep = typeof ModelStep.Type

export interface Request {
  readonly languageModel: LanguageModel.LanguageModel
  /** The whole request, system message first: an estimate counts all of it. */
  readonly prompt: Prompt.Prompt
  readonly toolkit: Toolkit
  readonly policy: RetryPolicy
  readonly onRetry: (attempt: number, reason: string, delayMs: number) => Effect.Effect<void>
  /** The queued input this request carries (the step reports it as delivered). */
  readonly delivered: ReadonlyArray<string>
  /** Streams the answer, handing its text on as it arrives. */
  readonly onText?: ((delta: string) => void) | undefined
  /** Called with the model id the answer reports (`response-metadata`), if it reports one. */
  readonly onModelId?: ((modelId: string) => void) | undefined
  /** A typed result: the child is offered the final-answer tool, or its provider the answer's schema. */
  readonly output?: OutputSchema.Check | undefined
  /** The model id the agent runs on: the `chat {model}` span's (GenAiTrace). */
  readonly model?: string | undefined
}

/** How a caller may cut a step short: it is handed each attempt, and says afterwards whether it cut it. */
export interface Cuttable {
  /** Each attempt's fiber as it starts; `undefined` once the call has ended. */
  readonly onAttempt: (call: Fiber.Fiber<unknown, unknown> | undefined) => void
  /** Read once when the call ends: was it interrupted on purpose? */
  readonly takeCut: () => boolean
}

/** The model id a provider reports in an answer, if any. */
const reportedModel = (response: Response): string | undefined => {
  for (const part of response.content) {
    if (part.type === "response-metadata" && part.modelId !== undefined && part.modelId !== "") return part.modelId
  }
  return undefined
}

/** The answer as a step: the turn resolved, and a usage the provider did not report estimated. */
export const stepOf = (request: Request, response: Response): ModelStep => {
  if (request.onModelId !== undefined) {
    const modelId = reportedModel(response)
    if (modelId !== undefined) request.onModelId(modelId)
  }
  const turn = resolveTurn(response)
  return {
    delivered: request.delivered,
    text: turn.text,
    toolCalls: turn.toolCalls,
    usage: turn.usageReported ? turn.usage : Usage.estimate(request.prompt.content, turn.assistant),
    usageReported: turn.usageReported,
    assistant: turn.assistant
  }
}

const call = (
  fiber: Fiber.Fiber<unknown, unknown>,
  request: Request,
  onAttempt: ((call: Fiber.Fiber<unknown, unknown>) => void) | undefined
) =>
  callModelIn(
    fiber,
    request.languageModel,
    request.prompt,
    request.toolkit,
    request.policy,
    request.onRetry,
    onAttempt,
    request.onText,
    request.output,
    request.model
  )

/** One model step, started in the running fiber (`AgentSteps.model`). */
export const run = (request: Request): Effect.Effect<ModelStep, ModelCallFailed> =>
  Effect.withFiber((fiber) => Effect.mapEager(call(fiber, request, undefined), (response) => stepOf(request, response)))

/**
 * One model step, started in the running `fiber`'s scheduler turn, that `cuttable` may cut
 * short: then it has no turn (`undefined`).
 */
export const runCuttable = (
  fiber: Fiber.Fiber<unknown, unknown>,
  request: Request,
  cuttable: Cuttable
): Effect.Effect<ModelStep | undefined, ModelCallFailed> =>
  Effect.matchCauseEffectEager(call(fiber, request, cuttable.onAttempt), {
    onSuccess: (response) => {
      cuttable.onAttempt(undefined)
      cuttable.takeCut()
      return Effect.succeed(stepOf(request, response))
    },
    onFailure: (cause) => {
      cuttable.onAttempt(undefined)
      return cuttable.takeCut() && Cause.hasInterruptsOnly(cause) ? Effect.succeed(undefined) : Effect.failCause(cause)
    }
  })
