/**
 * grep — search file contents under a workspace directory with an RE2 regular expression.
 *
 * Patterns come from a model, so they are compiled by `re2js` (RE2 semantics: matching
 * time is linear in the input, whatever the pattern) rather than JavaScript's backtracking
 * `RegExp`, where `(a+)+$` on a 35-character line runs for minutes and blocks the event
 * loop every other agent (and `fibril mcp`) shares. Patterns are capped in length, and
 * syntax RE2 lacks (backreferences, lookaround) is a tool error naming what is missing.
 * The search yields to the event loop between files and every 64 KiB
 * within one, so a large tree never starves other fibers and the call stays interruptible.
 *
 * Built on `Walk` (so `.git`, `node_modules`, linked directories and out-of-workspace
 * links are never read); binary and very large files are skipped. Output is
 * `relpath:line: text`, capped by match count and by characters, with a note when cut,
 * so the model knows to narrow the search rather than trust a partial list.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { RE2JS, RE2JSSyntaxException } from "re2js"
import { text } from "../internal/resource.ts"
import * as ToolRegistry from "../ToolRegistry.ts"
import { Workspace } from "../Workspace.ts"
import { decodeUtf8, fsFailure, looksBinary, plural, splitLines } from "./Common.ts"
import * as Walk from "./Walk.ts"

export const name = "grep"
export const defaultMaxMatches = 200
/** A matched line is shown up to this many characters. */
export const maxLineChars = 500
/** Larger files are skipped (and counted in the output). */
export const maxFileBytes = 5 * 1024 * 1024
/** Longer patterns are refused: a model never needs one, and compiling one costs time and memory. */
export const maxPatternChars = 1000
/** Within one file, yield to the event loop after matching about this many characters. */
const yieldEveryChars = 64 * 1024

const description = text("./grep.md", import.meta.url)

