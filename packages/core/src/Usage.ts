/**
 * Token usage: input, output and cached input tokens. Accumulators are plain mutable
 * records because they are bumped on every model step of every agent.
 *
 * `Usage` is the one schema of token counts: a record's `tokens`, a journaled model step's
 * `usage` (AgentSteps) and a cluster agent's row. Counts are whole tokens.
 */
import type * as Prompt from "effect/ai/Prompt"
import type * as Response from "effect/ai/Response"
import * as Schema from "effect/Schema"

export const Usage = Schema.Struct({ input: Schema.Int, output: Schema.Int, cached: Schema.Int })
export type Usage = typeof Usage.Type

/** No tokens (a value: `zero` gives an accumulator). */
export const none: Usage = { input: 0, output: 0, cached: 0 }

export interface MutableUsage {
  input: number
  output: number
  cached: number
}

export const zero = (): MutableUsage => ({ input: 0, output: 0, cached: 0 })

export const add = (into: MutableUsage, usage: Usage): void => {
  into.input += usage.input
  into.output += usage.output
  into.cached += usage.cached
}

export const snapshot = (usage: Usage): Usage => ({ input: usage.input, output: usage.output, cached: usage.cached })

export const total = (usage: Usage): number => usage.input + usage.output

/** Reads an `effect/ai` finish-part usage (all fields optional) as numbers. */
export const fromResponse = (usage: Response.Usage | undefined): Usage => ({
  input: usage?.inputTokens.total ?? 0,
  output: usage?.outputTokens.total ?? 0,
  cached: usage?.inputTokens.cacheRead ?? 0
})

/** Characters of a message's content that a model reads (text, tool calls and results). */
const messageChars = (message: Prompt.Message): number => {
  if (typeof message.content === "string") return message.content.length
  let chars = 0
  for (const part of message.content) {
    switch (part.type) {
      case "text":
      case "reasoning":
        chars += part.text.length
        break
      case "tool-call":
        chars += part.name.length + (JSON.stringify(part.params)?.length ?? 0)
        break
      case "tool-result":
        chars += part.name.length + (JSON.stringify(part.result)?.length ?? 0)
        break
    }
  }
  return chars
}

/**
 * An estimate of a model step's usage when the provider reported none: characters / 4 of
 * the request (`messages`) and of the answer. Only used for such steps; the record then says
 * its usage is `estimated`.
 */
export const estimate = (messages: ReadonlyArray<Prompt.Message>, answer: Prompt.Message): Usage => {
  let input = 0
  for (const message of messages) input += messageChars(message)
  return { input: tokensOfChars(input), output: tokensOfChars(messageChars(answer)), cached: 0 }
}

/** Tokens of `chars` characters as `estimate` counts them (and so the token budgets charge them). */
export const tokensOfChars = (chars: number): number => Math.ceil(chars / 4)
