/**
 * OpenAiError — how a failed call to an OpenAI-compatible server becomes an `AiError`.
 *
 * The agent loop retries exactly the errors whose `reason.isRetryable` is true and waits at
 * least a rate limit's `retryAfter`, so choosing the reason here *is* the retry policy:
 *
 * | what happened                                      | reason                  | retried |
 * |----------------------------------------------------|-------------------------|---------|
 * | 429 (`insufficient_quota`: the account is empty)    | RateLimitError (QuotaExhaustedError) | yes (no) |
 * | 408, 409, 5xx                                      | InternalProviderError   | yes     |
 * | timeout, connection refused/reset, a cut-off body  | NetworkError            | yes     |
 * | a body that is not JSON                            | InvalidOutputError      | yes     |
 * | JSON that is not a chat completion                 | InvalidResponseError    | no      |
 * | 400, 404 (e.g. unknown model), 413, 422            | InvalidRequestError     | no      |
 * | 401 / 403                                          | AuthenticationError     | no      |
 *
 * The SDK's own retries are off (see OpenAiClient), so every failure arrives here once.
 *
 * Every URL and message that goes into an error passes through `@fibril/core/Secrets`
 * first: a key written into the base URL (`https://user:KEY@host/v1`) would otherwise be
 * quoted by fetch's own error ("Request cannot be constructed from a URL that includes
 * credentials: …") and reach logs, records and spans.
 */
import { redactText, redactUrl } from "@fibril/core/Secrets"
import * as AiError from "effect/ai/AiError"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
// The SDK's error classes alone (three small modules): the client itself, and the rest of the
// SDK, are loaded only when a client is made (OpenAiClient.make).
import * as OpenAI from "openai/core/error"

/** The request that failed, for `NetworkError` and error descriptions. */
export interface RequestInfo {
  readonly method: string
  readonly url: string
}

const MODULE = "OpenAiModel"

/**
 * The wait a server asks for, from `retry-after-ms` (OpenAI's, milliseconds) or else
 * `Retry-After` (seconds, or an HTTP date measured against `now`).
 */
export const parseRetryAfter = (headers: Headers | undefined, now: number): Duration.Duration | undefined => {
  if (headers === undefined) return undefined
  const ms = headers.get("retry-after-ms")
  if (ms !== null) {
    const value = Number(ms.trim())
    if (ms.trim() !== "" && Number.isFinite(value) && value >= 0) return Duration.millis(value)
  }
  const header = headers.get("retry-after")
  if (header === null || header.trim() === "") return undefined
  const text = header.trim()
  if (/^\d+(\.\d+)?$/.test(text)) return Duration.millis(Number(text) * 1000)
  const date = Date.parse(text)
  return Number.isNaN(date) ? undefined : Duration.millis(Math.max(0, date - now))
}

const headersRecord = (headers: Headers | undefined): Record<string, string> => {
  const record: Record<string, string> = {}
  headers?.forEach((value, key) => {
    record[key] = value
  })
  return record
}

const jsonText = (value: unknown): string | undefined => {
  try {
    return JSON.stringify(value)
  } catch {
    return undefined
  }
}

const stringField = (value: unknown, key: string): string | undefined => {
  if (typeof value !== "object" || value === null || !(key in value)) return undefined
  const field: unknown = Reflect.get(value, key)
  return typeof field === "string" ? field : typeof field === "number" ? String(field) : undefined
}

// What the server said about the error, kept as provider metadata for logs and the CLI.
const metadataOf = (error: OpenAI.APIError) => ({
  openai: {
    requestId: error.requestID ?? null,
    code: error.code ?? null,
    type: error.type ?? null,
    param: error.param ?? null
  }
})

const describe = (error: OpenAI.APIError, request: RequestInfo): string => {
  const message = stringField(error.error, "message") ?? error.message
  return redactText(`${request.method} ${request.url} → ${error.status ?? "stream"}: ${message}`)
}

const fromStatus = (
  error: OpenAI.APIError,
  status: number,
  request: RequestInfo,
  now: number
): AiError.AiErrorReason => {
  const description = describe(error, request)
  const metadata = metadataOf(error)
  const body = jsonText(error.error)
  const http = {
    response: { status, headers: headersRecord(error.headers) },
    ...(body === undefined ? {} : { body })
  }
  if (status === 429) {
    // OpenAI answers 429 both for "slow down" and for "the account has no credit"; only the
    // first goes away by waiting.
    if (error.code === "insufficient_quota") return new AiError.QuotaExhaustedError({ metadata, http })
    const retryAfter = parseRetryAfter(error.headers, now)
    return new AiError.RateLimitError({ ...(retryAfter === undefined ? {} : { retryAfter }), metadata, http })
  }
  if (status === 401) return new AiError.AuthenticationError({ kind: "InvalidKey", description, metadata, http })
  if (status === 403) {
    return new AiError.AuthenticationError({ kind: "InsufficientPermissions", description, metadata, http })
  }
  // 408 and 409 are what the SDK itself would retry: a request that may well succeed again.
  if (status >= 500 || status === 408 || status === 409) {
    return new AiError.InternalProviderError({ description, metadata, http })
  }
  if (status === 400 || status === 404 || status === 413 || status === 422) {
    return new AiError.InvalidRequestError({
      description,
      ...(error.param ? { parameter: error.param } : {}),
      metadata,
      http
    })
  }
  return new AiError.UnknownError({ description, metadata, http })
}

