/**
 * OpenAiClient — the official `openai` SDK, wrapped once, at the edge.
 *
 * Everything else in this package talks to the server through this service's Effects and
 * Streams: each call is interruptible (interruption aborts the HTTP request) and fails only
 * with an `AiError` (see OpenAiError). The SDK's own retries are turned off because the agent
 * loop retries, with backoff, per-attempt timeouts and `Retry-After`; retrying in both
 * places would multiply attempts and hide rate limits from the runtime.
 *
 * It works with any server that speaks the Chat Completions API: OpenAI, DeepSeek, vLLM,
 * Ollama, OpenRouter — set `baseURL`.
 */
import * as RateLimiter from "@fibril/core/RateLimiter"
import { redactUrl } from "@fibril/core/Secrets"
import type * as AiError from "effect/ai/AiError"
import * as Clock from "effect/Clock"
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Stream from "effect/Stream"
import type OpenAI from "openai"
import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionCreateParamsNonStreaming,
  ChatCompletionCreateParamsStreaming
} from "openai/resources/chat/completions"
import * as OpenAiError from "./OpenAiError.ts"
import * as OpenAiRateLimit from "./OpenAiRateLimit.ts"

/** Where OpenAI's API lives; the default when no base URL is configured. */
export const defaultBaseURL = "https://api.openai.com/v1"

export interface Options {
  /** Kept `Redacted` until the SDK is constructed; never logged. */
  readonly apiKey: Redacted.Redacted<string>
  /** Base URL including the version prefix, e.g. `http://localhost:8000/v1`. */
  readonly baseURL?: string | undefined
  /** Extra headers sent with every request (e.g. OpenRouter's `HTTP-Referer`). */
  readonly headers?: Readonly<Record<string, string>> | undefined
  /** The SDK's per-request timeout in milliseconds (its default is 10 minutes). */
  readonly timeoutMs?: number | undefined
  /**
   * The `fetch` the SDK sends requests with (default: the global one): a proxy agent,
   * instrumentation, or a canned reply in a benchmark.
   */
  readonly fetch?: ((input: string | URL | Request, init?: RequestInit) => Promise<Response>) | undefined
}

export class OpenAiClient extends Context.Service<OpenAiClient, {
  /**
   * The base URL requests go to (no trailing slash), with any credentials in it (userinfo,
   * `api_key=`…) redacted: safe to print. Only the SDK holds the URL as given.
   */
  readonly baseURL: string
  /** `POST /chat/completions`, non-streaming. */
  readonly createCompletion: (
    body: ChatCompletionCreateParamsNonStreaming
  ) => Effect.Effect<ChatCompletion, AiError.AiError>
  /**
   * `POST /chat/completions` with `stream: true`: the parsed SSE chunks. The request is
   * aborted when the stream ends early, fails or is interrupted.
   */
  readonly streamCompletion: (
    body: ChatCompletionCreateParamsStreaming
  ) => Stream.Stream<ChatCompletionChunk, AiError.AiError>
  /** `GET /models`: the ids the server serves. */
  readonly listModels: Effect.Effect<ReadonlyArray<string>, AiError.AiError>
  /**
   * Any other SDK call, with the interruption signal and the same error mapping. The SDK
   * client itself is not part of the service so that logging the service cannot print the key.
   */
  readonly use: <A>(
    method: string,
    f: (sdk: OpenAI, signal: AbortSignal) => Promise<A>
  ) => Effect.Effect<A, AiError.AiError>
}>()("@fibril/openai/OpenAiClient") {}

const trimSlash = (url: string) => url.replace(/\/+$/, "")

const isObject = (u: unknown): u is object => typeof u === "object" && u !== null

// The SDK returns whatever the body parsed to (or the raw text for a non-JSON content type);
// anything without `choices` cannot be read as a completion.
const hasChoices = (u: unknown): boolean => isObject(u) && "choices" in u && Array.isArray(u.choices)

