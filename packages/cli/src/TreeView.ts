/**
 * TreeView — the tree of agents, rebuilt from AgentEvents alone.
 *
 * `apply` folds one event into the view; `render` draws it at a time and a width: per agent
 * its role, description, id, status, elapsed time, steps, tool calls, tokens (its own, and
 * its tree's when it has children) and what it is doing — the tool it runs, a spinner while
 * it waits on its model, or the sub-agents it waits for — and, while its model streams its
 * answer, the last line it streamed, after the rest of the row. Every row is cut to the width.
 * A completed agent whose answer makes claims its own record does not back (its `completed`
 * event's `unverified`) is marked `! N unverified claims` beside its status: the claims and
 * why each is not backed are in its result and in `fibril agents show`.
 * `progressLine` is the one-line form used when the output is not a terminal. Pure
 * functions of the view and the time, so tests (TestClock) and the demo share them.
 */
import { type AgentEvent, type EventType, progressText, type ToolProgress } from "@fibril/core/AgentEvents"
import type { Question } from "@fibril/core/Approvals"
import { CliOutput } from "effect/cli"

/** An agent's status; `refused`: a spawn refused at the cap (no agent was created, the row says so). */
type Status = "pending" | "running" | "completed" | "failed" | "cancelled" | "interrupted" | "refused"

/** What a running agent is doing, inferred from its events. */
export type Activity =
  /** Its model call is in flight (after `started`, a retry, or the last result of a turn's tools). */
  | "model"
  /** Tool calls of the current turn have not all returned. */
  | "tools"
  /** Its model answered without tool calls: it is finishing, or waiting for its sub-agents. */
  | "finishing"

export interface Node {
  readonly id: string
  readonly parentId: string | undefined
  readonly depth: number
  readonly role: string
  readonly model: string
  readonly description: string | undefined
  status: Status
  steps: number
  toolCalls: number
  lastTool: string | undefined
  /** The tokens of the agent and its descendants, as its last event reported them. */
  tokens: { input: number; output: number; cached: number }
  /** The agent's own tokens (input + output), fixed at its last event. */
  ownTokens: number
  reason: string | undefined
  /** When it was spawned, and when it ended (epoch ms of the events). */
  readonly spawnedAt: number
  endedAt: number | undefined
  activity: Activity
  /** Its calls waiting for a person's answer (`ask` rules). */
  questions: number
  /** Those questions, oldest first (what a terminal that answers shows on the row). */
  asking: Array<Question>
  /** Tool calls started and not yet returned. */
  pendingTools: number
  /** The last line its model call in flight has streamed ("" when none). */
  streamed: string
  /** Claims of its completed answer its record does not back (0: none, or none checked). */
  unverified: number
  /** The latest progress a call in flight reported (`tool_progress`), until a call starts or ends. */
  progress: ToolProgress | undefined
}

export interface View {
  readonly nodes: Map<string, Node>
  readonly order: Array<string>
  /** Each agent's children, in spawn order. */
  readonly children: Map<string, Array<Node>>
  /** Descriptions known before an agent's first event (the root's, from its prompt). */
  readonly labels: Map<string, string>
  /** Questions are answered at this terminal (TerminalApprovals): rows show them, not a command. */
  answerHere: boolean
}

export const empty = (): View => ({
  nodes: new Map(),
  order: [],
  children: new Map(),
  labels: new Map(),
  answerHere: false
})

/** Gives an agent a description its events do not carry (the root agent's prompt). */
export const label = (view: View, agentId: string, description: string): void => {
  view.labels.set(agentId, description)
}

const terminal = (status: Status) => status !== "pending" && status !== "running"

const statusOf = (type: EventType, current: Status): Status => {
  switch (type) {
    case "spawned":
      return "pending"
    case "started":
      return "running"
    case "completed":
    case "failed":
    case "cancelled":
    case "interrupted":
      return type
    default:
      return current === "pending" ? "running" : current
  }
}

const total = (tokens: { readonly input: number; readonly output: number }) => tokens.input + tokens.output

/** The last line with text in `shown + delta` (what a row shows of a streaming answer). */
export const lastLine = (shown: string, delta: string): string => {
  const lines = (shown + delta).split("\n")
  for (let i = lines.length - 1; i >= 0; i--) if (lines[i]!.trim() !== "") return lines[i]!
  return ""
}

const childrenOf = (view: View, id: string): ReadonlyArray<Node> => view.children.get(id) ?? []

