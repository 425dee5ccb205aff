import { assert, describe, it } from "@effect/vitest"
import { Arbitrary, Schema } from "effect"
import type * as Prompt from "effect/ai/Prompt"
import * as Claims from "../src/Claims.ts"
import type { Claim, Ending } from "../src/Claims.ts"
import * as Parts from "../src/internal/parts.ts"
import * as OutputContract from "../src/OutputContract.ts"
import * as EditFile from "../src/tools/EditFile.ts"
import * as Grep from "../src/tools/Grep.ts"
import * as ReadFile from "../src/tools/ReadFile.ts"
import * as Shell from "../src/tools/Shell.ts"
import * as WriteFile from "../src/tools/WriteFile.ts"

// --- Transcripts, as the tools write their results ---

type Action =
  | { readonly _tag: "read"; readonly path: string; readonly from: number; readonly to: number }
  | { readonly _tag: "grep"; readonly path: string; readonly line: number }
  | { readonly _tag: "write"; readonly path: string; readonly lines: number }
  | { readonly _tag: "edit"; readonly path: string }
  | {
    readonly _tag: "shell"
    readonly command: string
    readonly exit: number | null
    /** What `git status` showed it changed (a writing command in a git work tree). */
    readonly changed?: ReadonlyArray<string> | undefined
  }

/** One tool call and its result, as a session's transcript holds them (`failed`: a denied or failed call). */
const step = (id: number, action: Action, failed = false): ReadonlyArray<Prompt.Message> => {
  const callId = `call_${id}`
  const [name, params, result]: [string, unknown, unknown] = (() => {
    switch (action._tag) {
      case "read": {
        const shown = Array.from(
          { length: action.to - action.from + 1 },
          (_, i) => `${String(action.from + i).padStart(6)}\tline ${action.from + i}`
        )
        return [
          ReadFile.name,
          { path: action.path, offset: action.from },
          [...shown, "... 3 more lines; use offset=9 to continue"].join("\n")
        ]
      }
      case "grep":
        return [Grep.name, { pattern: "x" }, `${action.path}:${action.line}: x marks it`]
      case "write":
        return [WriteFile.name, {
          path: action.path,
          content: Array.from({ length: action.lines }, (_, i) => `l${i}\n`).join("")
        }, `wrote ${action.lines} bytes to ${action.path}`]
      case "edit":
        return [EditFile.name, { path: action.path, old_string: "a", new_string: "b" }, "edited"]
      case "shell":
        return [Shell.name, JSON.stringify({ command: action.command }), {
          exit_code: action.exit,
          stdout: "",
          stderr: "",
          timed_out: action.exit === null,
          sandbox: "none",
          ...(action.changed === undefined ? {} : { changed: action.changed })
        }]
    }
  })()
  return [
    Parts.assistantMessage([Parts.toolCallPart(callId, name, params)]),
    Parts.toolMessage([
      Parts.toolResultPart(callId, name, failed, failed ? { error: "PermissionDenied", message: "denied" } : result)
    ])
  ]
}

const transcript = (actions: ReadonlyArray<Action>) => actions.flatMap((action, i) => step(i, action))

const report = (changes: string, evidence: string) =>
  `SUMMARY:\nok\n\nCHANGES:\n${changes}\n\nEVIDENCE:\n${evidence}\n\nRISKS:\nnone\n\nBLOCKERS:\nnone`

const cite = (path: string, from: number, to = from): Claim => ({ _tag: "Cite", path, from, to })
const command = (text: string, ending: Ending = { _tag: "Ran" }): Claim => ({ _tag: "Command", command: text, ending })
const exit = (code: number): Ending => ({ _tag: "Exit", code })

