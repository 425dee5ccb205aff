/**
 * Loop step: resolve a model turn.
 *
 * Turns the model's response into the assistant message appended to history, the tool
 * calls to run (arguments still undecoded: the tool step validates them so a malformed
 * call becomes a result the model can correct) and the turn's usage.
 */
import * as Prompt from "effect/ai/Prompt"
import * as Parts from "../internal/parts.ts"
import * as Usage from "../Usage.ts"
import type { Response } from "./CallModel.ts"

export interface ToolCall {
  readonly id: string
  readonly name: string
  readonly params: unknown
}

export interface Turn {
  readonly text: string
  readonly toolCalls: ReadonlyArray<ToolCall>
  readonly usage: Usage.Usage
  /** Did the provider report this turn's usage (input or output tokens)? */
  readonly usageReported: boolean
  readonly assistant: Prompt.AssistantMessage
}

export const resolveTurn = (response: Response): Turn => {
  const content: Array<Prompt.AssistantMessagePart> = []
  const toolCalls: Array<ToolCall> = []
  let text = ""
  let usage: Usage.Usage | undefined
  let usageReported = false
  for (const part of response.content) {
    switch (part.type) {
      case "text":
        text += part.text
        content.push(Parts.textPart(part.text))
        break
      case "reasoning":
        content.push(Parts.reasoningPart(part.text))
        break
      case "tool-call":
        if (part.providerExecuted) break
        toolCalls.push({ id: part.id, name: part.name, params: part.params })
        content.push(Parts.toolCallPart(part.id, part.name, part.params))
        break
      case "finish":
        usage = Usage.fromResponse(part.usage)
        usageReported = part.usage.inputTokens.total !== undefined || part.usage.outputTokens.total !== undefined
        break
    }
  }
  return {
    text,
    toolCalls,
    usage: usage ?? { input: 0, output: 0, cached: 0 },
    usageReported,
    assistant: Parts.assistantMessage(content)
  }
}
