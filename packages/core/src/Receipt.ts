/**
 * Receipt — an agent's record kept as a run receipt, and shown as one.
 *
 * Two halves. The first changes a record as its agent lives (the SubAgentManager calls it):
 * a run begins and ends, an input is delivered or not, a tool call lands, a check is
 * attached. These append to the record in memory, bounded, and never write on their own:
 * the manager's next `put` (at the next status change) carries them, so a tool call costs
 * no store write.
 *
 * The second projects a record for whoever reads it — a parent model (`agent_eval`), an MCP
 * client, a person (`fibril agents show`): the **worker record**, with where to follow up
 * (`follow_up`: the id or session name to pass to `agent_eval` / `agent_resume`) and how a
 * person takes the agent over locally (`takeover`: the command, or why it cannot be done).
 * The same shape is what a durable run ledger keeps: one receipt per agent, one entry per run.
 */
import * as Schema from "effect/Schema"
import type { AgentEvent } from "./AgentEvents.ts"
import type * as Approvals from "./Approvals.ts"
import * as Names from "./internal/names.ts"
import {
  append,
  type ApprovalEntry,
  ApprovalEntry as ApprovalEntrySchema,
  type Artifact,
  Artifact as ArtifactSchema,
  currentRun,
  currentRunId,
  type Input,
  Input as InputSchema,
  isTerminal,
  limits,
  LogEvent,
  type LogEvent as LogEventType,
  preview,
  recordVersion,
  type Run,
  Run as RunSchema,
  runId,
  Status,
  type SubAgentRecord,
  type UsageProvenance,
  UsageStatus,
  Verification,
  type VerificationReceipt,
  verificationStatus
} from "./SubAgentRecord.ts"
import type * as Usage from "./Usage.ts"

/** A record being changed by its owner (the manager): its fields reassignable, its lists values. */
export type Draft = { -readonly [K in keyof SubAgentRecord]: SubAgentRecord[K] }

// ---------------------------------------------------------------------------
// Changing a record
// ---------------------------------------------------------------------------

/** The receipt fields of a newly spawned agent: its first run (pending), `spawned`, its transcript (as few objects as will do: this runs per spawn). */
export const initial = (options: {
  readonly agentId: string
  readonly sessionName: string
  readonly transcriptHandle: string
  readonly now: number
  readonly bootId: string
  readonly pid: number
  readonly message: string
  readonly detail?: string | undefined
}) => {
  const first = runId(options.agentId, 1)
  return {
    record_version: recordVersion,
    session_name: options.sessionName,
    runs: [{
      run_id: first,
      kind: "spawn",
      status: "pending",
      requested_at: options.now,
      message: preview(options.message),
      session_boot_id: options.bootId,
      owner_pid: options.pid
    }] satisfies ReadonlyArray<Run>,
    events: [{
      at: options.now,
      type: "spawned",
      run_id: first,
      ...(options.detail === undefined ? {} : { detail: preview(options.detail) })
    }] satisfies ReadonlyArray<LogEventType>,
    artifacts: [{ kind: "transcript", ref: options.transcriptHandle }] satisfies ReadonlyArray<Artifact>,
    usage: { status: "unknown", reported_steps: 0, estimated_steps: 0 } satisfies UsageProvenance
    // `verification` is absent until a check is attached: the receipt reads that as self_report.
  } as const
}

/**
 * Appends to the event log with the current run's id; beyond the bound, tool calls go first.
 * The entry is built field by field, in the log's order: one spread of the several shapes
 * logged here would be a megamorphic copy, several times the cost, a few times per agent.
 */
export const log = (record: Draft, event: Omit<LogEventType, "run_id">): void => {
  const entry: { -readonly [K in keyof LogEventType]: LogEventType[K] } = { at: event.at, type: event.type }
  if ("tool" in event) entry.tool = event.tool
  if ("failed" in event) entry.failed = event.failed
  if ("detail" in event) entry.detail = event.detail
  entry.run_id = currentRunId(record)
  const next = append(record.events, entry, limits.events, (e) => e.type === "tool_call")
  record.events = next.list
  if (next.dropped > 0) record.events_dropped = (record.events_dropped ?? 0) + next.dropped
}

/**
 * Puts a takeover into the history of a record whose owner ends it after another process took
 * it over (found it gone while it lived): an `interrupted` event before the record's final
 * event, so the log reads in the order things happened.
 */