describe("Claims.extract: the grammar", () => {
  it("citations, commands (backticks with an exit phrase or after `ran`, `$` lines) and CHANGES paths", () => {
    const claims = Claims.extract({
      changes: ["- `src/a.ts`: new parser", "* lib/b.js:10-12 rewritten", "none", "1. docs/x.md"].join("\n"),
      evidence: [
        "src/a.ts:3 defines it; see also ./src/c.ts:4–6 and README.md:2:7.",
        "`npm test` exit 0, `make lint` exited with code 2, `tsc` passed, `vitest run` failed",
        "I ran `git status` and `foo()` returns early",
        "$ npm run build → exit 1",
        "  - $ ls -la (exit 0)",
        "$ echo hi",
        "http://example.com:8080/x and 10.0.0.1:22 and step:3 are not citations",
        "e.g.: nothing here"
      ].join("\n")
    })
    assert.deepStrictEqual(claims, [
      { _tag: "Change", path: "src/a.ts" },
      { _tag: "Change", path: "lib/b.js" },
      cite("lib/b.js", 10, 12),
      { _tag: "Change", path: "docs/x.md" },
      cite("src/a.ts", 3),
      cite("src/c.ts", 4, 6),
      cite("README.md", 2),
      command("npm test", exit(0)),
      command("make lint", exit(2)),
      command("tsc", exit(0)),
      command("vitest run", { _tag: "Failed" }),
      command("git status"),
      command("npm run build", exit(1)),
      command("ls -la", exit(0)),
      command("echo hi")
    ])
  })

  it("linear in the report's length: a line of many backticked spans is not searched again for each", {
    timeout: 10_000
  }, () => {
    // Each span looks back for `ran` and ahead for an exit phrase: over the whole line, that
    // would be (2.5e5 spans × 1e6 characters) steps.
    const text = report("", `${"`a` ".repeat(250_000)}and \`make\` exit 2`)
    assert.deepStrictEqual(Claims.extract(OutputContract.parse(text).sections), [command("make", exit(2))])
  })

  it("each claim once; a command's arguments are not read as citations", () => {
    const claims = Claims.extract({
      changes: "",
      evidence: "src/a.ts:1\nsrc/a.ts:1 again\n`grep -n x src/a.ts:9` exit 0"
    })
    assert.deepStrictEqual(claims, [cite("src/a.ts", 1), command("grep -n x src/a.ts:9", exit(0))])
  })
})

describe("Claims.check: each lie with its reason, a truthful report with none", () => {
  const did = transcript([
    { _tag: "read", path: "/work/ws/src/a.ts", from: 1, to: 20 },
    { _tag: "grep", path: "src/b.ts", line: 40 },
    { _tag: "write", path: "./out/c.txt", lines: 3 },
    { _tag: "edit", path: "src/d.ts" },
    { _tag: "shell", command: "npm  test", exit: 1 },
    { _tag: "shell", command: "npm test", exit: 0 },
    { _tag: "shell", command: "sleep 99", exit: null }
  ])

  it("a truthful report: every claim verified", () => {
    const text = report(
      "- out/c.txt\n- src/d.ts",
      "src/a.ts:5-20, src/b.ts:40, out/c.txt:3, src/d.ts:999\n`npm test` passed\n$ sleep 99 → failed"
    )
    assert.deepStrictEqual(Claims.ofAnswer(text, did), { checked: 8, verified: 8, unverified: [] })
  })

  it("a file it never read, a line beyond what it read, a command it never ran, an exit it did not get, a change it did not make", () => {
    const text = report(
      "- src/a.ts: changed",
      "src/z.ts:1\nsrc/a.ts:19-21\nsrc/b.ts:41\n`cargo test` passed\n`npm test` exit 1\n`sleep 99` exit 0"
    )
    assert.deepStrictEqual(Claims.ofAnswer(text, did), {
      checked: 7,
      verified: 0,
      unverified: [
        { claim: "changed src/a.ts", why: "no write_file or edit_file call of it changed src/a.ts" },
        { claim: "src/z.ts:1", why: "it never read, grepped or wrote src/z.ts" },
        {
          claim: "src/a.ts:19-21",
          why: "lines 19-21 of src/a.ts are beyond what it read or wrote (it saw lines 1-20)"
        },
        { claim: "src/b.ts:41", why: "line 41 of src/b.ts is beyond what it read or wrote (it saw line 40)" },
        {
          claim: "`cargo test` exit 0",
          why: "it never ran this command (no shell call with this exact command line)"
        },
        { claim: "`npm test` exit 1", why: "its last run of it exited 0, not exit 1" },
        {
          claim: "`sleep 99` exit 0",
          why: "its last run of it ended without an exit code (killed or timed out), not exit 0"
        }
      ]
    })
  })

  it("a typed output (a JSON object) is checked too: its strings are evidence, those under a changes key are changes", () => {
    const output = JSON.stringify({
      answer: "the parser is in src/a.ts:5-20",
      findings: [{ where: "src/b.ts:41", note: "`npm test` exit 1" }],
      files_changed: ["out/c.txt", "src/e.ts"],
      count: 3
    })
    assert.deepStrictEqual(Claims.ofAnswer(output, did), {
      checked: 5,
      verified: 2,
      unverified: [
        { claim: "changed src/e.ts", why: "no write_file or edit_file call of it changed src/e.ts" },
        { claim: "src/b.ts:41", why: "line 41 of src/b.ts is beyond what it read or wrote (it saw line 40)" },
        { claim: "`npm test` exit 1", why: "its last run of it exited 0, not exit 1" }
      ]
    })
    // Not a JSON object: read as a text report (no sections here, so no claims).
    assert.strictEqual(Claims.ofAnswer("[\"src/z.ts:1\"]", did).checked, 0)
    assert.strictEqual(Claims.sectionsOfOutput("{ not json"), undefined)
  })

  it("a shell command's changes (git status before and after it) back a CHANGES line", () => {
    const made = transcript([{ _tag: "shell", command: "npm run gen", exit: 0, changed: ["gen/y.ts"] }])
    const text = report("- gen/y.ts\n- gen/z.ts", "")
    assert.deepStrictEqual(Claims.ofAnswer(text, made), {
      checked: 2,
      verified: 1,
      unverified: [{
        claim: "changed gen/z.ts",
        why: "no write_file or edit_file call of it changed gen/z.ts, nor did any of its shell commands (by git status)"
      }]
    })
  })

  it("a failed or denied call backs nothing; a change the workspace shows backs a CHANGES line", () => {
    const denied = [
      ...step(0, { _tag: "write", path: "x.ts", lines: 2 }, true),
      ...step(1, { _tag: "shell", command: "make", exit: 0 }, true)
    ]
    const text = report("- x.ts\n- gen/y.ts", "`make` exit 0")
    const plain = Claims.ofAnswer(text, denied)
    assert.deepStrictEqual(plain.unverified.map((u) => u.claim), ["changed x.ts", "changed gen/y.ts", "`make` exit 0"])
    const compared = Claims.ofAnswer(text, denied, { changed: new Set(["/ws/gen/y.ts"]) })
    assert.deepStrictEqual(compared.unverified.map((u) => u.why), [
      "no write_file or edit_file call of it changed x.ts, nor did any of its shell commands (by git status)",
      "it never ran this command (no shell call with this exact command line)"
    ])
  })

  it("the tools it reads are the built-in tools' names", () => {
    assert.deepStrictEqual(Claims.tools, {
      read: ReadFile.name,
      grep: Grep.name,
      write: WriteFile.name,
      edit: EditFile.name,
      shell: Shell.name
    })
  })
})

