/**
 * The mutable state of one session, owned by the Session service and handed to the loop
 * steps. Plain fields, because the loop touches them on every step of every agent.
 */
import type { Prompt } from "effect/ai"
import type { AgentSnapshot } from "../AgentEvents.ts"
import type * as Permission from "../Permission.ts"
import type { ToolView } from "../ToolRegistry.ts"
import type { MutableUsage } from "../Usage.ts"

export interface SessionState {
  readonly id: string
  readonly parent: SessionState | undefined
  readonly depth: number
  readonly role: string
  readonly model: string
  /** A short label from the spawner (the `task` description), for progress views. */
  readonly description: string | undefined
  readonly system: Prompt.SystemMessage
  readonly messages: Array<Prompt.Message>
  readonly rules: Permission.Rules
  readonly view: ToolView
  /** This session's own model usage. */
  readonly usage: MutableUsage
  /** Its own usage plus every descendant's. */
  readonly treeUsage: MutableUsage
  steps: number
  toolCalls: number
  lastTool: string | undefined
  busy: boolean
}

export const snapshot = (state: SessionState): AgentSnapshot => ({
  agentId: state.id,
  parentId: state.parent?.id,
  depth: state.depth,
  role: state.role,
  model: state.model,
  description: state.description,
  step: state.steps,
  toolCalls: state.toolCalls,
  lastTool: state.lastTool,
  usage: { input: state.treeUsage.input, output: state.treeUsage.output, cached: state.treeUsage.cached }
})
