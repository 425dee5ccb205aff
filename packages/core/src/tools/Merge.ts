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
import { Embedded, SubAgentManager } from "../SubAgentManager.ts"
import * as ToolRegistry from "../ToolRegistry.ts"
import { Workspace } from "../Workspace.ts"
import * as Worktrees from "../Worktrees.ts"

/** Kept here too: `agent_merge`'s refusals are Worktrees'. */
export const NotMergeable = Worktrees.NotMergeable

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
  handler: Effect.fn("tool.agent_merge")(function*(params, context) {
    const id = params.agent_id ?? params.id
    if (id === undefined || id.length === 0) {
      return yield* new Worktrees.NotMergeable({
        agentId: "",
        reason: "agent_id is required (the id from task or agent_spawn)"
      })
    }
    // Worktrees are the embedded engine's alone (the cluster refuses them at spawn).
    const embedded = yield* Effect.serviceOption(Embedded)
    const workspace = yield* Effect.serviceOption(Workspace)
    if (Option.isNone(embedded) || Option.isNone(workspace)) {
      return yield* new IsolationUnavailable({
        mode: "worktree",
        reason: "this runtime has no workspace with worktrees, so there is nothing to merge",
        accepted: []
      })
    }
    const manager = yield* SubAgentManager
    return yield* embedded.value.mergeWorktree({
      callerId: context.sessionId,
      agentId: yield* manager.resolve(id),
      into: workspace.value.root,
      action: params.action ?? "merge"
    })
  })
})
