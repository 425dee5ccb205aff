/**
 * OpenAiModel — an `effect/ai` `LanguageModel` over the Chat Completions API.
 *
 * `LanguageModel.make` takes two hooks, `generateText` and `streamText`, that speak in encoded
 * response parts; everything else (tool-call decoding, `generateObject`, spans) it derives.
 * This module maps a `Prompt` to chat messages and a completion (or a stream of SSE chunks)
 * back to parts.
 *
 * Decisions that matter to the agent loop:
 * - Tool-call arguments that are not valid JSON are passed through as the raw string. The
 *   loop tells the model "arguments are not valid JSON" and lets it correct itself; failing
 *   the whole call here would turn one bad argument into a failed model call.
 * - Servers differ (DeepSeek's `reasoning_content` and `prompt_cache_hit_tokens`, vLLM and
 *   Ollama answering `finish_reason: "stop"` next to tool calls); both forms are read.
 * - Reasoning is kept as a `reasoning` part, never as text, and is sent back as
 *   `reasoning_content` on the assistant message it came with: DeepSeek's thinking mode
 *   rejects a history whose tool-call turns lost their reasoning.
 */
import * as DirectModel from "@fibril/core/DirectModel"
import * as OutputSchema from "@fibril/core/OutputSchema"
import * as AiError from "effect/ai/AiError"
import * as LanguageModel from "effect/ai/LanguageModel"
import * as Prompt from "effect/ai/Prompt"
import * as Response from "effect/ai/Response"
import * as Telemetry from "effect/ai/Telemetry"
import * as Tool from "effect/ai/Tool"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import type {
  ChatCompletion,
  ChatCompletionAssistantMessageParam,
  ChatCompletionChunk,
  ChatCompletionContentPart,
  ChatCompletionCreateParamsBase,
  ChatCompletionMessageFunctionToolCall,
  ChatCompletionMessageParam,
  ChatCompletionTool,
  ChatCompletionToolChoiceOption
} from "openai/resources/chat/completions"
import type { CompletionUsage } from "openai/resources/completions"
import { OpenAiClient } from "./OpenAiClient.ts"
import * as OpenAiError from "./OpenAiError.ts"

export interface Options {
  /** The model id sent with every request, e.g. `gpt-4.1-mini` or `deepseek-chat`. */
  readonly model: string
  /**
   * Sent as `parallel_tool_calls` when set. Left out by default: OpenAI already allows
   * parallel calls, and some compatible servers reject parameters they do not know.
   */
  readonly parallelToolCalls?: boolean | undefined
  /** Extra body fields for server-specific options (e.g. DeepSeek's `thinking`). */
  readonly extraBody?: Readonly<Record<string, unknown>> | undefined
  /**
   * The server takes `response_format: {type: "json_schema"}` with tools: a sub-agent with an
   * `output_schema` is then asked for its answer that way, rather than through a final-answer tool.
   */
  readonly structuredOutput?: boolean | undefined
}

// ---------------------------------------------------------------------------------------------
// Prompt → messages

/** An assistant message as DeepSeek wants it back: with its reasoning. */
type AssistantMessage = ChatCompletionAssistantMessageParam & { reasoning_content?: string }

const jsonText = (value: unknown): string => {
  try {
    return JSON.stringify(value) ?? "null"
  } catch {
    return String(value)
  }
}

/** A tool call's `arguments`: a raw string (a model's malformed arguments) goes back as it came. */
export const argumentsText = (params: unknown): string => typeof params === "string" ? params : jsonText(params)

/** A tool result's `content`: a string as is, anything else as JSON. */
export const resultText = (part: Prompt.ToolResultPart): string =>
  part.modelOutput !== undefined
    ? Prompt.toolModelOutputToText(part.modelOutput)
    : typeof part.result === "string"
    ? part.result
    : jsonText(part.result)

const base64 = (data: Uint8Array) => Buffer.from(data).toString("base64")

const imageURL = (part: Prompt.FilePart): string =>
  part.data instanceof URL
    ? part.data.href
    : `data:${part.mediaType};base64,${typeof part.data === "string" ? part.data : base64(part.data)}`

const unsupported = (description: string) =>
  OpenAiError.make("generateText", new AiError.InvalidUserInputError({ description }))

