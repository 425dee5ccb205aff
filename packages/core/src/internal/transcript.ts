/**
 * Transcript messages as the store keeps them: one JSON value per `effect/ai` prompt message.
 *
 * Plain messages are written in a compact form — their own fields without the Prompt type
 * markers and empty `options` — which the `Prompt.Message` schema decodes back as is; only a
 * message with a file part (binary data) goes through the Schema encoder. This runs for every
 * message of every agent on a durable store, and the compact form is about half the bytes.
 */
import * as Prompt from "effect/ai/Prompt"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"

const TranscriptMessages = Schema.Array(Prompt.Message)
const encodeWithSchema = Schema.encodeUnknownEffect(TranscriptMessages)
export const decode = Schema.decodeUnknownEffect(TranscriptMessages)

const typeMarker = "~effect/ai/Prompt/"

const isEmptyObject = (value: unknown): boolean =>
  typeof value === "object" && value !== null && Object.keys(value).length === 0

/** The object's own fields, without type markers and without empty `options`. */
const compactObject = (value: object): Record<string, unknown> => {
  const out: Record<string, unknown> = {}
  for (const key of Object.keys(value)) {
    if (key.startsWith(typeMarker)) continue
    const field = (value as Record<string, unknown>)[key]
    if (key === "options" && isEmptyObject(field)) continue
    out[key] = field
  }
  return out
}

const hasBinary = (message: Prompt.Message): boolean =>
  typeof message.content !== "string" && message.content.some((part) => part.type === "file")

const compact = (message: Prompt.Message): unknown => {
  const out = compactObject(message)
  if (typeof message.content !== "string") out["content"] = message.content.map(compactObject)
  return out
}

/** JSON-ready values of the messages, computed at once; undefined when one has binary data (see `encode`). */
export const encodePlain = (messages: ReadonlyArray<Prompt.Message>): ReadonlyArray<unknown> | undefined =>
  messages.some(hasBinary) ? undefined : messages.map(compact)

/** JSON-ready values of the messages. */
export const encode = (messages: ReadonlyArray<Prompt.Message>): Effect.Effect<ReadonlyArray<unknown>> => {
  const plain = encodePlain(messages)
  return plain === undefined ? Effect.orDie(encodeWithSchema(messages)) : Effect.succeed(plain)
}

/** Consecutive tool messages as one: the store keeps each tool result as its own message, as it lands. */
export const mergeToolMessages = (messages: ReadonlyArray<Prompt.Message>): Array<Prompt.Message> => {
  const out: Array<Prompt.Message> = []
  for (const message of messages) {
    const last = out.at(-1)
    if (message.role === "tool" && last?.role === "tool") {
      out[out.length - 1] = Prompt.makeMessage("tool", { content: [...last.content, ...message.content] })
    } else out.push(message)
  }
  return out
}
