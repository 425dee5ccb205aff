/**
 * The demo's scripted model. A real model decides from the conversation it is handed; so
 * does this one: each explorer reports what its real tool calls returned on the workspace
 * (whatever project it is), the reviewer checks the reports and scans for unfinished work,
 * and the parent's review request and final answer are built from its children's results.
 *
 * `paced`: each model turn takes the time a model would (0.4 to 2 s), so on a terminal the
 * tree is seen growing; unpaced, the scenario runs in a fraction of a second.
 */
import type { ScriptedModel } from "@fibril/testkit"
import * as Arr from "effect/Array"

type Conversation = ScriptedModel.Conversation
type Turn = ScriptedModel.Turn
type ToolResult = Conversation["toolResults"][number]

interface Exploration {
  readonly description: string
  readonly prompt: string
  readonly calls: Arr.NonEmptyReadonlyArray<{ readonly name: string; readonly args: Record<string, unknown> }>
  /** The report, from the results of its calls. */
  readonly report: (
    results: ReadonlyArray<ToolResult>
  ) => { readonly summary: string; readonly evidence: Array<string> }
  /** Model "thinking" time before the calls and before the report (paced demo). */
  readonly delays: readonly [number, number]
}

const manifests =
  "**/{package.json,pyproject.toml,setup.py,Cargo.toml,go.mod,pom.xml,build.gradle,Gemfile,composer.json,*.csproj}"
const testFiles = "**/{*.test.*,*.spec.*,*_test.*,test_*.py}"

const outputOf = (result: ToolResult | undefined): string =>
  result === undefined || result.isFailure
    ? ""
    : typeof result.result === "string"
    ? result.result
    : JSON.stringify(result.result)

const linesOf = (result: ToolResult | undefined): Array<string> =>
  outputOf(result).split("\n").map((line) => line.trimEnd()).filter((line) => line.trim() !== "")

/** The files a glob returned (its notes and "No files match" left out). */
const globbed = (result: ToolResult | undefined): Array<string> =>
  linesOf(result).filter((line) =>
    !line.startsWith("No files match") && !line.startsWith("[") && !line.startsWith("...")
  )

/** `a, b, c and 4 more`. */
const listed = (items: ReadonlyArray<string>, max: number): string => {
  if (items.length === 0) return "none"
  const shown = items.slice(0, max)
  const rest = items.length - shown.length
  const head = rest > 0
    ? shown.join(", ")
    : shown.length === 1
    ? shown[0]!
    : `${shown.slice(0, -1).join(", ")} and ${shown.at(-1)}`
  return rest > 0 ? `${head} and ${rest} more` : head
}

const plural = (n: number, noun: string, many = `${noun}s`) => `${n} ${n === 1 ? noun : many}`

const dirOf = (file: string) => file.includes("/") ? file.slice(0, file.lastIndexOf("/")) : "."