const modelIds = (page: unknown): ReadonlyArray<string> | undefined => {
  if (!isObject(page) || !("data" in page) || !Array.isArray(page.data)) return undefined
  const ids: Array<string> = []
  for (const entry of page.data) {
    if (isObject(entry) && "id" in entry && typeof entry.id === "string") ids.push(entry.id)
  }
  return ids
}

/**
 * The SDK, imported by a client's first request: about 240 modules and 100 ms that a process
 * which never calls an OpenAI-compatible server (a scripted model, `fibril --help`) does not
 * load, and that `fibril mcp` does not spend before it answers `tools/list` (its client is made
 * at start-up, its first request comes with the first task).
 */
const loadSdk: Effect.Effect<typeof OpenAI> = Effect.promise(() => import("openai")).pipe(
  Effect.map((module) => module.default)
)

/** The SDK's client for `options`. */
const sdkOf = (Sdk: typeof OpenAI, options: Options): OpenAI =>
  new Sdk({
    apiKey: Redacted.value(options.apiKey),
    baseURL: trimSlash(options.baseURL ?? defaultBaseURL),
    // Explicit nulls: otherwise the SDK reads OPENAI_ORG_ID / OPENAI_PROJECT_ID / … from
    // process.env behind the configuration's back.
    organization: null,
    project: null,
    adminAPIKey: null,
    webhookSecret: null,
    maxRetries: 0,
    // Failures come back as AiErrors; the SDK's own console logging would only write into
    // the CLI's live view (an explicit level also overrides OPENAI_LOG from the environment).
    logLevel: "off",
    ...(options.timeoutMs === undefined ? {} : { timeout: options.timeoutMs }),
    ...(options.fetch === undefined ? {} : { fetch: options.fetch }),
    ...(options.headers === undefined ? {} : { defaultHeaders: { ...options.headers } })
  })

/**
 * Builds the client (the SDK is loaded by the first request). Construction does no I/O.
 * Chat completions go through the `RateLimiter` in context (the process's own by default),
 * on the gate of this base URL and key.
 */
