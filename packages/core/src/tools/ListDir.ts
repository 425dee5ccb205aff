/**
 * list_dir — the entries of one workspace directory, sorted, directories marked with `/`.
 *
 * One level only: recursive listings are what `glob` is for, and they blow up on real
 * repositories. A symlink is shown by what it points to (a linked directory gets `/`);
 * one that leads out of the workspace is labelled so, and its target is never touched.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { text } from "../internal/resource.ts"
import * as ToolRegistry from "../ToolRegistry.ts"
import { Workspace } from "../Workspace.ts"
import { fsFailure, plural } from "./Common.ts"

export const name = "list_dir"
/** Entries shown at most; the rest are counted. */
export const maxEntries = 1000

export const Parameters = Schema.Struct({
  path: Schema.optionalKey(
    Schema.String.annotate({ description: "Directory to list, relative to the workspace root (default: the root)" })
  )
})
export type Parameters = typeof Parameters.Type

export const definition = ToolRegistry.define({
  name,
  description: text("./list_dir.md", import.meta.url),
  parameters: Parameters,
  posture: "read",
  handler: Effect.fn("tool.list_dir")(function*(params: Parameters) {
    const workspace = yield* Workspace
    const given = params.path ?? "."
    const fail = (reason: string) => new ToolRegistry.ToolFailure({ tool: name, reason })

    const { names, absolute } = yield* Effect.scoped(Effect.gen(function*() {
      const directory = yield* workspace.open(given).pipe(
        Effect.catchTag("PlatformError", (error) => Effect.fail(fsFailure(name, given)(error)))
      )
      if (directory.type === undefined) return yield* fail(`directory not found: "${given}"`)
      if (directory.type !== "Directory") {
        return yield* fail(`"${given}" is not a directory; use read_file to read a file`)
      }
      const entries = yield* directory.entries.pipe(Effect.mapError(fsFailure(name, given)))
      const relative = workspace.relative(directory.real)
      const listed = yield* Effect.forEach(entries, ({ name: entry, type }) =>
        type === "Directory"
          ? Effect.succeed(`${entry}/`)
          : type === "SymbolicLink" || type === "Unknown"
          // Resolved the way every tool resolves it (checked, never followed out), only to label it.
          ? Effect.scoped(workspace.open(relative === "." ? entry : `${relative}/${entry}`)).pipe(
            Effect.map((target) => (target.type === "Directory" ? `${entry}/` : entry)),
            Effect.catchTag("OutsideWorkspace", () => Effect.succeed(`${entry} (symlink to outside the workspace)`)),
            Effect.orElseSucceed(() => entry)
          )
          : Effect.succeed(entry))
      return { names: listed, absolute: directory.real }
    }))
    names.sort()

    const relative = workspace.relative(absolute)
    if (names.length === 0) return `(${relative} is empty)`
    const shown = names.slice(0, maxEntries)
    if (names.length > maxEntries) {
      shown.push(`... ${plural(names.length - maxEntries, "more entry", "more entries")} not shown; use glob to search`)
    }
    return shown.join("\n")
  })
})
