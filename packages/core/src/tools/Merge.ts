/**
 * `agent_merge` — brings an isolated agent's branch (`isolation: "worktree"`) into the caller's
 * tree, or discards it. One definition for every front end (it is in AgentTools.definitions):
 * the agent is found through the SubAgentManager contract, the git work is Worktrees'. The
 * caller's tree is its own workspace: the root one, or its worktree when it is isolated itself.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { text } from "../internal/resource.ts"
import { IsolationUnavailable } from "../SubAgentErrors.ts"
import { SubAgentManager } from "../SubAgentManager.ts"
import { isTerminal } from "../SubAgentRecord.ts"
import * as ToolRegistry from "../ToolRegistry.ts"
import { Workspace } from "../Workspace.ts"
import * as Worktrees from "../Worktrees.ts"

export class NotMergeable extends Schema.TaggedError<NotMergeable>()("NotMergeable", {
  agentId: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `agent ${this.agentId} cannot be merged: ${this.reason}`
  }
}

export const MergeParameters = Schema.Struct({
  agent_id: Schema.optionalKey(Schema.String.annotate({ description: "The isolated sub-agent's id or session name" })),
  id: Schema.optionalKey(Schema.String.annotate({ description: "Alias of agent_id" })),
  action: Schema.optionalKey(
    Schema.Literals(["merge", "discard"]).annotate({
      description: "merge (default): into your tree; discard: drop its branch and worktree"
    })
  )
})

export const definition = ToolRegistry.define({
  name: "agent_merge",
  description: text("./agent_merge.md", import.meta.url),
  parameters: MergeParameters,
  posture: "spawn",
  served: {
    title: "Merge an isolated sub-agent's branch into your tree",
    success: Worktrees.MergeResult,
    required: ["agent_id"],
    readOnly: false,
    destructive: true,
    idempotent: false,
    openWorld: false
  },
  handler: Effect.fn("tool.agent_merge")(function*(params) {
    const manager = yield* SubAgentManager
    const id = params.agent_id ?? params.id
    if (id === undefined || id.length === 0) {
      return yield* new NotMergeable({ agentId: "", reason: "agent_id is required (the id from task or agent_spawn)" })
    }
    const worktrees = yield* Effect.serviceOption(Worktrees.Worktrees)
    const workspace = yield* Effect.serviceOption(Workspace)
    if (Option.isNone(worktrees) || Option.isNone(workspace)) {
      return yield* new IsolationUnavailable({
        mode: "worktree",
        reason: "this runtime has no workspace with worktrees, so there is nothing to merge",
        accepted: []
      })
    }
    const agent = yield* manager.result(id, { block: false })
    const info = agent.worktree
    if (info === undefined) {
      return yield* new NotMergeable({
        agentId: agent.agent_id,
        reason: "it was not spawned with isolation \"worktree\""
      })
    }
    if (!isTerminal(agent.status)) {
      return yield* new NotMergeable({
        agentId: agent.agent_id,
        reason: `it is ${agent.status}; wait for it (agent_wait) so its changes are committed first`
      })
    }
    return params.action === "discard"
      ? yield* worktrees.value.discard(agent.agent_id, info)
      : yield* worktrees.value.merge(workspace.value.root, agent.agent_id, info)
  })
})