export const make = (options: Options): Effect.Effect<OpenAiClient["Service"]> =>
  Effect.gen(function*() {
    const onFirstUse = yield* Effect.cached(Effect.map(loadSdk, (Sdk) => sdkOf(Sdk, options)))
    const limiter = yield* RateLimiter.RateLimiter.useSync((service) => service)
    /** `f` with the SDK client, once it is loaded (the first call loads it). */
    const withSdk = <A, E>(f: (sdk: OpenAI) => Effect.Effect<A, E>) => Effect.flatMap(onFirstUse, f)
    const shownURL = redactUrl(trimSlash(options.baseURL ?? defaultBaseURL))
    const completionsURL = { method: "POST", url: `${shownURL}/chat/completions` }
    const modelsURL = { method: "GET", url: `${shownURL}/models` }
    const gateKey = OpenAiRateLimit.endpointKey(shownURL, Redacted.value(options.apiKey))
    // What the gate learns from a call: the answer's headers, or the 429 it got.
    const outcomeOf = (
      result: RateLimiter.Result<{ readonly response: Response }, AiError.AiError>,
      now: number
    ): RateLimiter.Outcome | undefined =>
      result._tag === "Success"
        ? OpenAiRateLimit.answered(result.value.response.headers, now)
        : OpenAiRateLimit.failed(result.error, now)
    const gated = <A>(
      body: { readonly messages: unknown },
      call: Effect.Effect<{ readonly data: A; readonly response: Response }, AiError.AiError>
    ) => RateLimiter.gate(limiter, gateKey, OpenAiRateLimit.estimateTokens(body), call, outcomeOf)

    const createCompletion = (body: ChatCompletionCreateParamsNonStreaming) =>
      gated(
        body,
        withSdk((sdk) =>
          Effect.tryPromise({
            // The signal is aborted when the fiber is interrupted: the HTTP request is cancelled.
            try: (signal) => sdk.chat.completions.create(body, { signal }).withResponse(),
            catch: (cause) => cause
          })
        ).pipe(Effect.catch(OpenAiError.fail("generateText", completionsURL)))
      ).pipe(
        Effect.map(({ data }) => data),
        Effect.flatMap((completion) =>
          hasChoices(completion) ? Effect.succeed(completion) : Effect.fail(
            OpenAiError.make(
              "generateText",
              OpenAiError.invalidResponse(`${completionsURL.url} answered without choices`)
            )
          )
        )
      )

    const streamCompletion = (body: ChatCompletionCreateParamsStreaming) =>
      Stream.unwrap(Effect.gen(function*() {
        const sdk = yield* onFirstUse
        // Our own controller, aborted when the stream's scope closes (end, failure or
        // interruption): it cancels the request while connecting and while reading the body.
        // The gate's ticket is held until the stream ends: a streamed answer is in flight until then.
        let outcome: RateLimiter.Outcome | undefined
        if (limiter.enabled) {
          const endpoint = limiter.endpoint(gateKey)
          const ticket = yield* endpoint.acquire(OpenAiRateLimit.estimateTokens(body))
          yield* Effect.addFinalizer(() => endpoint.complete(ticket, outcome))
        }
        const controller = new AbortController()
        yield* Effect.addFinalizer(() => Effect.sync(() => controller.abort()))
        const { data: chunks, response } = yield* Effect.tryPromise({
          try: () => sdk.chat.completions.create(body, { signal: controller.signal }).withResponse(),
          catch: (cause) => cause
        }).pipe(
          Effect.catch(OpenAiError.fail("streamText", completionsURL)),
          Effect.tapError((error) =>
            Effect.map(Clock.currentTimeMillis, (now) => void (outcome = OpenAiRateLimit.failed(error, now)))
          )
        )
        outcome = OpenAiRateLimit.answered(response.headers, yield* Clock.currentTimeMillis)
        return Stream.fromAsyncIterable(chunks, (cause) => cause).pipe(
          Stream.catch((cause) => Stream.fromEffect(OpenAiError.fail("streamText", completionsURL)(cause)))
        )
      }))

    const listModels = withSdk((sdk) =>
      Effect.tryPromise({
        try: (signal) => sdk.models.list({ signal }),
        catch: (cause) => cause
      })
    ).pipe(
      Effect.catch(OpenAiError.fail("listModels", modelsURL)),
      Effect.flatMap((page) => {
        const ids = modelIds(page)
        return ids === undefined
          ? Effect.fail(
            OpenAiError.make("listModels", OpenAiError.invalidResponse(`${modelsURL.url} did not list models`))
          )
          : Effect.succeed(ids)
      })
    )

    const use = <A>(method: string, f: (sdk: OpenAI, signal: AbortSignal) => Promise<A>) =>
      withSdk((sdk) => Effect.tryPromise({ try: (signal) => f(sdk, signal), catch: (cause) => cause })).pipe(
        Effect.catch(OpenAiError.fail(method, { method: "SDK", url: shownURL }))
      )

    return OpenAiClient.of({ baseURL: shownURL, createCompletion, streamCompletion, listModels, use })
  })

/**
 * The client for explicit options.
 *
 * @example
 * ```ts
 * OpenAiClient.layer({ apiKey: Redacted.make("sk-…"), baseURL: "https://api.deepseek.com/v1" })
 * ```
 */
export const layer = (options: Options): Layer.Layer<OpenAiClient> => Layer.effect(OpenAiClient, make(options))

/**
 * The client from configuration: `OPENAI_API_KEY` (required, read as `Redacted`) and
 * `OPENAI_BASE_URL` (optional; OpenAI's API by default). Headers and timeout come from code.
 */
export const layerConfig = (
  options: Omit<Options, "apiKey" | "baseURL"> = {}
): Layer.Layer<OpenAiClient, Config.ConfigError> =>
  Layer.effect(
    OpenAiClient,
    Effect.gen(function*() {
      const apiKey = yield* Config.Redacted("OPENAI_API_KEY")
      const baseURL = yield* Config.option(Config.String("OPENAI_BASE_URL"))
      return yield* make({ ...options, apiKey, baseURL: Option.getOrUndefined(baseURL) })
    })
  )
