/**
 * edit_file — replace an exact string in a workspace file.
 *
 * Exact matching (no regex, no fuzzy whitespace) makes an edit either do precisely what
 * the model asked or fail with a reason it can act on: not found, or ambiguous (several
 * matches without `replace_all`), so an edit never lands on the wrong occurrence.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { text } from "../internal/resource.ts"
import * as ToolRegistry from "../ToolRegistry.ts"
import { Workspace } from "../Workspace.ts"
import { decodeUtf8, fsFailure, looksBinary, plural } from "./Common.ts"

export const name = "edit_file"

export const Parameters = Schema.Struct({
  path: Schema.String.annotate({ description: "File to edit, relative to the workspace root (or absolute inside it)" }),
  old_string: Schema.String.annotate({
    description: "The exact text to replace, including whitespace and indentation; must occur in the file"
  }),
  new_string: Schema.String.annotate({ description: "The text to put in its place (must differ from old_string)" }),
  replace_all: Schema.optionalKey(
    Schema.Boolean.annotate({
      description: "Replace every occurrence instead of requiring exactly one (default false)"
    })
  )
})
export type Parameters = typeof Parameters.Type

const utf8 = new TextEncoder()

/** Non-overlapping occurrences of `needle`, left to right (what a replacement would touch). */
const count = (haystack: string, needle: string): number => {
  let n = 0
  for (let at = haystack.indexOf(needle); at !== -1; at = haystack.indexOf(needle, at + needle.length)) n++
  return n
}

export const definition = ToolRegistry.define({
  name,
  description: text("./edit_file.md", import.meta.url),
  parameters: Parameters,
  posture: "write",
  paths: (params) => [params.path],
  handler: Effect.fn("tool.edit_file")(function*(params: Parameters) {
    const workspace = yield* Workspace
    const fail = (reason: string) => new ToolRegistry.ToolFailure({ tool: name, reason })
    if (params.old_string === "") {
      return yield* fail("old_string is empty; to create or overwrite a whole file use write_file")
    }
    if (params.old_string === params.new_string) {
      return yield* fail("old_string and new_string are identical; nothing would change")
    }
    // Read and replaced through one handle: the edit lands on the file it was computed from.
    return yield* Effect.scoped(Effect.gen(function*() {
      const file = yield* workspace.open(params.path).pipe(
        Effect.catchTag("PlatformError", (error) => Effect.fail(fsFailure(name, params.path)(error)))
      )
      if (file.type === undefined) return yield* fail(`file not found: "${params.path}"; use write_file to create it`)
      if (file.type !== "File") return yield* fail(`"${params.path}" is not a regular file`)

      const bytes = yield* file.read.pipe(Effect.mapError(fsFailure(name, params.path)))
      if (looksBinary(bytes)) return yield* fail(`"${params.path}" looks like a binary file (it contains NUL bytes)`)
      const content = decodeUtf8(bytes)
      const found = count(content, params.old_string)
      if (found === 0) return yield* fail(`old_string not found in ${params.path}`)
      if (found > 1 && params.replace_all !== true) {
        return yield* fail(
          `old_string occurs ${found} times in ${params.path}; add surrounding context to make it unique, or pass replace_all: true to replace all ${found}`
        )
      }
      // split/join and slicing, not String.replace: `$&`, `$1`… in new_string must stay literal.
      const updated = params.replace_all === true
        ? content.split(params.old_string).join(params.new_string)
        : (() => {
          const at = content.indexOf(params.old_string)
          return content.slice(0, at) + params.new_string + content.slice(at + params.old_string.length)
        })()
      yield* file.replace(utf8.encode(updated)).pipe(Effect.mapError(fsFailure(name, params.path)))
      return `replaced ${plural(found, "occurrence")} in ${workspace.relative(file.real)}`
    }))
  })
})
