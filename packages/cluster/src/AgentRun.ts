/**
 * AgentRun — what one agent run is to the workflow engine: its payload, its outcome, its
 * failure and the workflow's versioned name (`fibril/agent/v4`), the ids it derives, and the
 * activity kind its store writes commit with. The workflow's body (AgentWorkflow), its step
 * journal (StepJournal), the sub-agent contract (ClusterSubAgents), the watch (ClusterWatch)
 * and the client (ClusterClient) all start from here; it depends on none of them.
 *
 * The name changes when what the body journals changes: a journal written by older code is
 * never replayed by newer code. v4: a sub-agent tool call runs core's definition, so the
 * activities it records are named after the call and the order of its requests
 * (`spawn/<step>/<index>/<n>`, `look/<step>/<index>/<n>`, ...).
 */
import * as GenAiTrace from "@fibril/core/GenAiTrace"
import * as Permission from "@fibril/core/Permission"
import { ClusterSchema } from "effect/cluster"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { Activity, Workflow } from "effect/workflow"
import { createHash } from "node:crypto"
import { AgentRow, type Grant } from "./ClusterStore.ts"

/** A run's payload: the fields of the agent's row that say what the run is (AgentRow's, one schema). */
const row = AgentRow.fields
export const AgentPayload = Schema.Struct({
  agentId: row.agentId,
  run: row.run,
  parentId: row.parentId,
  rootId: row.rootId,
  depth: row.depth,
  role: row.role,
  model: row.model,
  description: row.description,
  prompt: row.prompt,
  detached: row.detached,
  workspace: row.workspace,
  grants: row.grants,
  outputSchema: row.outputSchema,
  /**
   * The span of whoever started the run (a parent's tool call, a client's command), when
   * traces are exported: the run's `invoke_agent` span hangs under it, on whichever worker it
   * runs, so a tree is one trace. Not part of the agent's row.
   */
  trace: Schema.optionalKey(GenAiTrace.TraceParent)
})
export type AgentPayload = typeof AgentPayload.Type

/** The payload carrying the caller's span (GenAiTrace.currentParent), when there is one to carry. */
export const traced = (payload: AgentPayload): Effect.Effect<AgentPayload> =>
  Effect.map(GenAiTrace.currentParent, (trace) => trace === undefined ? payload : { ...payload, trace })

export const AgentOutcome = Schema.Struct({
  agentId: Schema.String,
  text: Schema.String,
  steps: Schema.Int,
  toolCalls: Schema.Int,
  /** The agent's row as its run ended: what a parent's `task` returns, without a read of its own. */
  row: Schema.optionalKey(AgentRow)
})
export type AgentOutcome = typeof AgentOutcome.Type

export class AgentFailed extends Schema.TaggedError<AgentFailed>()("AgentFailed", {
  agentId: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `agent ${this.agentId} failed: ${this.reason}`
  }
}

export const AgentWorkflow = Workflow.make("fibril/agent/v4", {
  payload: AgentPayload,
  success: AgentOutcome,
  error: AgentFailed,
  idempotencyKey: ({ agentId, run }) => `${agentId}#${run}`
})

/** A child's id: a function of its parent's run and the call that started it. */
export const childId = (parent: string, run: number, step: number, index: number): string =>
  `ag_${createHash("sha256").update(`${parent}#${run}/${step}/${index}`).digest("hex").slice(0, 16)}`

/** The agent's chain of grants (an older payload's: its role alone): core's `Permission.grantsOf`. */
export const grantsOf: (payload: AgentPayload) => ReadonlyArray<Grant> = Permission.grantsOf

/** An activity whose store writes commit in the transaction that journals its result. */
export const txActivity: typeof Activity.make = (options) =>
  Activity.make(options).annotate(ClusterSchema.WithTransaction, true)

/** A new agent's row, before its workflow starts: pending, nothing done yet. */
export const rowFor = (payload: AgentPayload) =>
  Effect.map(AgentWorkflow.executionId(payload), (executionId): AgentRow => ({
    ...payload,
    status: "pending",
    executionId,
    text: null,
    reason: null,
    steps: 0,
    toolCalls: 0,
    tokens: 0
  }))