export const takenOver = (record: Draft, event: { readonly at: number; readonly detail: string }): void => {
  const entry: LogEventType = { at: event.at, type: "interrupted", detail: event.detail, run_id: currentRunId(record) }
  const events = [...(record.events ?? [])]
  const last = events.at(-1)
  events.splice(last !== undefined && last.type !== "tool_call" ? events.length - 1 : events.length, 0, entry)
  const next = events.length > limits.events ? events.slice(events.length - limits.events) : events
  if (next.length < events.length) record.events_dropped = (record.events_dropped ?? 0) + events.length - next.length
  record.events = next
}

/** Replaces the current run with `f` of it. */
const updateRun = (record: Draft, f: (run: Run) => Run): void => {
  const runs = record.runs
  const last = runs?.at(-1)
  if (runs === undefined || last === undefined) return
  record.runs = [...runs.slice(0, -1), f(last)]
}

/** A new run (`agent_resume`): appended to `runs` (bounded), logged as `resumed`. */
export const beginResume = (record: Draft, options: {
  readonly now: number
  readonly bootId: string
  readonly pid: number
  readonly message: string
}): void => {
  const previous = currentRun(record)
  const n = previous === undefined ? 2 : (Number(/-r(\d+)$/.exec(previous.run_id)?.[1] ?? record.runs?.length ?? 1) + 1)
  const run: Run = {
    run_id: runId(record.agent_id, n),
    kind: "resume",
    status: "pending",
    requested_at: options.now,
    message: preview(options.message),
    session_boot_id: options.bootId,
    owner_pid: options.pid
  }
  const next = append(record.runs, run, limits.runs)
  record.runs = next.list
  if (next.dropped > 0) record.runs_dropped = (record.runs_dropped ?? 0) + next.dropped
  log(record, { at: options.now, type: "resumed", detail: preview(options.message) })
  // A check of an earlier run says nothing about this one.
  if (record.verification !== undefined) {
    record.verification = {
      ...record.verification,
      status: verificationStatus(record.verification.receipts, run.run_id)
    }
  }
}

/** The current run started running. */
export const started = (record: Draft, now: number): void => {
  updateRun(record, (run) => ({ ...run, status: "running", started_at: now }))
  log(record, { at: now, type: "started" })
}

export interface RunBase {
  readonly steps: number
  readonly toolCalls: number
  readonly tokens: Usage.Usage
}

/** The current run ended as the record now says (status, reason, outcome); what it alone did. */
export const finished = (record: Draft, base: RunBase): void => {
  const now = record.finished_at
  updateRun(record, (run) => {
    // The run's own fields, then how it ended (its earlier reason and summary replaced);
    // field by field, not a rest and spreads (slow copies of the run's several shapes).
    const ended: { -readonly [K in keyof Run]: Run[K] } = {
      run_id: run.run_id,
      kind: run.kind,
      status: record.status,
      session_boot_id: run.session_boot_id
    }
    if (run.requested_at !== undefined) ended.requested_at = run.requested_at
    if (run.started_at !== undefined) ended.started_at = run.started_at
    if (run.message !== undefined) ended.message = run.message
    if (run.owner_pid !== undefined) ended.owner_pid = run.owner_pid
    if (record.reason !== undefined) ended.reason = preview(record.reason)
    if (now !== undefined) ended.finished_at = now
    else if (run.finished_at !== undefined) ended.finished_at = run.finished_at
    if (record.outcome !== undefined) ended.summary = preview(record.outcome.summary)
    ended.steps = Math.max(0, record.steps - base.steps)
    ended.tool_calls = Math.max(0, record.tool_calls - base.toolCalls)
    ended.tokens = {
      input: Math.max(0, record.tokens.input - base.tokens.input),
      output: Math.max(0, record.tokens.output - base.tokens.output),
      cached: Math.max(0, record.tokens.cached - base.tokens.cached)
    }
    return ended
  })
  const type = record.status === "pending" || record.status === "running" ? "failed" : record.status
  log(
    record,
    record.reason === undefined
      ? { at: now ?? record.created_at, type }
      : { at: now ?? record.created_at, type, detail: preview(record.reason) }
  )
}

