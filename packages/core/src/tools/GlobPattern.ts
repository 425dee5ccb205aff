/**
 * GlobPattern — glob matching in time linear in the path, for patterns a model writes.
 *
 * Node's `path.matchesGlob` (minimatch) turns each segment into a backtracking `RegExp` and
 * expands braces into every combination: `*a*a*a*a*a*a*b` against a 100-character name runs
 * for minutes, `{a,b}` twenty times makes a million patterns, and either blocks the event
 * loop the whole process shares. Here braces stay alternations inside one RE2 program per
 * segment (`re2js`, linear time), and `**` is matched by dynamic programming over segments.
 *
 * The syntax and meaning follow `matchesGlob` for what the tools document: `*` (within a
 * segment), `**` (any number of segments), `?`, `[abc]`, `[a-z]`, `[!x]`/`[^x]`, POSIX
 * classes, `{a,b}` (nested, and across `/`). As in `matchesGlob`, `\` is a path separator,
 * not an escape (`[*]` matches a literal `*`). A wildcard never matches a name starting with
 * `.` unless the pattern segment spells the dot. Extended globs (`+(a|b)`) are refused with a
 * reason, as are `..` segments and patterns over {@link maxPatternChars}. A property test
 * checks the agreement.
 */
import * as Result from "effect/Result"
import { RE2JS } from "re2js"

/** Longer glob patterns are refused. */
export const maxPatternChars = 1000
/** Alternatives a pattern may expand to across `/` (braces within a segment are free). */
export const maxAlternatives = 256

export interface Matcher {
  readonly test: (path: string) => boolean
}

type Segment =
  | { readonly _tag: "globstar" }
  | { readonly _tag: "literal"; readonly text: string }
  | { readonly _tag: "pattern"; readonly regex: RE2JS; readonly dot: boolean }

const quote = (char: string): string => /[\\^$.|?*+()[\]{}]/.test(char) ? `\\${char}` : char

/** The end of the bracket expression opening at `start` (the index of its `]`), or -1. */
const classEnd = (pattern: string, start: number): number => {
  let i = start + 1
  if (pattern[i] === "!" || pattern[i] === "^") i++
  if (pattern[i] === "]") i++
  for (; i < pattern.length; i++) {
    if (pattern[i] === "[" && pattern[i + 1] === ":") {
      const close = pattern.indexOf(":]", i + 2)
      if (close !== -1) i = close + 1
    } else if (pattern[i] === "]") return i
  }
  return -1
}

/** `[...]` as an RE2 class that never matches `/`. */
const classToRe2 = (body: string): string => {
  let i = 0
  let negate = false
  if (body[0] === "!" || body[0] === "^") {
    negate = true
    i = 1
  }
  let out = ""
  for (; i < body.length; i++) {
    const char = body[i]!
    if (char === "[" && body[i + 1] === ":") {
      const close = body.indexOf(":]", i + 2)
      if (close !== -1) {
        out += body.slice(i, close + 2)
        i = close + 1
        continue
      }
    }
    out += char === "-" && i > (negate ? 1 : 0) && i < body.length - 1
      ? "-"
      : /[\\\][^-]/.test(char)
      ? `\\${char}`
      : char
  }
  return negate ? `[^/${out}]` : `(?:[${out}])`
}

/** The index of the `}` closing the brace at `start`, or -1; `commas` gets the top-level comma positions. */
const braceEnd = (pattern: string, start: number, commas: Array<number>): number => {
  let depth = 0
  for (let i = start; i < pattern.length; i++) {
    const char = pattern[i]
    if (char === "[") {
      const end = classEnd(pattern, i)
      if (end !== -1) i = end
    } else if (char === "{") depth++
    else if (char === "}") {
      depth--
      if (depth === 0) return i
    } else if (char === "," && depth === 1) commas.push(i)
  }
  return -1
}

