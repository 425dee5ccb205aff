/**
 * Claims — a finished child's report checked against what it did.
 *
 * A child's EVIDENCE and CHANGES are a self-report. `extract` reads the claims a parent can
 * check in them (a cited `path:line`, a command it says it ran and how it exited, a file it
 * says it changed: the grammar is in docs/subagents.md, "Checked claims"); `evidenceOf` reads
 * what the child did from its transcript (the tool calls and their results); `check` tells
 * which claims that record backs and why the others are not. An unverified claim is
 * information for the parent, never a failure of the result.
 *
 * Pure and total: the engines call `ofAnswer` where they build a finished child's outcome
 * (the embedded run's end, the cluster's final step), over the same transcript shape, so both
 * produce the same `claims`. A typed `output` (a JSON object) is read the same way: its strings
 * are the evidence, those under a key naming changes are the CHANGES (`sectionsOfOutput`).
 */
import type * as Prompt from "effect/ai/Prompt"
import * as Schema from "effect/Schema"
import * as OutputContract from "./OutputContract.ts"

// --- The report ---

export const Unverified = Schema.Struct({
  /** The claim as checked: `src/a.ts:12-20`, `` `npm test` exit 0 ``, `changed src/a.ts`. */
  claim: Schema.String,
  /** Why the child's record does not back it. */
  why: Schema.String
})
export type Unverified = typeof Unverified.Type

/** How many claims were checked, how many the record backs, and the others with the reason. */
export const ClaimsReport = Schema.Struct({
  checked: Schema.Int,
  verified: Schema.Int,
  unverified: Schema.Array(Unverified)
})
export type ClaimsReport = typeof ClaimsReport.Type

/** At most this many unverified claims are listed (`checked` and `verified` count them all). */
export const maxListed = 50

// --- Claims ---

/** How a command is said to have ended: ran (no word on it), a given exit code, or failed (non-zero). */
export type Ending =
  | { readonly _tag: "Ran" }
  | { readonly _tag: "Exit"; readonly code: number }
  | { readonly _tag: "Failed" }

export type Claim =
  /** `path:from` or `path:from-to`: those lines were read (or written) by the child. */
  | { readonly _tag: "Cite"; readonly path: string; readonly from: number; readonly to: number }
  /** A command line the child ran, and how it ended. */
  | { readonly _tag: "Command"; readonly command: string; readonly ending: Ending }
  /** A file listed under CHANGES: the child changed it. */
  | { readonly _tag: "Change"; readonly path: string }

/** A claim as a parent reads it in `unverified`. */
export const render = (claim: Claim): string => {
  switch (claim._tag) {
    case "Cite":
      return claim.from === claim.to ? `${claim.path}:${claim.from}` : `${claim.path}:${claim.from}-${claim.to}`
    case "Command":
      return `\`${claim.command}\`${endingText(claim.ending)}`
    case "Change":
      return `changed ${claim.path}`
  }
}

const endingText = (ending: Ending): string =>
  ending._tag === "Exit" ? ` exit ${ending.code}` : ending._tag === "Failed" ? " failed" : " ran"

// --- What the child did ---

/** What a child's transcript shows it did; paths are workspace-relative. */
export interface Evidence {
  /** Line ranges it saw (read_file windows, grep hits) or wrote (write_file content), by path. */
  readonly lines: ReadonlyMap<string, ReadonlyArray<readonly [number, number]>>
  /** Files it wrote or edited with a writing tool call that succeeded. */
  readonly wrote: ReadonlySet<string>
  /** Files it edited (edit_file): any line of them may be cited (the edit does not say which lines). */
  readonly edited: ReadonlySet<string>
  /** Its shell calls that ran, in order, with their exit codes (null: killed or timed out). */
  readonly ran: ReadonlyArray<{ readonly command: string; readonly exit: number | null }>
  /**
   * Files its shell commands changed, as `git status` before and after each showed them (a
   * shell result's `changed`), with any given by the caller; absent: nothing was compared (no
   * writing command ran in a git work tree).
   */
  readonly changed?: ReadonlySet<string> | undefined
}

// The built-in tools whose calls are evidence (their `name` in tools/*.ts; Claims.test.ts checks them).
export const tools = {
  read: "read_file",
  grep: "grep",
  write: "write_file",
  edit: "edit_file",
  shell: "shell"
} as const

