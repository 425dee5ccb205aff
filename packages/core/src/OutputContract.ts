/**
 * The output contract between a parent agent and its sub-agents.
 *
 * Every sub-agent is told to end its final answer with five sections (SUMMARY, CHANGES, EVIDENCE,
 * RISKS, BLOCKERS). The parent never sees the child's transcript, only what `parse` extracts here,
 * so this module decides what a child "said". It is deliberately forgiving: models decorate headings
 * in many ways, and a malformed answer must still yield usable fields. Deviations from the contract
 * are returned as `Violation`s for the runtime to report, never as failures.
 *
 * `parse` runs on every sub-agent result, so it is a pure, total, linear-time function: one scan
 * over the lines with anchored regexes whose quantifiers never overlap (no quadratic backtracking on
 * long lines).
 */

export const SectionNames = ["SUMMARY", "CHANGES", "EVIDENCE", "RISKS", "BLOCKERS"] as const

export type SectionName = typeof SectionNames[number]

export interface Sections {
  readonly summary: string
  readonly changes: string
  readonly evidence: string
  readonly risks: string
  readonly blockers: string
}

export interface Violation {
  readonly kind: "missing" | "empty" | "out_of_order" | "duplicate" | "no_sections"
  readonly section?: SectionName
  readonly message: string
}

export interface ParsedOutput {
  readonly sections: Sections
  readonly violations: ReadonlyArray<Violation>
  readonly preamble: string
}

// "None" is a legitimate answer for these, so an empty body is not a contract violation.
const mayBeEmpty: ReadonlySet<SectionName> = new Set<SectionName>(["CHANGES", "RISKS", "BLOCKERS"])

const sectionIndex: ReadonlyMap<string, number> = new Map(SectionNames.map((name, i) => [name, i]))

const lineBreak = /\r\n?|\n/

// Decoration before the name: markdown `#`, `*`, `_`, then optional list numbering ("1." / "2)").
// The character classes are disjoint from their neighbours, which keeps matching linear.
const headingStart = /^[ \t#*_]*(?:\d{1,3}[.)][ \t*_]*)?(summary|changes|evidence|risks|blockers)(?![A-Za-z0-9])/i

// After the name: closing decoration, an optional ":" or "-" separator, decoration again.
const headingEnd = /^[ \t*_#]*(?:([:\-–—])[ \t*_]*)?/

const fenceOpen = /^[ \t]*(`{3,}|~{3,})/
const fenceClose = /^[ \t]*(`{3,}|~{3,})[ \t]*$/

interface Heading {
  readonly section: number
  readonly line: number
  readonly inline: string
}

/**
 * Recognises a heading line. Only the `:` separator may carry inline content
 * (`SUMMARY: did X`); `Summary - did X` reads as prose, not as a heading.
 */
const matchHeading = (line: string, lineNo: number): Heading | undefined => {
  const start = headingStart.exec(line)
  if (start === null) return undefined
  const section = sectionIndex.get((start[1] ?? "").toUpperCase())
  if (section === undefined) return undefined
  const rest = line.slice(start[0].length)
  const end = headingEnd.exec(rest)
  const separator = end?.[1]
  const inline = rest.slice(end === null ? 0 : end[0].length).trim()
  if (inline === "") return { section, line: lineNo, inline: "" }
  return separator === ":" ? { section, line: lineNo, inline } : undefined
}

/**
 * Finds the headings in one pass. A heading-like line inside a closed code fence is quoted material
 * (command output, a pasted README), not structure, so it is ignored. If a fence is never closed the
 * model most likely forgot to close it, and its headings are honoured rather than losing every
 * section after it.
 */
const scanHeadings = (lines: ReadonlyArray<string>): Array<Heading> => {
  const headings: Array<Heading> = []
  let fence: string | undefined
  let fenced: Array<Heading> = []
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] ?? ""
    if (fence !== undefined) {
      const close = fenceClose.exec(line)?.[1]
      if (close !== undefined && close[0] === fence[0] && close.length >= fence.length) {
        fence = undefined
        fenced = []
        continue
      }
      const heading = matchHeading(line, i)
      if (heading !== undefined) fenced.push(heading)
      continue
    }
    const open = fenceOpen.exec(line)?.[1]
    if (open !== undefined) {
      fence = open
      continue
    }
    const heading = matchHeading(line, i)
    if (heading !== undefined) headings.push(heading)
  }
  return fenced.length === 0 ? headings : headings.concat(fenced)
}

