/**
 * remember — keep a note for later sessions in the workspace's memory file.
 *
 * The note is appended as one bullet to `.fibril/memory.md` (see `Memory`), whose content
 * later sessions see in their system prompt. The tool has its own posture, `memory`, so
 * permissions can deny leaving notes without denying file writes; but a note reaches every
 * later agent's prompt, so it is also a write (Permission, rule 3): it needs the `write`
 * posture too, and the memory file must be inside the agent's write scope. Read-only roles
 * can therefore never remember.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { text } from "../internal/resource.ts"
import { defaultPath, maxNoteChars, Memory, normalize } from "../Memory.ts"
import * as ToolRegistry from "../ToolRegistry.ts"

export const name = "remember"

export const Parameters = Schema.Struct({
  note: Schema.String.annotate({
    description:
      `One self-contained fact worth knowing in later sessions, as a single line (at most ${maxNoteChars} characters)`
  })
})
export type Parameters = typeof Parameters.Type

/** `remember` writing to the memory file at `file` (absolute, or relative to the workspace). */
export const definitionFor = (file: string) =>
  ToolRegistry.define({
    name,
    description: text("./remember.md", import.meta.url),
    parameters: Parameters,
    posture: "memory",
    // The file a note lands in: checked against the write scope before the handler runs.
    paths: () => [file],
    handler: Effect.fn("tool.remember")(function*(params: Parameters) {
      const memory = yield* Memory
      const bullet = yield* memory.remember(params.note)
      return normalize(params.note).truncated
        ? `remembered (shortened to ${maxNoteChars} characters): ${bullet}`
        : `remembered: ${bullet}`
    })
  })

/** `remember` on the default memory file (`.fibril/memory.md`). */
export const definition = definitionFor(defaultPath)

/** Registers `remember` on the Memory in context (its file is what permissions check). */
export const layer: Layer.Layer<never, ToolRegistry.DuplicateTool, ToolRegistry.ToolRegistry | Memory> = Layer
  .effectDiscard(Effect.gen(function*() {
    const memory = yield* Memory
    const registry = yield* ToolRegistry.ToolRegistry
    yield* registry.register(definitionFor(memory.path))
  }))
