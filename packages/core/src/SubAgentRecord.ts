/**
 * SubAgentRecord — what is known about one sub-agent, as persisted: its **receipt**.
 *
 * Field names are snake_case because records are a storage format (rows of the shared
 * store) and are shown to models and people (`agent_eval`, `fibril agents show`). Unknown
 * fields written by a newer Fibril are kept on rewrite by the store; this schema lists the
 * fields this version reads.
 *
 * Beside the agent's state (status, counts, parsed outcome) a record carries what a parent,
 * a person or another process needs to inspect, continue or take over the work: its runs
 * (one `run_id` per run: the first and each resume), a bounded lifecycle event log, the
 * inputs it was sent (delivered or not, never silently lost), references to what it produced
 * (its transcript, the files it changed: references, never copies), where its token counts
 * come from (`usage.status`) and whether its result was checked by anything but itself
 * (`verification.status`). Every list is bounded: the oldest entries go first and a
 * `*_dropped` counter says how many.
 *
 * Version 2 (`record_version`) introduced the receipt; a version 1 record (whose past runs
 * were a `history` list) is migrated when read (`migrate`).
 */
import * as Schema from "effect/Schema"
import * as SchemaJITCompiler from "effect/schema/SchemaJITCompiler"
import { AgentStatus as Status, isTerminal, terminal as terminalStatuses } from "./AgentStatus.ts"
import { Question } from "./Approvals.ts"
import { ClaimsReport } from "./Claims.ts"
import * as Names from "./internal/names.ts"
import { RulesJson } from "./Permission.ts"
import * as Usage from "./Usage.ts"
import * as Worktrees from "./Worktrees.ts"

/** A record's status is the one `AgentStatus`, named here as the record's readers know it. */
export { isTerminal, Status, terminalStatuses }

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
  contract_violations: Schema.Array(Schema.String),
  /** Its EVIDENCE and CHANGES checked against its transcript (Claims); absent in records from before. */
  claims: Schema.optionalKey(ClaimsReport),
  /** A typed result (`output_schema`): the decoded value; `text` is its compact JSON. */
  output: Schema.optionalKey(Schema.Unknown)
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

/** The record format this version writes. */
export const recordVersion = 2

/** Fields of version 1 that version 2 replaced: cleared from a stored row when it is rewritten. */
export const retiredKeys: ReadonlyArray<string> = ["history"]

/** Bounds on the record's lists; beyond them the oldest entries go (counted in `*_dropped`). */
export const limits = {
  runs: 20,
  events: 100,
  inputs: 20,
  artifacts: 100,
  receipts: 10,
  approvals: 50,
  /** Characters kept of an input's text, a run's summary, an event's detail. */
  preview: 200
} as const

/** The id of the `n`-th run (1-based) of an agent: `agent_k3x91-r2`. */
export const runId = (agentId: string, n: number): string => `${agentId}-r${n}`

/** The agent id inside a run id, if `id` has the run id form. */
export const agentOfRunId = (id: string): string | undefined => {
  const match = /^(.+)-r\d+$/.exec(id)
  return match === null ? undefined : match[1]
}

/** One run of an agent: the first (`spawn`) or a continuation (`resume`). */
export const Run = Schema.Struct({
  run_id: Schema.String,
  kind: Schema.Literals(["spawn", "resume"]),
  status: Status,
  reason: Schema.optionalKey(Schema.String),
  /** When the run was asked for (spawn or resume), started running, ended. Epoch ms. */
  requested_at: Schema.optionalKey(Schema.Int),
  started_at: Schema.optionalKey(Schema.Int),
  finished_at: Schema.optionalKey(Schema.Int),
  /** The run's summary (bounded preview), when it completed. */
  summary: Schema.optionalKey(Schema.String),
  /** The message that started the run (bounded preview). */
  message: Schema.optionalKey(Schema.String),
  /** The manager instance that ran it, and its process. */
  session_boot_id: Schema.String,
  owner_pid: Schema.optionalKey(Schema.Int),
  /** What this run alone did (the record's counters add up every run). */
  steps: Schema.optionalKey(Schema.Int),
  tool_calls: Schema.optionalKey(Schema.Int),
  tokens: Schema.optionalKey(Usage.Usage)
})
export type Run = typeof Run.Type

export const EventType = Schema.Literals([
  "spawned",
  "started",
  "resumed",
  "input_delivered",
  "input_undelivered",
  "tool_call",
  "assigned",
  "verification",
  "completed",
  "failed",
  "cancelled",
  "interrupted"
])
export type EventType = typeof EventType.Type

