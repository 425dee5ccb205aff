/**
 * RateLimiter — one gate per provider endpoint, shared by every agent of a process (and, through
 * `SharedState`, by a cluster's workers), so a fan-out of sub-agents waits for the provider's
 * budget instead of being answered 429 and failing.
 *
 * A call `acquire`s a ticket before its request and `complete`s it with what the answer said.
 * The gate admits a call when all of these allow it:
 * - the endpoint's "not before" time (a 429's `retry-after`, or a pause when it said nothing);
 * - the request and token budgets the last answers reported (`x-ratelimit-remaining-*` until
 *   `x-ratelimit-reset-*`), minus what was admitted since;
 * - a concurrency window that adapts: it doubles per round-trip until the first 429 (slow
 *   start), then a 429 that no budget explains cuts it to the concurrency the server just
 *   showed it accepts (the "learned limit"), or halves it when nothing tells; past the learned
 *   limit it probes one more only after a run of successes, so steady state costs one 429 per
 *   probe rather than one per round-trip.
 *
 * Providers that send no headers are paced by the window alone. The limiter does not retry:
 * the agent loop's retry (CallModel) does, and its next attempt waits here.
 *
 * The default, a `Context.Reference`, is one limiter per process with default options: every
 * `OpenAiClient` in the process shares it without wiring. `layer(options)` replaces it (turned
 * off, tuned, or backed by a cluster store).
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as RateHeaders from "./internal/rateHeaders.ts"

export { parseResetMs, type RateHeaders as Headers } from "./internal/rateHeaders.ts"

/** What the endpoint's shared row holds (cluster workers read and write it through their store). */
export interface SharedRow {
  /** Epoch millis before which no worker calls the endpoint. */
  readonly notBefore: number
  /** The concurrency last learned from a 429 (undefined: none learned). */
  readonly learnedLimit: number | undefined
}

/**
 * Where limiters of several processes meet: a row per endpoint. Read at most once per
 * `syncMs` before a call, written after a 429: never a statement per call.
 */
export interface SharedState {
  readonly read: (endpoint: string) => Effect.Effect<SharedRow | undefined>
  readonly write: (endpoint: string, row: SharedRow) => Effect.Effect<void>
}

export interface Options {
  /** Off: calls go straight through (default on). */
  readonly enabled?: boolean | undefined
  /** Concurrent calls per endpoint before anything is learned (default 4). */
  readonly initialConcurrency?: number | undefined
  /** The most concurrent calls per endpoint, whatever is learned (default 64). */
  readonly maxConcurrency?: number | undefined
  /** How long the endpoint pauses after a 429 that says neither when nor why (default 1000 ms). */
  readonly pauseMs?: number | undefined
  readonly shared?: SharedState | undefined
  /** How often a shared row is read, at most (default 1000 ms). */
  readonly syncMs?: number | undefined
}

/** What an answer said, for `complete`. */
export interface Outcome {
  /** The server answered 429 (slow down; not an exhausted quota). */
  readonly rateLimited: boolean
  readonly headers: RateHeaders.RateHeaders
}

/** An admitted call. */
export interface Ticket {
  readonly sentAt: number
  /** Calls in flight with this one, itself included. */
  readonly inFlight: number
  readonly cost: number
  /** The window generation it was sent in (a header from an older one is stale). */
  readonly generation: number
  /** Concurrency cuts made before it was sent. */
  readonly cuts: number
}

/** What a test or benchmark reads of an endpoint. */
export interface Stats {
  readonly limit: number
  readonly learnedLimit: number | undefined
  readonly inFlight: number
  readonly notBefore: number
  readonly admitted: number
  readonly rateLimited: number
}

export interface Endpoint {
  readonly key: string
  /** Waits until a call costing `tokens` may be sent. */
  readonly acquire: (tokens: number) => Effect.Effect<Ticket>
  /** The call ended (answered, failed, or was interrupted: `undefined`). */
  readonly complete: (ticket: Ticket, outcome: Outcome | undefined) => Effect.Effect<void>
  readonly stats: () => Stats
}

