/**
 * OpenAiRateLimit — how an OpenAI-compatible endpoint's calls go through core's `RateLimiter`:
 * which gate a client uses, what a request costs, and what an answer (or a 429) says.
 *
 * The gate is per endpoint: the base URL and the API key's identity (a digest, never the key),
 * so two clients on one account share a budget and two accounts on one server do not.
 */
import * as RateLimiter from "@fibril/core/RateLimiter"
import type * as AiError from "effect/ai/AiError"
import * as Duration from "effect/Duration"
import { createHash } from "node:crypto"

/** The gate's key for a base URL (already redacted) and an API key. */
export const endpointKey = (baseURL: string, apiKey: string): string =>
  `${baseURL}#${createHash("sha256").update(apiKey).digest("hex").slice(0, 12)}`

/**
 * The tokens a request will be charged before its answer: about four characters per token of
 * the messages as sent, plus the most it may answer. Providers charge their own estimate of the
 * same against a tokens-per-minute budget when the request arrives.
 */
export const estimateTokens = (
  body: {
    readonly messages: unknown
    readonly max_tokens?: number | null
    readonly max_completion_tokens?: number | null
  }
): number =>
  Math.ceil((JSON.stringify(body.messages)?.length ?? 0) / 4) + (body.max_completion_tokens ?? body.max_tokens ?? 0)

/** What a successful answer's headers say. */
export const answered = (headers: Headers, now: number): RateLimiter.Outcome => ({
  rateLimited: false,
  headers: RateLimiter.readHeaders((name) => headers.get(name) ?? undefined, now)
})

/**
 * What a failure says: a 429 (not an exhausted quota) with its headers; any other failure
 * teaches the gate nothing.
 */
export const failed = (error: AiError.AiError, now: number): RateLimiter.Outcome | undefined => {
  const reason = error.reason
  if (reason._tag !== "RateLimitError") return undefined
  const headers = reason.http?.response?.headers ?? {}
  const read = RateLimiter.readHeaders((name) => {
    const value = headers[name]
    return typeof value === "string" ? value : undefined
  }, now)
  // A 429 from a stream's error event has no headers, but may still say how long to wait.
  return {
    rateLimited: true,
    headers: read.retryAt === undefined && reason.retryAfter !== undefined
      ? { ...read, retryAt: now + Duration.toMillis(reason.retryAfter) }
      : read
  }
}
