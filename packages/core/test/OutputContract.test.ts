import { assert, describe, it } from "@effect/vitest"
import { Arbitrary, Schema } from "effect"
import * as OutputContract from "../src/OutputContract.ts"
import type { Sections, Violation } from "../src/OutputContract.ts"

const wellFormed = [
  "SUMMARY:",
  "Fixed the parser.",
  "",
  "CHANGES:",
  "- src/a.ts",
  "",
  "EVIDENCE:",
  "npm test: 12 passed",
  "",
  "RISKS:",
  "none",
  "",
  "BLOCKERS:",
  "none"
].join("\n")

const kinds = (violations: ReadonlyArray<Violation>) => violations.map((v) => `${v.kind}:${v.section ?? "-"}`)

describe("OutputContract.parse", () => {
  it("parses the canonical form with no violations", () => {
    const parsed = OutputContract.parse(wellFormed)
    assert.deepStrictEqual(parsed.sections, {
      summary: "Fixed the parser.",
      changes: "- src/a.ts",
      evidence: "npm test: 12 passed",
      risks: "none",
      blockers: "none"
    })
    assert.deepStrictEqual(parsed.violations, [])
    assert.strictEqual(parsed.preamble, "")
  })

  const styles: ReadonlyArray<(name: string) => string> = [
    (n) => n,
    (n) => `${n}:`,
    (n) => `## ${n}`,
    (n) => `### ${n}:`,
    (n) => `**${n}**`,
    (n) => `**${n}:**`,
    (n) => `1. ${n}`,
    (n) => `${n} -`,
    (n) => `   ${n}:   `,
    (n) => `# ${n} #`,
    (n) => `2) __${n}__`
  ]
  const casings: ReadonlyArray<(name: string) => string> = [
    (n) => n,
    (n) => n.toLowerCase(),
    (n) => n.charAt(0) + n.slice(1).toLowerCase()
  ]

  it.each(styles.flatMap((style) => casings.map((casing) => style(casing("SUMMARY")))))(
    "recognises the heading %j",
    (heading) => {
      const text = OutputContract.SectionNames
        .map((name, i) => `${i === 0 ? heading : name}\ncontent of ${name.toLowerCase()}`)
        .join("\n")
      const parsed = OutputContract.parse(text)
      assert.strictEqual(parsed.sections.summary, "content of summary")
      assert.strictEqual(parsed.sections.blockers, "content of blockers")
      assert.deepStrictEqual(parsed.violations, [])
    }
  )

  it("mixes heading styles in one answer, with CRLF line endings", () => {
    const text = [
      "## Summary",
      "did X",
      "**CHANGES:**",
      "a.ts",
      "1. Evidence",
      "ran it",
      "Risks -",
      "",
      "### BLOCKERS:",
      "none"
    ]
      .join("\r\n")
    const parsed = OutputContract.parse(text)
    assert.deepStrictEqual(parsed.sections, {
      summary: "did X",
      changes: "a.ts",
      evidence: "ran it",
      risks: "",
      blockers: "none"
    })
    assert.deepStrictEqual(parsed.violations, [])
  })

  it("takes inline content after the colon, plus the following lines", () => {
    const parsed = OutputContract.parse(
      "SUMMARY: did X\nand Y\n**Changes:** none\nEVIDENCE: ran tests\nRISKS:\nBLOCKERS: none"
    )
    assert.strictEqual(parsed.sections.summary, "did X\nand Y")
    assert.strictEqual(parsed.sections.changes, "none")
    assert.strictEqual(parsed.sections.evidence, "ran tests")
    assert.strictEqual(parsed.sections.risks, "")
    assert.strictEqual(parsed.sections.blockers, "none")
    assert.deepStrictEqual(parsed.violations, [])
  })

  it("does not treat a sentence mentioning a section name as a heading", () => {
    const text = [
      "SUMMARY:",
      "In summary, the risks are low.",
      "Summary of changes below",
      "Summary - it works",
      "Summarylike words and Risks2 do not count",
      "CHANGES:",
      "Changed the summary field",
      "EVIDENCE:",
      "ok",
      "RISKS:",
      "BLOCKERS:"
    ].join("\n")
    const parsed = OutputContract.parse(text)
    assert.strictEqual(
      parsed.sections.summary,
      "In summary, the risks are low.\nSummary of changes below\nSummary - it works\nSummarylike words and Risks2 do not count"
    )
    assert.strictEqual(parsed.sections.changes, "Changed the summary field")
    assert.deepStrictEqual(parsed.violations, [])
  })

  it("keeps text before the first heading as the preamble", () => {
    const parsed = OutputContract.parse(`  I looked around.\n\nThen I fixed it.\n\n${wellFormed}`)
    assert.strictEqual(parsed.preamble, "I looked around.\n\nThen I fixed it.")
    assert.strictEqual(parsed.sections.summary, "Fixed the parser.")
    assert.deepStrictEqual(parsed.violations, [])
  })

  it("records each missing section", () => {
    const parsed = OutputContract.parse("SUMMARY:\ndid X\nEVIDENCE:\nran it")
    assert.deepStrictEqual(kinds(parsed.violations), ["missing:CHANGES", "missing:RISKS", "missing:BLOCKERS"])
    assert.strictEqual(parsed.sections.changes, "")
    assert.include(parsed.violations.map((v) => v.message), "missing section BLOCKERS")
  })

  it("flags an empty SUMMARY or EVIDENCE but accepts empty CHANGES, RISKS and BLOCKERS", () => {
    const parsed = OutputContract.parse("SUMMARY:\n\nCHANGES:\nEVIDENCE:\n   \nRISKS:\nBLOCKERS:\n")
    assert.deepStrictEqual(kinds(parsed.violations), ["empty:SUMMARY", "empty:EVIDENCE"])
    assert.strictEqual(parsed.violations[0]?.message, "empty section SUMMARY")
  })

  it("concatenates duplicate sections and records the duplicate", () => {
    const parsed = OutputContract.parse(`${wellFormed}\nCHANGES:\n- src/b.ts`)
    assert.strictEqual(parsed.sections.changes, "- src/a.ts\n\n- src/b.ts")
    assert.strictEqual(parsed.sections.blockers, "none")
    assert.deepStrictEqual(kinds(parsed.violations), ["duplicate:CHANGES"])
  })

  it("records one out_of_order violation however many sections are swapped", () => {
    const parsed = OutputContract.parse(
      "BLOCKERS:\nnone\nRISKS:\nnone\nEVIDENCE:\nran it\nCHANGES:\na.ts\nSUMMARY:\ndid X"
    )
    assert.deepStrictEqual(kinds(parsed.violations), ["out_of_order:-"])
    assert.deepStrictEqual(parsed.sections, {
      summary: "did X",
      changes: "a.ts",
      evidence: "ran it",
      risks: "none",
      blockers: "none"
    })
  })

  it("reports text with no headings as a single no_sections violation", () => {
    const parsed = OutputContract.parse("\n  I fixed it, in summary.\nAll good.  \n")
    assert.deepStrictEqual(kinds(parsed.violations), ["no_sections:-"])
    assert.strictEqual(parsed.preamble, "I fixed it, in summary.\nAll good.")
    assert.deepStrictEqual(parsed.sections, { summary: "", changes: "", evidence: "", risks: "", blockers: "" })
  })

  it("handles the empty string", () => {
    const parsed = OutputContract.parse("")
    assert.deepStrictEqual(kinds(parsed.violations), ["no_sections:-"])
    assert.strictEqual(parsed.preamble, "")
  })

  it("ignores heading-like lines inside a closed code fence", () => {
    const text = [
      "SUMMARY:",
      "did X",
      "CHANGES:",
      "EVIDENCE:",
      "```",
      "## Summary",
      "3 passed",
      "```",
      "RISKS:",
      "BLOCKERS:"
    ].join("\n")
    const parsed = OutputContract.parse(text)
    assert.strictEqual(parsed.sections.evidence, "```\n## Summary\n3 passed\n```")
    assert.deepStrictEqual(parsed.violations, [])
  })

  it("honours headings after a fence that is never closed", () => {
    const parsed = OutputContract.parse("SUMMARY:\ndid X\nCHANGES:\n```diff\n+a\nEVIDENCE:\nran\nRISKS:\nBLOCKERS:")
    assert.strictEqual(parsed.sections.changes, "```diff\n+a")
    assert.strictEqual(parsed.sections.evidence, "ran")
    assert.deepStrictEqual(parsed.violations, [])
  })

  it("stays linear on pathological lines", () => {
    const long = " ".repeat(200_000)
    const text = [
      `Summary${long}x`,
      `**${"*".repeat(200_000)}`,
      `1.${long}SUMMARY${long}:${long}`,
      `#${"_".repeat(200_000)}`
    ]
      .join("\n")
    const parsed = OutputContract.parse(text)
    assert.deepStrictEqual(kinds(parsed.violations), [
      "missing:CHANGES",
      "missing:EVIDENCE",
      "missing:RISKS",
      "missing:BLOCKERS"
    ])
  }, 2_000)
})

