// Agent records for store tests: a plain one, and one owned by a store's process.
import type { SubAgentRecord } from "../src/SubAgentRecord.ts"
import type * as SubAgentStore from "../src/SubAgentStore.ts"

/** A running depth-1 record with every required field, `overrides` last. */
export const sample = (agentId: string, overrides: Partial<SubAgentRecord> = {}): SubAgentRecord => ({
  record_version: 2,
  agent_id: agentId,
  depth: 1,
  role: "worker",
  model: "fake-model",
  description: `agent ${agentId}`,
  objective: "do the thing",
  status: "running",
  detached: false,
  fork_context: false,
  session_boot_id: "boot-1",
  created_at: 0,
  steps: 0,
  tool_calls: 0,
  tokens: { input: 0, output: 0, cached: 0 },
  transcript_handle: agentId,
  ...overrides
})

/** A record owned by `store`'s process, named the way the manager names its own. */
export const owned = (
  store: SubAgentStore.SubAgentStore["Service"],
  agentId: string,
  overrides: Partial<SubAgentRecord> = {}
): SubAgentRecord =>
  sample(agentId, {
    session_boot_id: store.owner.boot_id,
    owner_pid: store.owner.pid,
    owner_host: store.owner.host,
    ...overrides
  })