/** One entry of the lifecycle event log. */
export const LogEvent = Schema.Struct({
  /** Epoch ms. */
  at: Schema.Int,
  type: EventType,
  run_id: Schema.optionalKey(Schema.String),
  /** The tool of a `tool_call`. */
  tool: Schema.optionalKey(Schema.String),
  /** A `tool_call` that failed (a denial included). */
  failed: Schema.optionalKey(Schema.Boolean),
  /** A bounded note: a reason, a preview, a path. */
  detail: Schema.optionalKey(Schema.String)
})
export type LogEvent = typeof LogEvent.Type

/** A question one of its calls asked a person (Approvals.ts), and how it was decided. */
export const ApprovalEntry = Schema.Struct({
  /** When it was decided (epoch ms), and when asked. */
  at: Schema.Int,
  asked_at: Schema.Int,
  question_id: Schema.String,
  kind: Schema.Literals(["tool", "fan_out"]),
  tool: Schema.String,
  /** Why it asked, and the call's arguments (bounded previews). */
  question: Schema.String,
  arguments: Schema.String,
  decision: Schema.Literals(["allow", "deny"]),
  /** Who decided: "terminal", "mcp client", "process <pid>", "timeout", "standing answer", "policy". */
  by: Schema.String,
  reason: Schema.optionalKey(Schema.String),
  always: Schema.optionalKey(Schema.Boolean)
})
export type ApprovalEntry = typeof ApprovalEntry.Type

/** A message sent to the agent (`agent_send_input`, `agent_eval`, `agent_assign`). */
export const Input = Schema.Struct({
  at: Schema.Int,
  run_id: Schema.optionalKey(Schema.String),
  /** The start of the message (bounded) and its full length. */
  preview: Schema.String,
  chars: Schema.Int,
  /**
   * True: handed to the running agent, which reads it before its next model step. False:
   * it never reached the agent — it had ended, or ended before reading it (`reason`).
   */
  delivered: Schema.Boolean,
  reason: Schema.optionalKey(Schema.String),
  interrupt: Schema.optionalKey(Schema.Boolean),
  /** The tool or interface it came through. */
  via: Schema.optionalKey(Schema.String)
})
export type Input = typeof Input.Type

export const ArtifactKind = Schema.Literals(["transcript", "file", "plan", "todo"])
export type ArtifactKind = typeof ArtifactKind.Type

/**
 * A reference to something the agent produced — never a copy. `transcript`: the transcript
 * handle (read it with `handle_read`); `file`: a workspace path it changed with a writing
 * tool; `plan`: such a path under `.fibril/plans`; `todo`: its todo list (`todowrite`).
 */
export const Artifact = Schema.Struct({
  kind: ArtifactKind,
  ref: Schema.String,
  /** The tool that made or last changed it, and when, in which run. */
  tool: Schema.optionalKey(Schema.String),
  at: Schema.optionalKey(Schema.Int),
  run_id: Schema.optionalKey(Schema.String),
  /** How many successful calls changed it. */
  writes: Schema.optionalKey(Schema.Int)
})
export type Artifact = typeof Artifact.Type

/**
 * Where the token counts come from: `reported` by the provider for every model step,
 * `estimated` (some step's provider reported nothing; Fibril counted characters / 4), or
 * `unknown` (no model step yet, or a record from before this was tracked).
 */
export const UsageStatus = Schema.Literals(["reported", "estimated", "unknown"])
export type UsageStatus = typeof UsageStatus.Type

export const UsageProvenance = Schema.Struct({
  status: UsageStatus,
  reported_steps: Schema.Int,
  estimated_steps: Schema.Int
})
export type UsageProvenance = typeof UsageProvenance.Type

/**
 * A separate check of the agent's work: a verifier agent's result (`agent`) or a command's
 * exit code (`command`). `inconclusive`: the check itself did not finish.
 */
export const VerificationReceipt = Schema.Struct({
  kind: Schema.Literals(["agent", "command"]),
  verdict: Schema.Literals(["passed", "failed", "inconclusive"]),
  at: Schema.Int,
  /** The run of the checked agent this check is about. */
  run_id: Schema.optionalKey(Schema.String),
  /** For `agent`: the verifier, its run and its status. */
  agent_id: Schema.optionalKey(Schema.String),
  verifier_run_id: Schema.optionalKey(Schema.String),
  /** For `command`: what ran and its exit code. */
  command: Schema.optionalKey(Schema.String),
  exit_code: Schema.optionalKey(Schema.Int),
  /** What the check reported (bounded preview). */
  summary: Schema.optionalKey(Schema.String)
})
export type VerificationReceipt = typeof VerificationReceipt.Type

/**
 * `self_report`: the result is the agent's own claim (no check of its latest run);
 * `verified`: the latest conclusive check of its latest run passed; `disputed`: it failed.
 */