describe("OutputContract.render", () => {
  it("renders the canonical text", () => {
    const text = OutputContract.render({
      summary: " did X ",
      changes: "a.ts",
      evidence: "ran",
      risks: "",
      blockers: "none"
    })
    assert.strictEqual(text, "SUMMARY:\ndid X\n\nCHANGES:\na.ts\n\nEVIDENCE:\nran\n\nRISKS:\n\n\nBLOCKERS:\nnone")
  })
})

describe("OutputContract.summaryOf", () => {
  it("prefers the SUMMARY section", () => {
    assert.strictEqual(OutputContract.summaryOf(OutputContract.parse(wellFormed), wellFormed), "Fixed the parser.")
  })

  it("falls back to the start of the trimmed text when SUMMARY is missing or empty", () => {
    const text = `  ${"a".repeat(600)}  `
    assert.strictEqual(OutputContract.summaryOf(OutputContract.parse(text), text), "a".repeat(500))
    assert.strictEqual(OutputContract.summaryOf(OutputContract.parse(text), text, 10), "a".repeat(10))
    const empty = "SUMMARY:\nCHANGES:\nx"
    assert.strictEqual(OutputContract.summaryOf(OutputContract.parse(empty), empty), empty)
  })

  it("never splits a surrogate pair", () => {
    const text = "ab😀cd"
    assert.strictEqual(OutputContract.summaryOf(OutputContract.parse(text), text, 3), "ab")
    assert.strictEqual(OutputContract.summaryOf(OutputContract.parse(text), text, 4), "ab😀")
  })
})

