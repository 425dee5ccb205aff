/**
 * DirectModel — the agent loop's model call without `LanguageModel.make`'s generic machinery,
 * when nothing would observe the difference.
 *
 * The loop calls `generateText` with the tool calls returned, not run, and not validated
 * (`disableToolCallResolution` with `toolCallValidation: "deferred"`). For that call,
 * `LanguageModel.make` decodes the provider's parts through the union of every part schema of
 * the toolkit (and keeps one such decoder, for the last toolkit it saw: a root and its
 * sub-agents with other tools rebuild it at each call), copies the toolkit, and opens a span
 * with GenAI annotations. `make` wraps a model built with `LanguageModel.make` so that this call
 * goes straight to the provider's part producer and makes the decoded parts the way the decode
 * makes them — text, reasoning and tool calls (params kept as sent) directly, the finish and
 * metadata parts through their own schemas (the usage class, the timestamp).
 *
 * It does so only when nothing would see a difference: no tracer installed (the span and its
 * annotations are then exported by nobody), no span transformer (at build or call time), no
 * response-id tracker, no tool approvals in the prompt, no `oneOf` tool choice, and a toolkit
 * given as a value. Every other call, and `streamText` and `generateObject`, go to the wrapped
 * model unchanged. A provider part of another kind makes the call fail as a defect naming it:
 * the producer must give only the kinds above.
 *
 * @example
 * const model = yield* Effect.flatMap(
 *   LanguageModel.make({ generateText, streamText }),
 *   (made) => DirectModel.make(made, (provider) => Effect.map(callProvider(provider), toParts))
 * )
 */
import * as AiError from "effect/ai/AiError"
import * as LanguageModel from "effect/ai/LanguageModel"
import * as Prompt from "effect/ai/Prompt"
import * as Response from "effect/ai/Response"
import * as ResponseIdTracker from "effect/ai/ResponseIdTracker"
import * as Telemetry from "effect/ai/Telemetry"
import type * as Tool from "effect/ai/Tool"
import * as Context from "effect/Context"
import * as DateTime from "effect/DateTime"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as References from "effect/References"
import * as Schema from "effect/Schema"
import * as Tracer from "effect/Tracer"

/** What the provider's part producer is given: the request, as `LanguageModel` would give it. */
export type Request = Pick<LanguageModel.ProviderOptions, "prompt" | "tools" | "toolChoice" | "responseFormat">

/** The provider's `generateText`: the request's parts, encoded (as a `LanguageModel.make` provider gives them). */
export type Produce = (request: Request) => Effect.Effect<ReadonlyArray<Response.PartEncoded>, AiError.AiError>

/** The options the direct path reads; the rest go to the wrapped model as given. */
interface CallOptions {
  readonly prompt: Prompt.RawInput
  readonly toolkit?: unknown
  readonly toolChoice?: LanguageModel.ToolChoice<string> | undefined
  readonly disableToolCallResolution?: boolean | undefined
  readonly toolCallValidation?: string | undefined
}

/** `model` with the agent loop's `generateText` calls taken directly to `produce` when nothing would observe it. */
export const make = (
  model: LanguageModel.LanguageModel,
  produce: Produce
): Effect.Effect<LanguageModel.LanguageModel> =>
  Effect.map(Effect.serviceOption(Telemetry.CurrentSpanTransformer), (transformer) =>
    // A span transformer given when the model is built applies to every call: no direct path.
    Option.isSome(transformer) ? model : { ...model, generateText: directGenerateText(model, produce) })

const directGenerateText = (
  model: LanguageModel.LanguageModel,
  produce: Produce
): LanguageModel.LanguageModel["generateText"] => {
  const fallback = model.generateText as (options: CallOptions) => Effect.Effect<unknown, AiError.AiError>
  const generateText = (options: CallOptions) =>
    Effect.withFiber((fiber): Effect.Effect<unknown, AiError.AiError> => {
      const toolkit = options.toolkit
      const toolChoice = options.toolChoice ?? "auto"
      if (
        options.disableToolCallResolution !== true || options.toolCallValidation !== "deferred" ||
        typeof toolkit !== "object" || toolkit === null || Effect.isEffect(toolkit) || !("tools" in toolkit) ||
        (typeof toolChoice === "object" && "oneOf" in toolChoice) ||
        (fiber.getRef(Tracer.Tracer) !== Tracer.nativeTracer && fiber.getRef(References.TracerEnabled)) ||
        Option.isSome(Context.getOption(fiber.context, Telemetry.CurrentSpanTransformer)) ||
        Option.isSome(Context.getOption(fiber.context, ResponseIdTracker.ResponseIdTracker))
      ) {
        return fallback(options)
      }
      const prompt = Prompt.make(options.prompt)
      if (hasApprovals(prompt)) return fallback(options)
      const tools = Object.values(toolkit.tools as Record<string, Tool.Any>)
      return Effect.flatMap(
        produce({ prompt, tools, toolChoice, responseFormat: { type: "text" } }),
        (encoded) => Effect.mapEager(decodeParts(encoded), (parts) => new LanguageModel.GenerateTextResponse(parts))
      )
    })
  return generateText as unknown as LanguageModel.LanguageModel["generateText"]
}

/** Does the prompt hold tool approval requests or responses (which `LanguageModel` resolves)? */
const hasApprovals = (prompt: Prompt.Prompt): boolean =>
  prompt.content.some((message) =>
    (message.role === "assistant" || message.role === "tool") &&
    message.content.some((part) => part.type === "tool-approval-request" || part.type === "tool-approval-response")
  )

