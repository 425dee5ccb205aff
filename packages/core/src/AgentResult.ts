/**
 * AgentResult — what a model or an MCP client sees of an agent, whatever engine runs it.
 *
 * Each view is a Schema (the sub-agent tools' output schemas: MCP wants an object root) and
 * the function that builds it from an `AgentView`, the one shape both engines map their
 * records (embedded) or rows (cluster) into. The sub-agent tools (tools/Agents.ts,
 * tools/Task.ts) return these to Fibril's own loop, to the `effect/ai` Toolkit and to both MCP
 * servers, so a result looks the same wherever it is read. No view has a key whose value is
 * `undefined`: structured MCP content is JSON, and a model reads the same JSON.
 */
import * as Schema from "effect/Schema"
import { ClaimsReport } from "./Claims.ts"
import * as OutputContract from "./OutputContract.ts"
import * as Receipt from "./Receipt.ts"
import {
  currentRunId,
  Input,
  type Outcome,
  ResultSections,
  resultSections,
  Status,
  type SubAgentRecord
} from "./SubAgentRecord.ts"
import * as Usage from "./Usage.ts"
import * as Worktrees from "./Worktrees.ts"

/** A record as shown to callers: the stored fields plus whether it predates this process. */
export type AgentView = SubAgentRecord & { readonly from_prior_session: boolean }

/** Default bound on each part of a result a parent receives (summary, each section) and on stored reasons. */
export const defaultMaxResultChars = 16_384

/** `text` cut to `max` characters, marked when cut: the whole text stays in the transcript. */
export const bound = (text: string, max: number): string => {
  if (text.length <= max) return text
  const low = text.charCodeAt(max)
  const cut = low >= 0xdc00 && low <= 0xdfff ? max - 1 : max
  return `${text.slice(0, cut)}\n[... cut: ${
    text.length - cut
  } more characters; the whole answer is in the agent's transcript]`
}

/**
 * A final answer as a record keeps it: the text, the summary and the five sections parsed
 * (OutputContract), each part bounded by `max`, the contract's violations, and its claims
 * checked (`Claims.ofAnswer`, over the whole answer and transcript). Both engines turn an
 * agent's answer into its outcome here.
 */
export const outcomeOf = (
  text: string,
  max: number,
  checked: { readonly claims?: ClaimsReport | undefined; readonly output?: unknown } = {}
): Outcome => {
  const { claims, output } = checked
  // A typed result is its value: no sections to parse (the text is the value's JSON).
  if (output !== undefined) return typedOutcome(text, max, output, claims)
  const parsed = OutputContract.parse(text)
  const sections = parsed.sections
  return {
    text: bound(text, max),
    summary: bound(OutputContract.summaryOf(parsed, text), max),
    sections: {
      summary: bound(sections.summary, max),
      changes: bound(sections.changes, max),
      evidence: bound(sections.evidence, max),
      risks: bound(sections.risks, max),
      blockers: bound(sections.blockers, max)
    },
    contract_violations: parsed.violations.map((violation) => violation.message),
    ...(claims === undefined ? {} : { claims })
  }
}

const noSections = { summary: "", changes: "", evidence: "", risks: "", blockers: "" }

const typedOutcome = (text: string, max: number, output: unknown, claims: ClaimsReport | undefined): Outcome => ({
  text: bound(text, max),
  summary: "",
  sections: noSections,
  contract_violations: [],
  output,
  ...(claims === undefined ? {} : { claims })
})

/** A typed result's value, as a view carries it (no sections beside it: the value is the result). */
const outputOf = (agent: AgentView) =>
  agent.outcome?.output === undefined ? undefined : { output: agent.outcome.output }

/**
 * The keys of a view that say how the answer met the contract: `summary`, `contract_violations`
 * and `claims`. A typed result (`output`) leaves out the ones with nothing in them (an empty
 * summary, no violations, no claim checked): its value is the result, and every key the parent
 * carries is context it pays for (docs/performance.md, the typed-economy row).
 */
const summaryKey = (agent: AgentView, summary: string): { readonly summary?: string } =>
  summary === "" && agent.outcome?.output !== undefined ? {} : { summary }

const checkKeys = (
  agent: AgentView
): { readonly contract_violations?: ReadonlyArray<string>; readonly claims?: ClaimsReport } => {
  const violations = agent.outcome?.contract_violations ?? []
  const claims = agent.outcome?.claims
  const typed = agent.outcome?.output !== undefined
  return {
    ...(typed && violations.length === 0 ? {} : { contract_violations: violations }),
    ...(claims === undefined || (typed && claims.checked === 0) ? {} : { claims })
  }
}

const durationOf = (agent: AgentView): number | undefined =>
  agent.started_at !== undefined && agent.finished_at !== undefined ? agent.finished_at - agent.started_at : undefined

// ---------------------------------------------------------------------------
// An agent's state or result (agent_result, agent_wait, agent_cancel, ...)
// ---------------------------------------------------------------------------

