/**
 * The `effect/ai` prompt messages and parts an agent's run makes, built as object literals of one
 * shape each: the values `Prompt.makeMessage` and `Prompt.makePart` return, field for field.
 *
 * `makePart` and `makeMessage` spread their parameters into a new object. One spread site sees
 * every kind of part and message, so V8's cache for it goes megamorphic in a running agent:
 * about 330 ns a part where a literal takes about 20 (measured on the benchmark's machine), and
 * a sub-agent's run makes a dozen or more. `Parts.test.ts` checks each constructor against
 * `makePart`/`makeMessage`.
 */
import * as Prompt from "effect/ai/Prompt"

// The markers as literal keys: a literal with a computed key is built a field at a time, one
// with constant keys is copied from its template at once. `Parts.test.ts` checks every value
// here against the one `effect/ai` builds, markers included.

export const textPart = (text: string): Prompt.TextPart =>
  ({
    text,
    "~effect/ai/Prompt/Part": "~effect/ai/Prompt/Part",
    type: "text",
    options: {}
  }) as unknown as Prompt.TextPart

export const reasoningPart = (text: string): Prompt.ReasoningPart =>
  ({
    text,
    "~effect/ai/Prompt/Part": "~effect/ai/Prompt/Part",
    type: "reasoning",
    options: {}
  }) as unknown as Prompt.ReasoningPart

export const toolCallPart = (id: string, name: string, params: unknown): Prompt.ToolCallPart =>
  ({
    id,
    name,
    params,
    providerExecuted: false,
    "~effect/ai/Prompt/Part": "~effect/ai/Prompt/Part",
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
    "~effect/ai/Prompt/Part": "~effect/ai/Prompt/Part",
    type: "tool-result",
    options: {}
  }) as unknown as Prompt.ToolResultPart

// Every message has the same fields (the role is a value, not a key): one literal, one shape.
const message = <M>(role: Prompt.Message["role"], content: unknown): M =>
  ({
    content,
    "~effect/ai/Prompt/Message": "~effect/ai/Prompt/Message",
    role,
    options: {}
  }) as unknown as M

export const systemMessage = (content: string): Prompt.SystemMessage => message("system", content)

export const userMessage = (content: ReadonlyArray<Prompt.UserMessagePart>): Prompt.UserMessage =>
  message("user", content)

/** A user message of one text part. */
export const userText = (text: string): Prompt.UserMessage => userMessage([textPart(text)])

export const assistantMessage = (content: ReadonlyArray<Prompt.AssistantMessagePart>): Prompt.AssistantMessage =>
  message("assistant", content)

export const toolMessage = (content: ReadonlyArray<Prompt.ToolMessagePart>): Prompt.ToolMessage =>
  message("tool", content)
