/**
 * glob — find files by name pattern under a workspace directory.
 *
 * Matching is `GlobPattern` (matchesGlob's syntax, linear time); walking is `Walk`,
 * so `.git`, `node_modules` and anything outside the workspace stay invisible. Results are
 * workspace-relative and sorted; the list is capped with a note so a too-broad pattern
 * tells the model to narrow it.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { text } from "../internal/resource.ts"
import * as ToolRegistry from "../ToolRegistry.ts"
import { Workspace } from "../Workspace.ts"
import { fsFailure } from "./Common.ts"
import * as Walk from "./Walk.ts"

export const name = "glob"
export const maxResults = 1000

export const Parameters = Schema.Struct({
  pattern: Schema.String.annotate({
    description:
      "Glob such as \"**/*.ts\", \"src/**/*.test.ts\" or \"*.{json,md}\", matched against paths relative to `path`"
  }),
  path: Schema.optionalKey(
    Schema.String.annotate({ description: "Directory to search, relative to the workspace root (default: the root)" })
  )
})
export type Parameters = typeof Parameters.Type

/** The search, under a scope that closes every descriptor the walk opened. */
const find = Effect.fnUntraced(function*(params: Parameters) {
  const workspace = yield* Workspace
  const given = params.path ?? "."
  const start = yield* workspace.open(given).pipe(
    Effect.catchTag("PlatformError", (error) => Effect.fail(fsFailure(name, given)(error)))
  )
  if (start.type === undefined) {
    return yield* new ToolRegistry.ToolFailure({ tool: name, reason: `path not found: "${given}"` })
  }

  const glob = yield* Walk.glob(name, params.pattern)
  const found: Array<string> = []
  let capped = false
  yield* Walk.files(start, (entry) =>
    Effect.sync(() => {
      if (!Walk.matches(glob, entry)) return true
      if (found.length >= maxResults) {
        capped = true
        return false
      }
      found.push(entry.relative)
      return true
    }))
  found.sort()

  if (found.length === 0) return `No files match "${params.pattern}" under ${workspace.relative(start.real)}`
  if (capped) found.push(`[showing the first ${maxResults} matches; narrow the pattern or path]`)
  return found.join("\n")
})

export const definition = ToolRegistry.define({
  name,
  description: text("./glob.md", import.meta.url),
  parameters: Parameters,
  posture: "read",
  handler: Effect.fn("tool.glob")(function*(params: Parameters) {
    return yield* Effect.scoped(find(params))
  })
})
