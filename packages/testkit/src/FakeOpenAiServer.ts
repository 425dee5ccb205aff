/**
 * FakeOpenAiServer — a real OpenAI-compatible HTTP server on 127.0.0.1 that answers from a
 * ScriptedModel script, so provider code can be tested through the real `openai` SDK with
 * nothing mocked below HTTP.
 *
 * `POST /v1/chat/completions` (JSON, or SSE with `stream: true`) turns the request's messages
 * back into an effect/ai `Prompt`, asks `ScriptedModel.make(script)` for the answer and renders
 * it as the API would: text, `tool_calls` (arguments as JSON text, or a script's raw string
 * as is), finish reason and usage. `GET /v1/models` lists `models`.
 *
 * On top of the script, per-request faults (matched by request number or a predicate):
 * HTTP errors with `Retry-After`, a hang, slow SSE chunks, a stream held part-way until the test
 * releases it, a connection cut mid-answer, a body
 * that is not JSON, tool-call arguments that are not JSON, and DeepSeek-style
 * `reasoning_content`. A simulated prefix cache reports cached prompt tokens for the longest
 * message prefix it has already seen. Every request is recorded, and so is every connection
 * the client closed before its answer was complete (an interrupted call must show up there).
 *
 * Answers pass through the real clock (script `delay_ms`, `slowChunksMs`): use `it.live`.
 */
import * as AiError from "effect/ai/AiError"
import * as Prompt from "effect/ai/Prompt"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FiberSet from "effect/FiberSet"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Http from "node:http"
import * as FakeRateLimit from "./FakeRateLimit.ts"
import * as ScriptedModel from "./ScriptedModel.ts"

// ---------------------------------------------------------------------------------------------
// Options

/**
 * What to do to one request. Fields combine (e.g. `slowChunksMs` with `badToolArguments`);
 * several matching rules are merged, later ones winning.
 */
export interface Fault {
  /** Answer with this HTTP error status instead (429, 500, 400, 401, 404, …). */
  readonly status?: number
  /** With `status`: a `Retry-After` header in seconds. */
  readonly retryAfterSecs?: number
  /** With `status`: OpenAI's `retry-after-ms` header. */
  readonly retryAfterMs?: number
  /** With `status`: a raw `Retry-After` value (e.g. an HTTP date). */
  readonly retryAfter?: string
  /**
   * With `status`: the error body's `code` (e.g. `insufficient_quota`); `null` sends
   * `"code": null`, as some OpenAI-compatible servers do. Unset, a 429 says `rate_limit_exceeded`.
   */
  readonly code?: string | null
  /** Never answer; the connection stays open until the client gives up. */
  readonly hang?: boolean
  /** Wait this long before each SSE chunk (or before a JSON answer). */
  readonly slowChunksMs?: number
  /** Cut the connection after `afterChunks` SSE chunks (default 2), or halfway through a JSON body. */
  readonly disconnectMidStream?: boolean
  readonly afterChunks?: number
  /**
   * Hold the SSE stream after this many chunks (the role chunk counts as one, then one per
   * text delta) until `release` completes: what a client shows before the rest is sent.
   */
  readonly holdAfterChunks?: number
  /** With `holdAfterChunks`: the rest of the stream is sent when this completes (a Deferred's await). */
  readonly release?: Effect.Effect<void>
  /** A body (or an SSE event) that is not JSON. */
  readonly malformedJson?: boolean
  /** Tool-call arguments that are not valid JSON (the JSON text cut short). */
  readonly badToolArguments?: boolean
  /** DeepSeek-style `reasoning_content` before the answer. */
  readonly reasoningContent?: string
}

/** A chat-completions request as a fault predicate sees it. */
export interface ChatRequest {
  /** 1-based number among all chat-completions requests, whichever script rule answers them. */
  readonly n: number
  readonly body: ChatBody
}

export interface FaultRule {
  /** The request number (1-based, see `ChatRequest.n`), or a predicate. */
  readonly on: number | ((request: ChatRequest) => boolean)
  readonly fault: Fault
  /** Apply at most this many times (default: every match). */
  readonly times?: number
}