/** Records a message sent to the agent, delivered or not; returns the entry. */
export const input = (record: Draft, options: {
  readonly now: number
  readonly message: string
  readonly delivered: boolean
  readonly reason?: string | undefined
  readonly interrupt?: boolean | undefined
  readonly via?: string | undefined
}): Input => {
  const entry: Input = {
    at: options.now,
    run_id: currentRunId(record),
    preview: preview(options.message),
    chars: options.message.length,
    delivered: options.delivered,
    ...(options.reason === undefined ? {} : { reason: preview(options.reason) }),
    ...(options.interrupt === true ? { interrupt: true } : {}),
    ...(options.via === undefined ? {} : { via: options.via })
  }
  const next = append(record.inputs, entry, limits.inputs)
  record.inputs = next.list
  if (next.dropped > 0) record.inputs_dropped = (record.inputs_dropped ?? 0) + next.dropped
  log(record, {
    at: options.now,
    type: options.delivered ? "input_delivered" : "input_undelivered",
    detail: options.delivered ? entry.preview : `${entry.preview} — ${options.reason ?? "not delivered"}`
  })
  return entry
}

/**
 * The last `count` delivered inputs of the current run never reached the agent: its run
 * ended before its next model step read them. They are marked undelivered, with why.
 */
export const unread = (record: Draft, count: number, reason: string, now: number): void => {
  if (count === 0 || record.inputs === undefined) return
  const run = currentRunId(record)
  const inputs = [...record.inputs]
  let left = count
  for (let i = inputs.length - 1; i >= 0 && left > 0; i--) {
    const entry = inputs[i]!
    if (!entry.delivered || entry.run_id !== run) continue
    inputs[i] = { ...entry, delivered: false, reason: preview(reason) }
    log(record, { at: now, type: "input_undelivered", detail: `${entry.preview} — ${reason}` })
    left--
  }
  record.inputs = inputs
}

/** Where plan artifacts live (the plan role may write only there). */
const plansDir = ".fibril/plans/"

/** Adds or refreshes an artifact reference (one per kind and ref). */
const artifact = (record: Draft, kind: Artifact["kind"], ref: string, tool: string, at: number): void => {
  const list = record.artifacts ?? []
  const run = currentRunId(record)
  const at_ = list.findIndex((a) => a.kind === kind && a.ref === ref)
  if (at_ >= 0) {
    const found = list[at_]!
    const next = [...list]
    next[at_] = { ...found, tool, at, run_id: run, writes: (found.writes ?? 1) + 1 }
    record.artifacts = next
    return
  }
  // The transcript reference is never the one to go.
  const next = append(
    list,
    { kind, ref, tool, at, run_id: run, writes: 1 },
    limits.artifacts,
    (a) => a.kind !== "transcript"
  )
  record.artifacts = next.list
  if (next.dropped > 0) record.artifacts_dropped = (record.artifacts_dropped ?? 0) + next.dropped
}

/**
 * A tool call landed: logged (tool, failed or not), and what it produced is referenced —
 * files a writing tool changed (`plan` under `.fibril/plans`), the todo list `todowrite` set.
 * `relativize` makes a path workspace-relative.
 */
export const toolResult = (record: Draft, event: AgentEvent, relativize: (path: string) => string): void => {
  const tool = event.tool ?? "tool"
  log(
    record,
    event.isFailure === true
      ? { at: event.at, type: "tool_call", tool, failed: true, detail: preview(event.reason ?? "failed") }
      : { at: event.at, type: "tool_call", tool }
  )
  if (event.isFailure === true) return
  for (const path of event.changed ?? []) {
    const ref = relativize(path)
    artifact(record, ref.startsWith(plansDir) ? "plan" : "file", ref, tool, event.at)
  }
  if (tool === "todowrite") artifact(record, "todo", `todos:${record.agent_id}`, tool, event.at)
}

/** A question one of its calls asked now waits for a person (a `question` event). */
export const asked = (record: Draft, event: AgentEvent): void => {
  if (event.question !== undefined) waiting(record, event.question)
}

/** The fields of a record its approval questions change. */
export type Decisions = Pick<Draft, "questions" | "approvals" | "approvals_dropped">

/**
 * A question now waits for a person: kept under `questions` until decided. The embedded
 * runtime calls it from a `question` event, the cluster from the question's durable row.
 */
export const waiting = (record: Decisions, question: Approvals.Question): void => {
  record.questions = [...(record.questions ?? []), question]
}

/** A question one of its calls asked, decided (an `answered` event): kept with who and when. */
export const approval = (record: Draft, event: AgentEvent): void => {
  const { answer, question } = event
  if (question === undefined || answer === undefined) return
  decided(record, { question, answer, at: event.at })
}

