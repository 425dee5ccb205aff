/**
 * What a provider says about its rate limits, read from a response's headers: OpenAI's
 * `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` (also sent by Groq, DeepSeek, vLLM
 * behind LiteLLM, OpenRouter…) and the `retry-after-ms` / `retry-after` of a 429.
 */

/** One budget (requests or tokens) as the last answer described it. */
export interface Budget {
  readonly limit: number | undefined
  readonly remaining: number | undefined
  /** Epoch millis at which the budget is full again, if said. */
  readonly resetAt: number | undefined
}

export interface RateHeaders {
  readonly requests: Budget
  readonly tokens: Budget
  /** Epoch millis before which the server asked not to be called again (`retry-after*`). */
  readonly retryAt: number | undefined
}

/** A header by its lower-case name. */
export type HeaderLookup = (name: string) => string | undefined

const number = (text: string | undefined): number | undefined => {
  if (text === undefined || text.trim() === "") return undefined
  const value = Number(text.trim())
  return Number.isFinite(value) && value >= 0 ? value : undefined
}

const unitMs: Record<string, number> = { h: 3_600_000, m: 60_000, s: 1000, ms: 1 }

/**
 * A reset as OpenAI writes it (`1s`, `6m0s`, `20ms`, `1h2m3.5s`), or a bare number of seconds.
 * Undefined when unreadable.
 */
export const parseResetMs = (text: string | undefined): number | undefined => {
  if (text === undefined) return undefined
  const trimmed = text.trim()
  const bare = number(trimmed)
  if (bare !== undefined) return bare * 1000
  const parts = [...trimmed.matchAll(/(\d+(?:\.\d+)?)(ms|h|m|s)/g)]
  if (parts.length === 0 || parts.map((part) => part[0]).join("") !== trimmed) return undefined
  let total = 0
  for (const part of parts) total += Number(part[1]) * (unitMs[part[2] ?? "s"] ?? 1000)
  return total
}

const budget = (get: HeaderLookup, kind: "requests" | "tokens", now: number): Budget => {
  const reset = parseResetMs(get(`x-ratelimit-reset-${kind}`))
  return {
    limit: number(get(`x-ratelimit-limit-${kind}`)),
    remaining: number(get(`x-ratelimit-remaining-${kind}`)),
    resetAt: reset === undefined ? undefined : now + reset
  }
}

/** `retry-after-ms` (milliseconds) first, else `retry-after` (seconds or an HTTP date), as epoch millis. */
export const retryAt = (get: HeaderLookup, now: number): number | undefined => {
  const ms = number(get("retry-after-ms"))
  if (ms !== undefined) return now + ms
  const header = get("retry-after")?.trim()
  if (header === undefined || header === "") return undefined
  const seconds = number(header)
  if (seconds !== undefined) return now + seconds * 1000
  const date = Date.parse(header)
  return Number.isNaN(date) ? undefined : Math.max(now, date)
}

/** Every rate-limit header of an answer received at `now`. */
export const read = (get: HeaderLookup, now: number): RateHeaders => ({
  requests: budget(get, "requests", now),
  tokens: budget(get, "tokens", now),
  retryAt: retryAt(get, now)
})

/** No headers at all (a provider that sends none, or a failure with no response). */
export const none: RateHeaders = {
  requests: { limit: undefined, remaining: undefined, resetAt: undefined },
  tokens: { limit: undefined, remaining: undefined, resetAt: undefined },
  retryAt: undefined
}