// An `error` event inside an SSE stream: there is no status, only the payload's type/code.
const fromStreamedError = (error: OpenAI.APIError, request: RequestInfo): AiError.AiErrorReason => {
  const description = describe(error, request)
  const metadata = metadataOf(error)
  if (error.code === "rate_limit_exceeded" || error.type === "rate_limit_error") {
    return new AiError.RateLimitError({ metadata })
  }
  if (error.type === "invalid_request_error") return new AiError.InvalidRequestError({ description, metadata })
  return new AiError.InternalProviderError({ description, metadata })
}

const NETWORK_CODES = /^(E[A-Z]+|UND_ERR_[A-Z_]+)$/

// fetch (undici) reports a refused or reset connection, or a body cut off mid-way, as a
// TypeError ("fetch failed", "terminated") whose cause carries a system error code.
const isTransportError = (cause: unknown): boolean => {
  let current: unknown = cause
  for (let depth = 0; depth < 5 && typeof current === "object" && current !== null; depth++) {
    const code = stringField(current, "code")
    if (code !== undefined && NETWORK_CODES.test(code)) return true
    if (current instanceof TypeError && (current.message === "terminated" || current.message === "fetch failed")) {
      return true
    }
    current = "cause" in current ? current.cause : undefined
  }
  return false
}

const causeMessage = (cause: unknown): string => {
  const parts: Array<string> = []
  let current: unknown = cause
  for (let depth = 0; depth < 5 && current instanceof Error; depth++) {
    parts.push(current.message)
    current = current.cause
  }
  return redactText(parts.length === 0 ? String(cause) : parts.join(": "))
}

// The underlying error is kept only as its name and redacted message: its own message (and
// its cause's) may quote the URL with the credentials in it.
const network = (request: RequestInfo, description: string, cause: unknown) =>
  new AiError.NetworkError({
    reason: "TransportError",
    method: request.method,
    url: redactUrl(request.url),
    description,
    cause: { name: cause instanceof Error ? cause.name : typeof cause, message: causeMessage(cause) }
  })

/**
 * The reason for a failure thrown by the SDK (or by fetch underneath it). `now` (epoch
 * millis) resolves a `Retry-After` given as an HTTP date.
 */
export const reasonOf = (cause: unknown, request: RequestInfo, now: number): AiError.AiErrorReason => {
  if (AiError.isAiErrorReason(cause)) return cause
  // Subclasses before their parents: a timeout is a connection error is an APIError.
  if (cause instanceof OpenAI.APIConnectionTimeoutError) return network(request, "the request timed out", cause)
  // Interruption by the runtime also aborts the request, but then nobody reads this error;
  // an abort that reaches here came from elsewhere (a proxy, the platform) and may not recur.
  if (cause instanceof OpenAI.APIUserAbortError) return network(request, "the request was aborted", cause)
  if (cause instanceof OpenAI.APIConnectionError) {
    return network(request, `connection error: ${causeMessage(cause)}`, cause)
  }
  if (cause instanceof OpenAI.APIError) {
    return cause.status === undefined
      ? fromStreamedError(cause, request)
      : fromStatus(cause, cause.status, request, now)
  }
  // A garbled body is usually a proxy or a truncated response: worth one more try.
  if (cause instanceof SyntaxError) {
    return new AiError.InvalidOutputError({
      description: redactText(`the server's answer is not valid JSON: ${cause.message}`)
    })
  }
  if (isTransportError(cause)) return network(request, `connection lost: ${causeMessage(cause)}`, cause)
  return new AiError.UnknownError({
    description: redactText(`${request.method} ${request.url} failed: ${causeMessage(cause)}`)
  })
}

/** A well-formed answer that is not what the API promises (no choices, no model list). */
export const invalidResponse = (description: string): AiError.AiErrorReason =>
  new AiError.InvalidResponseError({ description })

/** The `AiError` for a failure of `method` (an `effect/ai` method name). */
export const make = (method: string, reason: AiError.AiErrorReason): AiError.AiError =>
  AiError.make({ module: MODULE, method, reason })

/** Fails with the `AiError` for `cause`, reading the clock for `Retry-After` dates. */
export const fail = (method: string, request: RequestInfo) => (cause: unknown): Effect.Effect<never, AiError.AiError> =>
  Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.fail(make(method, reasonOf(cause, request, now))))