/**
 * A question decided (`at`: when): one approval entry with who decided, and no longer waiting.
 * The one way a decision enters a receipt, in either engine (the cluster's from its row).
 */
export const decided = (record: Decisions, { answer, at, question }: Approvals.Decided): void => {
  if (record.questions?.some((open) => open.id === question.id)) {
    const left = record.questions.filter((open) => open.id !== question.id)
    if (left.length > 0) record.questions = left
    else delete record.questions
  }
  const entry: ApprovalEntry = {
    at,
    asked_at: question.askedAt,
    question_id: question.id,
    kind: question.kind,
    tool: question.tool,
    question: preview(question.reason),
    arguments: preview(question.arguments),
    decision: answer.decision,
    by: answer.by,
    ...(answer.reason === undefined ? {} : { reason: preview(answer.reason) }),
    ...(answer.always === true ? { always: true } : {})
  }
  const next = append(record.approvals, entry, limits.approvals, () => true)
  record.approvals = next.list
  if (next.dropped > 0) record.approvals_dropped = (record.approvals_dropped ?? 0) + next.dropped
}

/** Usage provenance from a session's step counts. */
export const usage = (steps: { readonly reported: number; readonly estimated: number }): UsageProvenance => ({
  status: steps.estimated > 0 ? "estimated" : steps.reported > 0 ? "reported" : "unknown",
  reported_steps: steps.reported,
  estimated_steps: steps.estimated
})

