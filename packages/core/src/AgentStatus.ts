/**
 * AgentStatus — the one status enum of an agent, in both runtimes: a record of the embedded
 * runtime (`SubAgentRecord.status`) and a row of the cluster's store (`ClusterStore.AgentRow`).
 *
 * `interrupted` is the embedded runtime's: an agent whose process ended before it did (found
 * by another process, or on restart). The cluster never writes it: a cluster agent outlives
 * its worker, and is resumed rather than interrupted.
 */
import * as Schema from "effect/Schema"

export const AgentStatus = Schema.Literals(["pending", "running", "completed", "failed", "cancelled", "interrupted"])
export type AgentStatus = typeof AgentStatus.Type

/** The statuses an agent ends in. */
export const terminal: ReadonlySet<AgentStatus> = new Set(["completed", "failed", "cancelled", "interrupted"])

/** Has the agent ended (completed, failed, cancelled or interrupted)? */
export const isTerminal = (status: AgentStatus): boolean => terminal.has(status)