const emptySections: Sections = { summary: "", changes: "", evidence: "", risks: "", blockers: "" }

const nameAt = (i: number): SectionName => SectionNames[i] ?? "SUMMARY"

/**
 * Splits a sub-agent's final answer into the five contract sections.
 *
 * Pure and total: any string yields a `ParsedOutput`; problems are listed in `violations`.
 *
 * @example
 * const parsed = parse("SUMMARY: fixed the bug\nCHANGES:\n- a.ts\nEVIDENCE:\ntests pass\nRISKS:\nnone\nBLOCKERS:\nnone")
 * parsed.sections.summary // "fixed the bug"
 * parsed.violations       // []
 */
export const parse = (text: string): ParsedOutput => {
  // One line (a short answer, often): no regex split.
  const lines = text.includes("\n") || text.includes("\r") ? text.split(lineBreak) : [text]
  const headings = scanHeadings(lines)
  const first = headings[0]
  if (first === undefined) {
    return {
      sections: emptySections,
      violations: [{
        kind: "no_sections",
        message: `no recognised sections (expected ${SectionNames.join(", ")})`
      }],
      preamble: text.trim()
    }
  }

  const parts: Array<Array<string>> = SectionNames.map(() => [])
  const order: Array<number> = []
  for (let h = 0; h < headings.length; h++) {
    const heading = headings[h] ?? first
    const nextLine = headings[h + 1]?.line ?? lines.length
    const body = lines.slice(heading.line + 1, nextLine).join("\n")
    const content = (heading.inline === "" ? body : `${heading.inline}\n${body}`).trim()
    const bucket = parts[heading.section]
    if (bucket === undefined) continue
    if (bucket.length === 0) order.push(heading.section)
    bucket.push(content)
  }

  const violations: Array<Violation> = []
  const contents = parts.map((bucket, i) => {
    const section = nameAt(i)
    if (bucket.length === 0) {
      violations.push({ kind: "missing", section, message: `missing section ${section}` })
      return ""
    }
    if (bucket.length > 1) {
      violations.push({
        kind: "duplicate",
        section,
        message: `duplicate section ${section} (${bucket.length} headings); contents concatenated`
      })
    }
    const content = bucket.filter((part) => part !== "").join("\n\n")
    if (content === "" && !mayBeEmpty.has(section)) {
      violations.push({ kind: "empty", section, message: `empty section ${section}` })
    }
    return content
  })

  if (order.some((section, i) => i > 0 && section < (order[i - 1] ?? section))) {
    violations.push({
      kind: "out_of_order",
      message: `sections out of order: found ${order.map(nameAt).join(", ")}; expected ${SectionNames.join(", ")}`
    })
  }

  return {
    sections: {
      summary: contents[0] ?? "",
      changes: contents[1] ?? "",
      evidence: contents[2] ?? "",
      risks: contents[3] ?? "",
      blockers: contents[4] ?? ""
    },
    violations,
    preamble: lines.slice(0, first.line).join("\n").trim()
  }
}

/**
 * The canonical, well-formed text for `sections`: `parse(render(s))` gives back `s` (trimmed) as
 * long as no content line is itself a heading.
 */
export const render = (sections: Sections): string =>
  [
    `SUMMARY:\n${sections.summary.trim()}`,
    `CHANGES:\n${sections.changes.trim()}`,
    `EVIDENCE:\n${sections.evidence.trim()}`,
    `RISKS:\n${sections.risks.trim()}`,
    `BLOCKERS:\n${sections.blockers.trim()}`
  ].join("\n\n")

/**
 * What the parent is told a child did: its SUMMARY, or, when the child ignored the contract, the
 * start of its trimmed answer (at most `maxChars` UTF-16 units, never splitting a surrogate pair).
 */
export const summaryOf = (parsed: ParsedOutput, fallbackText: string, maxChars = 500): string => {
  if (parsed.sections.summary !== "") return parsed.sections.summary
  const text = fallbackText.trim()
  const limit = Math.max(0, Math.floor(maxChars))
  if (!(limit < text.length)) return text
  const low = text.charCodeAt(limit)
  const cut = limit > 0 && low >= 0xdc00 && low <= 0xdfff ? limit - 1 : limit
  return text.slice(0, cut)
}
