/**
 * Loop step: call the model.
 *
 * One request = the session's system prompt and messages, the tools its view allows, and
 * tool-call resolution disabled (the loop runs tools itself). Each attempt has its own
 * timeout; retryable provider errors and timeouts are retried with exponential backoff,
 * honouring a provider's Retry-After. Everything waits on the Effect Clock, so TestClock
 * drives it in tests.
 *
 * Streamed (`onText` given), the attempt is the whole stream: its text is handed on as it
 * arrives and its parts are gathered into the same response a non-streamed call returns. The
 * attempt's timeout covers the stream from its request to its last part, and a stream that
 * fails part-way is retried as a whole attempt (the `retry` event tells whoever showed its
 * text to drop it).
 */
import * as AiError from "effect/ai/AiError"
import * as LanguageModel from "effect/ai/LanguageModel"
import type * as Prompt from "effect/ai/Prompt"
import * as AiResponse from "effect/ai/Response"
import type * as Tool from "effect/ai/Tool"
import type * as AiToolkit from "effect/ai/Toolkit"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Random from "effect/Random"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as GenAiTrace from "../GenAiTrace.ts"
import { liveClock } from "../internal/sleep.ts"
import { tracing } from "../internal/span.ts"
import * as OutputSchema from "../OutputSchema.ts"

export interface RetryPolicy {
  /** Per-attempt timeout. */
  readonly apiTimeoutSecs: number
  /** Retries after the first attempt. */
  readonly maxRetries: number
  readonly retryBaseMs: number
  readonly retryMaxMs: number
}

export class ModelCallFailed extends Schema.TaggedError<ModelCallFailed>()("ModelCallFailed", {
  attempts: Schema.Int,
  retryable: Schema.Boolean,
  reason: Schema.String
}) {
  override get message() {
    return this.retryable
      ? `model call failed after ${this.attempts} attempts: ${this.reason}`
      : `model call failed (not retryable): ${this.reason}`
  }
}

interface AttemptFailure {
  readonly retryable: boolean
  readonly reason: string
  readonly retryAfterMs: number
}

const describeAiError = (error: AiError.AiError): AttemptFailure => {
  const reason = error.reason
  return {
    retryable: reason.isRetryable,
    reason: `${reason._tag}: ${error.message}`,
    retryAfterMs: reason._tag === "RateLimitError" && reason.retryAfter !== undefined
      ? Duration.toMillis(reason.retryAfter)
      : 0
  }
}

/** Delay before retry `attempt` (1-based): exponential, capped, with jitter in [0.5, 1]. */
export const backoffMs = (policy: RetryPolicy, attempt: number, jitter: number): number =>
  Math.min(policy.retryMaxMs, policy.retryBaseMs * 2 ** (attempt - 1)) * (0.5 + jitter / 2)

export type Toolkit = AiToolkit.WithHandler<Record<string, Tool.Any>>
export type Response = LanguageModel.GenerateTextResponse<Record<string, Tool.Any>, "deferred">

const maxTimerMs = 2 ** 31 - 1

type Part = Response["content"][number]

/**
 * A streamed answer as the response `generateText` would have returned: text and reasoning
 * deltas joined into one part each (in the order they began), every other part as it came.
 * An `error` part fails the attempt (retryable unless the provider's error says otherwise).
 */
const collectStream = (
  stream: Stream.Stream<AiResponse.StreamPart<Record<string, Tool.Any>, "deferred">, AiError.AiError>,
  onText: (delta: string) => void
): Effect.Effect<Response, AiError.AiError | AttemptFailure> =>
  Effect.suspend(() => {
    const content: Array<Part | { readonly joined: "text" | "reasoning"; text: string }> = []
    const open = new Map<string, { readonly joined: "text" | "reasoning"; text: string }>()
    let failure: AiError.AiError | AttemptFailure | undefined
    const join = (joined: "text" | "reasoning", id: string) => {
      let piece = open.get(`${joined}:${id}`)
      if (piece === undefined) {
        piece = { joined, text: "" }
        open.set(`${joined}:${id}`, piece)
        content.push(piece)
      }
      return piece
    }
    return Stream.runForEach(stream, (part) =>
      Effect.sync(() => {
        switch (part.type) {
          case "text-delta":
            join("text", part.id).text += part.delta
            if (part.delta !== "") onText(part.delta)
            break
          case "reasoning-delta":
            join("reasoning", part.id).text += part.delta
            break
          case "error":
            failure ??= AiError.isAiError(part.error)
              ? part.error
              : { retryable: true, reason: `the stream sent an error: ${String(part.error)}`, retryAfterMs: 0 }
            break
          case "text-start":
          case "text-end":
          case "reasoning-start":
          case "reasoning-end":
          case "tool-params-start":
          case "tool-params-delta":
          case "tool-params-end":
            break
          default:
            content.push(part)
        }
      })).pipe(
        Effect.flatMap(() =>
          failure !== undefined
            ? Effect.fail(failure)
            : Effect.succeed(
              new LanguageModel.GenerateTextResponse(content.map((part): Part =>
                "joined" in part ? AiResponse.makePart(part.joined, { text: part.text }) : part
              ))
            )
        )
      )
  })