/**
 * `path` with `/` separators, `./` and `..` resolved: how paths are compared. A transcript's
 * path may be absolute (inside the workspace) where a report's is relative: `samePath` matches
 * them by their end, so the check needs no workspace root (and reads the same in both engines).
 */
export const normalizePath = (path: string): string => {
  const given = path.trim().replace(/\\/g, "/")
  const absolute = given.startsWith("/")
  const parts: Array<string> = []
  for (const part of given.split("/")) {
    if (part === "" || part === ".") continue
    if (part === ".." && parts.length > 0 && parts.at(-1) !== "..") parts.pop()
    else parts.push(part)
  }
  const joined = parts.join("/")
  return absolute ? `/${joined}` : joined === "" ? "." : joined
}

/** Two normalized paths name one file: equal, or one is absolute and ends with the other (relative) one. */
export const samePath = (a: string, b: string): boolean => {
  if (a === b) return true
  const aAbsolute = a.startsWith("/")
  if (aAbsolute === b.startsWith("/")) return false
  return aAbsolute ? a.endsWith(`/${b}`) : b.endsWith(`/${a}`)
}

/** Every range seen of the file `path` names, under any of its names. */
const rangesOf = (
  map: ReadonlyMap<string, ReadonlyArray<readonly [number, number]>>,
  path: string
): ReadonlyArray<readonly [number, number]> | undefined => {
  let found: Array<readonly [number, number]> | undefined
  for (const [key, ranges] of map) if (samePath(key, path)) (found ??= []).push(...ranges)
  return found
}

const hasIn = (set: ReadonlySet<string> | undefined, path: string): boolean => {
  if (set === undefined) return false
  if (set.has(path)) return true
  for (const key of set) if (samePath(key, path)) return true
  return false
}

const normalizeCommand = (command: string): string => command.trim().replace(/\s+/g, " ")

const paramsOf = (params: unknown): Record<string, unknown> => {
  let value = params
  if (typeof value === "string") {
    try {
      value = JSON.parse(value)
    } catch {
      return {}
    }
  }
  return typeof value === "object" && value !== null && !Array.isArray(value) ? value as Record<string, unknown> : {}
}

const numberedLine = /^ *(\d+)\t/
const grepHit = /^(.+?):(\d+): /

const lineCount = (content: string): number => {
  if (content === "") return 0
  const lines = content.split(/\r\n?|\n/)
  return lines.at(-1) === "" ? lines.length - 1 : lines.length
}

/**
 * What a transcript shows the child did: every tool call paired with its result, a failed
 * call (a denial, an error) counting for nothing. `changed`: the workspace's own comparison,
 * when one was made.
 */
export const evidenceOf = (
  messages: ReadonlyArray<Prompt.Message>,
  options: { readonly changed?: ReadonlySet<string> | undefined } = {}
): Evidence => {
  const calls = new Map<string, { readonly name: string; readonly params: Record<string, unknown> }>()
  const lines = new Map<string, Array<readonly [number, number]>>()
  const wrote = new Set<string>()
  const edited = new Set<string>()
  const ran: Array<{ readonly command: string; readonly exit: number | null }> = []
  let changed: Set<string> | undefined = options.changed === undefined ? undefined : new Set(options.changed)
  const saw = (path: string, from: number, to: number) => {
    const key = normalizePath(path)
    const ranges = lines.get(key)
    if (ranges === undefined) lines.set(key, [[from, to]])
    else ranges.push([from, to])
  }
  const pathParam = (params: Record<string, unknown>) => typeof params["path"] === "string" ? params["path"] : undefined
  for (const message of messages) {
    if (typeof message.content === "string") continue
    for (const part of message.content) {
      if (part.type === "tool-call") {
        calls.set(part.id, { name: part.name, params: paramsOf(part.params) })
        continue
      }
      if (part.type !== "tool-result" || part.isFailure) continue
      const call = calls.get(part.id)
      if (call === undefined) continue
      const path = pathParam(call.params)
      const result = part.result
      switch (call.name) {
        case tools.read: {
          if (path === undefined || typeof result !== "string") break
          // The numbered lines shown form one window: its first and last line.
          let first: number | undefined
          let last: number | undefined
          for (const line of result.split("\n")) {
            const match = numberedLine.exec(line)
            if (match === null) continue
            const n = Number(match[1])
            first ??= n
            last = n
          }
          if (first !== undefined && last !== undefined) saw(path, first, last)
          break
        }
        case tools.grep: {
          if (typeof result !== "string") break
          // Hits are `path:line: text`, the path workspace-relative.
          for (const line of result.split("\n")) {
            const match = grepHit.exec(line)
            if (match !== null) saw(match[1]!, Number(match[2]), Number(match[2]))
          }
          break
        }
        case tools.write: {
          if (path === undefined) break
          wrote.add(normalizePath(path))
          const content = call.params["content"]
          const count = typeof content === "string" ? lineCount(content) : 0
          if (count > 0) saw(path, 1, count)
          break
        }
        case tools.edit: {
          if (path === undefined) break
          wrote.add(normalizePath(path))
          edited.add(normalizePath(path))
          break
        }
        case tools.shell: {
          const command = call.params["command"]
          if (typeof command !== "string") break
          const exit = typeof result === "object" && result !== null && "exit_code" in result
            ? (result as { readonly exit_code: unknown }).exit_code
            : null
          ran.push({ command: normalizeCommand(command), exit: typeof exit === "number" ? exit : null })
          const made = typeof result === "object" && result !== null && "changed" in result
            ? (result as { readonly changed: unknown }).changed
            : undefined
          if (Array.isArray(made)) {
            changed ??= new Set()
            for (const file of made) if (typeof file === "string") changed.add(normalizePath(file))
          }
          break
        }
      }
    }
  }
  return { lines, wrote, edited, ran, changed }
}