export interface Service {
  readonly enabled: boolean
  /** The endpoint's gate, made on first use. */
  readonly endpoint: (key: string) => Endpoint
}

// ---------------------------------------------------------------------------------------------
// Budgets

interface Window {
  limit: number | undefined
  remaining: number | undefined
  resetAt: number | undefined
}

const newWindow = (): Window => ({ limit: undefined, remaining: undefined, resetAt: undefined })

// --- Admission ---

/** When a call costing `cost` can go under this budget: now (undefined) or a time to wait for. */
const budgetWait = (window: Window, cost: number, now: number, pauseMs: number): number | undefined => {
  if (window.remaining === undefined || window.remaining >= cost) return undefined
  // A call larger than the whole budget can never fit: the server decides.
  if (window.limit !== undefined && cost > window.limit) return undefined
  return window.resetAt ?? now + pauseMs
}

const clampLimit = (value: number, max: number) => Math.max(1, Math.min(max, value))

interface Resolved {
  readonly initialConcurrency: number
  readonly maxConcurrency: number
  readonly pauseMs: number
  readonly syncMs: number
  readonly shared: SharedState | undefined
}

/** One endpoint's gate. */
const makeEndpoint = (key: string, options: Resolved): Endpoint => {
  const requests = newWindow()
  const tokens = newWindow()
  let limit = clampLimit(options.initialConcurrency, options.maxConcurrency)
  let learnedLimit: number | undefined
  let successesAtLimit = 0
  let inFlight = 0
  let inFlightTokens = 0
  let notBefore = 0
  let cuts = 0
  let generation = 0
  let admitted = 0
  let rateLimited = 0
  let syncedAt = Number.NEGATIVE_INFINITY
  let syncing = false
  let changed = Deferred.makeUnsafe<void>()

  const signal = () => {
    const done = changed
    changed = Deferred.makeUnsafe<void>()
    Deferred.doneUnsafe(done, Effect.void)
  }

  /** Budgets whose reset time passed are full again (their limit, when known). */
  const roll = (now: number) => {
    for (const window of [requests, tokens]) {
      if (window.resetAt !== undefined && now >= window.resetAt) {
        window.remaining = window.limit
        window.resetAt = undefined
        generation++
      }
    }
  }

  const adopt = (row: SharedRow) => {
    notBefore = Math.max(notBefore, row.notBefore)
    if (row.learnedLimit !== undefined) {
      learnedLimit = learnedLimit === undefined ? row.learnedLimit : Math.min(learnedLimit, row.learnedLimit)
      limit = Math.min(limit, learnedLimit)
    }
  }

  // Read the shared row when it is older than `syncMs`; one fiber reads, the others go on with
  // what is known (a worker a second late to learn of a 429 costs at most one more 429).
  const sync = (now: number): Effect.Effect<void> => {
    const shared = options.shared
    if (shared === undefined || syncing || now - syncedAt < options.syncMs) return Effect.void
    syncing = true
    syncedAt = now
    return shared.read(key).pipe(
      Effect.map((row) => row === undefined ? undefined : adopt(row)),
      Effect.ensuring(Effect.sync(() => void (syncing = false)))
    )
  }

  const acquire = (cost: number): Effect.Effect<Ticket> =>
    Effect.flatMap(Clock.currentTimeMillis, (now) =>
      Effect.flatMap(sync(now), () => {
        roll(now)
        const waitUntil = Math.max(
          notBefore,
          budgetWait(requests, 1, now, options.pauseMs) ?? 0,
          budgetWait(tokens, cost, now, options.pauseMs) ?? 0
        )
        // Until then, or until an answer changes what is known (a budget read as spent may not be).
        if (waitUntil > now) {
          return Effect.andThen(Effect.raceFirst(Effect.sleep(waitUntil - now), Deferred.await(changed)), acquire(cost))
        }
        if (inFlight >= Math.floor(limit)) return Effect.andThen(Deferred.await(changed), acquire(cost))
        inFlight++
        inFlightTokens += cost
        admitted++
        if (requests.remaining !== undefined) requests.remaining -= 1
        if (tokens.remaining !== undefined) tokens.remaining -= cost
        return Effect.succeed<Ticket>({ sentAt: now, inFlight, cost, generation, cuts })
      }))

  // --- What answers say ---

  // The server counted what it had received when it answered; the calls still in flight may
  // not be in that count, so they are taken off it (when they were, this is short by them until
  // their own answers, which count them, come back). Taken as is rather than as a minimum, a
  // later answer corrects an earlier one either way.
  const observe = (window: Window, budget: RateHeaders.Budget, ticket: Ticket, now: number, pending: number) => {
    if (budget.limit !== undefined) window.limit = budget.limit
    // A budget that has already reset, or that describes a window rolled over since the call
    // was sent, says nothing about the current one.
    if (budget.remaining === undefined || ticket.generation !== generation) return
    if (budget.resetAt !== undefined && budget.resetAt <= now) return
    window.remaining = budget.remaining - pending
    if (budget.resetAt !== undefined) window.resetAt = budget.resetAt
  }

  /** The 429 came with a budget at zero: it is explained, and the window waits for the reset. */
  const exhausted = (headers: RateHeaders.RateHeaders, cost: number) =>
    (headers.requests.remaining !== undefined && headers.requests.remaining < 1) ||
    (headers.tokens.remaining !== undefined && headers.tokens.remaining < cost)

  const onRateLimited = (ticket: Ticket, headers: RateHeaders.RateHeaders, now: number): boolean => {
    rateLimited++
    const explained = exhausted(headers, ticket.cost)
    const told = headers.retryAt !== undefined
    if (told) notBefore = Math.max(notBefore, headers.retryAt ?? 0)
    if (explained) {
      for (const [window, budget] of [[requests, headers.requests], [tokens, headers.tokens]] as const) {
        if (budget.remaining !== undefined && budget.resetAt !== undefined && budget.resetAt > now) {
          window.remaining = budget.remaining
          window.resetAt = budget.resetAt
        }
      }
      return told
    }
    // One cut per congestion event: calls sent before the last cut were judged by it.
    if (ticket.cuts !== cuts) return told
    cuts++
    successesAtLimit = 0
    const saidBudget = headers.requests.remaining !== undefined || headers.tokens.remaining !== undefined
    if (saidBudget) {
      // Budget left, yet refused: a concurrency limit, and the server just showed the level it accepts.
      learnedLimit = Math.max(1, ticket.inFlight - 1)
      limit = Math.min(limit, learnedLimit)
    } else {
      limit = Math.max(1, Math.floor(limit / 2))
      learnedLimit = Math.floor(limit)
      if (!told) notBefore = Math.max(notBefore, now + options.pauseMs)
    }
    return true
  }

  const onSuccess = (ticket: Ticket) => {
    // Grow only when the window was what held calls back: an idle endpoint learns nothing.
    if (ticket.inFlight < Math.floor(limit)) return
    if (learnedLimit === undefined) {
      limit = Math.min(options.maxConcurrency, limit + 1)
    } else if (limit < learnedLimit) {
      limit = Math.min(learnedLimit, limit + 1 / limit)
    } else if (++successesAtLimit >= 4 * learnedLimit) {
      // A probe: the limit may have been raised (or the other workers left).
      successesAtLimit = 0
      learnedLimit = Math.min(options.maxConcurrency, learnedLimit + 1)
      limit = learnedLimit
    }
  }

  const complete = (ticket: Ticket, outcome: Outcome | undefined): Effect.Effect<void> =>
    Effect.flatMap(Clock.currentTimeMillis, (now) => {
      inFlight--
      inFlightTokens -= ticket.cost
      let write = false
      if (outcome !== undefined) {
        observe(requests, outcome.headers.requests, ticket, now, inFlight)
        observe(tokens, outcome.headers.tokens, ticket, now, inFlightTokens)
        if (outcome.rateLimited) write = onRateLimited(ticket, outcome.headers, now)
        else onSuccess(ticket)
      }
      signal()
      const shared = options.shared
      return write && shared !== undefined ? shared.write(key, { notBefore, learnedLimit }) : Effect.void
    })

  const stats = (): Stats => ({ limit, learnedLimit, inFlight, notBefore, admitted, rateLimited })

  return { key, acquire, complete, stats }
}

