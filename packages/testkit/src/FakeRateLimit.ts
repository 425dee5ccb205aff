/**
 * FakeRateLimit — the rate-limit mode of the FakeOpenAiServer: requests and tokens per window
 * (a minute by default, as real providers count; tests and benchmarks shrink the window) and,
 * optionally, a cap on concurrent requests. Over a limit the server answers 429 with the headers
 * OpenAI sends; every answer carries `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`.
 *
 * Windows are fixed and start with the first request. A request is charged, when it arrives,
 * the tokens OpenAiRateLimit estimates for it (a quarter of its messages' JSON length plus its
 * `max_tokens`), as providers charge their own estimate against a tokens-per-minute budget.
 */
import type * as Http from "node:http"

export interface RateLimitOptions {
  readonly requestsPerWindow?: number | undefined
  readonly tokensPerWindow?: number | undefined
  /** The window's length (default 60 000 ms: per minute). */
  readonly windowMs?: number | undefined
  /** Requests answered at once; one more is a 429 (with budget left, and no `retry-after`). */
  readonly maxConcurrent?: number | undefined
}

export interface RateLimitStats {
  readonly admitted: number
  /** 429s sent by the limits. */
  readonly rejected: number
  /** The most requests answered at once. */
  readonly peakConcurrent: number
}

export type Admission =
  | {
    readonly admitted: true
    /** The budgets as the answer, sent at `now`, reports them. */
    readonly headers: (now: number) => Record<string, string>
    readonly done: () => void
  }
  | { readonly admitted: false; readonly headers: Record<string, string>; readonly message: string }

/** A reset as OpenAI writes it: `250ms`, `1.5s`, `6m0s`. */
export const formatReset = (ms: number): string => {
  if (ms < 1000) return `${Math.max(0, Math.ceil(ms))}ms`
  if (ms < 60_000) return `${Math.round(ms) / 1000}s`
  const minutes = Math.floor(ms / 60_000)
  return `${minutes}m${Math.round(ms - minutes * 60_000) / 1000}s`
}

/** The tokens charged for a request body (see the module header). */
export const chargeOf = (body: unknown): number => {
  if (typeof body !== "object" || body === null) return 0
  const messages = "messages" in body ? body.messages : undefined
  const max = "max_completion_tokens" in body && typeof body.max_completion_tokens === "number"
    ? body.max_completion_tokens
    : "max_tokens" in body && typeof body.max_tokens === "number"
    ? body.max_tokens
    : 0
  return Math.ceil((JSON.stringify(messages)?.length ?? 0) / 4) + max
}

export const make = (options: RateLimitOptions) => {
  const windowMs = options.windowMs ?? 60_000
  let origin: number | undefined
  let window = -1
  let requests = 0
  let tokens = 0
  let inFlight = 0
  const stats = { admitted: 0, rejected: 0, peakConcurrent: 0 }

  /** Moves to the window `now` is in (its counts start at zero); its start. */
  const advance = (now: number): number => {
    origin ??= now
    const current = Math.floor((now - origin) / windowMs)
    if (current !== window) {
      window = current
      requests = 0
      tokens = 0
    }
    return origin + current * windowMs
  }

  const headersAt = (now: number): Record<string, string> => {
    const start = advance(now)
    const reset = formatReset(start + windowMs - now)
    const headers: Record<string, string> = {}
    if (options.requestsPerWindow !== undefined) {
      headers["x-ratelimit-limit-requests"] = String(options.requestsPerWindow)
      headers["x-ratelimit-remaining-requests"] = String(Math.max(0, options.requestsPerWindow - requests))
      headers["x-ratelimit-reset-requests"] = reset
    }
    if (options.tokensPerWindow !== undefined) {
      headers["x-ratelimit-limit-tokens"] = String(options.tokensPerWindow)
      headers["x-ratelimit-remaining-tokens"] = String(Math.max(0, options.tokensPerWindow - tokens))
      headers["x-ratelimit-reset-tokens"] = reset
    }
    return headers
  }

  const admit = (charge: number, now: number): Admission => {
    const start = advance(now)
    const overRequests = options.requestsPerWindow !== undefined && requests + 1 > options.requestsPerWindow
    const overTokens = options.tokensPerWindow !== undefined && tokens + charge > options.tokensPerWindow
    if (overRequests || overTokens) {
      stats.rejected++
      const waitMs = start + windowMs - now
      return {
        admitted: false,
        headers: {
          ...headersAt(now),
          "retry-after-ms": String(Math.ceil(waitMs)),
          "retry-after": String(Math.ceil(waitMs / 1000))
        },
        message: overRequests
          ? `Rate limit reached for requests: limit ${options.requestsPerWindow} per ${windowMs} ms.`
          : `Rate limit reached for tokens: limit ${options.tokensPerWindow} per ${windowMs} ms, requested ${charge}.`
      }
    }
    if (options.maxConcurrent !== undefined && inFlight >= options.maxConcurrent) {
      stats.rejected++
      return {
        admitted: false,
        headers: headersAt(now),
        message: `Too many concurrent requests: limit ${options.maxConcurrent}.`
      }
    }
    requests++
    tokens += charge
    inFlight++
    stats.admitted++
    stats.peakConcurrent = Math.max(stats.peakConcurrent, inFlight)
    let done = false
    return {
      admitted: true,
      headers: headersAt,
      done: () => {
        if (!done) inFlight--
        done = true
      }
    }
  }

  // The headers each admitted answer will carry, by response: stamped when it is sent.
  const pending = new WeakMap<Http.ServerResponse, (now: number) => Record<string, string>>()

  /**
   * Admits the request `res` answers (undefined), or says the 429 to send. An admitted request
   * counts as in flight until its response closes.
   */
  const admitResponse = (res: Http.ServerResponse, body: unknown, now: number) => {
    const admission = admit(chargeOf(body), now)
    if (!admission.admitted) return admission
    pending.set(res, admission.headers)
    res.on("close", admission.done)
    return undefined
  }

  /** Sets the budgets on an admitted answer about to be sent (a reset counts from then). */
  const stamp = (res: Http.ServerResponse, now: number) => {
    for (const [name, value] of Object.entries(pending.get(res)?.(now) ?? {})) res.setHeader(name, value)
  }

  return { admit, admitResponse, stamp, stats: (): RateLimitStats => ({ ...stats }) }
}