export const explorations: Arr.NonEmptyReadonlyArray<Exploration> = [
  {
    description: "Map the repository layout",
    prompt: "Map the layout of this repository: its top-level entries and its package manifests.",
    calls: [
      { name: "list_dir", args: { path: "." } },
      { name: "glob", args: { pattern: manifests } }
    ],
    delays: [500, 1500],
    report: ([entries, found]) => {
      const names = linesOf(entries).filter((line) => !line.startsWith("..."))
      const dirs = names.filter((name) => name.endsWith("/")).map((name) => name.slice(0, -1))
      const files = names.filter((name) => !name.endsWith("/"))
      const projects = globbed(found)
      return {
        summary: `The workspace has ${plural(names.length, "top-level entry", "top-level entries")}: ` +
          `${plural(dirs.length, "directory", "directories")} (${listed(dirs, 6)}) and ${
            plural(files.length, "file")
          } (${listed(files, 6)}). ` +
          (projects.length === 0
            ? "No package manifest was found."
            : `It holds ${plural(projects.length, "package manifest")}: ${listed(projects, 5)}.`),
        evidence: [
          `list_dir .: ${plural(names.length, "entry", "entries")}`,
          `glob ${manifests}: ${projects.length === 0 ? "no match" : listed(projects, 5)}`
        ]
      }
    }
  },
  {
    description: "Find the tests",
    prompt: "Find the project's tests: where they live and how they are named.",
    calls: [{ name: "glob", args: { pattern: testFiles } }],
    delays: [900, 1200],
    report: ([found]) => {
      const tests = globbed(found)
      if (tests.length === 0) {
        return {
          summary: "No test files were found (no *.test.*, *.spec.*, *_test.* or test_*.py file).",
          evidence: [`glob ${testFiles}: no match`]
        }
      }
      const byDir = new Map<string, number>()
      for (const file of tests) byDir.set(dirOf(file), (byDir.get(dirOf(file)) ?? 0) + 1)
      const dirs = [...byDir.entries()].sort((a, b) => b[1] - a[1])
      const style = tests.filter((f) => /\.test\./.test(f)).length >= tests.length / 2
        ? "*.test.*"
        : "*.spec.* / test_*"
      return {
        summary:
          `There ${tests.length === 1 ? "is" : "are"} ${plural(tests.length, "test file")} in ${
            plural(dirs.length, "directory", "directories")
          }, ` +
          `mostly ${listed(dirs.slice(0, 3).map(([dir, n]) => `${dir} (${n})`), 3)}; they are named ${style}.`,
        evidence: [
          `glob ${testFiles}: ${plural(tests.length, "file")}`,
          ...tests.slice(0, 3).map((file) => `e.g. ${file}`)
        ]
      }
    }
  },
  {
    description: "Read the README",
    prompt: "Find the README and read its opening, to report what the project is and how a user starts.",
    calls: [
      { name: "glob", args: { pattern: "README*" } },
      { name: "read_file", args: { path: "README.md", limit: 60 } }
    ],
    delays: [400, 2000],
    report: ([, read]) => {
      // read_file numbers its lines like `cat -n`: "    12\ttext".
      const numbered = linesOf(read).flatMap((line) => {
        const match = /^\s*(\d+)\t(.*)$/.exec(line)
        return match === null ? [] : [{ n: Number(match[1]), text: match[2]! }]
      })
      if (numbered.length === 0) {
        return {
          summary: "There is no README.md at the root of the workspace.",
          evidence: ["read_file README.md: not found"]
        }
      }
      const title = numbered.find((line) => line.text.startsWith("#"))
      // The opening paragraph: the first lines of prose, up to a blank line; its first sentence.
      const start = numbered.findIndex((line) =>
        line.text.trim() !== "" && !/^(#|```|<|!\[|\[!|[-*|>])/.test(line.text.trim())
      )
      const end = numbered.findIndex((line, i) => i > start && line.text.trim() === "")
      const paragraph = start === -1 ? [] : numbered.slice(start, end === -1 ? undefined : end)
      const prose = paragraph.map((line) => line.text.trim()).join(" ")
      const sentence = /^.*?[.!?](\s|$)/.exec(prose)?.[0].trim() ?? prose
      const fence = numbered.findIndex((line) => line.text.startsWith("```"))
      const command = fence === -1
        ? undefined
        : numbered.slice(fence + 1).find((line) => line.text.trim() !== "" && !line.text.startsWith("```"))
      const shell = command?.text.replace(/\s+#.*$/, "").trim()
      return {
        summary: `The README${title === undefined ? "" : ` ("${title.text.replace(/^#+\s*/, "")}")`} opens: ` +
          `${
            sentence === ""
              ? "(no opening paragraph)"
              : `"${sentence.length > 240 ? `${sentence.slice(0, 239)}…` : sentence}"`
          }` +
          `${shell === undefined ? "" : ` Its first command is \`${shell}\`.`}`,
        evidence: [title, paragraph[0], command].flatMap((line) =>
          line === undefined ? [] : [`README.md:${line.n}: ${line.text.trim()}`]
        )
      }
    }
  }
]

const report = (summary: string, evidence: ReadonlyArray<string>, risks = "none"): string =>
  [
    "SUMMARY:",
    summary,
    "",
    "CHANGES:",
    "none",
    "",
    "EVIDENCE:",
    ...evidence.map((line) => `- ${line}`),
    "",
    "RISKS:",
    risks,
    "",
    "BLOCKERS:",
    "none"
  ].join("\n")

const pace = (paced: boolean, ms: number): { readonly delay_ms?: number } => paced ? { delay_ms: ms } : {}

const explorer = (paced: boolean) => (conversation: Conversation): Turn => {
  const plan = explorations.find((e) => conversation.prompt.startsWith(e.prompt)) ?? explorations[0]
  if (conversation.turn === 0) {
    return {
      ...pace(paced, plan.delays[0]),
      tool_calls: Arr.map(plan.calls, (call) => ({ name: call.name, args: call.args }))
    }
  }
  const { summary, evidence } = plan.report(conversation.toolResults)
  return { ...pace(paced, plan.delays[1]), text: report(summary, evidence) }
}

// A marker as left in code: the word followed by a colon or an opening parenthesis.
const markers = "\\b(TODO|FIXME|XXX)\\b[:(]"

const reviewer = (paced: boolean) => (conversation: Conversation): Turn => {
  if (conversation.turn === 0) {
    return { ...pace(paced, 700), tool_calls: [{ name: "grep", args: { pattern: markers, max_matches: 20 } }] }
  }
  const hits = linesOf(conversation.toolResults[0]).filter((line) => /^[^:]+:\d+: /.test(line))
  const files = [...new Set(hits.map((line) => line.slice(0, line.indexOf(":"))))]
  return {
    ...pace(paced, 1000),
    text: report(
      "The three reports are consistent: each cites the tool output it is based on, and none contradicts another. " +
        (hits.length === 0
          ? "A scan for TODO/FIXME/XXX markers found none."
          : `A scan for TODO/FIXME/XXX markers found ${plural(hits.length, "line")}${
            hits.length >= 20 ? " (stopped at 20)" : ""
          } in ${listed(files, 4)}.`),
      hits.length === 0 ? [`grep ${markers}: no match`] : hits.slice(0, 3),
      "the review read the reports and scanned for markers; it did not run the tests"
    )
  }
}

const childResults = (conversation: Conversation) =>
  conversation.toolResults.map((result) =>
    result.result as { readonly description?: string; readonly summary?: string; readonly status?: string }
  )

const parent = (paced: boolean) => (conversation: Conversation): Turn => {
  switch (conversation.turn) {
    case 0:
      return {
        ...pace(paced, 700),
        text:
          "I will look at the layout, the tests and the README in three parallel explorers, then have the findings reviewed.",
        tool_calls: Arr.map(explorations, (e) => ({
          name: "task",
          args: { description: e.description, prompt: e.prompt, subagent_type: "explore" }
        }))
      }
    case 1:
      return {
        ...pace(paced, 600),
        tool_calls: [{
          name: "task",
          args: {
            description: "Review the findings",
            prompt: `Check these exploration reports against each other and look for unfinished work:\n${
              childResults(conversation).map((r) => `- ${r.description ?? "?"}: ${r.summary ?? ""}`).join("\n")
            }`,
            subagent_type: "reviewer"
          }
        }]
      }
    default: {
      const results = childResults(conversation)
      const [layout, tests, readme, review] = results
      return {
        ...pace(paced, 600),
        text: report(
          [layout?.summary, tests?.summary, readme?.summary, review?.summary].filter((s) => s !== undefined).join(" "),
          results.map((r) => `${r.description ?? "?"} (${r.status ?? "?"})`)
        )
      }
    }
  }
}

/** The script: the root `general` agent delegates; explorers and the reviewer use real tools. */
export const script = (options: { readonly paced: boolean }): ScriptedModel.ScriptInput => ({
  rules: [
    { match: { role: "explore" }, respond: explorer(options.paced) },
    { match: { role: "review" }, respond: reviewer(options.paced) },
    { match: { role: "general", depth: 0 }, respond: parent(options.paced) }
  ]
})

export const rootPrompt =
  "Give me an overview of this project: its layout, its tests, what its README says, and anything unfinished."
