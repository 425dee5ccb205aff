/**
 * write_file — create or overwrite a workspace file with the given content.
 *
 * Parent directories are created. The file is reached through `Workspace.open`: each directory
 * on the way is opened and verified inside the workspace (created there, one at a time, when
 * missing), and the content goes to a temporary file in that verified directory, renamed over
 * the target: a directory swapped for a link to outside while this runs cannot redirect the
 * write, and a reader never sees a half-written file. An existing file keeps its mode.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { text } from "../internal/resource.ts"
import * as ToolRegistry from "../ToolRegistry.ts"
import { Workspace } from "../Workspace.ts"
import { fsFailure, plural } from "./Common.ts"

export const name = "write_file"

export const Parameters = Schema.Struct({
  path: Schema.String.annotate({
    description: "File to write, relative to the workspace root (or absolute inside it)"
  }),
  content: Schema.String.annotate({ description: "The complete new content of the file" })
})
export type Parameters = typeof Parameters.Type

const utf8 = new TextEncoder()

export const definition = ToolRegistry.define({
  name,
  description: text("./write_file.md", import.meta.url),
  parameters: Parameters,
  posture: "write",
  paths: (params) => [params.path],
  handler: Effect.fn("tool.write_file")(function*(params: Parameters) {
    const workspace = yield* Workspace
    const bytes = utf8.encode(params.content)
    const real = yield* Effect.scoped(Effect.gen(function*() {
      const file = yield* workspace.open(params.path, { createParents: true }).pipe(
        Effect.catchTag("PlatformError", (error) => Effect.fail(fsFailure(name, params.path)(error)))
      )
      if (file.type !== undefined && file.type !== "File") {
        return yield* new ToolRegistry.ToolFailure({
          tool: name,
          reason: `"${params.path}" is ${
            file.type === "Directory" ? "a directory" : "not a regular file"
          }; give the path of a file`
        })
      }
      yield* file.replace(bytes).pipe(Effect.mapError(fsFailure(name, params.path)))
      return file.real
    }))
    return `wrote ${plural(bytes.length, "byte")} to ${workspace.relative(real)}`
  })
})