/** Attaches a check of the agent's work; its verification status follows from it. */
export const attach = (record: Draft, receipt: VerificationReceipt): void => {
  const receipts = append(record.verification?.receipts, receipt, limits.receipts).list
  record.verification = { status: verificationStatus(receipts, currentRunId(record)), receipts }
  log(record, {
    at: receipt.at,
    type: "verification",
    detail: preview(
      `${receipt.verdict} (${
        receipt.kind === "agent"
          ? `verifier ${receipt.agent_id ?? "?"}`
          : `\`${receipt.command ?? "?"}\` exit ${receipt.exit_code ?? "?"}`
      })`
    )
  })
}

const noBlockers = /^(?:none|n\/a|no(?:ne)?\.?|no blockers?\.?|nothing|-|—)\.?$/i

/**
 * A verifier agent's result as a receipt for the agent it checked: `passed` when it completed
 * with nothing under BLOCKERS, `failed` when it completed naming blockers, `inconclusive`
 * when it did not complete.
 */
export const fromVerifier = (verifier: SubAgentRecord, checkedRun: string, now: number): VerificationReceipt => {
  const blockers = verifier.outcome?.sections.blockers.trim() ?? ""
  const verdict = verifier.status !== "completed"
    ? "inconclusive"
    : blockers === "" || noBlockers.test(blockers)
    ? "passed"
    : "failed"
  const text = verifier.status === "completed"
    ? verifier.outcome?.summary ?? ""
    : `${verifier.status}${verifier.reason === undefined ? "" : `: ${verifier.reason}`}`
  return {
    kind: "agent",
    verdict,
    at: now,
    run_id: checkedRun,
    agent_id: verifier.agent_id,
    verifier_run_id: currentRunId(verifier),
    summary: preview(verdict === "failed" ? `${text} — blockers: ${blockers}` : text)
  }
}

/** A command's exit code as a receipt (0 passed, anything else failed). */
export const fromCommand = (options: {
  readonly command: string
  readonly exitCode: number
  readonly summary?: string | undefined
  readonly runId: string
  readonly now: number
}): VerificationReceipt => ({
  kind: "command",
  verdict: options.exitCode === 0 ? "passed" : "failed",
  at: options.now,
  run_id: options.runId,
  command: preview(options.command),
  exit_code: options.exitCode,
  ...(options.summary === undefined ? {} : { summary: preview(options.summary) })
})

// ---------------------------------------------------------------------------
// Projection: the worker record
// ---------------------------------------------------------------------------

/** Who is looking, and from where: what a takeover can be offered. */
export interface Viewer {
  /**
   * The workspace whose `.fibril/state` holds the record (a person runs `fibril agents` there),
   * or undefined: records live only in one process's memory, or in a store elsewhere.
   */
  readonly workspace: string | undefined
  /** The store keeps records beyond the process (false: the memory store). */
  readonly durable: boolean
  /** Is the agent's owner this process, another live one, or gone? */
  readonly owner: "self" | "alive" | "gone"
}

export const FollowUp = Schema.Struct({
  agent_id: Schema.String,
  session_name: Schema.String,
  /** The tool that continues it now: `agent_eval` while it runs, `agent_resume` once it has ended. */
  tool: Schema.Literals(["agent_eval", "agent_resume"]),
  /** Whether a message sent now reaches it (before its next model step). */
  accepts_input: Schema.Boolean,
  hint: Schema.String
})
export type FollowUp = typeof FollowUp.Type

export const Takeover = Schema.Struct({
  /** Whether a person can take it over now with `command`. */
  available: Schema.Boolean,
  /** Continues the agent in the person's terminal, from its transcript. */
  command: Schema.optionalKey(Schema.String),
  /** Reads its transcript (works at any time). */
  transcript_command: Schema.optionalKey(Schema.String),
  transcript_handle: Schema.String,
  /** Why it cannot be taken over (now), and what would make it possible. */
  reason: Schema.optionalKey(Schema.String)
})
export type Takeover = typeof Takeover.Type

const quote = (text: string): string => /^[\w./:@%+=,-]+$/.test(text) ? text : `'${text.replaceAll("'", "'\\''")}'`

export const sessionName = (record: SubAgentRecord): string => record.session_name ?? Names.fromId(record.agent_id)

export const followUp = (record: SubAgentRecord): FollowUp => {
  const name = sessionName(record)
  if (!isTerminal(record.status)) {
    return {
      agent_id: record.agent_id,
      session_name: name,
      tool: "agent_eval",
      accepts_input: true,
      hint: `agent_eval {"agent_id": "${name}", "message": "..."} delivers a message before its next step; ` +
        `add "block": true to wait for its result`
    }
  }
  return {
    agent_id: record.agent_id,
    session_name: name,
    tool: "agent_resume",
    accepts_input: false,
    hint: `it has ended (${record.status}); agent_resume {"agent_id": "${name}", "message": "..."} continues it ` +
      "from its transcript, as a new run"
  }
}

export const takeover = (record: SubAgentRecord, viewer: Viewer): Takeover => {
  const handle = record.transcript_handle
  if (!viewer.durable) {
    return {
      available: false,
      transcript_handle: handle,
      reason: "its record lives only in this process's memory (the memory store): no other process can read or " +
        "resume it; handle_read reads its transcript from here. Run with the file store (fibril run and fibril mcp use it) " +
        "for local takeover"
    }
  }
  if (viewer.workspace === undefined) {
    return {
      available: false,
      transcript_handle: handle,
      reason: "its store is not a workspace's .fibril/state, which is where `fibril agents` looks; " +
        "open the store directly, or use the workspace's default store for local takeover"
    }
  }
  const cwd = ` --cwd ${quote(viewer.workspace)}`
  const transcript = `fibril agents transcript ${record.agent_id}${cwd}`
  const command = `fibril agents resume ${record.agent_id}${cwd}`
  if (!isTerminal(record.status)) {
    const where = viewer.owner === "self"
      ? "this process"
      : `another live process (pid ${record.owner_pid ?? "unknown"}${
        record.owner_host === undefined ? "" : ` on ${record.owner_host}`
      })`
    return {
      available: false,
      command,
      transcript_command: transcript,
      transcript_handle: handle,
      reason: `it is ${record.status} in ${where}; only a finished agent can be taken over. ` +
        `Cancel it first (fibril agents cancel ${record.agent_id}${cwd}) or wait for it, then run the command`
    }
  }
  return { available: true, command, transcript_command: transcript, transcript_handle: handle }
}

export const UsageView = Schema.Struct({
  status: UsageStatus,
  reported_steps: Schema.Int,
  estimated_steps: Schema.Int,
  input: Schema.Int,
  output: Schema.Int,
  cached: Schema.Int
})

export const Owner = Schema.Struct({
  session_boot_id: Schema.String,
  pid: Schema.optionalKey(Schema.Int),
  host: Schema.optionalKey(Schema.String)
})

/** The receipt fields, as `agent_eval` returns them at its top level. */
export const receiptFields = {
  session_name: Schema.String,
  run_id: Schema.String,
  runs: Schema.Array(RunSchema),
  runs_dropped: Schema.optionalKey(Schema.Int),
  events: Schema.Array(LogEvent),
  events_dropped: Schema.optionalKey(Schema.Int),
  inputs: Schema.Array(InputSchema),
  inputs_dropped: Schema.optionalKey(Schema.Int),
  /** Questions its calls asked a person (`ask` rules), with the answers; absent when none. */
  approvals: Schema.optionalKey(Schema.Array(ApprovalEntrySchema)),
  approvals_dropped: Schema.optionalKey(Schema.Int),
  artifacts: Schema.Array(ArtifactSchema),
  artifacts_dropped: Schema.optionalKey(Schema.Int),
  transcript_handle: Schema.String,
  usage: UsageView,
  verification: Verification,
  follow_up: FollowUp,
  takeover: Takeover
}

/** The worker record: the whole receipt of an agent. */
export const WorkerRecord = Schema.Struct({
  record_version: Schema.Int,
  agent_id: Schema.String,
  parent_id: Schema.optionalKey(Schema.String),
  depth: Schema.Int,
  role: Schema.String,
  model: Schema.String,
  description: Schema.String,
  objective: Schema.String,
  status: Status,
  reason: Schema.optionalKey(Schema.String),
  detached: Schema.Boolean,
  created_at: Schema.Int,
  started_at: Schema.optionalKey(Schema.Int),
  finished_at: Schema.optionalKey(Schema.Int),
  owner: Owner,
  steps: Schema.Int,
  tool_calls: Schema.Int,
  /** The result's summary: the agent's own claim unless `verification.status` says otherwise. */
  summary: Schema.optionalKey(Schema.String),
  verifies: Schema.optionalKey(Schema.String),
  ...receiptFields
})
export type WorkerRecord = typeof WorkerRecord.Type

export const ReceiptFields = Schema.Struct(receiptFields)
export type ReceiptFields = typeof ReceiptFields.Type

/** The receipt fields of a record (older records get the defaults their migration would give). */
export const fields = (record: SubAgentRecord, viewer: Viewer): ReceiptFields => {
  const runs = record.runs ?? [{
    run_id: runId(record.agent_id, 1),
    kind: "spawn" as const,
    status: record.status,
    session_boot_id: record.session_boot_id
  }]
  const provenance = record.usage ?? { status: "unknown" as const, reported_steps: 0, estimated_steps: 0 }
  return {
    session_name: sessionName(record),
    run_id: runs.at(-1)!.run_id,
    runs,
    ...(record.runs_dropped === undefined ? {} : { runs_dropped: record.runs_dropped }),
    events: record.events ?? [],
    ...(record.events_dropped === undefined ? {} : { events_dropped: record.events_dropped }),
    inputs: record.inputs ?? [],
    ...(record.inputs_dropped === undefined ? {} : { inputs_dropped: record.inputs_dropped }),
    ...(record.approvals === undefined ? {} : { approvals: record.approvals }),
    ...(record.approvals_dropped === undefined ? {} : { approvals_dropped: record.approvals_dropped }),
    artifacts: record.artifacts ?? [{ kind: "transcript", ref: record.transcript_handle }],
    ...(record.artifacts_dropped === undefined ? {} : { artifacts_dropped: record.artifacts_dropped }),
    transcript_handle: record.transcript_handle,
    usage: { ...provenance, ...record.tokens },
    verification: record.verification ?? { status: "self_report", receipts: [] },
    follow_up: followUp(record),
    takeover: takeover(record, viewer)
  }
}

/** The worker record of `record` as `viewer` sees it. */
export const workerRecord = (record: SubAgentRecord, viewer: Viewer): WorkerRecord => ({
  record_version: record.record_version,
  agent_id: record.agent_id,
  ...(record.parent_id === undefined ? {} : { parent_id: record.parent_id }),
  depth: record.depth,
  role: record.role,
  model: record.model,
  description: record.description,
  objective: record.objective,
  status: record.status,
  ...(record.reason === undefined ? {} : { reason: record.reason }),
  detached: record.detached,
  created_at: record.created_at,
  ...(record.started_at === undefined ? {} : { started_at: record.started_at }),
  ...(record.finished_at === undefined ? {} : { finished_at: record.finished_at }),
  owner: {
    session_boot_id: record.session_boot_id,
    ...(record.owner_pid === undefined ? {} : { pid: record.owner_pid }),
    ...(record.owner_host === undefined ? {} : { host: record.owner_host })
  },
  steps: record.steps,
  tool_calls: record.tool_calls,
  ...(record.outcome === undefined ? {} : { summary: record.outcome.summary }),
  ...(record.verifies === undefined ? {} : { verifies: record.verifies }),
  ...fields(record, viewer)
})