const userContent = (
  message: Prompt.UserMessage
): Effect.Effect<string | Array<ChatCompletionContentPart>, AiError.AiError> => {
  if (message.content.every((part) => part.type === "text")) {
    return Effect.succeed(message.content.map((part) => part.type === "text" ? part.text : "").join("\n"))
  }
  const parts: Array<ChatCompletionContentPart> = []
  for (const part of message.content) {
    if (part.type === "text") parts.push({ type: "text", text: part.text })
    else if (part.mediaType.startsWith("image/")) parts.push({ type: "image_url", image_url: { url: imageURL(part) } })
    else return Effect.fail(unsupported(`files of type ${part.mediaType} cannot be sent to a chat completion`))
  }
  return Effect.succeed(parts)
}

const assistantMessage = (message: Prompt.AssistantMessage): AssistantMessage => {
  let text = ""
  let reasoning = ""
  const calls: Array<ChatCompletionMessageFunctionToolCall> = []
  for (const part of message.content) {
    switch (part.type) {
      case "text":
        text += part.text
        break
      case "reasoning":
        reasoning += part.text
        break
      case "tool-call":
        // A provider-executed call was run by the server and is not part of this API.
        if (!part.providerExecuted) {
          calls.push({
            id: part.id,
            type: "function",
            function: { name: part.name, arguments: argumentsText(part.params) }
          })
        }
        break
      default:
        break
    }
  }
  return {
    role: "assistant",
    content: text === "" ? null : text,
    ...(calls.length > 0 ? { tool_calls: calls } : {}),
    ...(reasoning === "" ? {} : { reasoning_content: reasoning })
  }
}

/** The chat messages for a prompt. Fails only on content the API cannot carry (non-image files). */
export const toMessages = (prompt: Prompt.Prompt): Effect.Effect<Array<ChatCompletionMessageParam>, AiError.AiError> =>
  Effect.gen(function*() {
    const messages: Array<ChatCompletionMessageParam> = []
    for (const message of prompt.content) {
      switch (message.role) {
        case "system":
          messages.push({ role: "system", content: message.content })
          break
        case "user":
          messages.push({ role: "user", content: yield* userContent(message) })
          break
        case "assistant":
          messages.push(assistantMessage(message))
          break
        case "tool":
          for (const part of message.content) {
            // Approval responses are resolved by LanguageModel before the request.
            if (part.type === "tool-result") {
              messages.push({ role: "tool", tool_call_id: part.id, content: resultText(part) })
            }
          }
          break
      }
    }
    return messages
  })

// A tool is an immutable value: its request entry (the JSON Schema compiled from its parameters'
// Schema, the costliest part of building a request) is computed once per tool, not per call.
const toolEntries = new WeakMap<Tool.Any, ChatCompletionTool>()

const toolEntry = (tool: Tool.Any): ChatCompletionTool => {
  let entry = toolEntries.get(tool)
  if (entry === undefined) {
    const description = Tool.getDescription(tool)
    entry = {
      type: "function",
      function: {
        name: tool.name,
        ...(description === undefined ? {} : { description }),
        parameters: Tool.getJsonSchema(tool)
      }
    }
    toolEntries.set(tool, entry)
  }
  return entry
}

/** Function tools with their parameters' JSON Schema. Provider-defined tools have no place here. */
export const toTools = (tools: ReadonlyArray<Tool.Any>): Array<ChatCompletionTool> => {
  const out: Array<ChatCompletionTool> = []
  for (const tool of tools) if (!Tool.isProviderDefined(tool)) out.push(toolEntry(tool))
  return out
}

const toToolChoice = (choice: LanguageModel.ToolChoice<string>): ChatCompletionToolChoiceOption => {
  if (choice === "auto" || choice === "none" || choice === "required") return choice
  if ("tool" in choice) return { type: "function", function: { name: choice.tool } }
  // `oneOf`: LanguageModel already narrowed `tools` to the allowed ones.
  return choice.mode === "required" ? "required" : "auto"
}

type RequestBody = Omit<ChatCompletionCreateParamsBase, "stream" | "stream_options">

const requestBody = (
  options: Options,
  provider: Pick<LanguageModel.ProviderOptions, "prompt" | "tools" | "toolChoice" | "responseFormat">
): Effect.Effect<RequestBody, AiError.AiError> =>
  Effect.withFiber((fiber) =>
    Effect.map(toMessages(provider.prompt), (messages): RequestBody => {
      // A typed sub-agent's request: the agent loop's `generateText` (so with its tools), with
      // the answer's schema the model step set for it (OutputSchema.ResponseFormat).
      const typed = options.structuredOutput === true && provider.responseFormat.type === "text"
        ? fiber.getRef(OutputSchema.ResponseFormat)
        : undefined
      const body = baseBody(options, provider, messages)
      return typed === undefined
        ? body
        : { ...body, response_format: { type: "json_schema", json_schema: { name: "output", schema: typed } } }
    })
  )