export const AgentResult = Schema.Struct({
  agent_id: Schema.String,
  /** Accepted by every agent tool in place of the id. */
  session_name: Schema.String,
  /** The current run: the first, or the latest resume. */
  run_id: Schema.String,
  description: Schema.String,
  role: Schema.String,
  status: Status,
  reason: Schema.optionalKey(Schema.String),
  /** Absent for a typed result (`output`) whose summary is empty. */
  summary: Schema.optionalKey(Schema.String),
  sections: Schema.optionalKey(ResultSections),
  /** With `output_schema`: the result, decoded against it (then there are no `sections`). */
  output: Schema.optionalKey(Schema.Unknown),
  /** Absent for a typed result with none. */
  contract_violations: Schema.optionalKey(Schema.Array(Schema.String)),
  /** A finished agent's EVIDENCE and CHANGES checked against what it did (docs/subagents.md). */
  claims: Schema.optionalKey(ClaimsReport),
  steps: Schema.Int,
  tool_calls: Schema.Int,
  tokens: Usage.Usage,
  duration_ms: Schema.optionalKey(Schema.Int),
  model: Schema.String,
  /** Read it with `handle_read`, a page at a time. */
  transcript_handle: Schema.String,
  from_prior_session: Schema.optionalKey(Schema.Boolean),
  /** An isolated agent's branch and what it holds (`agent_merge` brings it into your tree). */
  worktree: Schema.optionalKey(Worktrees.Summary)
})
export type AgentResult = typeof AgentResult.Type

/** The `worktree` key of a view: present only for an isolated agent. */
const worktreeOf = (agent: AgentView): { readonly worktree?: Worktrees.Summary } =>
  agent.worktree === undefined ? {} : { worktree: Worktrees.summaryOf(agent.worktree) }

/** An agent's state or result: the record without bookkeeping, the outcome flattened. */
export const of = (agent: AgentView): AgentResult => {
  const duration = durationOf(agent)
  return {
    agent_id: agent.agent_id,
    session_name: Receipt.sessionName(agent),
    run_id: currentRunId(agent),
    description: agent.description,
    role: agent.role,
    status: agent.status,
    ...(agent.reason === undefined ? {} : { reason: agent.reason }),
    ...summaryKey(agent, agent.outcome?.summary ?? ""),
    ...(agent.outcome === undefined ? {} : outputOf(agent) ?? { sections: resultSections(agent.outcome.sections) }),
    ...checkKeys(agent),
    steps: agent.steps,
    tool_calls: agent.tool_calls,
    tokens: agent.tokens,
    ...(duration === undefined ? {} : { duration_ms: duration }),
    model: agent.model,
    transcript_handle: agent.transcript_handle,
    ...(agent.from_prior_session ? { from_prior_session: true } : {}),
    ...worktreeOf(agent)
  }
}

// ---------------------------------------------------------------------------
// task: the parsed result of a finished agent
// ---------------------------------------------------------------------------

export const TaskResult = Schema.Struct({
  agent_id: Schema.String,
  description: Schema.String,
  status: Schema.Literals(["completed", "failed", "cancelled"]),
  /** Absent for a typed result (`output`) whose summary is empty. */
  summary: Schema.optionalKey(Schema.String),
  /** CHANGES, EVIDENCE, RISKS, BLOCKERS; SUMMARY is `summary`. Absent with `output`. */
  sections: Schema.optionalKey(ResultSections),
  /** With `output_schema`: the result, decoded against it (the parent gets this JSON only). */
  output: Schema.optionalKey(Schema.Unknown),
  /** Absent for a typed result with none. */
  contract_violations: Schema.optionalKey(Schema.Array(Schema.String)),
  /** Its EVIDENCE and CHANGES checked against what it did: unverified claims never fail a result. */
  claims: Schema.optionalKey(ClaimsReport),
  tool_calls: Schema.Int,
  steps: Schema.Int,
  tokens: Usage.Usage,
  duration_ms: Schema.Int,
  model: Schema.String,
  /** The child's transcript, for `handle_read` (it never enters the parent's context by itself). */
  transcript_handle: Schema.String,
  worktree: Schema.optionalKey(Worktrees.Summary)
})
export type TaskResult = typeof TaskResult.Type

const emptySections: ResultSections = { changes: "", evidence: "", risks: "", blockers: "" }

/** The `task` result of a finished agent: a failure or a cancel is a result too, with its reason as summary. */
export const task = (agent: AgentView): TaskResult => ({
  agent_id: agent.agent_id,
  description: agent.description,
  status: agent.status === "completed" ? "completed" : agent.status === "cancelled" ? "cancelled" : "failed",
  ...summaryKey(agent, agent.outcome?.summary ?? agent.reason ?? ""),
  ...(outputOf(agent) ??
    { sections: agent.outcome === undefined ? emptySections : resultSections(agent.outcome.sections) }),
  ...checkKeys(agent),
  tool_calls: agent.tool_calls,
  steps: agent.steps,
  tokens: agent.tokens,
  duration_ms: durationOf(agent) ?? 0,
  model: agent.model,
  transcript_handle: agent.transcript_handle,
  ...worktreeOf(agent)
})

// ---------------------------------------------------------------------------
// agent_spawn / agent_open / agent_resume: the agent just started
// ---------------------------------------------------------------------------

