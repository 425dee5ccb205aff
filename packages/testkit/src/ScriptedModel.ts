/**
 * ScriptedModel — an `effect/ai` `LanguageModel` that plays a script instead of calling an LLM.
 * Every test, the demo and the benchmarks run agents on it.
 *
 * It is stateless like a real model: each request is answered from the conversation handed in
 * and nothing else. The agent's role and depth come from the `Fibril agent: role=<r> depth=<n>`
 * header that starts every system prompt; the turn is the number of assistant messages so far
 * (counted after the last `[fork]` marker, since a forked child first sees its parent's history).
 * The first rule whose `match` holds answers with its turn for that number.
 *
 * The one piece of state is an attempt counter per (rule, turn, conversation) used by
 * `error.times` / `hang.times`: it simulates a transient provider fault, where a retried request
 * (which arrives with the same conversation) fails or hangs a few times and then succeeds.
 *
 * The JSON format is documented in `docs/script-format.md`.
 */
import * as DirectModel from "@fibril/core/DirectModel"
import * as AiError from "effect/ai/AiError"
import * as LanguageModel from "effect/ai/LanguageModel"
import type * as Prompt from "effect/ai/Prompt"
import type * as Response from "effect/ai/Response"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { Script } from "./Script.ts"
import type { Match, ToolCall, Turn, TurnError } from "./Script.ts"

export { Hang, JsonRule, Match, Script, ToolCall, Turn, TurnError, Usage } from "./Script.ts"

/** The `modelId` reported in every response's `response-metadata` part. */
export const modelId = "scripted"

/** A tool result the conversation has seen. */
export interface ToolResult {
  readonly id: string
  readonly name: string
  readonly result: unknown
  readonly isFailure: boolean
}

/** What a `respond` function sees of the conversation. */
export interface Conversation {
  /** The role from the header, as written there (`undefined` without a header). */
  readonly role: string | undefined
  /** The depth from the header (`undefined` without a header). */
  readonly depth: number | undefined
  /** The agent's task: its first user message (after the fork marker, if any). */
  readonly prompt: string
  /** The system prompt (all system messages, joined by newlines). */
  readonly system: string
  /** Assistant messages so far (after the fork marker, if any): 0 on the first request. */
  readonly turn: number
  /** The whole conversation, as the provider received it. */
  readonly messages: ReadonlyArray<Prompt.Message>
  /** Every tool result so far (after the fork marker, if any), in order. */
  readonly toolResults: ReadonlyArray<ToolResult>
  /** The results in the last tool message (empty if there is none). */
  readonly lastToolResults: ReadonlyArray<ToolResult>
  /** The names of the tools offered with this request (the agent's effective tools). */
  readonly tools: ReadonlyArray<string>
}

/** A rule that plays fixed turns: turn i of a matching conversation plays `turns[i]`. */
export interface TurnsRule {
  readonly name?: string
  readonly match?: Match
  readonly turns: ReadonlyArray<Turn>
  /** Past the last turn, replay it instead of failing. */
  readonly repeat_last?: boolean
}

/** A code-defined rule: computes each turn from the conversation. */
export interface RespondRule {
  readonly name?: string
  readonly match?: Match
  readonly respond: (conversation: Conversation) => Turn | Effect.Effect<Turn, AiError.AiError>
}

/** A rule: first match wins. JSON scripts only have `TurnsRule`s. */
export type Rule = TurnsRule | RespondRule

/** A script in code: a decoded JSON `Script`, or rules written in TypeScript (with `respond`). */
export interface ScriptInput {
  readonly description?: string
  readonly rules: ReadonlyArray<Rule>
}

/** A script file could not be read, parsed or decoded. */
export class ScriptFileError extends Schema.TaggedError<ScriptFileError>()("ScriptFileError", {
  path: Schema.String,
  detail: Schema.String
}) {
  override get message() {
    return `cannot load the model script ${this.path}: ${this.detail}`
  }
}

// ---------------------------------------------------------------------------------------------
// Reading the conversation

const HEADER = /^Fibril agent: role=(\S+) depth=(\d+)/
const FORK_MARKER = "[fork]"

/** What one pass over the messages yields; `start` is the first index after the last fork marker. */
interface Seen {
  readonly role: string | undefined
  readonly depth: number | undefined
  readonly prompt: string
  readonly system: string
  readonly turn: number
  readonly start: number
}