// --- properties -------------------------------------------------------------------------------

const headingLines = Schema.Literals([
  "SUMMARY",
  "SUMMARY:",
  "## Summary",
  "### SUMMARY:",
  "**Summary**",
  "**CHANGES:**",
  "**Evidence:**",
  "1. RISKS",
  "Blockers -",
  "risks: none",
  "SUMMARY: did X",
  "```",
  "~~~",
  ""
])

const interleaved = Arbitrary.array(Arbitrary.schema(Schema.Union([headingLines, Schema.String])), { maxLength: 40 })
  .pipe(Arbitrary.map((lines) => lines.join("\n")))

const sectionKeys = ["summary", "changes", "evidence", "risks", "blockers"] as const

const assertWellShaped = (text: string) => {
  const parsed = OutputContract.parse(text)
  for (const key of sectionKeys) {
    const value = parsed.sections[key]
    assert.strictEqual(value, value.trim())
  }
  assert.strictEqual(parsed.preamble, parsed.preamble.trim())
  const noSections = parsed.violations.some((v) => v.kind === "no_sections")
  if (noSections) {
    assert.strictEqual(parsed.violations.length, 1)
    assert.strictEqual(parsed.preamble, text.trim())
  }
  for (const v of parsed.violations) assert.isAbove(v.message.length, 0)
}

const isHeadingName = /^\s*(summary|changes|evidence|risks|blockers)\s*$/i

// Words that look like headings on their own, so sanitising (not the generator) keeps the content legal.
const contentPiece = Schema.Union([
  Schema.Literals(["summary", "Risks", "CHANGES", "none", " ", "\n", "\n\n", "fix 1"]),
  Schema.String.pipe(Schema.check(Schema.isPattern(/^[A-Za-z0-9 \n]*$/), Schema.isMaxLength(30)))
])

const content = Arbitrary.array(Arbitrary.schema(contentPiece), { maxLength: 12 }).pipe(
  Arbitrary.map((pieces) =>
    pieces.join("")
      .split("\n")
      .map((line) => (isHeadingName.test(line) ? `x ${line}` : line))
      .join("\n")
      .trim()
  )
)

const sections = Arbitrary.all({
  summary: content,
  changes: content,
  evidence: content,
  risks: content,
  blockers: content
})

describe("OutputContract properties", () => {
  it.prop("parse is total on arbitrary strings", [Schema.String], ([text]) => {
    assertWellShaped(text)
  })

  it.prop("parse is total on text interleaved with heading lines", [interleaved], ([text]) => {
    assertWellShaped(text)
  }, { arbitrary: { runs: 500 } })

  it.prop("parse(render(s)) gives back s", [sections], ([s]: [Sections]) => {
    const parsed = OutputContract.parse(OutputContract.render(s))
    assert.deepStrictEqual(parsed.sections, s)
    assert.strictEqual(parsed.preamble, "")
    const expected = [
      ...(s.summary === "" ? ["empty:SUMMARY"] : []),
      ...(s.evidence === "" ? ["empty:EVIDENCE"] : [])
    ]
    assert.deepStrictEqual(kinds(parsed.violations), expected)
  }, { arbitrary: { runs: 500 } })

  it.prop("text without heading lines is all preamble", [content], ([text]) => {
    const parsed = OutputContract.parse(text)
    assert.deepStrictEqual(kinds(parsed.violations), ["no_sections:-"])
    assert.strictEqual(parsed.preamble, text)
  })
})