export const VerificationStatus = Schema.Literals(["self_report", "verified", "disputed"])
export type VerificationStatus = typeof VerificationStatus.Type

export const Verification = Schema.Struct({
  status: VerificationStatus,
  receipts: Schema.Array(VerificationReceipt)
})
export type Verification = typeof Verification.Type

export const SubAgentRecord = Schema.Struct({
  /** The record format (`recordVersion`); older records are migrated when read. */
  record_version: Schema.Literal(recordVersion),
  agent_id: Schema.String,
  /** A short human name (`amber-heron`) every agent tool accepts in place of the id. */
  session_name: Schema.optionalKey(Schema.String),
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
  tokens: Usage.Usage,
  outcome: Schema.optionalKey(Outcome),
  /** Where the transcript lives: the key of its messages in the store. */
  transcript_handle: Schema.String,
  /** Every run of this agent, oldest first (bounded); the last one is the current run. */
  runs: Schema.optionalKey(Schema.Array(Run)),
  runs_dropped: Schema.optionalKey(Schema.Int),
  /** The lifecycle event log, oldest first (bounded; tool calls are dropped first). */
  events: Schema.optionalKey(Schema.Array(LogEvent)),
  events_dropped: Schema.optionalKey(Schema.Int),
  /** Messages sent to it, delivered or not. */
  inputs: Schema.optionalKey(Schema.Array(Input)),
  inputs_dropped: Schema.optionalKey(Schema.Int),
  /** Questions of its calls that wait for a person now (`fibril agents questions` lists them). */
  questions: Schema.optionalKey(Schema.Array(Question)),
  /** Questions its calls asked a person, with their answers. */
  approvals: Schema.optionalKey(Schema.Array(ApprovalEntry)),
  approvals_dropped: Schema.optionalKey(Schema.Int),
  /** References to what it produced. */
  artifacts: Schema.optionalKey(Schema.Array(Artifact)),
  artifacts_dropped: Schema.optionalKey(Schema.Int),
  usage: Schema.optionalKey(UsageProvenance),
  verification: Schema.optionalKey(Verification),
  /** The run (run id) this agent checks (`verifies` at spawn): its result becomes that agent's verification receipt. */
  verifies: Schema.optionalKey(Schema.String),
  /** Its effective permissions when spawned: a resume after a restart never gives it more. */
  permissions: Schema.optionalKey(RulesJson),
  /** `output_schema` at spawn: a resume (also after a restart) ends with the same typed result. */
  output_schema: Schema.optionalKey(Schema.Record(Schema.String, Schema.Unknown)),
  /** `isolation: "worktree"`: the git worktree and branch it works on (Worktrees.ts). */
  worktree: Schema.optionalKey(Worktrees.Info)
})
export type SubAgentRecord = typeof SubAgentRecord.Type

// ---------------------------------------------------------------------------
// Bounded lists
// ---------------------------------------------------------------------------

/** The start of `text`, at most `limits.preview` characters, marked when cut. */
export const preview = (text: string, max: number = limits.preview): string => {
  if (text.length <= max) return text
  const low = text.charCodeAt(max - 1)
  const cut = low >= 0xd800 && low <= 0xdbff ? max - 1 : max
  return `${text.slice(0, cut)}…`
}

/**
 * `list` with `item` appended, at most `max` long: a new array (records are values, shared
 * with views). Beyond `max`, the first entry `droppable` accepts goes (else the oldest);
 * returns how many went.
 */
export const append = <A>(
  list: ReadonlyArray<A> | undefined,
  item: A,
  max: number,
  droppable?: (a: A) => boolean
): { readonly list: ReadonlyArray<A>; readonly dropped: number } => {
  const next = list === undefined ? [item] : [...list, item]
  if (next.length <= max) return { list: next, dropped: 0 }
  const at = droppable === undefined ? 0 : Math.max(0, next.findIndex(droppable))
  next.splice(at, 1)
  return { list: next, dropped: 1 }
}

/** The current (last) run of a record. */
export const currentRun = (record: SubAgentRecord): Run | undefined => record.runs?.at(-1)

/** The current run's id; for a record without runs, its first run's. */
export const currentRunId = (record: SubAgentRecord): string => currentRun(record)?.run_id ?? runId(record.agent_id, 1)

/** What a set of verification receipts says about run `run`: the latest conclusive one wins. */
export const verificationStatus = (receipts: ReadonlyArray<VerificationReceipt>, run: string): VerificationStatus => {
  for (let i = receipts.length - 1; i >= 0; i--) {
    const receipt = receipts[i]!
    if (receipt.run_id !== run || receipt.verdict === "inconclusive") continue
    return receipt.verdict === "passed" ? "verified" : "disputed"
  }
  return "self_report"
}