export interface Options {
  readonly script: ScriptedModel.ScriptInput
  readonly faults?: ReadonlyArray<FaultRule>
  /**
   * The ids `GET /v1/models` lists (default `["scripted"]`); a chat request for another id is a
   * 404, as on a real server. `{ status }` makes the listing fail and accepts any id.
   */
  readonly models?: ReadonlyArray<string> | { readonly status: number }
  /** When set, requests without `Authorization: Bearer <apiKey>` get a 401. */
  readonly apiKey?: string
  /** How usage reports cached tokens: OpenAI's `prompt_tokens_details` or DeepSeek's fields. */
  readonly dialect?: "openai" | "deepseek"
  /** Characters per SSE text delta (default 8). */
  readonly textChunkChars?: number
  /** Characters per SSE tool-call arguments delta (default 5). */
  readonly argumentChunkChars?: number
  /** Interleave the argument deltas of parallel tool calls (round-robin) instead of one after another. */
  readonly interleaveToolCalls?: boolean
  /** Rate-limit mode: requests and tokens per window, concurrent requests (see FakeRateLimit). */
  readonly rateLimit?: FakeRateLimit.RateLimitOptions
}

export interface RecordedRequest {
  readonly method: string
  readonly path: string
  readonly headers: Readonly<Record<string, string>>
  /** The parsed JSON body, the raw text if it is not JSON, or `undefined` if empty. */
  readonly body: unknown
}

export interface FakeOpenAiServer {
  /** The base URL including `/v1`, for `baseURL`. */
  readonly url: string
  readonly port: number
  /** Every request, in arrival order (a live view). */
  readonly requests: ReadonlyArray<RecordedRequest>
  /** How many connections the client closed before their answer was complete. */
  readonly closed: Effect.Effect<number>
  /** Waits until at least `count` connections were closed by the client. */
  readonly awaitClosed: (count: number) => Effect.Effect<void>
  /** What the rate-limit mode admitted and refused (zeros without `rateLimit`). */
  readonly rateLimitStats: () => FakeRateLimit.RateLimitStats
}

// ---------------------------------------------------------------------------------------------
// The request body

const Content = Schema.NullOr(Schema.Union([
  Schema.String,
  Schema.Array(Schema.Struct({ type: Schema.String, text: Schema.optionalKey(Schema.String) }))
]))

const RequestToolCall = Schema.Struct({
  id: Schema.String,
  type: Schema.optionalKey(Schema.String),
  function: Schema.Struct({ name: Schema.String, arguments: Schema.String })
})

const RequestMessage = Schema.Struct({
  role: Schema.Literals(["system", "developer", "user", "assistant", "tool"]),
  content: Schema.optionalKey(Content),
  tool_calls: Schema.optionalKey(Schema.NullOr(Schema.Array(RequestToolCall))),
  tool_call_id: Schema.optionalKey(Schema.String),
  reasoning_content: Schema.optionalKey(Schema.NullOr(Schema.String))
})

const RequestTool = Schema.Struct({
  type: Schema.String,
  function: Schema.Struct({
    name: Schema.String,
    description: Schema.optionalKey(Schema.String),
    parameters: Schema.optionalKey(Schema.Unknown)
  })
})

/** The part of a chat-completions body the server reads (other fields are allowed and ignored). */
export const ChatBody = Schema.Struct({
  model: Schema.String,
  messages: Schema.Array(RequestMessage),
  tools: Schema.optionalKey(Schema.Array(RequestTool)),
  stream: Schema.optionalKey(Schema.NullOr(Schema.Boolean)),
  stream_options: Schema.optionalKey(Schema.NullOr(Schema.Struct({
    include_usage: Schema.optionalKey(Schema.NullOr(Schema.Boolean))
  })))
})
export type ChatBody = typeof ChatBody.Type
type RequestMessage = typeof RequestMessage.Type

const textOf = (content: typeof Content.Type | undefined): string =>
  content === undefined || content === null
    ? ""
    : typeof content === "string"
    ? content
    : content.map((part) => part.text ?? "").join("")

const parseJson = (text: string): { readonly ok: true; readonly value: unknown } | { readonly ok: false } => {
  try {
    return { ok: true, value: JSON.parse(text) }
  } catch {
    return { ok: false }
  }
}

