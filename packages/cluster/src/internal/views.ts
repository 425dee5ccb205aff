/**
 * A cluster agent's row as core's views of it (ClusterSubAgents re-exports them): the record,
 * the parsed outcome of its answer (claims and typed output included), its receipt.
 */
import * as AgentResult from "@fibril/core/AgentResult"
import type * as Claims from "@fibril/core/Claims"
import * as Receipt from "@fibril/core/Receipt"
import * as SubAgentManager from "@fibril/core/SubAgentManager"
import * as SubAgentRecord from "@fibril/core/SubAgentRecord"
import { type AgentRow, finished, tokensOf } from "../ClusterStore.ts"

type AgentView = SubAgentManager.AgentView

/** The owner every cluster record names: the cluster, not a process. */
export const owner = "cluster"

/**
 * A completed answer as a record keeps it (each part bounded, as the embedded records), with
 * its checked claims; a typed answer's value is parsed back from its text.
 */
export const outcomeOf = (
  text: string,
  claims: Claims.ClaimsReport | undefined,
  typed = false
): SubAgentRecord.Outcome =>
  AgentResult.outcomeOf(text, SubAgentManager.defaultMaxResultChars, {
    claims,
    output: typed ? parsed(text) : undefined
  })

/** A typed answer's value: the run wrote its compact JSON (the loop decoded it) as the text. */
const parsed = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

const defined = (value: number | null | undefined) =>
  value === null || value === undefined ? undefined : Math.round(value)

/**
 * An agent's row as core's record of it: status, reason, the parsed outcome of its answer,
 * tokens by kind, counts, the current run's times, its transcript handle (its id). The session
 * name is the id (every tool takes either).
 */
export const recordOf = (row: AgentRow): SubAgentRecord.SubAgentRecord => {
  const startedAt = defined(row.startedAt)
  const finishedAt = finished(row.status) ? defined(row.finishedAt) : undefined
  const reason = row.reason === null ? {} : { reason: row.reason }
  const times = {
    ...(startedAt === undefined ? {} : { started_at: startedAt }),
    ...(finishedAt === undefined ? {} : { finished_at: finishedAt })
  }
  return {
    record_version: SubAgentRecord.recordVersion,
    agent_id: row.agentId,
    session_name: row.agentId,
    ...(row.parentId === null ? {} : { parent_id: row.parentId }),
    depth: row.depth,
    role: row.role,
    model: row.model,
    description: row.description,
    objective: row.prompt,
    status: row.status,
    ...reason,
    detached: row.detached,
    fork_context: false,
    session_boot_id: owner,
    created_at: startedAt ?? 0,
    ...times,
    steps: row.steps,
    tool_calls: row.toolCalls,
    tokens: tokensOf(row),
    ...(row.status === "completed" && row.text !== null
      ? { outcome: outcomeOf(row.text, row.claims, row.outputSchema !== undefined) }
      : {}),
    transcript_handle: row.agentId,
    runs: [{
      run_id: SubAgentRecord.runId(row.agentId, row.run + 1),
      kind: row.run === 0 ? "spawn" : "resume",
      status: row.status,
      ...reason,
      ...times,
      session_boot_id: owner
    }]
  }
}

export const viewOf = (row: AgentRow): AgentView => ({ ...recordOf(row), from_prior_session: false })

/** The receipt of a cluster agent: no local takeover (the cluster, not a workspace, keeps it). */
export const workerRecord = (record: SubAgentRecord.SubAgentRecord): Receipt.WorkerRecord =>
  Receipt.workerRecord(record, {
    workspace: undefined,
    durable: true,
    owner: SubAgentRecord.isTerminal(record.status) ? "gone" : "alive"
  })