const userText = (message: Prompt.UserMessage): string => {
  const parts = message.content
  if (parts.length === 1) return parts[0]!.type === "text" ? parts[0]!.text : ""
  let text = ""
  for (const part of parts) if (part.type === "text") text += part.text
  return text
}

const read = (messages: ReadonlyArray<Prompt.Message>): Seen => {
  let role: string | undefined
  let depth: number | undefined
  let prompt: string | undefined
  let headerText: string | undefined
  let system = ""
  let turn = 0
  let start = 0
  for (let i = 0; i < messages.length; i++) {
    const message = messages[i]!
    switch (message.role) {
      case "system": {
        system = system === "" ? message.content : `${system}\n${message.content}`
        const header = HEADER.exec(message.content)
        if (header !== null) {
          role = header[1]
          depth = Number(header[2])
        }
        break
      }
      case "user": {
        const text = userText(message)
        if (text.startsWith(FORK_MARKER)) {
          start = i + 1
          turn = 0
          prompt = undefined
          headerText = undefined
          break
        }
        // After a fork the child's own header may come as a user message (the role
        // instructions); it sets role and depth and is not the task.
        if (start > 0) {
          const header = HEADER.exec(text)
          if (header !== null) {
            role = header[1]
            depth = Number(header[2])
            headerText ??= text
            break
          }
        }
        prompt ??= text
        break
      }
      case "assistant":
        turn++
        break
      case "tool":
        break
    }
  }
  return { role, depth, prompt: prompt ?? headerText ?? "", system, turn, start }
}

const toolResultsOf = (messages: ReadonlyArray<Prompt.Message>, start: number) => {
  const all: Array<ToolResult> = []
  let last: Array<ToolResult> = []
  for (let i = start; i < messages.length; i++) {
    const message = messages[i]!
    if (message.role !== "tool" && message.role !== "assistant") continue
    const found: Array<ToolResult> = []
    for (const part of message.content) {
      if (part.type === "tool-result") {
        found.push({ id: part.id, name: part.name, result: part.result, isFailure: part.isFailure })
      }
    }
    all.push(...found)
    if (message.role === "tool") last = found
  }
  return { all, last }
}

const conversationOf = (
  seen: Seen,
  messages: ReadonlyArray<Prompt.Message>,
  tools: ReadonlyArray<string> = []
): Conversation => {
  const results = toolResultsOf(messages, seen.start)
  return {
    role: seen.role,
    depth: seen.depth,
    prompt: seen.prompt,
    system: seen.system,
    turn: seen.turn,
    messages,
    toolResults: results.all,
    lastToolResults: results.last,
    tools
  }
}

// JSON text of a value, never throwing (BigInt, cycles): used only for sizes and fingerprints.
const jsonText = (value: unknown): string => {
  if (typeof value === "string") return value
  try {
    return JSON.stringify(value) ?? ""
  } catch {
    return String(value)
  }
}

// Characters of one message's text, cached: a conversation grows by appending, so a message
// object handed in again (a Prompt reused between requests) is not measured twice.
const charCache = new WeakMap<Prompt.Message, number>()

const messageChars = (message: Prompt.Message): number => {
  const cached = charCache.get(message)
  if (cached !== undefined) return cached
  let chars = 0
  if (message.role === "system") {
    chars = message.content.length
  } else {
    for (const part of message.content) {
      switch (part.type) {
        case "text":
        case "reasoning":
          chars += part.text.length
          break
        case "tool-call":
          chars += part.name.length + jsonText(part.params).length
          break
        case "tool-result":
          chars += jsonText(part.result).length
          break
        default:
          break
      }
    }
  }
  charCache.set(message, chars)
  return chars
}

const promptChars = (messages: ReadonlyArray<Prompt.Message>): number => {
  let chars = 0
  for (const message of messages) chars += messageChars(message)
  return chars
}

// FNV-1a over a serialization of the conversation: the key of the attempt counter.
const fingerprint = (messages: ReadonlyArray<Prompt.Message>): string => {
  const text = jsonText(messages.map((message) =>
    message.role === "system"
      ? ["system", message.content]
      : [
        message.role,
        message.content.map((part) => {
          switch (part.type) {
            case "text":
            case "reasoning":
              return part.text
            case "tool-call":
              return [part.id, part.name, part.params]
            case "tool-result":
              return [part.id, part.name, part.isFailure, part.result]
            default:
              return part.type
          }
        })
      ]
  ))
  let hash = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i)
    hash = Math.imul(hash, 0x01000193)
  }
  return `${(hash >>> 0).toString(16)}:${text.length}`
}