/** The request's messages as the Prompt a provider would have been given. */
export const toPrompt = (messages: ReadonlyArray<RequestMessage>): Prompt.Prompt => {
  const names = new Map<string, string>()
  const out: Array<Prompt.Message> = []
  let results: Array<Prompt.ToolResultPart> = []
  const flush = () => {
    if (results.length > 0) out.push(Prompt.makeMessage("tool", { content: results }))
    results = []
  }
  for (const message of messages) {
    if (message.role !== "tool") flush()
    switch (message.role) {
      case "system":
      case "developer":
        out.push(Prompt.makeMessage("system", { content: textOf(message.content) }))
        break
      case "user":
        out.push(Prompt.makeMessage("user", { content: [Prompt.makePart("text", { text: textOf(message.content) })] }))
        break
      case "assistant": {
        const content: Array<Prompt.AssistantMessagePart> = []
        if (message.reasoning_content) content.push(Prompt.makePart("reasoning", { text: message.reasoning_content }))
        const text = textOf(message.content)
        if (text !== "") content.push(Prompt.makePart("text", { text }))
        for (const call of message.tool_calls ?? []) {
          names.set(call.id, call.function.name)
          const parsed = parseJson(call.function.arguments)
          content.push(Prompt.makePart("tool-call", {
            id: call.id,
            name: call.function.name,
            // Malformed arguments stay the raw string, as the runtime keeps them.
            params: parsed.ok ? parsed.value : call.function.arguments,
            providerExecuted: false
          }))
        }
        out.push(Prompt.makeMessage("assistant", { content }))
        break
      }
      case "tool": {
        // Consecutive tool messages are the results of one turn: one Prompt tool message.
        const id = message.tool_call_id ?? ""
        const text = textOf(message.content)
        const parsed = parseJson(text)
        results.push(Prompt.makePart("tool-result", {
          id,
          name: names.get(id) ?? "",
          // The API carries no failure flag; a result is a failure only to whoever reads it.
          isFailure: false,
          result: parsed.ok ? parsed.value : text,
          providerExecuted: false
        }))
        break
      }
    }
  }
  flush()
  return Prompt.fromMessages(out)
}

// ---------------------------------------------------------------------------------------------
// The prefix cache

// FNV-1a, continued message by message: the hash of every prefix in one pass.
const fnv = (hash: number, text: string): number => {
  let h = hash
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return h >>> 0
}

interface Prefixes {
  readonly keys: ReadonlyArray<string>
  readonly chars: ReadonlyArray<number>
  readonly total: number
}

const prefixesOf = (messages: ReadonlyArray<unknown>): Prefixes => {
  const keys: Array<string> = []
  const chars: Array<number> = []
  let hash = 0x811c9dc5
  let length = 0
  for (const message of messages) {
    const text = JSON.stringify(message) ?? ""
    hash = fnv(fnv(hash, text), "\u0000")
    length += text.length
    keys.push(`${hash.toString(16)}:${length}`)
    chars.push(length)
  }
  return { keys, chars, total: length }
}

// ---------------------------------------------------------------------------------------------
// Rendering

interface RenderedCall {
  readonly id: string
  readonly name: string
  readonly arguments: string
}

interface Answer {
  readonly id: string
  readonly model: string
  readonly created: number
  readonly text: string | undefined
  readonly reasoning: string | undefined
  readonly calls: ReadonlyArray<RenderedCall>
  readonly usage: Record<string, unknown>
}

const finishReason = (answer: Answer) => answer.calls.length > 0 ? "tool_calls" : "stop"

const completionJson = (answer: Answer) => ({
  id: answer.id,
  object: "chat.completion",
  created: answer.created,
  model: answer.model,
  choices: [{
    index: 0,
    message: {
      role: "assistant",
      content: answer.text ?? null,
      refusal: null,
      ...(answer.reasoning === undefined ? {} : { reasoning_content: answer.reasoning }),
      ...(answer.calls.length === 0 ? {} : {
        tool_calls: answer.calls.map((call) => ({
          id: call.id,
          type: "function",
          function: { name: call.name, arguments: call.arguments }
        }))
      })
    },
    logprobs: null,
    finish_reason: finishReason(answer)
  }],
  usage: answer.usage
})

const slices = (text: string, size: number): Array<string> => {
  const out: Array<string> = []
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size))
  return out
}

