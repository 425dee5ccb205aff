/**
 * read_file — a text file from the workspace, `cat -n` style, a window at a time.
 *
 * The window (offset/limit) and the per-line cap keep one call from flooding the model's
 * context; the output also stops at `maxOutputChars`, and every cut says how to read on.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { text } from "../internal/resource.ts"
import * as ToolRegistry from "../ToolRegistry.ts"
import { Workspace } from "../Workspace.ts"
import { decodeUtf8, fsFailure, looksBinary, plural, splitLines } from "./Common.ts"

export const name = "read_file"
export const defaultLimit = 2000
export const maxLineChars = 2000
/** Files above this size are refused rather than loaded whole into memory. */
export const maxFileBytes = 50 * 1024 * 1024

const description = text("./read_file.md", import.meta.url)

export const Parameters = Schema.Struct({
  path: Schema.String.annotate({ description: "File to read, relative to the workspace root (or absolute inside it)" }),
  offset: Schema.optionalKey(
    Schema.Int.pipe(Schema.check(Schema.isGreaterThanOrEqualTo(1))).annotate({
      description: "1-based number of the first line to read (default 1)"
    })
  ),
  limit: Schema.optionalKey(
    Schema.Int.pipe(Schema.check(Schema.isGreaterThanOrEqualTo(1))).annotate({
      description: `Maximum number of lines to read (default ${defaultLimit})`
    })
  )
})
export type Parameters = typeof Parameters.Type

export interface Limits {
  readonly maxOutputChars: number
}

const numbered = (n: number, line: string) => {
  const shown = line.length > maxLineChars
    ? `${line.slice(0, maxLineChars)} [... line truncated, ${line.length - maxLineChars} more chars]`
    : line
  return `${String(n).padStart(6)}\t${shown}`
}

export const definition = (limits: Limits) =>
  ToolRegistry.define({
    name,
    description,
    parameters: Parameters,
    posture: "read",
    handler: Effect.fn("tool.read_file")(function*(params: Parameters) {
      const workspace = yield* Workspace
      const fail = (reason: string) => new ToolRegistry.ToolFailure({ tool: name, reason })

      // Opened first, then looked at: the descriptor says what it is (a FIFO is never read).
      const { bytes, real: absolute } = yield* Effect.scoped(Effect.gen(function*() {
        const file = yield* workspace.open(params.path).pipe(
          Effect.catchTag("PlatformError", (error) => Effect.fail(fsFailure(name, params.path)(error)))
        )
        if (file.type === undefined) return yield* fail(`file not found: "${params.path}"`)
        if (file.type === "Directory") {
          return yield* fail(`"${params.path}" is a directory; use list_dir to see its entries`)
        }
        if (file.type !== "File") return yield* fail(`"${params.path}" is not a regular file`)
        if (file.size > maxFileBytes) {
          return yield* fail(
            `"${params.path}" is ${file.size} bytes, over the ${maxFileBytes}-byte limit; use grep to find what you need, or shell (e.g. sed -n) for a slice`
          )
        }
        const read = yield* file.read.pipe(Effect.mapError(fsFailure(name, params.path)))
        return { bytes: read, real: file.real }
      }))
      if (looksBinary(bytes)) return yield* fail(`"${params.path}" looks like a binary file (it contains NUL bytes)`)

      const lines = splitLines(decodeUtf8(bytes))
      if (lines.length === 0) return `(${workspace.relative(absolute)} is empty)`
      const offset = params.offset ?? 1
      if (offset > lines.length) {
        return yield* fail(
          `offset ${offset} is past the end of "${params.path}", which has ${plural(lines.length, "line")}`
        )
      }
      const last = Math.min(lines.length, offset - 1 + (params.limit ?? defaultLimit))

      const out: Array<string> = []
      let chars = 0
      let next = offset
      for (; next <= last; next++) {
        const line = numbered(next, lines[next - 1] ?? "")
        // Always show at least one line, so a call can never make zero progress.
        if (out.length > 0 && chars + line.length + 1 > limits.maxOutputChars) break
        out.push(line)
        chars += line.length + 1
      }
      const remaining = lines.length - next + 1
      if (remaining > 0) out.push(`... ${plural(remaining, "more line")}; use offset=${next} to continue`)
      return out.join("\n")
    })
  })