/**
 * Waits for an attempt's fiber, at most `timeout`: on time, the attempt's exit; late, the
 * attempt is interrupted and `late()` is the failure. On Effect's live clock the wait is one
 * timer, cleared when the call ends (no racing fiber per attempt); on another clock (TestClock)
 * it is a sleep raced with the call, so the clock under test drives it. The waiter interrupted
 * (its agent cancelled, its run ended) interrupts the call and waits for it to stop: the call
 * is not registered as a child of the waiting fiber, so this is where it goes with it.
 */
const awaitWithin = <A, E>(
  call: Fiber.Fiber<A, E>,
  apiTimeoutSecs: number
): Effect.Effect<A, E | AttemptFailure> => {
  // Started at once, a call that needed no wait (a scripted model) is already done: its exit,
  // with no timer and no further scheduler turn (and nothing made for a timeout).
  const done = call.pollUnsafe()
  if (done !== undefined) return done
  const timeout = Duration.seconds(apiTimeoutSecs)
  const late = (): AttemptFailure => ({
    retryable: true,
    reason: `no answer within api_timeout_secs=${apiTimeoutSecs}`,
    retryAfterMs: 0
  })
  return Effect.withFiber((fiber) => {
    if (fiber.getRef(Clock.Clock) !== liveClock) {
      return Effect.onInterrupt(
        Effect.timeoutOrElse(Effect.flatten(Fiber.await(call)), {
          duration: timeout,
          orElse: () => Effect.andThen(Fiber.interrupt(call), Effect.fail(late()))
        }),
        () => Fiber.interrupt(call)
      )
    }
    return Effect.callback<A, E | AttemptFailure>((resume) => {
      const timer = setTimeout(() => {
        remove()
        resume(Effect.andThen(Fiber.interrupt(call), Effect.fail(late())))
      }, Math.min(maxTimerMs, Duration.toMillis(timeout)))
      const remove = call.addObserver((exit) => {
        clearTimeout(timer)
        resume(exit)
      })
      // This fiber interrupted while it waits: the timer goes, and so does the call.
      return Effect.suspend(() => {
        clearTimeout(timer)
        remove()
        return Fiber.interrupt(call)
      })
    })
  })
}

/**
 * Calls the model, retrying as the policy says. Each attempt runs in a fiber of its own, handed
 * to `onAttempt` (the session interrupts it when a delivery asks to cut the step short): an
 * attempt interrupted that way ends the call with that interruption, which is not retried.
 */
export const callModel = (
  model: LanguageModel.LanguageModel,
  prompt: Prompt.Prompt,
  toolkit: Toolkit,
  policy: RetryPolicy,
  onRetry: (attempt: number, reason: string, delayMs: number) => Effect.Effect<void>,
  onAttempt?: (call: Fiber.Fiber<unknown, unknown>) => void,
  onText?: (delta: string) => void
): Effect.Effect<Response, ModelCallFailed> =>
  Effect.withFiber((fiber) => callModelIn(fiber, model, prompt, toolkit, policy, onRetry, onAttempt, onText))

/**
 * `callModel` started in the running `fiber`'s scheduler turn: the first attempt starts now, and
 * a call that is done at once (a scripted or cached answer) is its Exit, which the caller reads
 * where it is (`matchCauseEffectEager`).
 */
