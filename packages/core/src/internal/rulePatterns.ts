/**
 * Rule entries with an argument pattern: `shell(git push *)`, `write_file(src/**)`. They live in
 * the same ask and deny sets as plain names (Permission rule 5), so meeting rules stays a union
 * of entries; they are judged once a call's arguments are decoded, against the shell command
 * (for a `shell`-posture tool) or each path the call touches (any other tool).
 */
export interface Pattern {
  readonly tool: string
  readonly pattern: string
}

/** `tool(pattern)` → its parts; a plain name → undefined. */
export const parse = (entry: string): Pattern | undefined => {
  const match = /^([^()\s]+)\((.+)\)$/.exec(entry.trim())
  return match === null ? undefined : { tool: match[1]!, pattern: match[2]!.trim() }
}

/** The tool an entry names (a plain name is its own). */
export const toolOf = (entry: string): string => parse(entry)?.tool ?? entry

const cache = new Map<string, RegExp>()

/**
 * A pattern as a regular expression. For commands `*` is any text (`git push *`; Claude Code's
 * `git push:*` prefix form means the same); for paths `*` stays within one directory and `**`
 * crosses them (`src/**`, `**\/*.env`). Not the glob tool's matcher (tools/GlobPattern.ts): there
 * a wildcard skips names that start with a dot, as `matchesGlob` does, and a rule that asks or
 * denies must not (`write_file(secret/**)` covers `secret/.key`). Patterns come from the
 * user's configuration and definitions, not from a model.
 */
const compile = (pattern: string, command: boolean): RegExp => {
  const key = `${command ? "c" : "p"}${pattern}`
  let re = cache.get(key)
  if (re === undefined) {
    const source = command ? pattern.replace(/:\*$/, " *") : pattern.replace(/^\.\//, "")
    let out = ""
    for (let i = 0; i < source.length; i++) {
      const c = source[i]!
      if (c === "*") {
        if (!command && source[i + 1] === "*") {
          // `**/` matches no directory or any; `**` at the end matches everything below.
          if (source[i + 2] === "/") {
            out += "(?:.*/)?"
            i += 2
          } else {
            out += ".*"
            i += 1
          }
        } else out += command ? ".*" : "[^/]*"
      } else if (c === "?") out += command ? "." : "[^/]"
      else out += c.replace(/[.+^${}()|[\]\\]/g, "\\$&")
    }
    // `git push *` also matches a bare `git push`.
    if (command && out.endsWith(" .*")) out = `${out.slice(0, -3)}(?: .*)?`
    re = new RegExp(`^${out}$`, "s")
    if (cache.size > 512) cache.clear()
    cache.set(key, re)
  }
  return re
}

/** What a call is judged on: its shell command, or the paths it touches. */
export interface Subjects {
  readonly command?: string | undefined
  readonly paths: ReadonlyArray<string>
}

/** The first entry of `entries` that is a pattern for `name` matching the call, if any. */
export const matching = (
  entries: ReadonlySet<string>,
  name: string,
  posture: string,
  subjects: Subjects
): string | undefined => {
  for (const entry of entries) {
    const pattern = parse(entry)
    if (pattern === undefined || pattern.tool !== name) continue
    if (posture === "shell") {
      if (subjects.command !== undefined && compile(pattern.pattern, true).test(subjects.command.trim())) return entry
    } else if (subjects.paths.some((path) => compile(pattern.pattern, false).test(path))) return entry
  }
  return undefined
}
