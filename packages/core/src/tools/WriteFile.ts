/**
 * write_file — create or overwrite a workspace file with the given content.
 *
 * Parent directories are created. The path goes through `Workspace.resolve` first, which
 * checks the nearest existing ancestor's real path, so writing through a symlinked
 * directory that points outside the workspace is refused before anything is created.
 */
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Path from "effect/Path"
import * as Schema from "effect/Schema"
import { text } from "../internal/resource.ts"
import * as ToolRegistry from "../ToolRegistry.ts"
import { Workspace } from "../Workspace.ts"
import { fsFailure, plural, typeOf } from "./Common.ts"

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
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const workspace = yield* Workspace
    const absolute = yield* workspace.resolve(params.path)
    const type = yield* typeOf(name, params.path, absolute)
    if (type !== undefined && type !== "File") {
      return yield* new ToolRegistry.ToolFailure({
        tool: name,
        reason: `"${params.path}" is ${
          type === "Directory" ? "a directory" : "not a regular file"
        }; give the path of a file`
      })
    }
    const bytes = utf8.encode(params.content)
    yield* fs.makeDirectory(path.dirname(absolute), { recursive: true }).pipe(
      Effect.mapError(fsFailure(name, params.path))
    )
    yield* fs.writeFile(absolute, bytes).pipe(Effect.mapError(fsFailure(name, params.path)))
    return `wrote ${plural(bytes.length, "byte")} to ${workspace.relative(absolute)}`
  })
})
