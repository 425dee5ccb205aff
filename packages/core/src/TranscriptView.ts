/**
 * TranscriptView — a transcript read by its handle, a page at a time, as text.
 *
 * A parent looks into a child's work on demand (`handle_read`, `fibril agents transcript`)
 * instead of having it enter its context by default: each call returns a bounded page of
 * messages, each message rendered to text (tool calls as `→ name {args}`, results as
 * `← name {result}`) and cut when long, with the offset of the next page.
 */
import type * as Prompt from "effect/ai/Prompt"
import * as Schema from "effect/Schema"

export const defaultLimit = 20
export const maxLimit = 100
/** Characters of one message's text on a page; the rest is cut, marked. */
export const maxMessageChars = 4_000
/** Characters of a whole page: once past them, the page ends (always at least one message). */
export const maxPageChars = 32_000

export const PagedMessage = Schema.Struct({
  /** Its position in the transcript, from 0 (the system message). */
  index: Schema.Int,
  role: Schema.String,
  text: Schema.String,
  /** Characters cut from the end of `text`. */
  cut: Schema.optionalKey(Schema.Int)
})
export type PagedMessage = typeof PagedMessage.Type

export const Page = Schema.Struct({
  handle: Schema.String,
  agent_id: Schema.optionalKey(Schema.String),
  /** Messages in the whole transcript. */
  total: Schema.Int,
  offset: Schema.Int,
  messages: Schema.Array(PagedMessage),
  /** Pass as `offset` for the next page; absent on the last page. */
  next_offset: Schema.optionalKey(Schema.Int)
})
export type Page = typeof Page.Type

const json = (value: unknown): string => {
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}

/** A message as text. */
export const render = (message: Prompt.Message): string =>
  typeof message.content === "string" ? message.content : message.content.map((part) => {
    switch (part.type) {
      case "text":
        return part.text
      case "reasoning":
        return `(reasoning) ${part.text}`
      case "tool-call":
        return `→ ${part.name} ${json(part.params)}`
      case "tool-result":
        return `← ${part.name}${part.isFailure ? " (failed)" : ""} ${json(part.result)}`
      default:
        return `[${part.type}]`
    }
  }).join("\n")

const cut = (text: string, max: number): { readonly text: string; readonly cut?: number } => {
  if (text.length <= max) return { text }
  const low = text.charCodeAt(max)
  const at = low >= 0xdc00 && low <= 0xdfff ? max - 1 : max
  return { text: text.slice(0, at), cut: text.length - at }
}

/**
 * The page of `messages` from `offset` (default 0), at most `limit` messages (default 20,
 * at most 100) and about `maxPageChars` characters.
 */
export const page = (
  messages: ReadonlyArray<Prompt.Message>,
  options: {
    readonly handle: string
    readonly agentId?: string | undefined
    readonly offset?: number | undefined
    readonly limit?: number | undefined
    readonly messageChars?: number | undefined
  }
): Page => {
  const offset = Math.max(0, Math.floor(options.offset ?? 0))
  const limit = Math.min(maxLimit, Math.max(1, Math.floor(options.limit ?? defaultLimit)))
  const perMessage = options.messageChars ?? maxMessageChars
  const out: Array<PagedMessage> = []
  let chars = 0
  let index = offset
  for (; index < messages.length && out.length < limit; index++) {
    if (out.length > 0 && chars >= maxPageChars) break
    const message = messages[index]!
    const shown = cut(render(message), perMessage)
    chars += shown.text.length
    out.push({ index, role: message.role, ...shown })
  }
  return {
    handle: options.handle,
    ...(options.agentId === undefined ? {} : { agent_id: options.agentId }),
    total: messages.length,
    offset,
    messages: out,
    ...(index < messages.length ? { next_offset: index } : {})
  }
}