export const apply = (view: View, event: AgentEvent): void => {
  const agent = event.agent
  let node = view.nodes.get(agent.agentId)
  if (node === undefined) {
    node = {
      id: agent.agentId,
      parentId: agent.parentId,
      depth: agent.depth,
      role: agent.role,
      model: agent.model,
      description: agent.description ?? view.labels.get(agent.agentId),
      status: "pending",
      steps: 0,
      toolCalls: 0,
      lastTool: undefined,
      tokens: { input: 0, output: 0, cached: 0 },
      ownTokens: 0,
      reason: undefined,
      spawnedAt: event.at,
      endedAt: undefined,
      activity: "model",
      pendingTools: 0,
      streamed: "",
      unverified: 0,
      progress: undefined,
      questions: 0,
      asking: []
    }
    view.nodes.set(agent.agentId, node)
    view.order.push(agent.agentId)
    if (node.parentId !== undefined) {
      const siblings = view.children.get(node.parentId) ?? []
      siblings.push(node)
      view.children.set(node.parentId, siblings)
    }
  }
  node.status = statusOf(event.type, node.status)
  node.steps = agent.step
  node.toolCalls = agent.toolCalls
  node.lastTool = agent.lastTool
  node.tokens = { ...agent.usage }
  // The event's usage is the agent's tree: what its children have reported is theirs.
  node.ownTokens = Math.max(0, total(agent.usage) - childrenOf(view, node.id).reduce((n, c) => n + total(c.tokens), 0))
  switch (event.type) {
    case "started":
    case "retry":
      node.activity = "model"
      node.streamed = ""
      break
    case "text":
      node.streamed = lastLine(node.streamed, event.text ?? "")
      break
    case "step":
      node.activity = "finishing"
      node.streamed = ""
      break
    case "completed":
      node.unverified = event.unverified ?? 0
      break
    case "tool_call":
      node.pendingTools += 1
      node.activity = "tools"
      node.progress = undefined
      break
    case "tool_progress":
      node.progress = event.progress
      break
    case "question":
      node.questions += 1
      if (event.question !== undefined) node.asking.push(event.question)
      break
    case "answered":
      node.questions = Math.max(0, node.questions - 1)
      node.asking = node.asking.filter((question) => question.id !== event.question?.id)
      break
    case "tool_result":
      node.progress = undefined
      node.pendingTools = Math.max(0, node.pendingTools - 1)
      // The turn's last result is handed back to the model at once.
      if (node.pendingTools === 0) node.activity = "model"
      break
    default:
      break
  }
  if (terminal(node.status) && node.endedAt === undefined) node.endedAt = event.at
  // A cancelled agent's questions are withdrawn: no `answered` event follows them.
  if (terminal(node.status)) node.asking = []
  if (event.reason !== undefined && event.type !== "retry") node.reason = oneLine(event.reason)
  if (event.type === "tool_result" && event.isFailure === true && isRefusedSpawn(event)) refuse(view, node, event)
}

/** The spawning tools, and the words a spawn refused at the cap fails with (SubAgentManager.CapReached). */
const spawnTools = new Set(["task", "agent_spawn", "agent_open"])
const isRefusedSpawn = (event: AgentEvent) =>
  spawnTools.has(event.tool ?? "") && (event.reason ?? "").includes("sub-agent cap reached")

/** A refused spawn as a row under the agent that asked: no agent exists, so it has no id of its own. */
const refuse = (view: View, parent: Node, event: AgentEvent) => {
  const siblings = view.children.get(parent.id) ?? []
  const id = `${parent.id}/refused-${siblings.filter((child) => child.status === "refused").length + 1}`
  const node: Node = {
    id,
    parentId: parent.id,
    depth: parent.depth + 1,
    role: event.tool!,
    model: parent.model,
    description: undefined,
    status: "refused",
    steps: 0,
    toolCalls: 0,
    lastTool: undefined,
    tokens: { input: 0, output: 0, cached: 0 },
    ownTokens: 0,
    reason: oneLine((event.reason ?? "").split(": nothing was spawned")[0]!),
    spawnedAt: event.at,
    endedAt: event.at,
    activity: "finishing",
    pendingTools: 0,
    streamed: "",
    unverified: 0,
    progress: undefined,
    questions: 0,
    asking: []
  }
  view.nodes.set(id, node)
  view.order.push(id)
  siblings.push(node)
  view.children.set(parent.id, siblings)
}

