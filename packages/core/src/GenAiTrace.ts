/**
 * GenAiTrace — the spans of agents, model calls and tool calls, as the OpenTelemetry GenAI
 * semantic conventions name them, so Langfuse, Phoenix, Jaeger or Honeycomb read a Fibril tree
 * as they read any agent framework's (docs/observability.md):
 *
 * - `invoke_agent {role}` for each run of an agent (`gen_ai.agent.id`, `gen_ai.agent.name`),
 * - `chat {model}` for each model call (`gen_ai.request.model`, `gen_ai.provider.name`,
 *   `gen_ai.usage.input_tokens` / `output_tokens`, `gen_ai.response.finish_reasons`),
 * - `execute_tool {tool}` for each tool call (`gen_ai.tool.name`, `gen_ai.tool.call.id`),
 *
 * each with `gen_ai.operation.name`. Prompts, answers, tool arguments and results are recorded
 * only with `CaptureContent` (`[telemetry] capture_content = true`): they may hold secrets.
 *
 * Both engines open them through the same loop steps (CallModel, ToolStep) and this module's
 * `invokeAgent`; a cluster run gets its parent's span from its workflow payload (`TraceParent`),
 * so a tree spread over several workers is one trace. Nothing here runs without a tracer
 * (internal/span.ts): the per-agent paths pay for none of it then.
 *
 * The attribute names are those of `@opentelemetry/semantic-conventions` 1.45.0 (its
 * `incubating` entry), copied: importing that entry costs ~60 ms at start-up.
 */
import * as Prompt from "effect/ai/Prompt"
import type * as Response from "effect/ai/Response"
import * as Telemetry from "effect/ai/Telemetry"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Tracer from "effect/Tracer"
import { tracing } from "./internal/span.ts"

// --- Names (@opentelemetry/semantic-conventions 1.45.0, incubating) ---

export const ATTR_GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
export const ATTR_GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
export const ATTR_GEN_AI_AGENT_ID = "gen_ai.agent.id"
export const ATTR_GEN_AI_AGENT_NAME = "gen_ai.agent.name"
export const ATTR_GEN_AI_AGENT_DESCRIPTION = "gen_ai.agent.description"
export const ATTR_GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
export const ATTR_GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
export const ATTR_GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
export const ATTR_GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
export const ATTR_GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
export const ATTR_GEN_AI_TOOL_NAME = "gen_ai.tool.name"
export const ATTR_GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
export const ATTR_GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
export const ATTR_GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
export const ATTR_GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
export const ATTR_GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
export const ATTR_GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
export const ATTR_GEN_AI_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
export const GEN_AI_OPERATION_NAME_VALUE_CHAT = "chat"
export const GEN_AI_OPERATION_NAME_VALUE_EXECUTE_TOOL = "execute_tool"
export const GEN_AI_OPERATION_NAME_VALUE_INVOKE_AGENT = "invoke_agent"

// --- Settings ---

/** `[telemetry]` (FibrilConfig): what the exported spans record. */
export interface TelemetrySettings {
  /** Prompts, answers, tool arguments and results on the spans (`CaptureContent`). */
  readonly captureContent: boolean
}

/**
 * Record content on the spans: prompts and answers (`gen_ai.input.messages`,
 * `gen_ai.output.messages`, `gen_ai.system_instructions`), tool arguments and results
 * (`gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`). Off by default.
 */
export const CaptureContent = Context.Reference<boolean>("@fibril/core/GenAiTrace/CaptureContent", {
  defaultValue: () => false
})

/**
 * The provider a model id names: the part before its first `:` (`scripted:script.json`,
 * `openai:gpt-4.1`), else none (a provider that knows better annotates its span itself).
 */
export const providerOf = (model: string): string | undefined => {
  const colon = model.indexOf(":")
  return colon > 0 ? model.slice(0, colon) : undefined
}

// --- Content ---

/** One message as the conventions' JSON shape has it: a role and typed parts. */
const messageOf = (message: Prompt.Message) => ({
  role: message.role,
  parts: typeof message.content === "string"
    ? [{ type: "text", content: message.content }]
    : message.content.map((part) => partOf(part))
})

// A part's field by name: the parts of prompts and answers are many classes; the few read here
// are plain data on each.
const field = (part: object, key: string): unknown => (part as Record<string, unknown>)[key]

const partOf = (part: { readonly type: string }) => {
  switch (part.type) {
    case "text":
    case "reasoning":
      return { type: part.type, content: field(part, "text") }
    case "tool-call":
      return { type: "tool_call", id: field(part, "id"), name: field(part, "name"), arguments: field(part, "params") }
    case "tool-result":
      return { type: "tool_call_response", id: field(part, "id"), response: field(part, "result") }
    default:
      return { type: part.type }
  }
}

const json = (value: unknown): string => {
  try {
    return typeof value === "string" ? value : JSON.stringify(value) ?? "null"
  } catch {
    return String(value)
  }
}