// ---------------------------------------------------------------------------
// Migration
// ---------------------------------------------------------------------------

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const int = (value: unknown): number | undefined =>
  typeof value === "number" && Number.isInteger(value) ? value : undefined
const str = (value: unknown): string | undefined => typeof value === "string" ? value : undefined
const terminalTypes: ReadonlySet<unknown> = terminalStatuses

/** Only the keys whose values are defined. */
const defined = (fields: Record<string, unknown>): Record<string, unknown> => {
  const out: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(fields)) if (value !== undefined) out[key] = value
  return out
}

/**
 * A stored record in the current format. A version 1 record (no `record_version`) becomes a
 * version 2 one: its `history` of past runs and its current run become `runs` (run ids
 * `<agent_id>-r1`, `-r2`, ...), its event log is rebuilt from its timestamps (marked so),
 * its transcript becomes an artifact, usage provenance is `unknown`, verification
 * `self_report`, and it gets its session name. Fields this version does not know are kept.
 * Anything else is returned as it is (the schema then decides).
 */
export const migrate = (raw: unknown): unknown => {
  if (!isObject(raw) || raw["record_version"] !== undefined) return raw
  const agentId = str(raw["agent_id"])
  const bootId = str(raw["session_boot_id"])
  const status = raw["status"]
  if (agentId === undefined || bootId === undefined) return raw
  const { history, ...rest } = raw
  const past = Array.isArray(history) ? history.filter(isObject) : []
  const runs: Array<Record<string, unknown>> = past.map((run, i) =>
    defined({
      run_id: runId(agentId, i + 1),
      kind: i === 0 ? "spawn" : "resume",
      status: run["status"],
      reason: str(run["reason"]),
      started_at: int(run["started_at"]),
      finished_at: int(run["finished_at"]),
      summary: str(run["summary"]) === undefined ? undefined : preview(str(run["summary"])!),
      session_boot_id: str(run["session_boot_id"]) ?? bootId
    })
  )
  const outcome = isObject(raw["outcome"]) ? raw["outcome"] : undefined
  const current = runId(agentId, past.length + 1)
  runs.push(defined({
    run_id: current,
    kind: past.length === 0 ? "spawn" : "resume",
    status,
    reason: str(raw["reason"]),
    started_at: int(raw["started_at"]),
    finished_at: int(raw["finished_at"]),
    summary: str(outcome?.["summary"]) === undefined ? undefined : preview(str(outcome?.["summary"])!),
    session_boot_id: bootId,
    owner_pid: int(raw["owner_pid"])
  }))
  const note = "rebuilt from a version 1 record"
  const events: Array<Record<string, unknown>> = []
  const createdAt = int(raw["created_at"])
  if (createdAt !== undefined) events.push({ at: createdAt, type: "spawned", run_id: runId(agentId, 1), detail: note })
  const startedAt = int(raw["started_at"])
  if (startedAt !== undefined) {
    events.push({ at: startedAt, type: past.length === 0 ? "started" : "resumed", run_id: current, detail: note })
  }
  const finishedAt = int(raw["finished_at"])
  if (finishedAt !== undefined && terminalTypes.has(status)) {
    events.push(defined({ at: finishedAt, type: status, run_id: current, detail: str(raw["reason"]) ?? note }))
  }
  const handle = str(raw["transcript_handle"])
  return {
    ...rest,
    record_version: recordVersion,
    session_name: str(raw["session_name"]) ?? Names.fromId(agentId),
    runs: runs.slice(-limits.runs),
    ...(runs.length > limits.runs ? { runs_dropped: runs.length - limits.runs } : {}),
    events,
    artifacts: handle === undefined ? [] : [{ kind: "transcript", ref: handle }],
    usage: { status: "unknown", reported_steps: 0, estimated_steps: 0 },
    verification: { status: "self_report", receipts: [] }
  }
}

// ---------------------------------------------------------------------------
// Decoding a stored record
// ---------------------------------------------------------------------------

// A store checks the record schema at every finished agent's put and decodes it at every read:
// it is compiled to plain JavaScript (Effect's Schema JIT compiler, before first use) rather
// than interpreted, about 6x faster per check (9 µs to 1.6 for a finished record, warm). The
// interpreter stays the fallback where `new Function` is blocked. Its type side is itself (no
// transformations), so one compilation serves `Schema.is` and the decoder.
SchemaJITCompiler.enable(SubAgentRecord.ast)
const decodeCurrent = Schema.decodeUnknownResult(SubAgentRecord)

/** A stored record, migrated to the current format first (version 1 records have no `record_version`). */
export const decodeStored = (raw: unknown) => decodeCurrent(migrate(raw))