const chunkJson = (answer: Answer, delta: Record<string, unknown>, finish: string | null = null) => ({
  id: answer.id,
  object: "chat.completion.chunk",
  created: answer.created,
  model: answer.model,
  choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }]
})

const streamChunks = (answer: Answer, options: Options, includeUsage: boolean): Array<unknown> => {
  const chunks: Array<unknown> = [chunkJson(answer, { role: "assistant", content: "" })]
  const textSize = Math.max(1, options.textChunkChars ?? 8)
  const argSize = Math.max(1, options.argumentChunkChars ?? 5)
  for (const piece of slices(answer.reasoning ?? "", textSize)) {
    chunks.push(chunkJson(answer, { reasoning_content: piece }))
  }
  for (const piece of slices(answer.text ?? "", textSize)) chunks.push(chunkJson(answer, { content: piece }))
  // The first piece of each call carries its id and name; the arguments follow in small pieces.
  const pieces = answer.calls.map((call, index) => [
    { index, id: call.id, type: "function", function: { name: call.name, arguments: "" } },
    ...slices(call.arguments, argSize).map((args) => ({ index, function: { arguments: args } }))
  ])
  if (options.interleaveToolCalls === true) {
    const longest = Math.max(0, ...pieces.map((p) => p.length))
    for (let i = 0; i < longest; i++) {
      for (const call of pieces) {
        const piece = call[i]
        if (piece !== undefined) chunks.push(chunkJson(answer, { tool_calls: [piece] }))
      }
    }
  } else {
    for (const call of pieces) for (const piece of call) chunks.push(chunkJson(answer, { tool_calls: [piece] }))
  }
  chunks.push(chunkJson(answer, {}, finishReason(answer)))
  if (includeUsage) {
    chunks.push({
      id: answer.id,
      object: "chat.completion.chunk",
      created: answer.created,
      model: answer.model,
      choices: [],
      usage: answer.usage
    })
  }
  return chunks
}

const errorBody = (status: number, message: string, code?: string | null) => ({
  error: {
    message,
    type: status === 429 ? "rate_limit_error" : status >= 500 ? "server_error" : "invalid_request_error",
    param: null,
    code: code !== undefined ? code : status === 429 ? "rate_limit_exceeded" : status === 401 ? "invalid_api_key" : null
  }
})

// ---------------------------------------------------------------------------------------------
// The server

interface ErrorAnswer {
  readonly status: number
  readonly body: unknown
  readonly headers: Readonly<Record<string, string>>
}

// A script's failure as the HTTP error a real server would send for it.
const fromAiError = (error: AiError.AiError): ErrorAnswer => {
  const reason = error.reason
  switch (reason._tag) {
    case "RateLimitError": {
      const ms = reason.retryAfter === undefined ? undefined : Duration.toMillis(reason.retryAfter)
      return {
        status: 429,
        body: errorBody(429, error.message),
        headers: ms === undefined ? {} : { "retry-after-ms": String(ms), "retry-after": String(Math.ceil(ms / 1000)) }
      }
    }
    case "InvalidRequestError":
      return { status: 400, body: errorBody(400, reason.description ?? error.message), headers: {} }
    default:
      return { status: 500, body: errorBody(500, error.message), headers: {} }
  }
}

/** Usage as the API reports it, cached tokens in the dialect's fields. */
const usageJson = (
  dialect: Options["dialect"],
  input: number,
  output: number,
  cached: number
): Record<string, unknown> =>
  dialect === "deepseek"
    ? {
      prompt_tokens: input,
      completion_tokens: output,
      total_tokens: input + output,
      prompt_cache_hit_tokens: cached,
      prompt_cache_miss_tokens: input - cached
    }
    : {
      prompt_tokens: input,
      completion_tokens: output,
      total_tokens: input + output,
      prompt_tokens_details: { cached_tokens: cached },
      completion_tokens_details: { reasoning_tokens: 0 }
    }

const headersOf = (req: Http.IncomingMessage): Record<string, string> => {
  const out: Record<string, string> = {}
  for (const [key, value] of Object.entries(req.headers)) {
    if (value !== undefined) out[key] = Array.isArray(value) ? value.join(", ") : value
  }
  return out
}

