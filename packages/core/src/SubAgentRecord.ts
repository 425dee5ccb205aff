/**
 * SubAgentRecord — what is known about one sub-agent, as persisted.
 *
 * Field names are snake_case because records are a file format (`subagents.v1.json`) and
 * are shown to models (`agent_list`, `agent_result`). Unknown fields written by a newer
 * Fibril are kept on rewrite by the store; this schema lists the fields this version reads.
 */
import { Schema } from "effect"
import { RulesJson } from "./Permission.ts"

export const Status = Schema.Literals(["pending", "running", "completed", "failed", "cancelled", "interrupted"])
export type Status = typeof Status.Type

export const terminalStatuses: ReadonlySet<Status> = new Set(["completed", "failed", "cancelled", "interrupted"])
export const isTerminal = (status: Status): boolean => terminalStatuses.has(status)

export const Tokens = Schema.Struct({ input: Schema.Int, output: Schema.Int, cached: Schema.Int })
export type Tokens = typeof Tokens.Type

/** The parsed final answer of a completed agent. */
export const Outcome = Schema.Struct({
  text: Schema.String,
  summary: Schema.String,
  sections: Schema.Struct({
    summary: Schema.String,
    changes: Schema.String,
    evidence: Schema.String,
    risks: Schema.String,
    blockers: Schema.String
  }),
  contract_violations: Schema.Array(Schema.String)
})
export type Outcome = typeof Outcome.Type

/**
 * The sections as a parent receives them: without `summary`, which it gets once, as the
 * result's own `summary` (a 10 MB summary is not sent twice).
 */
export const ResultSections = Schema.Struct({
  changes: Schema.String,
  evidence: Schema.String,
  risks: Schema.String,
  blockers: Schema.String
})
export type ResultSections = typeof ResultSections.Type

export const resultSections = (sections: Outcome["sections"]): ResultSections => ({
  changes: sections.changes,
  evidence: sections.evidence,
  risks: sections.risks,
  blockers: sections.blockers
})

/** How one earlier run of an agent ended (kept when the agent is resumed). */
export const PastRun = Schema.Struct({
  status: Status,
  reason: Schema.optionalKey(Schema.String),
  started_at: Schema.optionalKey(Schema.Int),
  finished_at: Schema.optionalKey(Schema.Int),
  summary: Schema.optionalKey(Schema.String),
  session_boot_id: Schema.String
})
export type PastRun = typeof PastRun.Type

/** At most this many earlier runs are kept in `history`. */
export const maxHistory = 20

export const SubAgentRecord = Schema.Struct({
  agent_id: Schema.String,
  /** The spawning agent's id (a session id); absent for agents spawned from outside (MCP, toolkit). */
  parent_id: Schema.optionalKey(Schema.String),
  depth: Schema.Int,
  role: Schema.String,
  model: Schema.String,
  description: Schema.String,
  /** The task the agent was given (updated by `agent_assign`). */
  objective: Schema.String,
  status: Status,
  /** Why it failed, was cancelled or interrupted. */
  reason: Schema.optionalKey(Schema.String),
  detached: Schema.Boolean,
  fork_context: Schema.Boolean,
  /** The manager instance (process run) that created or last resumed the agent: its owner. */
  session_boot_id: Schema.String,
  /** The owner's process id and host: with the owner's lease, how other processes tell whether it is alive. */
  owner_pid: Schema.optionalKey(Schema.Int),
  owner_host: Schema.optionalKey(Schema.String),
  /** Epoch milliseconds. */
  created_at: Schema.Int,
  started_at: Schema.optionalKey(Schema.Int),
  finished_at: Schema.optionalKey(Schema.Int),
  steps: Schema.Int,
  tool_calls: Schema.Int,
  last_tool: Schema.optionalKey(Schema.String),
  tokens: Tokens,
  outcome: Schema.optionalKey(Outcome),
  /** Where the transcript lives: the key of its messages in the store. */
  transcript_handle: Schema.String,
  /** Earlier runs of this agent (before each resume), oldest first, bounded: what each ended with. */
  history: Schema.optionalKey(Schema.Array(PastRun)),
  /** Its effective permissions when spawned: a resume after a restart never gives it more. */
  permissions: Schema.optionalKey(RulesJson)
})
export type SubAgentRecord = typeof SubAgentRecord.Type