const decodeFinish = Schema.decodeEffect(Response.FinishPart)
const decodeMetadata = Schema.decodeEffect(Response.ResponseMetadataPart)

// The finish and metadata parts built directly when they are plainly valid (what the schema
// checks, checked here: a known reason, whole token counts, a timestamp that parses; no
// provider metadata or HTTP details); anything else goes through the schema, for the same
// value or the same error. The schema path was about a quarter of the direct call's own CPU.
const finishReasons: ReadonlySet<string> = new Set(Response.FinishReason.literals)
const isCount = (n: unknown) => n === undefined || Number.isSafeInteger(n)
const countsOk = (counts: object | undefined, keys: ReadonlyArray<string>): boolean => {
  if (typeof counts !== "object" || counts === null) return false
  for (const key in counts) {
    if (!keys.includes(key) || !isCount((counts as Record<string, unknown>)[key])) return false
  }
  return true
}
const inputKeys = ["uncached", "total", "cacheRead", "cacheWrite"]
const outputKeys = ["total", "text", "reasoning"]
/** The finish part, or undefined when it is not plainly valid (the schema decides then). */
const finishPart = (part: Response.FinishPartEncoded): Response.AnyPart | undefined => {
  const usage = part.usage
  if (
    !finishReasons.has(part.reason) || part.response !== undefined || part.metadata !== undefined ||
    Object.keys(usage).length !== 2 || !countsOk(usage.inputTokens, inputKeys) ||
    !countsOk(usage.outputTokens, outputKeys)
  ) return undefined
  return (
    Response.makePart(
      "finish",
      {
        reason: part.reason,
        usage: new Response.Usage({ inputTokens: { ...usage.inputTokens }, outputTokens: { ...usage.outputTokens } }, {
          disableChecks: true
        })
      } as Parameters<typeof Response.makePart<"finish">>[1]
    )
  )
}
/** The metadata part, or undefined when it is not plainly valid (the schema decides then). */
const metadataPart = (part: Response.ResponseMetadataPartEncoded): Response.AnyPart | undefined => {
  const { id, modelId, timestamp } = part
  const time = typeof timestamp === "string" ? DateTime.make(timestamp) : Option.none()
  if (
    part.metadata !== undefined || (id !== undefined && typeof id !== "string") ||
    (modelId !== undefined && typeof modelId !== "string") ||
    (timestamp !== undefined && Option.isNone(time))
  ) return undefined
  return (Response.makePart(
    "response-metadata",
    {
      ...("id" in part ? { id } : {}),
      ...("modelId" in part ? { modelId } : {}),
      ...(Option.isSome(time)
        ? { timestamp: DateTime.toUtc(time.value) }
        : "timestamp" in part
        ? { timestamp: undefined }
        : {})
    } as Parameters<typeof Response.makePart<"response-metadata">>[1]
  ))
}

/** A part built directly, or undefined when a schema must decide (or it is not a part built here). */
const directPart = (part: Response.PartEncoded): Response.AnyPart | undefined => {
  switch (part.type) {
    case "text":
      return Response.makePart("text", { text: part.text })
    case "reasoning":
      return Response.makePart("reasoning", { text: part.text })
    case "tool-call":
      return Response.makePart("tool-call", {
        id: part.id,
        name: part.name,
        params: part.params,
        providerExecuted: part.providerExecuted ?? false
      })
    case "finish":
      return finishPart(part)
    case "response-metadata":
      return metadataPart(part)
    default:
      return undefined
  }
}

/**
 * The parts as `LanguageModel` decodes them with deferred validation (tool-call params kept as
 * sent): built at once when each is plainly valid (the usual answer: an Exit, read with no
 * scheduler turn of its own), else part by part through the schemas, for the same value or the same error.
 */
export const decodeParts = (
  encoded: ReadonlyArray<Response.PartEncoded>
): Effect.Effect<Array<Response.Part<Record<string, Tool.Any>>>, AiError.AiError> => {
  const parts: Array<Response.AnyPart> = []
  for (const part of encoded) {
    const direct = directPart(part)
    if (direct === undefined) return decodeSlowly(encoded)
    parts.push(direct)
  }
  return Effect.succeed(parts as Array<Response.Part<Record<string, Tool.Any>>>)
}

const decodeSlowly = (
  encoded: ReadonlyArray<Response.PartEncoded>
): Effect.Effect<Array<Response.Part<Record<string, Tool.Any>>>, AiError.AiError> =>
  Effect.forEach(encoded, (part): Effect.Effect<Response.AnyPart, Schema.SchemaError> => {
    const direct = directPart(part)
    if (direct !== undefined) return Effect.succeed(direct)
    switch (part.type) {
      case "finish":
        return decodeFinish(part)
      case "response-metadata":
        return decodeMetadata(part)
      default:
        return Effect.die(`DirectModel: the provider gave a ${part.type} part, which the direct path does not build`)
    }
  }).pipe(
    Effect.mapError((error) =>
      AiError.make({
        module: "LanguageModel",
        method: "generateText",
        reason: AiError.InvalidOutputError.fromSchemaError(error)
      })
    )
  ) as Effect.Effect<Array<Response.Part<Record<string, Tool.Any>>>, AiError.AiError>