// --- The property: a claim is verified exactly when the transcript backs it ---

const paths = ["src/a.ts", "b.md", "lib/c.js"] as const
const commands = ["npm test", "make", "exit 1"] as const
const Line = Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 8 }))
const Path = Schema.Literals(paths)
const Cmd = Schema.Literals(commands)
// How the transcript names a file: as the report does, with `./`, or absolute under the workspace.
const Spelling = Schema.Literals(["plain", "dot", "absolute"])

const ActionSchema = Schema.Union([
  Schema.Struct({ _tag: Schema.Literal("read"), path: Path, from: Line, length: Line, spelling: Spelling }),
  Schema.Struct({ _tag: Schema.Literal("grep"), path: Path, line: Line }),
  Schema.Struct({ _tag: Schema.Literal("write"), path: Path, lines: Line, spelling: Spelling }),
  Schema.Struct({ _tag: Schema.Literal("edit"), path: Path }),
  Schema.Struct({
    _tag: Schema.Literal("shell"),
    command: Cmd,
    exit: Schema.NullOr(Schema.Literals([0, 1, 2])),
    changed: Schema.optionalKey(Schema.Array(Path))
  })
])
type GeneratedAction = typeof ActionSchema.Type

const ClaimSchema = Schema.Union([
  Schema.Struct({ _tag: Schema.Literal("Cite"), path: Path, from: Line, length: Line }),
  Schema.Struct({ _tag: Schema.Literal("Command"), command: Cmd, ending: Schema.Literals(["ran", 0, 1, 2, "failed"]) }),
  Schema.Struct({ _tag: Schema.Literal("Change"), path: Path })
])
type GeneratedClaim = typeof ClaimSchema.Type

const spell = (path: string, spelling: "plain" | "dot" | "absolute") =>
  spelling === "plain" ? path : spelling === "dot" ? `./${path}` : `/home/u/ws/${path}`

const toAction = (g: GeneratedAction): Action => {
  switch (g._tag) {
    case "read":
      return { _tag: "read", path: spell(g.path, g.spelling), from: g.from, to: g.from + g.length - 1 }
    case "write":
      return { _tag: "write", path: spell(g.path, g.spelling), lines: g.lines }
    default:
      return g
  }
}