const readBody = (req: Http.IncomingMessage): Effect.Effect<string> =>
  Effect.callback<string>((resume) => {
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => void chunks.push(chunk))
    req.on("end", () => resume(Effect.succeed(Buffer.concat(chunks).toString("utf8"))))
    // A request that breaks off has no body to answer; the close handler records it.
    req.on("error", () => resume(Effect.succeed(Buffer.concat(chunks).toString("utf8"))))
  })

const listen = (server: Http.Server): Effect.Effect<number> =>
  Effect.callback<number>((resume) => {
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      resume(Effect.succeed(typeof address === "object" && address !== null ? address.port : 0))
    })
  })

const shutdown = (server: Http.Server): Effect.Effect<void> =>
  Effect.callback<void>((resume) => {
    server.close(() => resume(Effect.void))
    // Hanging and keep-alive connections would keep `close` waiting forever.
    server.closeAllConnections()
  })

/**
 * Starts the server; it stops when the scope closes.
 *
 * @example
 * ```ts
 * const server = yield* FakeOpenAiServer.start({
 *   script: { rules: [{ turns: [{ text: "hello" }] }] },
 *   faults: [{ on: 1, fault: { status: 429, retryAfterSecs: 2 } }]
 * })
 * const client = new OpenAI({ apiKey: "test", baseURL: server.url, maxRetries: 0 })
 * ```
 */
