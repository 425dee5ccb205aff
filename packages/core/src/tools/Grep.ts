/**
 * grep — search file contents under a workspace directory with a JavaScript regex.
 *
 * Built on `Walk` (so `.git`, `node_modules`, linked directories and out-of-workspace
 * links are never read); binary and very large files are skipped. Output is
 * `relpath:line: text`, capped by match count and by characters, with a note when cut,
 * so the model knows to narrow the search rather than trust a partial list.
 */
import { Effect, FileSystem, Schema } from "effect"
import { text } from "../internal/resource.ts"
import * as ToolRegistry from "../ToolRegistry.ts"
import { Workspace } from "../Workspace.ts"
import { decodeUtf8, looksBinary, plural, splitLines, typeOf } from "./Common.ts"
import * as Walk from "./Walk.ts"

export const name = "grep"
export const defaultMaxMatches = 200
/** A matched line is shown up to this many characters. */
export const maxLineChars = 500
/** Larger files are skipped (and counted in the output). */
export const maxFileBytes = 5 * 1024 * 1024

const description = text("./grep.md", import.meta.url)

export const Parameters = Schema.Struct({
  pattern: Schema.String.annotate({
    description: "JavaScript regular expression, matched against each line (no surrounding slashes)"
  }),
  path: Schema.optionalKey(
    Schema.String.annotate({ description: "Directory or file to search, relative to the workspace root (default: the root)" })
  ),
  include: Schema.optionalKey(
    Schema.String.annotate({
      description: "Only search files whose path matches this glob, e.g. \"**/*.ts\" or \"*.{ts,tsx}\" (a pattern without / matches file names anywhere)"
    })
  ),
  ignore_case: Schema.optionalKey(Schema.Boolean.annotate({ description: "Case-insensitive matching (default false)" })),
  max_matches: Schema.optionalKey(
    Schema.Int.pipe(Schema.check(Schema.isGreaterThanOrEqualTo(1))).annotate({
      description: `Stop after this many matching lines (default ${defaultMaxMatches})`
    })
  )
})
export type Parameters = typeof Parameters.Type

export interface Limits {
  readonly maxOutputChars: number
}

export const definition = (limits: Limits) =>
  ToolRegistry.define({
    name,
    description,
    parameters: Parameters,
    posture: "read",
    handler: Effect.fn("tool.grep")(function*(params: Parameters) {
      const fs = yield* FileSystem.FileSystem
      const workspace = yield* Workspace
      const fail = (reason: string) => new ToolRegistry.ToolFailure({ tool: name, reason })

      const regex = yield* Effect.try({
        try: () => new RegExp(params.pattern, params.ignore_case === true ? "i" : ""),
        catch: (error) =>
          fail(`invalid regular expression "${params.pattern}": ${error instanceof Error ? error.message : String(error)}`)
      })
      const given = params.path ?? "."
      const start = yield* workspace.resolve(given)
      const type = yield* typeOf(name, given, start)
      if (type === undefined) return yield* fail(`path not found: "${given}"`)

      const maxMatches = params.max_matches ?? defaultMaxMatches
      const out: Array<string> = []
      let chars = 0
      let matches = 0
      let cut: "matches" | "chars" | undefined
      let tooLarge = 0

      yield* Walk.files(start, (entry) =>
        Effect.gen(function*() {
          if (params.include !== undefined && !Walk.matches(params.include, entry, { basename: true })) return true
          const info = yield* fs.stat(entry.absolute).pipe(Effect.orElseSucceed(() => undefined))
          if (info === undefined) return true
          if (Number(info.size) > maxFileBytes) {
            tooLarge++
            return true
          }
          const bytes = yield* fs.readFile(entry.absolute).pipe(Effect.orElseSucceed(() => undefined))
          if (bytes === undefined || looksBinary(bytes)) return true
          const lines = splitLines(decodeUtf8(bytes))
          for (let i = 0; i < lines.length; i++) {
            const line = lines[i] ?? ""
            if (!regex.test(line)) continue
            if (matches >= maxMatches) {
              cut = "matches"
              return false
            }
            const shown = line.length > maxLineChars ? `${line.slice(0, maxLineChars)} [...]` : line
            const rendered = `${entry.relative}:${i + 1}: ${shown}`
            if (chars + rendered.length + 1 > limits.maxOutputChars) {
              cut = "chars"
              return false
            }
            out.push(rendered)
            chars += rendered.length + 1
            matches++
          }
          return true
        }))

      const notes: Array<string> = []
      if (cut === "matches") {
        notes.push(`[stopped after ${plural(maxMatches, "match", "matches")} (max_matches); narrow the pattern, path or include, or raise max_matches]`)
      } else if (cut === "chars") {
        notes.push(`[output truncated at ${limits.maxOutputChars} characters after ${plural(matches, "match", "matches")}; narrow the pattern, path or include]`)
      }
      if (tooLarge > 0) notes.push(`[skipped ${plural(tooLarge, "file")} larger than ${maxFileBytes} bytes]`)
      if (out.length === 0) {
        return [`No matches for /${params.pattern}/ under ${workspace.relative(start)}`, ...notes].join("\n")
      }
      return [...out, ...notes].join("\n")
    })
  })