export const callModelIn = (
  fiber: Fiber.Fiber<unknown, unknown>,
  model: LanguageModel.LanguageModel,
  prompt: Prompt.Prompt,
  toolkit: Toolkit,
  policy: RetryPolicy,
  onRetry: (attempt: number, reason: string, delayMs: number) => Effect.Effect<void>,
  onAttempt?: (call: Fiber.Fiber<unknown, unknown>) => void,
  onText?: (delta: string) => void,
  output?: OutputSchema.Check,
  modelId?: string
): Effect.Effect<Response, ModelCallFailed> => {
  const typed = output === undefined ? undefined : typedRequest(toolkit, output)
  return callWith(
    fiber,
    model,
    prompt,
    typed?.toolkit ?? toolkit,
    policy,
    onRetry,
    onAttempt,
    onText,
    typed?.format,
    modelId
  )
}

/**
 * A typed result's request: with the provider's structured output, the answer's schema as the
 * request's response format (OutputSchema.ResponseFormat); otherwise the final-answer tool
 * beside the agent's own.
 */
const typedRequest = (toolkit: Toolkit, output: OutputSchema.Check) =>
  output.via === "provider"
    ? { toolkit, format: output.compiled.jsonSchema }
    : {
      toolkit: {
        ...toolkit,
        tools: { ...toolkit.tools, [OutputSchema.finalAnswerTool]: OutputSchema.finalAnswer(output.compiled) }
      },
      format: undefined
    }

const callWith = (
  fiber: Fiber.Fiber<unknown, unknown>,
  model: LanguageModel.LanguageModel,
  prompt: Prompt.Prompt,
  toolkit: Toolkit,
  policy: RetryPolicy,
  onRetry: (attempt: number, reason: string, delayMs: number) => Effect.Effect<void>,
  onAttempt: ((call: Fiber.Fiber<unknown, unknown>) => void) | undefined,
  onText: ((delta: string) => void) | undefined,
  format: OutputSchema.JsonSchema | undefined,
  modelId: string | undefined
): Effect.Effect<Response, ModelCallFailed> => {
  // The toolkit's tools are typed `Tool.Any`, whose parameter-encoding services are `unknown`;
  // ToolRegistry only admits parameter schemas that need no services, so R is really never.
  const request = { prompt, toolkit, disableToolCallResolution: true, toolCallValidation: "deferred" } as const
  const plain = onText === undefined
    ? model.generateText(request) as Effect.Effect<Response, AiError.AiError>
    : collectStream(
      model.streamText(request) as Stream.Stream<
        AiResponse.StreamPart<Record<string, Tool.Any>, "deferred">,
        AiError.AiError
      >,
      onText
    )
  const formatted = format === undefined ? plain : Effect.provideService(plain, OutputSchema.ResponseFormat, format)
  // Each attempt is a `chat {model}` span when a tracer is installed (GenAiTrace).
  const generate = modelId !== undefined && tracing(fiber) ? GenAiTrace.chat(fiber, modelId, formatted) : formatted
  // The provider's error is described where it is caught, not in the attempt's fiber. The
  // attempt's fiber starts at once, in this fiber's context (no `forkChild` and then a
  // `flatMap`); `awaitWithin` takes it down with this one.
  const attempt = (
    current: Fiber.Fiber<unknown, unknown>,
    n: number
  ): Effect.Effect<Response, ModelCallFailed> => {
    const call = Effect.runForkWith(current.context)(generate)
    onAttempt?.(call)
    return Effect.catchEager(awaitWithin(call, policy.apiTimeoutSecs), (error) => retry(error, n))
  }
  const retry = (error: AiError.AiError | AttemptFailure, n: number): Effect.Effect<Response, ModelCallFailed> => {
    const failure = "_tag" in error ? describeAiError(error) : error
    if (!failure.retryable || n > policy.maxRetries) {
      return Effect.fail(
        new ModelCallFailed({ attempts: n, retryable: failure.retryable, reason: failure.reason })
      )
    }
    return Effect.flatMap(Random.next, (jitter) => {
      // Whole milliseconds, as a real clock keeps time: a fractional sleep would move a
      // TestClock to fractional times, which records (integer times) reject.
      const delayMs = Math.round(Math.max(failure.retryAfterMs, backoffMs(policy, n, jitter)))
      return onRetry(n, failure.reason, delayMs).pipe(
        Effect.andThen(Effect.sleep(Duration.millis(delayMs))),
        Effect.andThen(Effect.withFiber((current) => attempt(current, n + 1)))
      )
    })
  }
  return attempt(fiber, 1)
}