const baseBody = (
  options: Options,
  provider: Pick<LanguageModel.ProviderOptions, "prompt" | "tools" | "toolChoice" | "responseFormat">,
  messages: RequestBody["messages"]
): RequestBody => {
  const tools = toTools(provider.tools)
  return {
    ...options.extraBody,
    model: options.model,
    messages,
    ...(tools.length > 0
      ? {
        tools,
        tool_choice: toToolChoice(provider.toolChoice),
        ...(options.parallelToolCalls === undefined ? {} : { parallel_tool_calls: options.parallelToolCalls })
      }
      : {}),
    ...(provider.responseFormat.type === "json"
      ? {
        response_format: {
          type: "json_schema",
          json_schema: {
            name: provider.responseFormat.objectName,
            schema: Tool.getJsonSchemaFromSchema(provider.responseFormat.schema)
          }
        }
      }
      : {})
  }
}

// ---------------------------------------------------------------------------------------------
// Answers → parts

/** Tool-call params: the parsed JSON, `{}` for no arguments, else the raw string (see header). */
export const parseArguments = (text: string): unknown => {
  if (text.trim() === "") return {}
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

const count = (u: unknown): number | undefined =>
  typeof u === "number" && Number.isFinite(u) ? Math.max(0, Math.round(u)) : undefined

const field = (value: unknown, key: string): unknown =>
  typeof value === "object" && value !== null && key in value ? Reflect.get(value, key) : undefined

/**
 * Usage in effect/ai's terms. Cached input comes from `prompt_tokens_details.cached_tokens`
 * (OpenAI, vLLM) or `prompt_cache_hit_tokens` (DeepSeek).
 */
export const usageOf = (usage: CompletionUsage | null | undefined): Response.FinishPartEncoded["usage"] => {
  const input = count(usage?.prompt_tokens)
  const output = count(usage?.completion_tokens)
  const cacheRead = count(usage?.prompt_tokens_details?.cached_tokens) ?? count(field(usage, "prompt_cache_hit_tokens"))
  const reasoning = count(usage?.completion_tokens_details?.reasoning_tokens)
  return {
    inputTokens: {
      total: input,
      cacheRead,
      uncached: input !== undefined && cacheRead !== undefined ? Math.max(0, input - cacheRead) : input
    },
    outputTokens: {
      total: output,
      reasoning,
      text: output !== undefined && reasoning !== undefined ? Math.max(0, output - reasoning) : output
    }
  }
}

/** The finish reason; `stop` next to tool calls (vLLM, Ollama) means the calls are the answer. */
export const finishReasonOf = (reason: string | null | undefined, hasToolCalls: boolean): Response.FinishReason => {
  switch (reason) {
    case "stop":
      return hasToolCalls ? "tool-calls" : "stop"
    case "length":
      return "length"
    case "tool_calls":
    case "function_call":
      return "tool-calls"
    case "content_filter":
      return "content-filter"
    default:
      return hasToolCalls ? "tool-calls" : "unknown"
  }
}

const reasoningOf = (value: unknown): string | undefined => {
  const text = field(value, "reasoning_content")
  return typeof text === "string" && text !== "" ? text : undefined
}

const timestampOf = (created: unknown): string | undefined =>
  typeof created === "number" && Number.isFinite(created) && created > 0
    ? new Date(created * 1000).toISOString()
    : undefined

const metadataPart = (id: string, model: string, created: unknown): Response.ResponseMetadataPartEncoded => {
  const timestamp = timestampOf(created)
  return { type: "response-metadata", id, modelId: model, ...(timestamp === undefined ? {} : { timestamp }) }
}

/** The parts of a (non-streaming) chat completion. */
export const fromCompletion = (completion: ChatCompletion): Array<Response.PartEncoded> => {
  const parts: Array<Response.PartEncoded> = [metadataPart(completion.id, completion.model, completion.created)]
  const choice = completion.choices.find((c) => c.index === 0) ?? completion.choices[0]
  const message = choice?.message
  const reasoning = reasoningOf(message)
  if (reasoning !== undefined) parts.push({ type: "reasoning", text: reasoning })
  // A refusal is the model's answer too; the agent should read it rather than see nothing.
  const text = message?.content || message?.refusal || ""
  if (text !== "") parts.push({ type: "text", text })
  let calls = 0
  for (const [index, call] of (message?.tool_calls ?? []).entries()) {
    if (call.type !== "function") continue
    calls++
    parts.push({
      type: "tool-call",
      id: call.id || `call_${index}`,
      name: call.function.name,
      params: parseArguments(call.function.arguments ?? "")
    })
  }
  parts.push({
    type: "finish",
    reason: finishReasonOf(choice?.finish_reason, calls > 0),
    usage: usageOf(completion.usage)
  })
  return parts
}

// ---------------------------------------------------------------------------------------------
// Streaming

interface PendingCall {
  readonly index: number
  id: string | undefined
  name: string | undefined
  args: string
  started: boolean
}

/**
 * Turns SSE chunks into stream parts. Text and reasoning deltas flow through as they come;
 * tool-call arguments arrive in pieces, per `index` (the id and name only in the first
 * piece), and become complete `tool-call` parts when the stream ends. The usage is in the
 * last chunk (`stream_options.include_usage`), so `finish` is emitted at the very end.
 */
export const makeStreamAssembler = () => {
  let metadataSent = false
  let open: { readonly kind: "text" | "reasoning"; readonly id: string } | undefined
  let blocks = 0
  const calls: Array<PendingCall> = []
  let finishReason: string | null | undefined
  let usage: CompletionUsage | null | undefined

  const close = (out: Array<Response.StreamPartEncoded>) => {
    if (open === undefined) return
    out.push(open.kind === "text" ? { type: "text-end", id: open.id } : { type: "reasoning-end", id: open.id })
    open = undefined
  }

  const delta = (out: Array<Response.StreamPartEncoded>, kind: "text" | "reasoning", text: string) => {
    if (open?.kind !== kind) {
      close(out)
      open = { kind, id: `${kind}_${blocks++}` }
      out.push(kind === "text" ? { type: "text-start", id: open.id } : { type: "reasoning-start", id: open.id })
    }
    out.push(
      kind === "text" ? { type: "text-delta", id: open.id, delta: text } : {
        type: "reasoning-delta",
        id: open.id,
        delta: text
      }
    )
  }

  // Servers that send a whole call in one chunk sometimes omit `index`; a piece without one
  // continues the last call unless it carries a new id.
  const callFor = (index: number | undefined, id: string | undefined): PendingCall => {
    const last = calls.at(-1)
    const found = index !== undefined
      ? calls.find((c) => c.index === index)
      : id === undefined || last?.id === id
      ? last
      : undefined
    if (found !== undefined) return found
    const created: PendingCall = {
      index: index ?? calls.length,
      id: undefined,
      name: undefined,
      args: "",
      started: false
    }
    calls.push(created)
    return created
  }

  const push = (chunk: ChatCompletionChunk): Array<Response.StreamPartEncoded> => {
    const out: Array<Response.StreamPartEncoded> = []
    if (!metadataSent) {
      metadataSent = true
      out.push(metadataPart(chunk.id, chunk.model, chunk.created))
    }
    if (chunk.usage) usage = chunk.usage
    const choices = Array.isArray(chunk.choices) ? chunk.choices : []
    const choice = choices.find((c) => c.index === 0) ?? choices[0]
    if (choice === undefined) return out
    const reasoning = reasoningOf(choice.delta)
    if (reasoning !== undefined) delta(out, "reasoning", reasoning)
    const text = choice.delta?.content
    if (typeof text === "string" && text !== "") delta(out, "text", text)
    for (const piece of choice.delta?.tool_calls ?? []) {
      close(out)
      const call = callFor(typeof piece.index === "number" ? piece.index : undefined, piece.id || undefined)
      if (call.id === undefined && piece.id) call.id = piece.id
      if (call.name === undefined && piece.function?.name) call.name = piece.function.name
      const args = piece.function?.arguments ?? ""
      call.args += args
      if (!call.started && call.id !== undefined && call.name !== undefined) {
        call.started = true
        out.push({ type: "tool-params-start", id: call.id, name: call.name })
        if (call.args !== "") out.push({ type: "tool-params-delta", id: call.id, delta: call.args })
      } else if (call.started && args !== "") {
        out.push({ type: "tool-params-delta", id: call.id ?? "", delta: args })
      }
    }
    if (choice.finish_reason) finishReason = choice.finish_reason
    return out
  }

  /** The closing parts, or the reason the stream is incomplete. */
  const end = (): { readonly parts: Array<Response.StreamPartEncoded> } | { readonly incomplete: string } => {
    // Without a finish reason the server (or the connection) stopped mid-answer: the calls
    // and text so far may be cut off, so this is a transport failure, not an answer.
    if (finishReason === undefined || finishReason === null) {
      return { incomplete: "the stream ended before the model finished its answer" }
    }
    const out: Array<Response.StreamPartEncoded> = []
    close(out)
    const ordered = [...calls].sort((a, b) => a.index - b.index)
    for (const call of ordered) {
      const id = call.id ?? `call_${call.index}`
      if (call.started) out.push({ type: "tool-params-end", id })
      out.push({ type: "tool-call", id, name: call.name ?? "", params: parseArguments(call.args) })
    }
    out.push({ type: "finish", reason: finishReasonOf(finishReason, calls.length > 0), usage: usageOf(usage) })
    return { parts: out }
  }

  return { push, end }
}

// ---------------------------------------------------------------------------------------------
// The model

const annotateRequest = (span: LanguageModel.ProviderOptions["span"], model: string) =>
  Telemetry.addGenAIAnnotations(span, { provider: { name: "openai" }, request: { model } })

/**
 * The `LanguageModel` for one model id, on the `OpenAiClient` in context.
 *
 * @example
 * ```ts
 * const model = yield* OpenAiModel.make({ model: "gpt-4.1-mini" })
 * const response = yield* model.generateText({ prompt: "Say hi" })
 * ```
 */
export const make = Effect.fn("OpenAiModel.make")(function*(options: Options) {
  const client = yield* OpenAiClient
  return yield* makeWith(client, options)
})

/** The same, with the client passed in (for catalogs that build many models). */
export const makeWith = (
  client: OpenAiClient["Service"],
  options: Options
): Effect.Effect<LanguageModel.LanguageModel> => {
  const generateText = Effect.fn("OpenAiModel.generateText")(function*(provider: LanguageModel.ProviderOptions) {
    annotateRequest(provider.span, options.model)
    const body = yield* requestBody(options, provider)
    const completion = yield* client.createCompletion(body)
    const parts = fromCompletion(completion)
    Telemetry.addGenAIAnnotations(provider.span, {
      response: { id: completion.id, model: completion.model },
      usage: { inputTokens: completion.usage?.prompt_tokens, outputTokens: completion.usage?.completion_tokens }
    })
    return parts
  })

  const streamText = (
    provider: LanguageModel.ProviderOptions
  ): Stream.Stream<Response.StreamPartEncoded, AiError.AiError> =>
    Stream.unwrap(Effect.gen(function*() {
      annotateRequest(provider.span, options.model)
      const body = yield* requestBody(options, provider)
      const assembler = makeStreamAssembler()
      const chunks = client.streamCompletion({
        ...body,
        stream: true,
        stream_options: { include_usage: true }
      })
      const closing = Stream.suspend(() => {
        const ended = assembler.end()
        return "parts" in ended ? Stream.fromIterable(ended.parts) : Stream.fail(OpenAiError.make(
          "streamText",
          new AiError.NetworkError({
            reason: "TransportError",
            method: "POST",
            url: `${client.baseURL}/chat/completions`,
            description: ended.incomplete
          })
        ))
      })
      return chunks.pipe(Stream.map(assembler.push), Stream.flattenIterable, Stream.concat(closing))
    })).pipe(Stream.withSpan("OpenAiModel.streamText"))

  // The agent loop's calls skip LanguageModel's generic machinery when nothing would observe it
  // (DirectModel): the request is built and the completion's parts made here, as its decode would.
  const made = Effect.flatMap(
    LanguageModel.make({ generateText, streamText }),
    (model) =>
      DirectModel.make(model, (provider) =>
        requestBody(options, provider).pipe(
          Effect.flatMap(client.createCompletion),
          Effect.map(fromCompletion)
        ))
  )
  return options.structuredOutput === true ? Effect.map(made, OutputSchema.withStructuredOutput) : made
}

/**
 * The model as the `LanguageModel` service.
 *
 * @example
 * ```ts
 * program.pipe(Effect.provide(OpenAiModel.layer({ model: "deepseek-chat" })), Effect.provide(OpenAiClient.layerConfig()))
 * ```
 */
export const layer = (options: Options): Layer.Layer<LanguageModel.LanguageModel, never, OpenAiClient> =>
  Layer.effect(LanguageModel.LanguageModel, make(options))