// ---------------------------------------------------------------------------------------------
// Rules

interface CompiledRule {
  readonly number: number
  readonly label: string
  readonly role: string | undefined
  readonly depth: number | undefined
  readonly prompt: string | undefined
  readonly system: string | undefined
  readonly turns: ReadonlyArray<Turn>
  readonly repeatLast: boolean
  readonly respond: RespondRule["respond"] | undefined
}

const clip = (text: string, max: number) => JSON.stringify(text.length > max ? `${text.slice(0, max)}…` : text)

const describeMatch = (match: Match | undefined): string => {
  const parts: Array<string> = []
  if (match?.role !== undefined) parts.push(`role=${match.role}`)
  if (match?.depth !== undefined) parts.push(`depth=${match.depth}`)
  if (match?.prompt !== undefined) parts.push(`prompt~${clip(match.prompt, 40)}`)
  if (match?.system !== undefined) parts.push(`system~${clip(match.system, 40)}`)
  return parts.length === 0 ? "matches anything" : parts.join(" ")
}

const compile = (rules: ReadonlyArray<Rule>): ReadonlyArray<CompiledRule> =>
  rules.map((rule, i) => ({
    number: i + 1,
    label: `rule ${i + 1} (${rule.name ?? describeMatch(rule.match)})`,
    role: rule.match?.role?.toLowerCase(),
    depth: rule.match?.depth,
    prompt: rule.match?.prompt,
    system: rule.match?.system,
    turns: "turns" in rule ? rule.turns : [],
    repeatLast: "turns" in rule && rule.repeat_last === true,
    respond: "respond" in rule ? rule.respond : undefined
  }))

const matches = (rule: CompiledRule, seen: Seen): boolean =>
  (rule.role === undefined || (seen.role !== undefined && seen.role.toLowerCase() === rule.role)) &&
  (rule.depth === undefined || seen.depth === rule.depth) &&
  (rule.prompt === undefined || seen.prompt.includes(rule.prompt)) &&
  (rule.system === undefined || seen.system.includes(rule.system))

// ---------------------------------------------------------------------------------------------
// Answers

type Method = "generateText" | "streamText"

const fail = (method: Method, reason: AiError.AiErrorReason) =>
  Effect.fail(AiError.make({ module: "ScriptedModel", method, reason }))

const fatal = (method: Method, description: string) => fail(method, new AiError.InvalidRequestError({ description }))

const scriptedError = (method: Method, error: TurnError) =>
  error.kind === "fatal"
    ? fail(method, new AiError.InvalidRequestError({ description: error.message }))
    : error.retry_after_ms !== undefined
    ? fail(
      method,
      new AiError.RateLimitError({
        retryAfter: Duration.millis(error.retry_after_ms),
        metadata: { message: error.message }
      })
    )
    : fail(method, new AiError.InternalProviderError({ description: error.message }))

/** One answer, rendered as `generateText` parts or as a stream. */
interface Answer {
  readonly text: string | undefined
  readonly toolCalls: ReadonlyArray<Response.ToolCallPartEncoded>
  readonly finish: Response.FinishPartEncoded
}

const metadataPart: Response.ResponseMetadataPartEncoded = { type: "response-metadata", modelId }

const answerOf = (turn: Turn, turnNumber: number, messages: ReadonlyArray<Prompt.Message>): Answer => {
  let replyChars = turn.text?.length ?? 0
  const toolCalls = (turn.tool_calls ?? []).map((call: ToolCall, index): Response.ToolCallPartEncoded => {
    const params = call.args ?? {}
    replyChars += call.name.length + jsonText(params).length
    return { type: "tool-call", id: call.id ?? `call_${turnNumber}_${index}`, name: call.name, params }
  })
  const reason = toolCalls.length > 0 ? "tool-calls" : "stop"
  // `usage: null`: a provider that reports no counts (the runtime must estimate them).
  if (turn.usage === null) {
    return { text: turn.text, toolCalls, finish: { type: "finish", reason, usage: unreported } }
  }
  const input = turn.usage?.input ?? Math.ceil(promptChars(messages) / 4)
  const output = turn.usage?.output ?? Math.ceil(replyChars / 4)
  const cached = turn.usage?.cached ?? 0
  return {
    text: turn.text,
    toolCalls,
    finish: {
      type: "finish",
      reason,
      usage: {
        inputTokens: { total: input, uncached: Math.max(0, input - cached), cacheRead: cached },
        outputTokens: { total: output, text: output }
      }
    }
  }
}