/** Why a pattern is refused; a class so it can be told apart from a result with `instanceof`. */
class Refused {
  readonly reason: string
  constructor(reason: string) {
    this.reason = reason
  }
}

/**
 * Expands, as matchesGlob does, the braces whose alternatives could change a segment's
 * structure or dot rule: an alternative that is empty, holds `/`, `*`, or another brace, or
 * starts with `.` (`{.github,src}`, `{,a}**`). Plain alternatives (`*.{ts,tsx}`) stay in the
 * segment as one RE2 alternation, so `{a,b}` thirty times is one linear program, not 2^30.
 */
const expandAcrossSegments = (pattern: string): Array<string> | Refused => {
  for (let i = 0; i < pattern.length; i++) {
    const char = pattern[i]
    if (char === "[") {
      const end = classEnd(pattern, i)
      if (end !== -1) i = end
      continue
    }
    if (char !== "{") continue
    const commas: Array<number> = []
    const end = braceEnd(pattern, i, commas)
    if (end === -1) return [pattern]
    const bounds = [i, ...commas, end]
    const special = bounds.slice(0, -1).some((at, k) => {
      const alternative = pattern.slice(at + 1, bounds[k + 1])
      return alternative === "" || alternative.startsWith(".") || /[/*{]/.test(alternative)
    })
    if (commas.length === 0 || !special) {
      i = end
      continue
    }
    const out: Array<string> = []
    for (let k = 0; k < bounds.length - 1; k++) {
      const expanded = expandAcrossSegments(
        pattern.slice(0, i) + pattern.slice(bounds[k]! + 1, bounds[k + 1]) + pattern.slice(end + 1)
      )
      if (expanded instanceof Refused) return expanded
      out.push(...expanded)
      if (out.length > maxAlternatives) {
        return new Refused(`it expands to more than ${maxAlternatives} alternatives across "/"; use fewer {a,b} groups`)
      }
    }
    return out
  }
  return [pattern]
}

/** One segment (no `/` outside braces) as an RE2 expression for a whole name. */
const segmentToRe2 = (segment: string): string | Refused => {
  let out = ""
  for (let i = 0; i < segment.length; i++) {
    const char = segment[i]!
    if (char === "*") {
      while (segment[i + 1] === "*") i++
      out += "[^/]*"
    } else if (char === "?") out += "[^/]"
    else if (char === "[") {
      const end = classEnd(segment, i)
      if (end === -1) out += "\\["
      else {
        out += classToRe2(segment.slice(i + 1, end))
        i = end
      }
    } else if (char === "{") {
      const commas: Array<number> = []
      const end = braceEnd(segment, i, commas)
      if (end === -1 || commas.length === 0) out += "\\{"
      else {
        const bounds = [i, ...commas, end]
        const parts: Array<string> = []
        for (let k = 0; k < bounds.length - 1; k++) {
          const part = segmentToRe2(segment.slice(bounds[k]! + 1, bounds[k + 1]))
          if (part instanceof Refused) return part
          parts.push(part)
        }
        out += `(?:${parts.join("|")})`
        i = end
      }
    } else out += quote(char)
  }
  return out
}

const isLiteral = (segment: string) => !/[*?[{]/.test(segment)

/** Splits at `/` outside brackets and braces. */
const splitSegments = (pattern: string): Array<string> => {
  const out: Array<string> = []
  let start = 0
  let depth = 0
  for (let i = 0; i < pattern.length; i++) {
    const char = pattern[i]
    if (char === "[") {
      const end = classEnd(pattern, i)
      if (end !== -1) i = end
    } else if (char === "{") depth++
    else if (char === "}" && depth > 0) depth--
    else if (char === "/" && depth === 0) {
      out.push(pattern.slice(start, i))
      start = i + 1
    }
  }
  out.push(pattern.slice(start))
  return out
}

/** The pattern's parts as matchesGlob reads them: "" and "." in the middle are dropped (`a//b`, `a/./b`). */
const normalizeParts = (parts: ReadonlyArray<string>): Array<string> =>
  parts.filter((part, i) => !((part === "" || part === ".") && i > 0 && i < parts.length - 1))

const compileOne = (pattern: string): Array<Segment> | Refused => {
  const segments: Array<Segment> = []
  for (const part of normalizeParts(splitSegments(pattern))) {
    if (part === "..") {
      return new Refused(
        `".." is not supported in a glob (files are matched below the searched directory); change the path parameter instead`
      )
    }
    if (part === "**") {
      if (segments.at(-1)?._tag !== "globstar") segments.push({ _tag: "globstar" })
      continue
    }
    if (isLiteral(part)) {
      segments.push({ _tag: "literal", text: part })
      continue
    }
    const source = segmentToRe2(part)
    if (source instanceof Refused) return source
    const compiled = Result.try({
      try: () => RE2JS.compile(source, RE2JS.DOTALL),
      catch: (error) =>
        new Refused(`it is not a valid glob (${error instanceof Error ? error.message : String(error)})`)
    })
    if (Result.isFailure(compiled)) return compiled.failure
    segments.push({ _tag: "pattern", regex: compiled.success, dot: part.startsWith(".") })
  }
  return segments
}

const matchSegment = (segment: Segment, name: string): boolean => {
  switch (segment._tag) {
    case "literal":
      return segment.text === name
    case "pattern":
      return (segment.dot || !name.startsWith(".")) && segment.regex.testExact(name)
    case "globstar":
      return false
  }
}

/**
 * Does the pattern match the path's segments? `ok[i][j]`: pattern from `i` matches path
 * from `j`; O(pattern × path) steps, whatever the pattern. A `**` matches zero or more
 * names that do not start with `.`, but at least one when it ends the pattern (`a/**` is
 * what is under `a`, as in matchesGlob).
 */
const matchSegments = (pattern: ReadonlyArray<Segment>, names: ReadonlyArray<string>): boolean => {
  const width = names.length + 1
  let next = Array.from({ length: width }, () => false)
  next[names.length] = true
  for (let i = pattern.length - 1; i >= 0; i--) {
    const segment = pattern[i]!
    const here = Array.from({ length: width }, () => false)
    for (let j = names.length; j >= 0; j--) {
      if (segment._tag === "globstar") {
        const last = i === pattern.length - 1
        // Zero names (not at the end), or one visible name and then this same globstar again.
        here[j] = (!last && next[j] === true) ||
          (j < names.length && !names[j]!.startsWith(".") && (here[j + 1] === true || (last && j + 1 === names.length)))
      } else {
        here[j] = j < names.length && next[j + 1] === true && matchSegment(segment, names[j]!)
      }
    }
    next = here
  }
  return next[0] === true
}

/** A matcher for `pattern`, or why it is refused. */
export const compile = (pattern: string): Result.Result<Matcher, string> => {
  if (pattern.length > maxPatternChars) {
    return Result.fail(`the pattern is ${pattern.length} characters long; at most ${maxPatternChars} are accepted`)
  }
  const extended = /[+@!?*]\(/.exec(pattern)
  if (extended !== null) {
    return Result.fail(`extended glob syntax "${extended[0]}...)" is not supported; use {a,b} alternatives`)
  }
  const expanded = expandAcrossSegments(pattern.replaceAll("\\", "/"))
  if (expanded instanceof Refused) return Result.fail(expanded.reason)
  const alternatives: Array<ReadonlyArray<Segment>> = []
  for (const one of expanded) {
    const compiled = compileOne(one)
    if (compiled instanceof Refused) return Result.fail(compiled.reason)
    alternatives.push(compiled)
  }
  return Result.succeed({
    test: (path) => {
      const parts = path.split("/")
      // Keep a leading "" (an absolute path); drop empty names elsewhere.
      const names = parts.filter((name, i) => name !== "" || (i === 0 && parts.length > 1))
      return alternatives.some((segments) => matchSegments(segments, names))
    }
  })
}