// --- Reading claims from a report ---

// A path: no spaces; it has a `/` or ends in an extension (`.ts`), and a letter somewhere.
const pathChars = String.raw`(?:\.{0,2}/)?[\w@+-][\w@+./-]*`
const citation = new RegExp(
  String.raw`(?<![\w@./:-])(${pathChars}):(\d{1,7})(?:\s?[-–]\s?(\d{1,7}))?(?::\d+)?(?![\w])`,
  "g"
)
const pathToken = new RegExp(String.raw`(?<![\w@./:-])(${pathChars})`, "g")
const extension = /\.[A-Za-z][A-Za-z0-9]*$/
const notPaths: ReadonlySet<string> = new Set(["e.g", "i.e", "etc", "vs", "a.k.a"])

const isPathLike = (token: string): boolean =>
  /[A-Za-z]/.test(token) && !notPaths.has(token.toLowerCase()) && (token.includes("/") || extension.test(token))

// An exit phrase: `exit 0`, `exit code 1`, `exited with 2`, `exit status: 0`, `returned 0`,
// or the words `passed`/`succeeded` (exit 0) and `failed` (non-zero).
const exitPhrase = String
  .raw`(?:(?:exit(?:ed)?|returned)(?:\s+with)?(?:\s+(?:code|status))?\s*[:=]?\s*(\d{1,3})(?!\d)|(passed|succeeded|failed)\b)`
