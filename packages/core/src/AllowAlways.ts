/**
 * AllowAlways — "always allow this tool", saved to the user's own config.
 *
 * `[permissions] allow` lists tool names and postures whose `ask` questions are answered
 * "allow" without asking (Approvals `Options.allow`). It is the answer side of the rules, not
 * a rule: a call the rules deny never reaches a question, so an entry here never lets a denied
 * call run, and a tool nobody asks about is unaffected. A terminal's `[s]ave` answer
 * (`fibril run`, TerminalApprovals) adds the tool to `<home>/.fibril/config.toml` with `save`.
 *
 * The file is the user's, comments and all: the entry is added by editing the text (the
 * `allow` array of `[permissions]`, made when missing), and the result is parsed back and
 * checked to equal the old table plus that one entry before it replaces the file (written
 * beside it and renamed over). A file whose shape the edit cannot handle safely (a dotted
 * `permissions.allow` key, an inline table) is left alone, with an error saying what to add.
 */
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Schema from "effect/Schema"
import { randomUUID } from "node:crypto"
import { createRequire } from "node:module"
import * as path from "node:path"
import type * as TomlModule from "smol-toml"

let tomlModule: typeof TomlModule | undefined
const Toml = (): typeof TomlModule => (tomlModule ??= createRequire(import.meta.url)("smol-toml") as typeof TomlModule)

export class AllowNotSaved extends Schema.TaggedError<AllowNotSaved>()("AllowNotSaved", {
  file: Schema.String,
  tool: Schema.String,
  problem: Schema.String
}) {
  override get message() {
    return `could not save "${this.tool}" to ${this.file}: ${this.problem}. ` +
      `Add it by hand: allow = ["${this.tool}"] under [permissions]`
  }
}

/** The user's config file under `home`. */
export const userFile = (home: string) => path.join(home, ".fibril", "config.toml")

type Table = Record<string, unknown>
const isTable = (value: unknown): value is Table =>
  typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof Date)

/** `[permissions] allow` of a parsed file (undefined when absent or not a list of strings). */
const allowOf = (table: Table): ReadonlyArray<string> | undefined => {
  const permissions = table["permissions"]
  const allow = isTable(permissions) ? permissions["allow"] : undefined
  return Array.isArray(allow) && allow.every((entry) => typeof entry === "string") ? allow : undefined
}

/** A parsed file as JSON with its keys sorted: two tables are the same when these are. */
const canonical = (value: unknown): string =>
  JSON.stringify(
    value,
    (_key, item: unknown) =>
      isTable(item) ? Object.fromEntries(Object.entries(item).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) : item
  )

const arrayText = (entries: ReadonlyArray<string>) => `allow = [${entries.map((e) => JSON.stringify(e)).join(", ")}]`

/**
 * `text` with `tool` added to `[permissions] allow`, or undefined when the edit is not safe.
 * Pure: the text-level edit `save` checks by parsing.
 */
export const addTo = (text: string, tool: string, current: ReadonlyArray<string>): string | undefined => {
  const entries = [...current, tool]
  const header = /^[ \t]*\[permissions\][ \t]*(#.*)?$/m.exec(text)
  if (header === null) {
    const separator = text === "" || text.endsWith("\n\n") ? "" : text.endsWith("\n") ? "\n" : "\n\n"
    return `${text}${separator}[permissions]\n${arrayText(entries)}\n`
  }
  const bodyStart = header.index + header[0].length
  const next = /^[ \t]*\[/m.exec(text.slice(bodyStart))
  const bodyEnd = next === null ? text.length : bodyStart + next.index
  const body = text.slice(bodyStart, bodyEnd)
  const key = /^[ \t]*allow[ \t]*=[ \t]*\[/m.exec(body)
  if (key === null) return `${text.slice(0, bodyStart)}\n${arrayText(entries)}${text.slice(bodyStart)}`
  // The array's closing bracket: its entries are tool names, with no brackets inside them.
  const close = body.indexOf("]", key.index + key[0].length)
  if (close < 0) return undefined
  const start = bodyStart + key.index + (key[0].length - key[0].trimStart().length)
  return `${text.slice(0, start)}${arrayText(entries)}${text.slice(bodyStart + close + 1)}`
}

/**
 * Adds `tool` to `[permissions] allow` of the user's config under `home`; succeeds with the
 * file's path (at once when it is listed already).
 */
export const save = Effect.fn("AllowAlways.save")(function*(home: string, tool: string) {
  const fs = yield* FileSystem.FileSystem
  const file = userFile(home)
  const fail = (problem: string) => new AllowNotSaved({ file, tool, problem })
  const text = yield* fs.readFileString(file).pipe(
    Effect.catchTag(
      "PlatformError",
      (error) => error.reason._tag === "NotFound" ? Effect.succeed("") : Effect.fail(fail(error.message))
    )
  )
  const parse = (source: string) =>
    Effect.try({ try: () => Toml().parse(source) as Table, catch: (error) => fail(`it is not valid TOML (${error})`) })
  const before = yield* parse(text)
  const current = allowOf(before) ?? []
  if (current.includes(tool)) return file
  const edited = addTo(text, tool, current)
  const after = edited === undefined ? undefined : yield* parse(edited).pipe(Effect.option)
  // The edit must change nothing but that one entry.
  const permissions = isTable(before["permissions"]) ? before["permissions"] : {}
  const expected = { ...before, permissions: { ...permissions, allow: [...current, tool] } }
  if (
    edited === undefined || after === undefined || after._tag === "None" ||
    canonical(after.value) !== canonical(expected)
  ) {
    return yield* fail("its [permissions] table is written in a form this edit does not handle")
  }
  // Written beside and renamed over, so a crash never leaves half a config.
  const temporary = `${file}.${randomUUID()}.tmp`
  yield* fs.makeDirectory(path.dirname(file), { recursive: true }).pipe(
    Effect.andThen(fs.writeFileString(temporary, edited)),
    Effect.andThen(fs.rename(temporary, file)),
    Effect.mapError((error) => fail(error.message))
  )
  return file
})