// --- invoke_agent ---

/** What an agent's span says about it. */
export interface AgentInfo {
  readonly agentId: string
  /** Its role: the span's name and `gen_ai.agent.name`. */
  readonly role: string
  readonly model: string
  readonly depth: number
  readonly parentId: string | undefined
  readonly description: string | undefined
  /** The input of this run (recorded only with `CaptureContent`). */
  readonly prompt: string | undefined
}

const agentAttributes = (info: AgentInfo): Record<string, unknown> => {
  const attributes: Record<string, unknown> = {
    [ATTR_GEN_AI_OPERATION_NAME]: GEN_AI_OPERATION_NAME_VALUE_INVOKE_AGENT,
    [ATTR_GEN_AI_AGENT_ID]: info.agentId,
    [ATTR_GEN_AI_AGENT_NAME]: info.role,
    [ATTR_GEN_AI_CONVERSATION_ID]: info.agentId,
    [ATTR_GEN_AI_REQUEST_MODEL]: info.model,
    "fibril.agent.depth": info.depth
  }
  const provider = providerOf(info.model)
  if (provider !== undefined) attributes[ATTR_GEN_AI_PROVIDER_NAME] = provider
  if (info.parentId !== undefined) attributes["fibril.agent.parent_id"] = info.parentId
  if (info.description !== undefined) attributes[ATTR_GEN_AI_AGENT_DESCRIPTION] = info.description
  return attributes
}

/**
 * `body()` under the agent's `invoke_agent {role}` span when `fiber` has a tracer, else
 * `body()` as it is, in the caller's scheduler turn. `parent`: the span to hang it under when
 * it is not the fiber's (a cluster run's, from its payload). With `CaptureContent`, the input
 * and the final text are recorded.
 */
export const invokeAgentIn = <A extends { readonly text: string }, E, R>(
  fiber: Fiber.Fiber<unknown, unknown>,
  info: AgentInfo,
  body: () => Effect.Effect<A, E, R>,
  parent?: TraceParent | undefined
): Effect.Effect<A, E, R> => {
  if (!tracing(fiber)) return body()
  const capture = fiber.getRef(CaptureContent)
  return Effect.useSpan(
    `${GEN_AI_OPERATION_NAME_VALUE_INVOKE_AGENT} ${info.role}`,
    {
      kind: "internal",
      attributes: agentAttributes(info),
      ...(parent === undefined ? {} : { parent: Tracer.externalSpan({ ...parent, sampled: true }) })
    },
    (span) => {
      if (capture && info.prompt !== undefined) {
        span.attribute(
          ATTR_GEN_AI_INPUT_MESSAGES,
          json([{ role: "user", parts: [{ type: "text", content: info.prompt }] }])
        )
      }
      const run = Effect.provideService(Effect.suspend(body), Tracer.ParentSpan, span)
      return capture
        ? Effect.tap(run, (result) =>
          Effect.sync(() =>
            span.attribute(
              ATTR_GEN_AI_OUTPUT_MESSAGES,
              json([{ role: "assistant", parts: [{ type: "text", content: result.text }] }])
            )
          ))
        : run
    }
  )
}

/** `invokeAgentIn` in the running fiber. */
export const invokeAgent = <A extends { readonly text: string }, E, R>(
  info: AgentInfo,
  body: () => Effect.Effect<A, E, R>,
  parent?: TraceParent | undefined
): Effect.Effect<A, E, R> => Effect.withFiber((fiber) => invokeAgentIn(fiber, info, body, parent))

// --- chat ---

const modelSpanNames: ReadonlySet<string> = new Set([
  "LanguageModel.generateText",
  "LanguageModel.streamText",
  "LanguageModel.generateObject"
])

/**
 * The fiber's tracer, with the span Effect's `LanguageModel` opens for a call named and
 * annotated as a `chat` span: its name is fixed by Effect ("LanguageModel.generateText"), and
 * the conventions' ("chat {model}") needs the model, which only the caller knows. Every other
 * span (the provider's own, its HTTP calls) goes to the tracer unchanged, under it.
 */
const chatTracer = (inner: Tracer.Tracer, model: string): Tracer.Tracer => {
  const provider = providerOf(model)
  return Tracer.make({
    span(options) {
      if (!modelSpanNames.has(options.name)) return inner.span(options)
      const span = inner.span({ ...options, name: `${GEN_AI_OPERATION_NAME_VALUE_CHAT} ${model}`, kind: "client" })
      span.attribute(ATTR_GEN_AI_OPERATION_NAME, GEN_AI_OPERATION_NAME_VALUE_CHAT)
      span.attribute(ATTR_GEN_AI_REQUEST_MODEL, model)
      if (provider !== undefined) span.attribute(ATTR_GEN_AI_PROVIDER_NAME, provider)
      return span
    },
    ...(inner.context === undefined ? {} : { context: inner.context })
  })
}