export const start = (options: Options): Effect.Effect<FakeOpenAiServer, never, Scope.Scope> =>
  Effect.gen(function*() {
    const model = yield* ScriptedModel.make(options.script)
    const run = yield* FiberSet.makeRuntime<never, void, never>()
    const requests: Array<RecordedRequest> = []
    const seenPrefixes = new Set<string>()
    const faultUses = new Map<FaultRule, number>()
    const cutByServer = new WeakSet<Http.ServerResponse>()
    const waiters: Array<{ readonly count: number; readonly done: Deferred.Deferred<void> }> = []
    const limits = options.rateLimit === undefined ? undefined : FakeRateLimit.make(options.rateLimit)
    const stamp = (res: Http.ServerResponse) => Effect.map(Clock.currentTimeMillis, (now) => limits?.stamp(res, now))
    let chats = 0
    let closedByClient = 0
    let stopping = false
    const models = options.models ?? [ScriptedModel.modelId]
    const listed: ReadonlyArray<string> | undefined = "status" in models ? undefined : models
    const listingStatus = "status" in models ? models.status : 200

    const faultFor = (request: ChatRequest): Fault => {
      let merged: Fault = {}
      for (const rule of options.faults ?? []) {
        const matches = typeof rule.on === "number" ? rule.on === request.n : rule.on(request)
        const used = faultUses.get(rule) ?? 0
        if (!matches || (rule.times !== undefined && used >= rule.times)) continue
        faultUses.set(rule, used + 1)
        merged = { ...merged, ...rule.fault }
      }
      return merged
    }

    const onClientClose = () => {
      closedByClient++
      for (const waiter of waiters) if (closedByClient >= waiter.count) Deferred.doneUnsafe(waiter.done, Effect.void)
    }

    const send = (res: Http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) =>
      Effect.sync(() => {
        const text = JSON.stringify(body)
        res.writeHead(status, { "content-type": "application/json", ...headers })
        res.end(text)
      })

    const sendError = (res: Http.ServerResponse, error: ErrorAnswer) =>
      send(res, error.status, error.body, error.headers)

    const cut = (res: Http.ServerResponse) =>
      Effect.sync(() => {
        cutByServer.add(res)
        res.destroy()
      })

    // Remembers this request's prefixes; returns the characters of the longest one seen before.
    const cachedChars = (messages: ReadonlyArray<unknown>): { readonly cached: number; readonly total: number } => {
      const prefixes = prefixesOf(messages)
      let cached = 0
      prefixes.keys.forEach((key, i) => {
        if (seenPrefixes.has(key)) cached = prefixes.chars[i] ?? cached
      })
      for (const key of prefixes.keys) seenPrefixes.add(key)
      return { cached, total: prefixes.total }
    }

    const answer = (request: ChatRequest, rawMessages: ReadonlyArray<unknown>, fault: Fault) =>
      Effect.gen(function*() {
        const prompt = toPrompt(request.body.messages)
        const response = yield* model.generateText({
          prompt,
          disableToolCallResolution: true,
          toolCallValidation: "deferred"
        })
        const calls = response.toolCalls.map((call): RenderedCall => {
          const text = typeof call.params === "string" ? call.params : JSON.stringify(call.params) ?? "{}"
          // Cut short: `{"path":"a.ts"}` becomes `{"path":"a.ts"`.
          return { id: call.id, name: call.name, arguments: fault.badToolArguments === true ? text.slice(0, -1) : text }
        })
        const input = response.usage.inputTokens.total ?? 0
        const output = response.usage.outputTokens.total ?? 0
        const scripted = response.usage.inputTokens.cacheRead ?? 0
        // The cache covers the share of the prompt (by characters) already seen; a script's
        // explicit `cached` wins.
        const seen = cachedChars(rawMessages)
        const cached = scripted > 0
          ? Math.min(scripted, input)
          : seen.total === 0
          ? 0
          : Math.floor(input * seen.cached / seen.total)
        const now = yield* Clock.currentTimeMillis
        return {
          id: `chatcmpl-fake-${request.n}`,
          model: request.body.model,
          created: Math.floor(now / 1000),
          text: response.text === "" ? undefined : response.text,
          reasoning: fault.reasoningContent,
          calls,
          usage: usageJson(options.dialect, input, output, cached)
        } satisfies Answer
      })

    const sendJsonAnswer = (res: Http.ServerResponse, result: Answer, fault: Fault) =>
      Effect.gen(function*() {
        if (fault.slowChunksMs !== undefined) yield* Effect.sleep(Duration.millis(fault.slowChunksMs))
        const text = fault.malformedJson === true
          ? `{"id":"${result.id}","object":"chat.completion","choices":[{"index":0,`
          : JSON.stringify(completionJson(result))
        yield* stamp(res)
        if (fault.disconnectMidStream === true) {
          yield* Effect.sync(() => {
            res.writeHead(200, { "content-type": "application/json", "content-length": String(text.length) })
            res.write(text.slice(0, Math.floor(text.length / 2)))
          })
          return yield* cut(res)
        }
        yield* Effect.sync(() => {
          res.writeHead(200, { "content-type": "application/json" })
          res.end(text)
        })
      })

    const sendStream = (res: Http.ServerResponse, result: Answer, fault: Fault, includeUsage: boolean) =>
      Effect.gen(function*() {
        const chunks = streamChunks(result, options, includeUsage)
        yield* stamp(res)
        yield* Effect.sync(() => {
          res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
          res.flushHeaders()
        })
        const cutAt = fault.disconnectMidStream === true ? Math.max(0, fault.afterChunks ?? 2) : undefined
        for (const [i, chunk] of chunks.entries()) {
          if (cutAt === i) return yield* cut(res)
          if (fault.holdAfterChunks === i) yield* fault.release ?? Effect.never
          if (fault.slowChunksMs !== undefined) yield* Effect.sleep(Duration.millis(fault.slowChunksMs))
          const data = fault.malformedJson === true && i === 1
            ? `{"id":"${result.id}","choices":[`
            : JSON.stringify(chunk)
          yield* Effect.sync(() => void res.write(`data: ${data}\n\n`))
        }
        yield* Effect.sync(() => res.end("data: [DONE]\n\n"))
      })

    const chat = (res: Http.ServerResponse, text: string) =>
      Effect.gen(function*() {
        const n = ++chats
        const json = parseJson(text)
        if (!json.ok) return yield* send(res, 400, errorBody(400, "the body is not JSON"))
        const decoded = Schema.decodeUnknownExit(ChatBody)(json.value)
        if (Exit.isFailure(decoded)) {
          return yield* send(res, 400, errorBody(400, `invalid request: ${Cause.pretty(decoded.cause)}`))
        }
        const request: ChatRequest = { n, body: decoded.value }
        if (listed !== undefined && !listed.includes(request.body.model)) {
          return yield* send(
            res,
            404,
            errorBody(
              404,
              `The model \`${request.body.model}\` does not exist or you do not have access to it.`,
              "model_not_found"
            )
          )
        }
        const fault = faultFor(request)
        if (fault.status !== undefined) {
          const headers: Record<string, string> = {}
          if (fault.retryAfterSecs !== undefined) headers["retry-after"] = String(fault.retryAfterSecs)
          if (fault.retryAfterMs !== undefined) headers["retry-after-ms"] = String(fault.retryAfterMs)
          if (fault.retryAfter !== undefined) headers["retry-after"] = fault.retryAfter
          return yield* send(
            res,
            fault.status,
            errorBody(fault.status, `injected fault: HTTP ${fault.status}`, fault.code),
            headers
          )
        }
        if (fault.hang === true) return yield* Effect.never
        const refused = limits?.admitResponse(res, json.value, yield* Clock.currentTimeMillis)
        if (refused !== undefined) return yield* send(res, 429, errorBody(429, refused.message), refused.headers)
        // The prefix cache hashes the messages exactly as sent, not as decoded.
        const raw = json.value
        const rawMessages: ReadonlyArray<unknown> =
          typeof raw === "object" && raw !== null && "messages" in raw && Array.isArray(raw.messages)
            ? raw.messages
            : []
        const result = yield* Effect.result(answer(request, rawMessages, fault))
        if (result._tag === "Failure") return yield* sendError(res, fromAiError(result.failure))
        return request.body.stream === true
          ? yield* sendStream(res, result.success, fault, request.body.stream_options?.include_usage === true)
          : yield* sendJsonAnswer(res, result.success, fault)
      })

    const handle = (req: Http.IncomingMessage, res: Http.ServerResponse) =>
      Effect.gen(function*() {
        const text = yield* readBody(req)
        const path = new URL(req.url ?? "/", "http://127.0.0.1").pathname
        const parsed = parseJson(text)
        const headers = headersOf(req)
        requests.push({
          method: req.method ?? "GET",
          path,
          headers,
          body: text === "" ? undefined : parsed.ok ? parsed.value : text
        })
        if (options.apiKey !== undefined && headers["authorization"] !== `Bearer ${options.apiKey}`) {
          return yield* send(res, 401, errorBody(401, "Incorrect API key provided."))
        }
        if (req.method === "GET" && path === "/v1/models") {
          return listed !== undefined
            ? yield* send(res, 200, {
              object: "list",
              data: listed.map((id) => ({ id, object: "model", created: 0, owned_by: "fibril-testkit" }))
            })
            : yield* send(res, listingStatus, errorBody(listingStatus, "listing models is not available"))
        }
        if (req.method === "POST" && path === "/v1/chat/completions") return yield* chat(res, text)
        return yield* send(res, 404, errorBody(404, `no route for ${req.method} ${path}`))
      }).pipe(
        // A bug in the fake must show up as a 500 in the test, not as a hang.
        Effect.catchCause((cause) =>
          Cause.hasInterruptsOnly(cause) ? Effect.void : Effect.sync(() => {
            if (res.headersSent) res.destroy()
            else {
              res.writeHead(500, { "content-type": "application/json" })
              res.end(JSON.stringify(errorBody(500, `fake server failure: ${Cause.pretty(cause)}`)))
            }
          })
        )
      )

    const server = Http.createServer((req, res) => {
      // Writes after the client left must not become an unhandled 'error' event.
      res.on("error", () => undefined)
      req.on("error", () => undefined)
      const fiber = run(handle(req, res))
      res.on("close", () => {
        if (!res.writableFinished && !cutByServer.has(res) && !stopping) onClientClose()
        fiber.interruptUnsafe()
      })
    })
    const port = yield* Effect.acquireRelease(
      listen(server),
      () =>
        Effect.suspend(() => {
          stopping = true
          return shutdown(server)
        })
    )

    return {
      url: `http://127.0.0.1:${port}/v1`,
      port,
      requests,
      closed: Effect.sync(() => closedByClient),
      awaitClosed: (count: number) =>
        Effect.suspend(() => {
          if (closedByClient >= count) return Effect.void
          const done = Deferred.makeUnsafe<void>()
          waiters.push({ count, done })
          return Deferred.await(done)
        }),
      rateLimitStats: () => limits?.stats() ?? { admitted: 0, rejected: 0, peakConcurrent: 0 }
    } satisfies FakeOpenAiServer
  })