// ---------------------------------------------------------------------------------------------
// The service

/** The defaults `make` fills in. */
export const defaults = {
  enabled: true,
  initialConcurrency: 4,
  maxConcurrency: 64,
  pauseMs: 1000,
  syncMs: 1000
} as const

/** The options `[rate_limit]` sets (FibrilConfig's settings). */
export const optionsFrom = (settings: {
  readonly rateLimit: {
    readonly enabled: boolean
    readonly initialConcurrency: number
    readonly maxConcurrency: number
  }
}): Options => ({ ...settings.rateLimit })

/** A limiter: one gate per endpoint key, made on first use. */
export const make = (options: Options = {}): Service => {
  const resolved = {
    enabled: options.enabled ?? defaults.enabled,
    initialConcurrency: options.initialConcurrency ?? defaults.initialConcurrency,
    maxConcurrency: options.maxConcurrency ?? defaults.maxConcurrency,
    pauseMs: options.pauseMs ?? defaults.pauseMs,
    syncMs: options.syncMs ?? defaults.syncMs,
    shared: options.shared
  }
  const endpoints = new Map<string, Endpoint>()
  return {
    enabled: resolved.enabled,
    endpoint: (key) => {
      let found = endpoints.get(key)
      if (found === undefined) {
        found = makeEndpoint(key, resolved)
        endpoints.set(key, found)
      }
      return found
    }
  }
}