/** Usage, finish reason and (with `CaptureContent`) the messages, from the answer, onto the call's span. */
const annotateAnswer = (capture: boolean): Telemetry.SpanTransformer => (options) => {
  const span = options.span
  for (const part of options.response) {
    if (part.type === "finish") {
      const usage = (part as Response.FinishPart).usage
      // The provider's own figures (OpenAiModel sets them) are not overwritten.
      if (!span.attributes.has(ATTR_GEN_AI_USAGE_INPUT_TOKENS) && usage.inputTokens.total !== undefined) {
        span.attribute(ATTR_GEN_AI_USAGE_INPUT_TOKENS, usage.inputTokens.total)
      }
      if (!span.attributes.has(ATTR_GEN_AI_USAGE_OUTPUT_TOKENS) && usage.outputTokens.total !== undefined) {
        span.attribute(ATTR_GEN_AI_USAGE_OUTPUT_TOKENS, usage.outputTokens.total)
      }
      // Effect's reasons are kebab-case ("tool-calls"); the conventions use the providers' ("tool_calls").
      span.attribute(ATTR_GEN_AI_RESPONSE_FINISH_REASONS, [(part as Response.FinishPart).reason.replaceAll("-", "_")])
    }
  }
  if (!capture) return
  const messages = options.prompt.content
  const system = messages.filter((message) => message.role === "system")
  if (system.length > 0) {
    span.attribute(
      ATTR_GEN_AI_SYSTEM_INSTRUCTIONS,
      json(system.map((message) => ({ type: "text", content: message.content })))
    )
  }
  span.attribute(
    ATTR_GEN_AI_INPUT_MESSAGES,
    json(messages.filter((message) => message.role !== "system").map(messageOf))
  )
  span.attribute(
    ATTR_GEN_AI_OUTPUT_MESSAGES,
    json([{
      role: "assistant",
      parts: options.response.flatMap((part) =>
        part.type === "text" || part.type === "reasoning" || part.type === "tool-call"
          ? [partOf(part)]
          : []
      )
    }])
  )
}

/**
 * A model call as a `chat {model}` span (the one Effect's `LanguageModel` opens, named and
 * annotated); the caller checks that `fiber` has a tracer first (CallModel does).
 */
export const chat = <A, E, R>(
  fiber: Fiber.Fiber<unknown, unknown>,
  model: string,
  call: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  call.pipe(
    Effect.provideService(Telemetry.CurrentSpanTransformer, annotateAnswer(fiber.getRef(CaptureContent))),
    Effect.withTracer(chatTracer(fiber.getRef(Tracer.Tracer), model))
  )

// --- execute_tool ---

/**
 * A tool call under its `execute_tool {tool}` span when the running fiber has a tracer; else
 * `run()` as it is (an Exit stays an Exit: the loop reads a call done at once where it is).
 */
export const executeTool = <A, E, R>(
  call: { readonly id: string; readonly name: string; readonly params: unknown },
  run: () => Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> => {
  const fiber = Fiber.getCurrent()
  if (fiber === undefined || !tracing(fiber)) return run()
  const capture = fiber.getRef(CaptureContent)
  return Effect.useSpan(
    `${GEN_AI_OPERATION_NAME_VALUE_EXECUTE_TOOL} ${call.name}`,
    {
      kind: "internal",
      attributes: {
        [ATTR_GEN_AI_OPERATION_NAME]: GEN_AI_OPERATION_NAME_VALUE_EXECUTE_TOOL,
        [ATTR_GEN_AI_TOOL_NAME]: call.name,
        [ATTR_GEN_AI_TOOL_CALL_ID]: call.id,
        [ATTR_GEN_AI_TOOL_TYPE]: "function",
        ...(capture ? { [ATTR_GEN_AI_TOOL_CALL_ARGUMENTS]: json(call.params) } : {})
      }
    },
    (span) => {
      const ran = Effect.provideService(Effect.suspend(run), Tracer.ParentSpan, span)
      return capture
        ? Effect.tap(ran, (result) => Effect.sync(() => span.attribute(ATTR_GEN_AI_TOOL_CALL_RESULT, json(result))))
        : ran
    }
  )
}

// --- Across workers ---

/** The span a run hangs under when it runs elsewhere (a cluster workflow's payload carries it). */
export const TraceParent = Schema.Struct({ traceId: Schema.String, spanId: Schema.String })
export type TraceParent = typeof TraceParent.Type

/** The fiber's current span as a `TraceParent`, when it has a tracer and a span. */
export const currentParent: Effect.Effect<TraceParent | undefined> = Effect.withFiber((fiber) => {
  if (!tracing(fiber)) return Effect.succeed(undefined)
  const span = Context.getOption(fiber.context, Tracer.ParentSpan)
  return Effect.succeed(Option.match(span, {
    onNone: () => undefined,
    onSome: (parent) => ({ traceId: parent.traceId, spanId: parent.spanId })
  }))
})