/** The agents of the view (a refused spawn's row is not one). */
export const agents = (view: View): Array<Node> => [...view.nodes.values()].filter((node) => node.status !== "refused")

/** The tokens of a node's whole tree as the view knows them now (children update first). */
const treeTokens = (view: View, node: Node): number =>
  node.ownTokens + childrenOf(view, node.id).reduce((n, child) => n + treeTokens(view, child), 0)

// ---------------------------------------------------------------------------------------
// Formatting

/** Control characters (newlines, escapes) never reach the terminal from a description or reason. */
export const oneLine = (text: string): string =>
  text.replace(/\s*[\r\n]+\s*/g, " ⏎ ").replace(/[\u0000-\u001f\u007f-\u009f]/g, " ")

/** `950`, `1.2k`, `12k`, `3.4M`. */
export const tokenCount = (n: number): string =>
  n < 1000
    ? String(n)
    : n < 10_000
    ? `${(n / 1000).toFixed(1)}k`
    : n < 1_000_000
    ? `${Math.round(n / 1000)}k`
    : `${(n / 1_000_000).toFixed(1)}M`

/** `0.4s`, `12s`, `3m05s`, `1h02m`. */
export const elapsed = (ms: number): string => {
  const s = Math.max(0, ms) / 1000
  if (s < 10) return `${s.toFixed(1)}s`
  if (s < 60) return `${Math.floor(s)}s`
  const m = Math.floor(s / 60)
  if (m < 60) return `${m}m${String(Math.floor(s % 60)).padStart(2, "0")}s`
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, "0")}m`
}

export const spinnerFrames = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"] as const
/** The spinner turns one frame every 100 ms of the clock. */
export const spinner = (now: number): string => spinnerFrames[Math.floor(now / 100) % spinnerFrames.length]!

const icon: Record<Status, string> = {
  pending: "○",
  running: "●",
  completed: "✓",
  failed: "✗",
  cancelled: "⊘",
  interrupted: "⊘",
  refused: "⊗"
}

/**
 * Characters one column wide and one code unit long each: ASCII, Latin, the arrows, shapes,
 * box drawing and braille the tree is drawn with. A string of only these (the usual row) is
 * measured by its length; anything else (CJK, emoji, combining marks) by grapheme.
 */
const narrow =
  /^[\u0020-\u007e\u00a0-\u024f\u2010-\u2027\u2030-\u205e\u2190-\u21ff\u2200-\u22ff\u23ce\u2500-\u25ff\u2713\u2717\u2800-\u28ff]*$/

/** Display columns of `text` (a wide character counts 2). */
export const width = (text: string): number => narrow.test(text) ? text.length : CliOutput.displayWidth(text)

const segmenter = new Intl.Segmenter()

/** `text` cut to at most `columns` display columns, ending with `…` when cut. */
export const cut = (text: string, columns: number): string => {
  if (width(text) <= columns) return text
  if (columns <= 0) return ""
  if (narrow.test(text)) return `${text.slice(0, columns - 1)}…`
  let out = ""
  let used = 0
  for (const { segment } of segmenter.segment(text)) {
    const w = width(segment)
    if (used + w > columns - 1) break
    out += segment
    used += w
  }
  return `${out}…`
}

/** How many characters of a question's arguments a row shows (the prompt under the tree shows more). */
const rowArgumentChars = 60

/** A question on its agent's row: `? write_file {"path":"out.txt",…} — why (+1 more)`. */
export const askingText = (question: Question, count: number): string =>
  `? ${question.tool} ${cut(oneLine(question.arguments), rowArgumentChars)} — ${oneLine(question.reason)}${
    count > 1 ? ` (+${count - 1} more)` : ""
  }`

interface Parts {
  readonly head: string
  readonly description: string | undefined
  /** Status and elapsed time. */
  readonly state: string
  readonly activity: string
  readonly metrics: string
  readonly id: string
  readonly reason: string
  /** The last line a running agent's model streamed, live only. */
  readonly streamed: string
}

/** The mark of a completed agent whose claims its record does not all back. */
const unverifiedMark = (node: Node): string =>
  node.status !== "completed" || node.unverified === 0
    ? ""
    : ` ! ${node.unverified} unverified claim${node.unverified === 1 ? "" : "s"}`

const parts = (view: View, node: Node, now: number, live: boolean): Parts => {
  const running = node.status === "running"
  const mark = live && running && node.activity === "model" ? spinner(now) : icon[node.status]
  const children = childrenOf(view, node.id)
  const tokens = children.length === 0
    ? `tokens ${tokenCount(node.ownTokens)}`
    : `tokens ${tokenCount(node.ownTokens)} own, ${tokenCount(treeTokens(view, node))} tree`
  const cached = node.tokens.cached > 0 && children.length === 0 ? ` (${tokenCount(node.tokens.cached)} cached)` : ""
  const waitingFor = children.filter((child) => !terminal(child.status)).length
  const activity = !running
    ? ""
    : node.questions > 0 && view.answerHere && node.asking.length > 0
    ? `  ${askingText(node.asking[0]!, node.asking.length)}`
    : node.questions > 0
    ? `  waiting for approval (${node.questions}): fibril agents questions`
    : node.activity === "model"
    ? live && node.streamed !== "" ? "  streaming" : "  waiting on model"
    : node.activity === "tools"
    ? `  (${
      node.lastTool ?? "tool"
    }${(node.progress === undefined ? "" : ` ${oneLine(progressText(node.progress))}`)})${
      waitingFor > 0 ? ` waiting on ${waitingFor} sub-agent${waitingFor === 1 ? "" : "s"}` : ""
    }`
    : waitingFor > 0
    ? `  waiting on ${waitingFor} sub-agent${waitingFor === 1 ? "" : "s"}`
    : ""
  return {
    head: `${mark} ${node.role}`,
    description: node.description === undefined ? undefined : oneLine(node.description),
    state: ` ${node.status} ${elapsed((node.endedAt ?? now) - node.spawnedAt)}${unverifiedMark(node)}`,
    activity,
    metrics: node.status === "refused" ? "" : `  steps ${node.steps}  tools ${node.toolCalls}  ${tokens}${cached}`,
    id: node.status === "refused" ? "" : `  [${node.id}]`,
    reason: node.reason !== undefined && node.status !== "completed" ? `  — ${node.reason}` : "",
    streamed: live && running && node.streamed !== "" ? oneLine(node.streamed).trim() : ""
  }
}

/**
 * One agent's row in at most `columns` columns: the row (`fitRow`), then the last line its
 * model streamed in the room left (its end shown: the words just written).
 */
const fit = (prefix: string, p: Parts, columns: number): string => {
  if (p.streamed === "") return fitRow(prefix, p, columns)
  // The streamed line keeps up to 40% of the row (or a dozen columns): counts and the id give way to it.
  const reserve = Math.min(width(p.streamed) + 4, Math.max(12, Math.floor(columns * 0.4)))
  const row = fitRow(prefix, p, columns - reserve)
  const room = columns - width(row) - 4
  if (room < 8) return row
  return `${row}  › ${width(p.streamed) <= room ? p.streamed : `…${cutStart(p.streamed, room - 1)}`}`
}

/** The end of `text` in at most `columns` display columns. */
const cutStart = (text: string, columns: number): string => {
  if (narrow.test(text)) return text.slice(Math.max(0, text.length - columns))
  const segments = [...segmenter.segment(text)].map((s) => s.segment)
  let out = ""
  let used = 0
  for (let i = segments.length - 1; i >= 0; i--) {
    const w = width(segments[i]!)
    if (used + w > columns) break
    out = segments[i]! + out
    used += w
  }
  return out
}

/**
 * One agent's row, without what it streams, in at most `columns` columns. What gives way, in
 * order: the reason, the id, the description's end (down to a dozen columns), the
 * step/tool/token counts; only then is the row itself cut. Status, elapsed time and activity
 * stay as long as anything.
 */
const fitRow = (prefix: string, p: Parts, columns: number): string => {
  const compose = (
    keep: { readonly metrics: boolean; readonly id: boolean; readonly reason: boolean },
    description: string | undefined
  ) =>
    `${prefix}${p.head}${description === undefined ? "" : ` "${description}"`}${p.state}${p.activity}${
      keep.metrics ? p.metrics : ""
    }${keep.id ? p.id : ""}${keep.reason ? p.reason : ""}`
  const stages = [
    { metrics: true, id: true, reason: true, shrink: false },
    { metrics: true, id: true, reason: false, shrink: false },
    { metrics: true, id: false, reason: false, shrink: true },
    { metrics: false, id: false, reason: false, shrink: true }
  ]
  for (const stage of stages) {
    const whole = compose(stage, p.description)
    if (width(whole) <= columns) return whole
    if (stage.shrink && p.description !== undefined) {
      const room = columns - width(compose(stage, ""))
      if (room >= 12) return compose(stage, cut(p.description, room))
    }
  }
  return cut(compose({ metrics: false, id: false, reason: false }, undefined), columns)
}

export interface RenderOptions {
  /** The clock now (epoch ms): elapsed times of running agents and the spinner. */
  readonly now: number
  /** Rows are cut to this many columns (no limit when absent). */
  readonly columns?: number | undefined
}

/** The whole tree, children under their parents in spawn order, each row within `columns`. */
export const render = (view: View, options: RenderOptions): Array<string> => rows(view, options).map((row) => row.line)

/** The tree's rows, each with the agent it shows. */
const rows = (view: View, options: RenderOptions): Array<{ readonly node: Node; readonly line: string }> => {
  const columns = options.columns ?? Number.POSITIVE_INFINITY
  const children = new Map<string | undefined, Array<Node>>()
  for (const id of view.order) {
    const node = view.nodes.get(id)!
    const parent = node.parentId !== undefined && view.nodes.has(node.parentId) ? node.parentId : undefined
    const list = children.get(parent) ?? []
    list.push(node)
    children.set(parent, list)
  }
  const lines: Array<{ readonly node: Node; readonly line: string }> = []
  const walk = (parent: string | undefined, prefix: string) => {
    const list = children.get(parent) ?? []
    list.forEach((node, index) => {
      const last = index === list.length - 1
      const branch = parent === undefined ? "" : last ? "└─ " : "├─ "
      const line = fit(`${prefix}${branch}`, parts(view, node, options.now, options.columns !== undefined), columns)
      lines.push({ node, line })
      walk(node.id, parent === undefined ? prefix : prefix + (last ? "   " : "│  "))
    })
  }
  walk(undefined, "")
  return lines
}

/**
 * The live frame: the tree within `rows` screen rows (a frame taller than the screen could
 * not be redrawn in place), the agents that do not fit summed up on the last row.
 */
export const frame = (view: View, options: RenderOptions & { readonly rows: number }): Array<string> => {
  const all = rows(view, options)
  const room = Math.max(1, options.rows)
  if (all.length <= room) return all.map((row) => row.line)
  const shown = all.slice(0, room - 1).map((row) => row.line)
  // Only the agents not on screen: the rows above say what the others are doing.
  const hidden = all.slice(room - 1)
  const running = hidden.filter((row) => row.node.status === "running").length
  shown.push(
    cut(
      `… ${hidden.length} more agent${hidden.length === 1 ? "" : "s"} (${running} running)`,
      options.columns ?? Infinity
    )
  )
  return shown
}

/** One line per lifecycle change, tool call or retry, indented by depth (for logs and pipes). */
export const progressLine = (view: View, event: AgentEvent): string | undefined => {
  const node = view.nodes.get(event.agent.agentId)
  if (node === undefined) return undefined
  const indent = "  ".repeat(node.depth)
  const who = `${node.role} [${node.id}]`
  switch (event.type) {
    case "tool_call":
      return `${indent}  → ${who} ${event.tool}`
    case "step":
    case "text":
    case "tool_progress":
      return undefined
    case "tool_result":
      return event.isFailure === true
        ? `${indent}  ✗ ${who} ${event.tool}: ${oneLine(event.reason ?? "failed")}`
        : undefined
    case "retry":
      return `${indent}  ↻ ${who} ${oneLine(event.reason ?? "retrying")}`
    case "question": {
      const id = event.question?.id ?? "?"
      return `${indent}  ? ${who} ${event.tool} waits for approval (${oneLine(event.question?.reason ?? "ask")}): ` +
        `fibril agents answer ${id} allow|deny`
    }
    case "answered":
      return `${indent}  ${event.answer?.decision === "allow" ? "✓" : "✗"} ${who} ${event.tool} ${
        event.answer?.decision === "allow" ? "allowed" : "denied"
      } by ${event.answer?.by ?? "?"}${event.answer?.reason === undefined ? "" : `: ${oneLine(event.answer.reason)}`}`
    default: {
      const p = parts(view, node, event.at, false)
      return `${indent}${p.head}${
        p.description === undefined ? "" : ` "${p.description}"`
      }${p.state}${p.metrics}${p.id}${p.reason}`
    }
  }
}
