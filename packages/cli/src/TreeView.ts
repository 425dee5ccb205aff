/**
 * TreeView — the tree of agents, rebuilt from AgentEvents alone.
 *
 * `apply` folds one event into the view; `render` draws it (role, status, steps, tool
 * calls, tokens, the current tool); `progressLine` is the one-line form used when the
 * output is not a terminal. Pure functions, so tests and the demo share them.
 */
import type { AgentEvent, EventType } from "@fibril/core/AgentEvents"

export interface Node {
  readonly id: string
  readonly parentId: string | undefined
  readonly depth: number
  readonly role: string
  readonly description: string | undefined
  status: "pending" | "running" | "completed" | "failed" | "cancelled" | "interrupted"
  steps: number
  toolCalls: number
  lastTool: string | undefined
  tokens: { input: number; output: number; cached: number }
  reason: string | undefined
}

export interface View {
  readonly nodes: Map<string, Node>
  readonly order: Array<string>
}

export const empty = (): View => ({ nodes: new Map(), order: [] })

const statusOf = (type: EventType, current: Node["status"]): Node["status"] => {
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

export const apply = (view: View, event: AgentEvent): void => {
  const agent = event.agent
  let node = view.nodes.get(agent.agentId)
  if (node === undefined) {
    node = {
      id: agent.agentId,
      parentId: agent.parentId,
      depth: agent.depth,
      role: agent.role,
      description: agent.description,
      status: "pending",
      steps: 0,
      toolCalls: 0,
      lastTool: undefined,
      tokens: { input: 0, output: 0, cached: 0 },
      reason: undefined
    }
    view.nodes.set(agent.agentId, node)
    view.order.push(agent.agentId)
  }
  node.status = statusOf(event.type, node.status)
  node.steps = agent.step
  node.toolCalls = agent.toolCalls
  node.lastTool = agent.lastTool
  node.tokens = { ...agent.usage }
  if (event.reason !== undefined && event.type !== "retry") node.reason = event.reason
}

const icon: Record<Node["status"], string> = {
  pending: "○",
  running: "●",
  completed: "✓",
  failed: "✗",
  cancelled: "⊘",
  interrupted: "⊘"
}

const describe = (node: Node): string => {
  const label = node.description === undefined ? "" : ` "${node.description}"`
  const tool = node.status === "running" && node.lastTool !== undefined ? `  (${node.lastTool})` : ""
  const cached = node.tokens.cached > 0 ? ` (${node.tokens.cached} cached)` : ""
  const reason = node.reason !== undefined && node.status !== "completed" ? `  — ${node.reason}` : ""
  return `${icon[node.status]} ${node.role}${label} [${node.id}] ${node.status}  steps ${node.steps}  tools ${node.toolCalls}  tokens ${
    node.tokens.input + node.tokens.output
  }${cached}${tool}${reason}`
}

/** The whole tree, children under their parents in spawn order. */
export const render = (view: View): Array<string> => {
  const children = new Map<string | undefined, Array<Node>>()
  for (const id of view.order) {
    const node = view.nodes.get(id)!
    const parent = node.parentId !== undefined && view.nodes.has(node.parentId) ? node.parentId : undefined
    const list = children.get(parent) ?? []
    list.push(node)
    children.set(parent, list)
  }
  const lines: Array<string> = []
  const walk = (parent: string | undefined, prefix: string) => {
    const list = children.get(parent) ?? []
    list.forEach((node, index) => {
      const last = index === list.length - 1
      const branch = parent === undefined ? "" : last ? "└─ " : "├─ "
      lines.push(`${prefix}${branch}${describe(node)}`)
      walk(node.id, parent === undefined ? prefix : prefix + (last ? "   " : "│  "))
    })
  }
  walk(undefined, "")
  return lines
}

/** One line per lifecycle change or tool call, indented by depth (for logs and pipes). */
export const progressLine = (view: View, event: AgentEvent): string | undefined => {
  const node = view.nodes.get(event.agent.agentId)
  if (node === undefined) return undefined
  const indent = "  ".repeat(node.depth)
  switch (event.type) {
    case "tool_call":
      return `${indent}  → ${node.role} [${node.id}] ${event.tool}`
    case "step":
      return undefined
    case "tool_result":
      return event.isFailure === true ? `${indent}  ✗ ${node.role} [${node.id}] ${event.tool}: ${event.reason ?? "failed"}` : undefined
    case "retry":
      return `${indent}  ↻ ${node.role} [${node.id}] ${event.reason ?? "retrying"}`
    default:
      return `${indent}${describe(node)}`
  }
}
