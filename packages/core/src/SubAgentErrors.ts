/**
 * SubAgentErrors — the refusals of the sub-agent contract (SubAgentManager), shared by every
 * engine: each carries what a caller needs, and its message says what to do instead. They
 * become model-facing text at the one tool-result boundary. SubAgentManager re-exports them.
 */
import * as Schema from "effect/Schema"

export class CapReached extends Schema.TaggedError<CapReached>()("CapReached", {
  max: Schema.Int,
  running: Schema.Int
}) {
  override get message() {
    return `sub-agent cap reached (max ${this.max}, running ${this.running}): nothing was spawned. ` +
      "Wait for a running agent to finish (agent_wait) or cancel one (agent_cancel), then try again."
  }
}

export class AgentNotFound extends Schema.TaggedError<AgentNotFound>()("AgentNotFound", { agentId: Schema.String }) {
  override get message() {
    return `no sub-agent with id "${this.agentId}"; agent_list shows the known ones`
  }
}

export class NotResumable extends Schema.TaggedError<NotResumable>()("NotResumable", {
  agentId: Schema.String,
  status: Schema.String,
  /** Why a finished agent cannot run again (its worktree was merged or discarded). */
  reason: Schema.optional(Schema.String)
}) {
  override get message() {
    return this.reason === undefined
      ? `sub-agent ${this.agentId} is ${this.status}; only a finished agent (completed, failed, cancelled or interrupted) can be resumed`
      : `sub-agent ${this.agentId} cannot be resumed: ${this.reason}`
  }
}

export class NotOwned extends Schema.TaggedError<NotOwned>()("NotOwned", {
  agentId: Schema.String,
  owner: Schema.String
}) {
  override get message() {
    return `sub-agent ${this.agentId} is recorded by another process (${this.owner}); only the process that owns its record can change it`
  }
}

/** How an agent may be kept apart from its parent (`isolation` on a spawn). */
export const IsolationMode = Schema.Literals(["worktree", "process"])

/**
 * The one refusal of an `isolation` this runtime cannot give (both modes, both engines), at
 * spawn, before anything is created: the mode asked, why not, and the modes it does accept
 * (none: only a spawn without `isolation`).
 */
export class IsolationUnavailable extends Schema.TaggedError<IsolationUnavailable>()("IsolationUnavailable", {
  mode: IsolationMode,
  reason: Schema.String,
  accepted: Schema.Array(IsolationMode)
}) {
  override get message() {
    const modes = this.accepted.map((mode) => `isolation "${mode}"`)
    return `isolation "${this.mode}" is not available here: ${this.reason}; accepted here: ${
      [...modes, "no isolation (omit it)"].join(" or ")
    }`
  }
}
