/**
 * Loop step: call the model.
 *
 * One request = the session's system prompt and messages, the tools its view allows, and
 * tool-call resolution disabled (the loop runs tools itself). Each attempt has its own
 * timeout; retryable provider errors and timeouts are retried with exponential backoff,
 * honouring a provider's Retry-After. Everything waits on the Effect Clock, so TestClock
 * drives it in tests.
 */
import { Duration, Effect, Random, Schema } from "effect"
import type { AiError, LanguageModel, Prompt, Tool, Toolkit } from "effect/ai"

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

export type Toolkit = Toolkit.WithHandler<Record<string, Tool.Any>>
export type Response = LanguageModel.GenerateTextResponse<Record<string, Tool.Any>, "deferred">

export const callModel = (
  model: LanguageModel.LanguageModel,
  prompt: Prompt.Prompt,
  toolkit: Toolkit,
  policy: RetryPolicy,
  onRetry: (attempt: number, reason: string, delayMs: number) => Effect.Effect<void>
): Effect.Effect<Response, ModelCallFailed> => {
  const timeout = Duration.seconds(policy.apiTimeoutSecs)
  // The toolkit's tools are typed `Tool.Any`, whose parameter-encoding services are `unknown`;
  // ToolRegistry only admits parameter schemas that need no services, so R is really never.
  const generate = model.generateText({
    prompt,
    toolkit,
    disableToolCallResolution: true,
    toolCallValidation: "deferred"
  }) as Effect.Effect<Response, AiError.AiError>
  const attemptOnce: Effect.Effect<Response, AttemptFailure> = generate.pipe(
    Effect.mapError(describeAiError),
    Effect.timeoutOrElse({
      duration: timeout,
      orElse: () =>
        Effect.fail<AttemptFailure>({
          retryable: true,
          reason: `no answer within api_timeout_secs=${policy.apiTimeoutSecs}`,
          retryAfterMs: 0
        })
    })
  )
  const loop = (attempt: number): Effect.Effect<Response, ModelCallFailed> =>
    Effect.catch(attemptOnce, (failure) => {
      if (!failure.retryable || attempt > policy.maxRetries) {
        return Effect.fail(
          new ModelCallFailed({ attempts: attempt, retryable: failure.retryable, reason: failure.reason })
        )
      }
      return Effect.flatMap(Random.next, (jitter) => {
        const delayMs = Math.max(failure.retryAfterMs, backoffMs(policy, attempt, jitter))
        return onRetry(attempt, failure.reason, delayMs).pipe(
          Effect.andThen(Effect.sleep(Duration.millis(delayMs))),
          Effect.andThen(loop(attempt + 1))
        )
      })
    })
  return loop(1)
}