const unreported: Response.FinishPartEncoded["usage"] = {
  inputTokens: { uncached: undefined, total: undefined, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: undefined, text: undefined, reasoning: undefined }
}

const toParts = (answer: Answer): Array<Response.PartEncoded> => {
  const parts: Array<Response.PartEncoded> = [metadataPart]
  if (answer.text !== undefined) parts.push({ type: "text", text: answer.text })
  parts.push(...answer.toolCalls, answer.finish)
  return parts
}

const toStreamParts = (answer: Answer): Array<Response.StreamPartEncoded> => {
  const parts: Array<Response.StreamPartEncoded> = [metadataPart]
  if (answer.text !== undefined) {
    parts.push(
      { type: "text-start", id: "text_0" },
      { type: "text-delta", id: "text_0", delta: answer.text },
      { type: "text-end", id: "text_0" }
    )
  }
  parts.push(...answer.toolCalls, answer.finish)
  return parts
}

/**
 * Builds the model for a script. Decode JSON with `Script` first (or use `layerFile`); rules in
 * code may use `respond` instead of `turns`.
 *
 * @example
 * ```ts
 * const model = yield* ScriptedModel.make({
 *   rules: [
 *     { match: { role: "explore" }, turns: [{ tool_calls: [{ name: "read_file", args: { path: "a.ts" } }] }, { text: "done" }] },
 *     { respond: (c) => ({ text: `turn ${c.turn} of ${c.role}` }) }
 *   ]
 * })
 * ```
 */
