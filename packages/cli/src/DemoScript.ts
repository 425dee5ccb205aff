/**
 * The demo's scripted model. A real model decides from the conversation it is handed; so
 * does this one: the explorers' reports quote what their real tool calls returned, and the
 * parent's review request and final answer quote its children's summaries.
 */
import type { ScriptedModel } from "@fibril/testkit"
import { Array as Arr } from "effect"

type Conversation = ScriptedModel.Conversation
type Turn = ScriptedModel.Turn

interface Exploration {
  readonly description: string
  readonly prompt: string
  readonly calls: Arr.NonEmptyReadonlyArray<{ readonly name: string; readonly args: Record<string, unknown> }>
}

export const explorations: Arr.NonEmptyReadonlyArray<Exploration> = [
  {
    description: "Map the repository layout",
    prompt: "Map the layout of this repository: its top-level entries and its package manifests.",
    calls: [
      { name: "list_dir", args: { path: "." } },
      { name: "glob", args: { pattern: "**/package.json" } }
    ]
  },
  {
    description: "Find where sub-agents are delegated",
    prompt: "Find the code that delegates work to sub-agents (look for where child sessions are created).",
    calls: [{ name: "grep", args: { pattern: "createChild\\(", include: "**/*.ts", max_matches: 12 } }]
  },
  {
    description: "Read the README quick start",
    prompt: "Find the README and read its opening, to report how a user starts.",
    calls: [
      { name: "glob", args: { pattern: "README*" } },
      { name: "read_file", args: { path: "README.md", limit: 30 } }
    ]
  }
]

const firstLines = (value: unknown, count: number): Array<string> => {
  const text = typeof value === "string" ? value : JSON.stringify(value)
  return text.split("\n").map((line) => line.trimEnd()).filter((line) => line.trim() !== "").slice(0, count)
}

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

const explorer = (conversation: Conversation): Turn => {
  const plan = explorations.find((e) => conversation.prompt.startsWith(e.prompt)) ?? explorations[0]
  if (conversation.turn === 0) {
    return { tool_calls: Arr.map(plan.calls, (call) => ({ name: call.name, args: call.args })) }
  }
  const evidence = conversation.toolResults.flatMap((result) =>
    result.isFailure
      ? [`${result.name} failed: ${firstLines(result.result, 1).join(" ")}`]
      : firstLines(result.result, 2).map((line) => `${result.name}: ${line}`)
  )
  const lines = conversation.toolResults.reduce((n, r) => n + firstLines(r.result, 10_000).length, 0)
  return {
    text: report(
      `${plan.description}: ran ${conversation.toolResults.length} tool call${conversation.toolResults.length === 1 ? "" : "s"} (${lines} line${lines === 1 ? "" : "s"} of output); the first lines are quoted below.`,
      evidence
    )
  }
}

const reviewer = (conversation: Conversation): Turn => {
  if (conversation.turn === 0) {
    return { tool_calls: [{ name: "grep", args: { pattern: "\\bTODO\\b|\\bFIXME\\b", include: "**/*.ts", max_matches: 5 } }] }
  }
  const found = conversation.toolResults[0]
  const hits = found === undefined || found.isFailure || String(found.result).startsWith("No matches")
    ? []
    : firstLines(found.result, 5)
  return {
    text: report(
      `The three reports are consistent and each quotes real tool output. A scan for unfinished-work markers found ${
        hits.length === 0 ? "none" : `${hits.length} (first shown)`
      }.`,
      hits.length === 0 ? ["grep: no unfinished-work markers"] : hits.map((line) => `grep: ${line}`),
      "this review only read the explorers' summaries and scanned for markers"
    )
  }
}

const summaries = (conversation: Conversation): Array<string> =>
  conversation.toolResults.map((result) => {
    const value = result.result as { readonly description?: string; readonly summary?: string; readonly status?: string }
    return `${value.description ?? result.name} (${value.status ?? "?"}): ${value.summary ?? ""}`
  })

const parent = (conversation: Conversation): Turn => {
  switch (conversation.turn) {
    case 0:
      return {
        text: "I will explore the repository in three parallel sub-agents.",
        tool_calls: Arr.map(explorations, (e) => ({
          name: "task",
          args: { description: e.description, prompt: e.prompt, subagent_type: "explore" }
        }))
      }
    case 1:
      return {
        tool_calls: [{
          name: "task",
          args: {
            description: "Review the exploration",
            prompt: `Review these exploration reports for consistency:\n${summaries(conversation).join("\n")}`,
            subagent_type: "reviewer"
          }
        }]
      }
    default:
      return {
        text: report(
          `Explored the repository with ${conversation.toolResults.length} sub-agents (three explorers in parallel, then a reviewer).`,
          summaries(conversation)
        )
      }
  }
}

/** The script: the root `general` agent delegates; explorers and the reviewer use real tools. */
export const script: ScriptedModel.ScriptInput = {
  rules: [
    { match: { role: "explore" }, respond: explorer },
    { match: { role: "review" }, respond: reviewer },
    { match: { role: "general", depth: 0 }, respond: parent }
  ]
}

export const rootPrompt = "Give me an overview of this repository: its layout, where it delegates to sub-agents, and how to start."