const toClaim = (g: GeneratedClaim): Claim =>
  g._tag === "Cite"
    ? cite(g.path, g.from, g.from + g.length - 1)
    : g._tag === "Change"
    ? { _tag: "Change", path: g.path }
    : command(
      g.command,
      g.ending === "ran" ? { _tag: "Ran" } : g.ending === "failed" ? { _tag: "Failed" } : exit(g.ending)
    )

/** The oracle: what the actions back, by brute force over lines (not Claims' merged ranges). */
const backs = (
  actions: ReadonlyArray<{ readonly action: GeneratedAction; readonly failed: boolean }>,
  claim: GeneratedClaim
) => {
  const done = actions.filter((a) => !a.failed).map((a) => a.action)
  switch (claim._tag) {
    case "Change":
      return done.some((a) =>
        ((a._tag === "write" || a._tag === "edit") && a.path === claim.path) ||
        (a._tag === "shell" && a.changed?.includes(claim.path) === true)
      )
    case "Command": {
      const last = done.filter((a) => a._tag === "shell" && a.command === claim.command).at(-1)
      if (last === undefined || last._tag !== "shell") return false
      if (claim.ending === "ran") return true
      if (claim.ending === "failed") return last.exit !== 0
      return last.exit === claim.ending
    }
    case "Cite": {
      if (done.some((a) => a._tag === "edit" && a.path === claim.path)) return true
      const seen = new Set<number>()
      for (const a of done) {
        if (a._tag === "read" && a.path === claim.path) { for (let l = a.from; l < a.from + a.length; l++) seen.add(l) }
        if (a._tag === "grep" && a.path === claim.path) seen.add(a.line)
        if (a._tag === "write" && a.path === claim.path) { for (let l = 1; l <= a.lines; l++) seen.add(l) }
      }
      for (let l = claim.from; l < claim.from + claim.length; l++) if (!seen.has(l)) return false
      return true
    }
  }
}

/** The claim as a report writes it, in the section it belongs to. */
const written = (claim: Claim): { readonly section: "changes" | "evidence"; readonly line: string } => {
  switch (claim._tag) {
    case "Change":
      return { section: "changes", line: `- ${claim.path}: changed` }
    case "Cite":
      return { section: "evidence", line: `- ${claim.path}:${claim.from}-${claim.to} shows it` }
    case "Command": {
      const ending = claim.ending
      return {
        section: "evidence",
        line: ending._tag === "Ran"
          ? `- ran \`${claim.command}\``
          : ending._tag === "Failed"
          ? `- $ ${claim.command} → failed`
          : `- \`${claim.command}\` exited ${ending.code}`
      }
    }
  }
}

const Case = Schema.Struct({
  actions: Schema.Array(Schema.Struct({ action: ActionSchema, failed: Schema.Boolean })).check(
    Schema.isMaxLength(12)
  ),
  claims: Schema.Array(ClaimSchema).check(Schema.isMinLength(1), Schema.isMaxLength(8))
})

describe("Claims properties", () => {
  it.prop(
    "a claim is verified exactly when the transcript backs it (and a report's text says the same)",
    [Arbitrary.schema(Case)],
    ([{ actions, claims }]) => {
      const messages = actions.flatMap(({ action, failed }, i) => step(i, toAction(action), failed))
      const evidence = Claims.evidenceOf(messages)
      for (const generated of claims) {
        const claim = toClaim(generated)
        assert.strictEqual(
          Claims.why(claim, evidence) === undefined,
          backs(actions, generated),
          `${Claims.render(claim)} against ${JSON.stringify(actions)}`
        )
      }
      // Written into a report and read back, the same claims get the same verdicts.
      const unique = [...new Map(claims.map(toClaim).map((c) => [Claims.render(c), c])).values()]
      const lines = unique.map(written)
      const text = report(
        lines.filter((l) => l.section === "changes").map((l) => l.line).join("\n"),
        lines.filter((l) => l.section === "evidence").map((l) => l.line).join("\n")
      )
      const fromText = Claims.ofAnswer(text, messages)
      const direct = Claims.check(unique, evidence)
      assert.strictEqual(fromText.checked, unique.length, text)
      assert.deepStrictEqual(
        fromText.unverified.map((u) => u.claim).toSorted(),
        direct.unverified.map((u) => u.claim).toSorted()
      )
      assert.strictEqual(fromText.verified, direct.verified)
    },
    { arbitrary: { runs: 300 } }
  )

  it.prop("extract and ofAnswer are total on arbitrary text", [Schema.String], ([text]) => {
    const checked = Claims.ofAnswer(text, [])
    assert.strictEqual(checked.verified + checked.unverified.length, checked.checked)
  })
})