export const Parameters = Schema.Struct({
  pattern: Schema.String.annotate({
    description:
      `RE2 regular expression (no backreferences or lookaround), matched against each line (no surrounding slashes); at most ${maxPatternChars} characters`
  }),
  path: Schema.optionalKey(
    Schema.String.annotate({
      description: "Directory or file to search, relative to the workspace root (default: the root)"
    })
  ),
  include: Schema.optionalKey(
    Schema.String.annotate({
      description:
        "Only search files whose path matches this glob, e.g. \"**/*.ts\" or \"*.{ts,tsx}\" (a pattern without / matches file names anywhere)"
    })
  ),
  ignore_case: Schema.optionalKey(
    Schema.Boolean.annotate({ description: "Case-insensitive matching (default false)" })
  ),
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

/** What RE2 rejects that JavaScript accepts, in words the model can act on. */
const unsupported = (reason: string, fragment: string): string | undefined => {
  if (/^\\[1-9]/.test(fragment) || fragment.startsWith("\\k") || fragment.startsWith("(?P=")) {
    return "backreferences (\\1, \\k<name>) are not supported"
  }
  if (fragment.startsWith("(?=") || fragment.startsWith("(?!")) return "lookahead ((?=...), (?!...)) is not supported"
  if (fragment.startsWith("(?<=") || fragment.startsWith("(?<!")) {
    return "lookbehind ((?<=...), (?<!...)) is not supported"
  }
  if (fragment.startsWith("\\u")) return "\\uXXXX escapes are not supported; write \\x{XXXX}"
  if (fragment.startsWith("\\c")) return "control escapes (\\cX) are not supported; write \\x{XX}"
  if (reason === "invalid nested repetition operator" && /^[*+?]\+$/.test(fragment)) {
    return "possessive quantifiers (a++, a*+) are not supported"
  }
  return undefined
}

/** Why RE2 refused `pattern`, for the model. */
const compileFailure = (pattern: string, error: unknown): string => {
  if (!(error instanceof RE2JSSyntaxException)) {
    return `invalid regular expression "${pattern}": ${error instanceof Error ? error.message : String(error)}`
  }
  const missing = unsupported(error.error, error.input ?? "")
  return missing === undefined
    ? `invalid regular expression "${pattern}": ${error.error}${error.input ? `: \`${error.input}\`` : ""}`
    : `unsupported regular expression syntax in "${pattern}": ${missing}. grep uses RE2 syntax, which matches in linear time; rewrite the pattern without it`
}

/** The pattern compiled by RE2, or a `ToolFailure` the model can act on. */
export const compile = (pattern: string, ignoreCase: boolean): Effect.Effect<RE2JS, ToolRegistry.ToolFailure> =>
  pattern.length > maxPatternChars
    ? Effect.fail(
      new ToolRegistry.ToolFailure({
        tool: name,
        reason:
          `pattern is ${pattern.length} characters long; at most ${maxPatternChars} are accepted. Search for a shorter, more specific pattern`
      })
    )
    : Effect.try({
      try: () => RE2JS.compile(pattern, ignoreCase ? RE2JS.CASE_INSENSITIVE : 0),
      catch: (error) => new ToolRegistry.ToolFailure({ tool: name, reason: compileFailure(pattern, error) })
    })

/** The search itself, under a scope that closes every descriptor the walk opened. */
const search = Effect.fnUntraced(function*(params: Parameters, limits: Limits) {
  const workspace = yield* Workspace
  const fail = (reason: string) => new ToolRegistry.ToolFailure({ tool: name, reason })

  const regex = yield* compile(params.pattern, params.ignore_case === true)
  const include = params.include === undefined ? undefined : yield* Walk.glob(name, params.include, "include")
  const given = params.path ?? "."
  const start = yield* workspace.open(given).pipe(
    Effect.catchTag("PlatformError", (error) => Effect.fail(fsFailure(name, given)(error)))
  )
  if (start.type === undefined) return yield* fail(`path not found: "${given}"`)

  const maxMatches = params.max_matches ?? defaultMaxMatches
  const out: Array<string> = []
  let chars = 0
  let matches = 0
  let cut: "matches" | "chars" | undefined
  let tooLarge = 0

  yield* Walk.files(start, (entry) =>
    Effect.gen(function*() {
      if (include !== undefined && !Walk.matches(include, entry, { basename: true })) return true
      // Opened, then looked at: a file swapped for a FIFO is reported as one and skipped.
      const file = yield* entry.open.pipe(Effect.orElseSucceed(() => undefined))
      if (file?.type !== "File") return true
      if (file.size > maxFileBytes) {
        tooLarge++
        return true
      }
      const bytes = yield* file.read.pipe(Effect.orElseSucceed(() => undefined))
      if (bytes === undefined || looksBinary(bytes)) return true
      // Reading is asynchronous, so every file starts on a fresh macrotask; within a
      // large file the loop below yields every `yieldEveryChars`.
      const lines = splitLines(decodeUtf8(bytes))
      let sinceYield = 0
      for (let i = 0; i < lines.length; i++) {
        const line = lines[i] ?? ""
        sinceYield += line.length + 1
        if (sinceYield > yieldEveryChars) {
          sinceYield = 0
          yield* Effect.yieldNow
        }
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
    notes.push(
      `[stopped after ${
        plural(maxMatches, "match", "matches")
      } (max_matches); narrow the pattern, path or include, or raise max_matches]`
    )
  } else if (cut === "chars") {
    notes.push(
      `[output truncated at ${limits.maxOutputChars} characters after ${
        plural(matches, "match", "matches")
      }; narrow the pattern, path or include]`
    )
  }
  if (tooLarge > 0) notes.push(`[skipped ${plural(tooLarge, "file")} larger than ${maxFileBytes} bytes]`)
  if (out.length === 0) {
    return [`No matches for /${params.pattern}/ under ${workspace.relative(start.real)}`, ...notes].join("\n")
  }
  return [...out, ...notes].join("\n")
})

export const definition = (limits: Limits) =>
  ToolRegistry.define({
    name,
    description,
    parameters: Parameters,
    posture: "read",
    handler: Effect.fn("tool.grep")(function*(params: Parameters) {
      return yield* Effect.scoped(search(params, limits))
    })
  })