// Right after a backticked command: an optional separator, then the phrase.
const afterCommand = new RegExp(String.raw`^\s*(?:[:,(]|->|→|=>|—|–|-)?\s*${exitPhrase}`, "i")
// At the end of a `$ command` line, after a separator: `$ npm test → exit 0`, `$ make (exit 2)`.
const endOfLine = new RegExp(String.raw`\s*(?:\(|->|→|=>|#|—|–|,)\s*${exitPhrase}\s*\)?\s*$`, "i")
const ranBefore = /\b(?:ran|run|running|executed|executing)\s*:?\s*$/i
const dollarLine = /^(\s*(?:[-*+•]\s+|\d{1,3}[.)]\s+)?)\$\s+(.+)$/
const backticked = /`([^`\n]+)`/g
const listMarker = /^\s*(?:[-*+•]\s+|\d{1,3}[.)]\s+)?/

const endingOf = (code: string | undefined, word: string | undefined): Ending => {
  if (code !== undefined) return { _tag: "Exit", code: Number(code) }
  if (word === undefined) return { _tag: "Ran" }
  return word.toLowerCase() === "failed" ? { _tag: "Failed" } : { _tag: "Exit", code: 0 }
}

/** `text` with `[start, end)` blanked out (same length: later offsets stay valid). */
const blank = (text: string, start: number, end: number) =>
  text.slice(0, start) + " ".repeat(end - start) + text.slice(end)

// The phrases around a command are looked for this near it: the searches that are not anchored
// at a line's start look at a bounded window, so reading a report stays linear in its length
// (an answer is not bounded: a line of a million spaces must not take a million squared steps).
const near = 120

/** The commands named on one line (see the grammar) and the line without them, for citations. */
const commandsOf = (line: string): { readonly commands: Array<Claim>; readonly rest: string } => {
  const dollar = dollarLine.exec(line)
  if (dollar !== null) {
    const body = dollar[2]!
    const from = Math.max(0, body.length - near)
    const end = endOfLine.exec(body.slice(from))
    const command = normalizeCommand(end === null ? body : body.slice(0, from + end.index))
    if (command === "") return { commands: [], rest: line }
    return {
      commands: [{ _tag: "Command", command, ending: end === null ? { _tag: "Ran" } : endingOf(end[1], end[2]) }],
      rest: ""
    }
  }
  const commands: Array<Claim> = []
  let rest = line
  for (const match of line.matchAll(backticked)) {
    const start = match.index
    const end = start + match[0].length
    const after = afterCommand.exec(line.slice(end, end + near))
    const ran = ranBefore.test(line.slice(Math.max(0, start - near), start))
    if (after === null && !ran) continue
    const command = normalizeCommand(match[1]!)
    if (command === "") continue
    commands.push({ _tag: "Command", command, ending: after === null ? { _tag: "Ran" } : endingOf(after[1], after[2]) })
    rest = blank(rest, start, end)
  }
  return { commands, rest }
}

const citationsOf = (text: string): Array<Claim> => {
  const claims: Array<Claim> = []
  for (const match of text.matchAll(citation)) {
    const path = match[1]!.replace(/[.]+$/, "")
    if (!isPathLike(path)) continue
    const from = Number(match[2])
    const to = match[3] === undefined ? from : Number(match[3])
    if (from < 1 || to < from) continue
    claims.push({ _tag: "Cite", path: normalizePath(path), from, to })
  }
  return claims
}

/** The first path a CHANGES line names (bare or in backticks), if it names one. */
const changeOf = (line: string): Claim | undefined => {
  const item = line.slice(listMarker.exec(line)?.[0].length ?? 0).replace(/`/g, " ")
  for (const match of item.matchAll(pathToken)) {
    const token = match[1]!.replace(/[.,;:)]+$/, "")
    if (isPathLike(token)) return { _tag: "Change", path: normalizePath(token) }
  }
  return undefined
}

const keyOf = (claim: Claim): string => `${claim._tag}\u0000${render(claim)}`

/**
 * The claims a report makes in its EVIDENCE and CHANGES sections: citations and commands in
 * both, and each CHANGES line's first path as a change. Each claim once, in order.
 */
export const extract = (sections: { readonly evidence: string; readonly changes: string }): Array<Claim> => {
  const claims: Array<Claim> = []
  const seen = new Set<string>()
  const add = (claim: Claim) => {
    const key = keyOf(claim)
    if (seen.has(key)) return
    seen.add(key)
    claims.push(claim)
  }
  for (const [section, text] of [["changes", sections.changes], ["evidence", sections.evidence]] as const) {
    for (const line of text.split(/\r\n?|\n/)) {
      const { commands, rest } = commandsOf(line)
      if (section === "changes" && commands.length === 0) {
        const change = changeOf(line)
        if (change !== undefined) add(change)
      }
      commands.forEach(add)
      citationsOf(rest).forEach(add)
    }
  }
  return claims
}

// --- Checking ---

const rangesText = (ranges: ReadonlyArray<readonly [number, number]>): string => {
  const sorted = [...ranges].sort((a, b) => a[0] - b[0])
  const one = sorted.length === 1 && sorted[0]![0] === sorted[0]![1]
  return `${one ? "line" : "lines"} ${sorted.map(([a, b]) => a === b ? `${a}` : `${a}-${b}`).join(", ")}`
}

/** Do the ranges, merged, cover every line of `[from, to]`? */
const covers = (ranges: ReadonlyArray<readonly [number, number]>, from: number, to: number): boolean => {
  let next = from
  for (const [a, b] of [...ranges].sort((x, y) => x[0] - y[0])) {
    if (a > next) break
    if (b >= next) next = b + 1
    if (next > to) return true
  }
  return next > to
}

const exitText = (exit: number | null): string =>
  exit === null ? "ended without an exit code (killed or timed out)" : `exited ${exit}`

