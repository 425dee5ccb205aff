/**
 * The `effect/ai` prompt messages and parts an agent's run makes, built as object literals of one
 * shape each: the values `Prompt.makeMessage` and `Prompt.makePart` return, field for field.
 *
 * `makePart` and `makeMessage` spread their parameters into a new object. One spread site sees
 * every kind of part and message, so V8's cache for it goes megamorphic in a running agent:
 * about 330 ns a part where a literal takes about 20 (measured on the benchmark's machine), and
 * a sub-agent's run makes a dozen or more. The type markers are read from values
 * `effect/ai` built, so they cannot drift from the library's; `parts.test.ts` checks each
 * constructor against `makePart`/`makeMessage`.
 */
import * as Prompt from "effect/ai/Prompt"

const markerOf = (value: object): string => {
  const marker = Object.keys(value).find((key) => (value as Record<string, unknown>)[key] === key)
  if (marker === undefined) throw new Error("effect/ai's prompt values carry no type marker")
  return marker
}
const partMarker = markerOf(Prompt.makePart("text", { text: "" }))
const messageMarker = markerOf(Prompt.makeMessage("user", { content: [] }))

export const textPart = (text: string): Prompt.TextPart =>
  ({ text, [partMarker]: partMarker, type: "text", options: {} }) as unknown as Prompt.TextPart

export const reasoningPart = (text: string): Prompt.ReasoningPart =>
  ({ text, [partMarker]: partMarker, type: "reasoning", options: {} }) as unknown as Prompt.ReasoningPart

export const toolCallPart = (id: string, name: string, params: unknown): Prompt.ToolCallPart =>
  ({
    id,
    name,
    params,
    providerExecuted: false,
    [partMarker]: partMarker,
    type: "tool-call",
    options: {}
  }) as unknown as Prompt.ToolCallPart

export const toolResultPart = (id: string, name: string, isFailure: boolean, result: unknown): Prompt.ToolResultPart =>
  ({
    id,
    name,
    isFailure,
    result,
    providerExecuted: false,
    [partMarker]: partMarker,
    type: "tool-result",
    options: {}
  }) as unknown as Prompt.ToolResultPart

export const systemMessage = (content: string): Prompt.SystemMessage =>
  ({ content, [messageMarker]: messageMarker, role: "system", options: {} }) as unknown as Prompt.SystemMessage

export const userMessage = (content: ReadonlyArray<Prompt.UserMessagePart>): Prompt.UserMessage =>
  ({ content, [messageMarker]: messageMarker, role: "user", options: {} }) as unknown as Prompt.UserMessage

/** A user message of one text part. */
export const userText = (text: string): Prompt.UserMessage => userMessage([textPart(text)])

export const assistantMessage = (content: ReadonlyArray<Prompt.AssistantMessagePart>): Prompt.AssistantMessage =>
  ({ content, [messageMarker]: messageMarker, role: "assistant", options: {} }) as unknown as Prompt.AssistantMessage

export const toolMessage = (content: ReadonlyArray<Prompt.ToolMessagePart>): Prompt.ToolMessage =>
  ({ content, [messageMarker]: messageMarker, role: "tool", options: {} }) as unknown as Prompt.ToolMessage