describe("OutputContract edge cases (from a mutation run)", () => {
  it("the violations say what was found and what is expected", () => {
    const none = OutputContract.parse("just prose")
    assert.deepStrictEqual(none.violations, [{
      kind: "no_sections",
      message: "no recognised sections (expected SUMMARY, CHANGES, EVIDENCE, RISKS, BLOCKERS)"
    }])
    const swapped = OutputContract.parse("CHANGES:\nx\nSUMMARY:\ns\nEVIDENCE:\ne\nBLOCKERS:\nb\nRISKS:\nr")
    assert.deepInclude(swapped.violations, {
      kind: "out_of_order",
      message: "sections out of order: found CHANGES, SUMMARY, EVIDENCE, BLOCKERS, RISKS; " +
        "expected SUMMARY, CHANGES, EVIDENCE, RISKS, BLOCKERS"
    })
    assert.strictEqual(swapped.sections.summary, "s")
  })

  it("a fence closes only with its own character, at least as long: headings inside stay quoted", () => {
    const text = [
      "SUMMARY:",
      "done",
      "````",
      "```",
      "EVIDENCE: inside the fence",
      "~~~~",
      "RISKS: still inside",
      "````",
      "EVIDENCE:",
      "outside"
    ].join("\n")
    const parsed = OutputContract.parse(text)
    assert.strictEqual(parsed.sections.evidence, "outside")
    assert.strictEqual(parsed.sections.risks, "")
    assert.include(parsed.sections.summary, "EVIDENCE: inside the fence")
    assert.include(parsed.sections.summary, "RISKS: still inside")
  })

  it("a heading's inline text loses its trailing blanks even when lines follow it", () => {
    const parsed = OutputContract.parse("SUMMARY: did X \t \nand Y\nEVIDENCE:   ran it  \nok")
    assert.strictEqual(parsed.sections.summary, "did X\nand Y")
    assert.strictEqual(parsed.sections.evidence, "ran it\nok")
  })

  it("after a closed fence, a section ends where an unclosed fence's first heading starts", () => {
    const text = [
      "SUMMARY:",
      "s",
      "```",
      "quoted",
      "```",
      "CHANGES:",
      "- a.ts",
      "```",
      "EVIDENCE:",
      "e"
    ].join("\n")
    const parsed = OutputContract.parse(text)
    // The unclosed fence's headings are honoured: CHANGES stops at EVIDENCE.
    assert.strictEqual(parsed.sections.changes, "- a.ts\n```")
    assert.strictEqual(parsed.sections.evidence, "e")
  })

  it("render trims each section", () => {
    assert.strictEqual(
      OutputContract.render({ summary: " s ", changes: "  c\n", evidence: "\ne ", risks: " r", blockers: "b  " }),
      "SUMMARY:\ns\n\nCHANGES:\nc\n\nEVIDENCE:\ne\n\nRISKS:\nr\n\nBLOCKERS:\nb"
    )
  })

  it("summaryOf cuts an answer without a SUMMARY at maxChars, never inside a surrogate pair", () => {
    const none = OutputContract.parse("")
    const cut = (text: string, max: number) => OutputContract.summaryOf(none, text, max)
    assert.strictEqual(cut("abcdef", 3), "abc")
    assert.strictEqual(cut("  abc  ", 3), "abc")
    assert.strictEqual(cut("abc", 3), "abc")
    // U+10000 is \ud800\udc00 and U+103FF is \ud800\udfff: the cut moves before the pair.
    assert.strictEqual(cut("a\u{10000}b", 2), "a")
    assert.strictEqual(cut("a\u{103FF}b", 2), "a")
    // A character above the surrogates (U+E000) is cut after, like any other.
    assert.strictEqual(cut("ab\ue000c", 2), "ab")
    // Nothing before the limit: nothing, whatever follows.
    assert.strictEqual(cut("\udc00abc", 0), "")
    assert.strictEqual(OutputContract.summaryOf(OutputContract.parse("SUMMARY: given"), "ignored", 1), "given")
  })
})