export const make = (script: ScriptInput): Effect.Effect<LanguageModel.LanguageModel> =>
  Effect.suspend(() => {
    const rules = compile(script.rules)
    const attempts = new Map<string, number>()

    // 1-based attempt number of this request at (rule, turn, conversation).
    const attempt = (rule: CompiledRule, turnNumber: number, messages: ReadonlyArray<Prompt.Message>): number => {
      const key = `${rule.number}:${turnNumber}:${fingerprint(messages)}`
      const n = (attempts.get(key) ?? 0) + 1
      attempts.set(key, n)
      return n
    }

    const play = (
      method: Method,
      rule: CompiledRule,
      turnNumber: number,
      turn: Turn,
      messages: ReadonlyArray<Prompt.Message>
    ): Effect.Effect<Answer, AiError.AiError> => {
      const counted = turn.error?.times !== undefined || typeof turn.hang === "object"
      const n = counted ? attempt(rule, turnNumber, messages) : 0
      const outcome: Effect.Effect<Answer, AiError.AiError> =
        turn.error !== undefined && (turn.error.times === undefined || n <= turn.error.times)
          ? scriptedError(method, turn.error)
          : turn.hang === true || (typeof turn.hang === "object" && n <= turn.hang.times)
          ? Effect.never
          : Effect.sync(() => answerOf(turn, turnNumber, messages))
      return turn.delay_ms !== undefined && turn.delay_ms > 0
        ? Effect.andThen(Effect.sleep(Duration.millis(turn.delay_ms)), outcome)
        : outcome
    }

    const answer = (method: Method, options: DirectModel.Request): Effect.Effect<Answer, AiError.AiError> =>
      Effect.suspend(() => {
        const messages = options.prompt.content
        const seen = read(messages)
        const rule = rules.find((candidate) => matches(candidate, seen))
        if (rule === undefined) {
          return fatal(
            method,
            `ScriptedModel: no rule matches this conversation (role=${seen.role ?? "<no header>"} depth=${
              seen.depth ?? "<no header>"
            } prompt=${clip(seen.prompt, 80)}); the script has ${rules.length} rule(s)${
              rules.length === 0 ? "" : `: ${rules.map((r) => r.label).join(", ")}`
            }`
          )
        }
        if (rule.respond !== undefined) {
          const out = rule.respond(conversationOf(seen, messages, options.tools.map((tool) => tool.name)))
          return Effect.flatMap(
            Effect.isEffect(out) ? out : Effect.succeed(out),
            (turn) => play(method, rule, seen.turn, turn, messages)
          )
        }
        const turn = rule.turns[seen.turn] ?? (rule.repeatLast ? rule.turns.at(-1) : undefined)
        if (turn === undefined) {
          return fatal(
            method,
            `ScriptedModel: ${rule.label} has ${rule.turns.length} turn${
              rule.turns.length === 1 ? "" : "s"
            }; the conversation is at turn ${seen.turn + 1}`
          )
        }
        return play(method, rule, seen.turn, turn, messages)
      })

    const provider = {
      generateText: (options: LanguageModel.ProviderOptions) => Effect.map(answer("generateText", options), toParts),
      streamText: (options: LanguageModel.ProviderOptions) =>
        Stream.fromArrayEffect(Effect.map(answer("streamText", options), toStreamParts))
    }
    // `LanguageModel.make` keeps one response decoder, for the last toolkit it saw: agents with
    // different tools (a root and its sub-agents) calling in turn would rebuild it on every
    // request. One model per set of tool names keeps each decoder (make still checks that the
    // tools are the same ones before reusing it).
    // The agent loop's calls go straight to the script (DirectModel), without the decode above.
    return Effect.flatMap(LanguageModel.make(provider), (first) => {
      const byTools = new Map<string, LanguageModel.LanguageModel>()
      const modelFor = (toolkit: unknown): Effect.Effect<LanguageModel.LanguageModel> => {
        const tools = (toolkit as { readonly tools?: Record<string, unknown> } | undefined)?.tools
        if (tools === undefined) return Effect.succeed(first)
        const key = Object.keys(tools).join(",")
        const found = byTools.get(key)
        if (found !== undefined) return Effect.succeed(found)
        return Effect.tap(LanguageModel.make(provider), (made) => Effect.sync(() => void byTools.set(key, made)))
      }
      const model = LanguageModel.LanguageModel.of({
        ...first,
        generateText: ((options: { readonly toolkit?: unknown }) =>
          Effect.flatMap(
            modelFor(options.toolkit),
            (byToolkit) => byToolkit.generateText(options as never)
          )) as unknown as LanguageModel.LanguageModel["generateText"],
        streamText: ((options: { readonly toolkit?: unknown }) =>
          Stream.unwrap(Effect.map(
            modelFor(options.toolkit),
            (byToolkit) => byToolkit.streamText(options as never)
          ))) as unknown as LanguageModel.LanguageModel["streamText"]
      })
      return DirectModel.make(model, (request) => Effect.map(answer("generateText", request), toParts))
    })
  })

/** The scripted model as the `LanguageModel` service. Each build has its own attempt counters. */
export const layer = (script: ScriptInput): Layer.Layer<LanguageModel.LanguageModel> =>
  Layer.effect(LanguageModel.LanguageModel, make(script))

/** Reads and decodes a JSON script file; every failure is a `ScriptFileError` naming the file. */
export const load = Effect.fn("ScriptedModel.load")(function*(path: string) {
  const fs = yield* FileSystem.FileSystem
  const text = yield* fs.readFileString(path).pipe(
    Effect.mapError((error) => new ScriptFileError({ path, detail: `cannot read it: ${error.message}` }))
  )
  const json = yield* Effect.try({
    try: (): unknown => JSON.parse(text),
    catch: (error) =>
      new ScriptFileError({ path, detail: `invalid JSON: ${error instanceof Error ? error.message : String(error)}` })
  })
  return yield* Schema.decodeUnknownEffect(Script)(json).pipe(
    Effect.mapError((error) => new ScriptFileError({ path, detail: `not a valid script:\n${error.message}` }))
  )
})

/**
 * The scripted model from a JSON script file (see `docs/script-format.md`).
 *
 * @example
 * ```ts
 * program.pipe(Effect.provide(ScriptedModel.layerFile("scripts/demo.json")), Effect.provide(NodeServices.layer))
 * ```
 */
export const layerFile = (
  path: string
): Layer.Layer<LanguageModel.LanguageModel, ScriptFileError, FileSystem.FileSystem> =>
  Layer.effect(LanguageModel.LanguageModel, Effect.flatMap(load(path), make))