/** The process's limiter: one per process with the defaults, unless a layer provides another. */
export const RateLimiter: Context.Reference<Service> = Context.Reference<Service>(
  "@fibril/core/RateLimiter",
  { defaultValue: () => make() }
)

/**
 * A limiter for everything built under this layer (a fresh one: no state shared with the
 * process default).
 *
 * @example
 * ```ts
 * OpenAiModels.layer({ defaultModel }).pipe(
 *   Layer.provide(OpenAiClient.layer({ apiKey, baseURL })),
 *   Layer.provide(RateLimiter.layer({ initialConcurrency: 8 }))
 * )
 * ```
 */
export const layer = (options: Options = {}): Layer.Layer<never> => Layer.succeed(RateLimiter, make(options))

/** Reads `x-ratelimit-*` and `retry-after*` headers (by lower-case name) of an answer received at `now`. */
export const readHeaders: (get: RateHeaders.HeaderLookup, now: number) => RateHeaders.RateHeaders = RateHeaders.read

/** No headers. */
export const noHeaders: RateHeaders.RateHeaders = RateHeaders.none

/** A call's result as `gate`'s `outcome` reads it. */
export type Result<A, E> = { readonly _tag: "Success"; readonly value: A } | {
  readonly _tag: "Failure"
  readonly error: E
}

/**
 * Runs `call` through the endpoint's gate: waits for a ticket, then completes it with what
 * `outcome` reads from the call's result (interrupted or died: nothing). Off, `call` runs as is.
 */
export const gate = <A, E, R>(
  service: Service,
  key: string,
  tokens: number,
  call: Effect.Effect<A, E, R>,
  outcome: (result: Result<A, E>, now: number) => Outcome | undefined
): Effect.Effect<A, E, R> => {
  if (!service.enabled) return call
  const endpoint = service.endpoint(key)
  return Effect.acquireUseRelease(
    endpoint.acquire(tokens),
    () => call,
    (ticket, exit) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        if (Exit.isSuccess(exit)) {
          return endpoint.complete(ticket, outcome({ _tag: "Success", value: exit.value }, now))
        }
        const error = Cause.findErrorOption(exit.cause)
        return endpoint.complete(
          ticket,
          Option.isSome(error) ? outcome({ _tag: "Failure", error: error.value }, now) : undefined
        )
      })
  )
}
