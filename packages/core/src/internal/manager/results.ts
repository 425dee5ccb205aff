/**
 * What a parent (a model, an MCP client) sees of an agent: its record without bookkeeping,
 * the outcome flattened, each part bounded. SubAgentManager re-exports these.
 */
import * as Receipt from "../../Receipt.ts"
import type { AgentView } from "../../SubAgentManager.ts"
import { currentRunId, resultSections } from "../../SubAgentRecord.ts"

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

/** What a model sees of an agent: the record without bookkeeping, the outcome flattened. */
export const agentResultForModel = (agent: AgentView) => ({
  agent_id: agent.agent_id,
  session_name: Receipt.sessionName(agent),
  run_id: currentRunId(agent),
  description: agent.description,
  role: agent.role,
  status: agent.status,
  ...(agent.reason === undefined ? {} : { reason: agent.reason }),
  summary: agent.outcome?.summary ?? "",
  sections: agent.outcome === undefined ? undefined : resultSections(agent.outcome.sections),
  contract_violations: agent.outcome?.contract_violations ?? [],
  steps: agent.steps,
  tool_calls: agent.tool_calls,
  tokens: agent.tokens,
  duration_ms: agent.started_at !== undefined && agent.finished_at !== undefined
    ? agent.finished_at - agent.started_at
    : undefined,
  model: agent.model,
  transcript_handle: agent.transcript_handle,
  ...(agent.from_prior_session ? { from_prior_session: true } : {})
})