export const Spawned = Schema.Struct({
  agent_id: Schema.String,
  session_name: Schema.String,
  run_id: Schema.String,
  status: Status,
  role: Schema.String,
  model: Schema.String,
  description: Schema.String,
  detached: Schema.Boolean
})
export type Spawned = typeof Spawned.Type

export const spawned = (agent: AgentView): Spawned => ({
  agent_id: agent.agent_id,
  session_name: Receipt.sessionName(agent),
  run_id: currentRunId(agent),
  status: agent.status,
  role: agent.role,
  model: agent.model,
  description: agent.description,
  detached: agent.detached
})

// ---------------------------------------------------------------------------
// agent_wait, agent_list, agent_send_input / agent_assign
// ---------------------------------------------------------------------------

export const WaitResult = Schema.Struct({
  timed_out: Schema.Boolean,
  completed: Schema.Array(AgentResult),
  still_running: Schema.Array(Schema.String)
})
export type WaitResult = typeof WaitResult.Type

export const AgentSummary = Schema.Struct({
  agent_id: Schema.String,
  session_name: Schema.String,
  parent_id: Schema.optionalKey(Schema.String),
  depth: Schema.Int,
  description: Schema.String,
  role: Schema.String,
  status: Status,
  reason: Schema.optionalKey(Schema.String),
  detached: Schema.Boolean,
  steps: Schema.Int,
  tool_calls: Schema.Int,
  from_prior_session: Schema.optionalKey(Schema.Boolean),
  worktree: Schema.optionalKey(Worktrees.Summary)
})
export type AgentSummary = typeof AgentSummary.Type

/** One line of `agent_list`. */
export const summary = (agent: AgentView): AgentSummary => ({
  agent_id: agent.agent_id,
  session_name: Receipt.sessionName(agent),
  ...(agent.parent_id === undefined ? {} : { parent_id: agent.parent_id }),
  depth: agent.depth,
  description: agent.description,
  role: agent.role,
  status: agent.status,
  ...(agent.reason === undefined ? {} : { reason: agent.reason }),
  detached: agent.detached,
  steps: agent.steps,
  tool_calls: agent.tool_calls,
  ...(agent.from_prior_session ? { from_prior_session: true } : {}),
  ...worktreeOf(agent)
})

export const ListResult = Schema.Struct({ agents: Schema.Array(AgentSummary) })

/** A message delivered to an agent (or not, and why). */
export interface Delivery {
  readonly delivered: boolean
  readonly reason?: string | undefined
  /** The input as the agent's record keeps it (absent when another process owns the record). */
  readonly input?: Input | undefined
}

export const InputResult = Schema.Struct({
  delivered: Schema.Boolean,
  reason: Schema.optionalKey(Schema.String),
  agent: AgentResult
})

export const delivery = (outcome: Delivery & { readonly agent: AgentView }): typeof InputResult.Type => ({
  delivered: outcome.delivered,
  ...(outcome.reason === undefined ? {} : { reason: outcome.reason }),
  agent: of(outcome.agent)
})

// ---------------------------------------------------------------------------
// agent_eval: the result, the delivery, and the run receipt
// ---------------------------------------------------------------------------

/**
 * What `agent_eval` returns: the agent's result, the delivery of the message it was given
 * (if any), its run receipt at the top level, and the whole receipt as `worker_record`.
 */
export const EvalResult = Schema.Struct({
  ...AgentResult.fields,
  /** With a message: was it delivered (to a running agent, read before its next step)? */
  delivered: Schema.optionalKey(Schema.Boolean),
  /** Why not, or how (queued for another process). */
  delivery_reason: Schema.optionalKey(Schema.String),
  /** The input as the record keeps it. */
  delivery: Schema.optionalKey(Input),
  ...Receipt.receiptFields,
  worker_record: Receipt.WorkerRecord
})
export type EvalResult = typeof EvalResult.Type

export const evaluation = (
  agent: AgentView,
  worker: Receipt.WorkerRecord,
  sent: Delivery | undefined
): EvalResult => ({
  ...(sent === undefined ? {} : {
    delivered: sent.delivered,
    ...(sent.reason === undefined ? {} : { delivery_reason: sent.reason }),
    ...(sent.input === undefined ? {} : { delivery: sent.input })
  }),
  ...of(agent),
  session_name: worker.session_name,
  run_id: worker.run_id,
  runs: worker.runs,
  ...(worker.runs_dropped === undefined ? {} : { runs_dropped: worker.runs_dropped }),
  events: worker.events,
  ...(worker.events_dropped === undefined ? {} : { events_dropped: worker.events_dropped }),
  inputs: worker.inputs,
  ...(worker.inputs_dropped === undefined ? {} : { inputs_dropped: worker.inputs_dropped }),
  artifacts: worker.artifacts,
  ...(worker.artifacts_dropped === undefined ? {} : { artifacts_dropped: worker.artifacts_dropped }),
  transcript_handle: worker.transcript_handle,
  usage: worker.usage,
  verification: worker.verification,
  follow_up: worker.follow_up,
  takeover: worker.takeover,
  worker_record: worker
})