/** Why `evidence` does not back `claim`; undefined: it does. */
export const why = (claim: Claim, evidence: Evidence): string | undefined => {
  switch (claim._tag) {
    case "Cite": {
      if (hasIn(evidence.edited, claim.path)) return undefined
      const ranges = rangesOf(evidence.lines, claim.path)
      if (ranges === undefined) return `it never read, grepped or wrote ${claim.path}`
      if (covers(ranges, claim.from, claim.to)) return undefined
      const cited = claim.from === claim.to
        ? `line ${claim.from} of ${claim.path} is`
        : `lines ${claim.from}-${claim.to} of ${claim.path} are`
      return `${cited} beyond what it read or wrote (it saw ${rangesText(ranges)})`
    }
    case "Command": {
      const runs = evidence.ran.filter((run) => run.command === claim.command)
      const last = runs.at(-1)
      if (last === undefined) return "it never ran this command (no shell call with this exact command line)"
      const ending = claim.ending
      if (ending._tag === "Ran") return undefined
      if (ending._tag === "Exit" && last.exit === ending.code) return undefined
      if (ending._tag === "Failed" && last.exit !== 0) return undefined
      const wanted = ending._tag === "Exit" ? `exit ${ending.code}` : "a non-zero exit"
      return `its last run of it ${exitText(last.exit)}, not ${wanted}`
    }
    case "Change": {
      if (hasIn(evidence.wrote, claim.path) || hasIn(evidence.changed, claim.path)) return undefined
      return evidence.changed === undefined
        ? `no write_file or edit_file call of it changed ${claim.path}`
        : `no write_file or edit_file call of it changed ${claim.path}, nor did any of its shell commands (by git status)`
    }
  }
}

// A claim is shown as written, up to a line's worth: a command line can be long.
const short = (text: string): string => text.length <= 200 ? text : `${text.slice(0, 199)}…`

/** Each claim checked against the evidence. */
export const check = (claims: ReadonlyArray<Claim>, evidence: Evidence): ClaimsReport => {
  const unverified: Array<Unverified> = []
  let verified = 0
  for (const claim of claims) {
    const reason = why(claim, evidence)
    if (reason === undefined) verified++
    else if (unverified.length < maxListed) unverified.push({ claim: short(render(claim)), why: reason })
  }
  return { checked: claims.length, verified, unverified }
}

// A key of a typed output whose strings name files the child changed (`changes`,
// `files_changed`, `modified_files`, `edited` ...): its strings are read as CHANGES lines.
const changesKey = /chang|modif|edit|wr[io]te/i

/**
 * The EVIDENCE and CHANGES of a typed `output` (an answer that is a JSON object): every string
 * in it, at any depth, is an evidence line, and the strings under a key that names changes
 * (`changesKey`) are CHANGES lines, so a typed result's citations and commands are checked
 * like a text report's. Undefined when the answer is not a JSON object.
 */
export const sectionsOfOutput = (text: string): { evidence: string; changes: string } | undefined => {
  const trimmed = text.trim()
  if (!trimmed.startsWith("{")) return undefined
  let value: unknown
  try {
    value = JSON.parse(trimmed)
  } catch {
    return undefined
  }
  const evidence: Array<string> = []
  const changes: Array<string> = []
  const walk = (node: unknown, inChanges: boolean): void => {
    if (typeof node === "string") (inChanges ? changes : evidence).push(...node.split(/\r\n?|\n/))
    else if (Array.isArray(node)) node.forEach((item) => walk(item, inChanges))
    else if (typeof node === "object" && node !== null) {
      for (const [key, item] of Object.entries(node)) walk(item, inChanges || changesKey.test(key))
    }
  }
  walk(value, false)
  return { evidence: evidence.join("\n"), changes: changes.join("\n") }
}

/**
 * A final answer's claims checked against the transcript of the run that wrote it: what both
 * engines call where they build a finished child's outcome. A typed answer (a JSON object) is
 * read by `sectionsOfOutput`, a text report by its sections.
 */
export const ofAnswer = (
  text: string,
  messages: ReadonlyArray<Prompt.Message>,
  options: { readonly changed?: ReadonlySet<string> | undefined } = {}
): ClaimsReport =>
  check(
    extract(sectionsOfOutput(text) ?? OutputContract.parse(text).sections),
    evidenceOf(messages, options)
  )
