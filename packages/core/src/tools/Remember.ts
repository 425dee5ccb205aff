/**
 * remember — keep a note for later sessions in the workspace's memory file.
 *
 * The note is appended as one bullet to `.fibril/memory.md` (see `Memory`), whose content
 * later sessions see in their system prompt. The tool has its own posture, `memory`, so
 * permissions can allow or deny leaving notes independently of writing files.
 */
import { Effect, Layer, Schema } from "effect"
import { text } from "../internal/resource.ts"
import { Memory, maxNoteChars, normalize } from "../Memory.ts"
import * as ToolRegistry from "../ToolRegistry.ts"

export const name = "remember"

export const Parameters = Schema.Struct({
  note: Schema.String.annotate({
    description: `One self-contained fact worth knowing in later sessions, as a single line (at most ${maxNoteChars} characters)`
  })
})
export type Parameters = typeof Parameters.Type

export const definition = ToolRegistry.define({
  name,
  description: text("./remember.md", import.meta.url),
  parameters: Parameters,
  posture: "memory",
  handler: Effect.fn("tool.remember")(function*(params: Parameters) {
    const memory = yield* Memory
    const bullet = yield* memory.remember(params.note)
    return normalize(params.note).truncated
      ? `remembered (shortened to ${maxNoteChars} characters): ${bullet}`
      : `remembered: ${bullet}`
  })
})

/** Registers `remember`; needs the Memory it writes to. */
export const layer: Layer.Layer<never, ToolRegistry.DuplicateTool, ToolRegistry.ToolRegistry | Memory> = Layer
  .effectDiscard(ToolRegistry.ToolRegistry.use((registry) => registry.register(definition)))
