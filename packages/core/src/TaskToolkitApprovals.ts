/**
 * TaskToolkitApprovals — the `effect/ai` Toolkit path's share of `ask` (Permission rule 5).
 *
 * An embedder that runs Fibril's sub-agent tools through its own `LanguageModel.generateText`
 * loop sees a call whose rules ask as a standard `tool-approval-request` part: each tool's
 * `needsApproval` is set when the root rules (`[permissions] ask`) ask for its name or its
 * posture (`spawn` for `task`/`agent_spawn`). The embedder's loop then answers it with a
 * `tool-approval-response`, and effect runs (or refuses) the call.
 *
 * The limit, by effect's design: `needsApproval` is decided before a tool's handler runs. A
 * question raised later, inside the tree a running `task` started (a grandchild's `shell`),
 * cannot become an approval request of the embedder's loop, whose call is already running; it
 * goes to the `Approvals` service in context (docs/embedding.md).
 */
import * as Tool from "effect/ai/Tool"
import * as Toolkit from "effect/ai/Toolkit"
import * as Effect from "effect/Effect"
import * as Permission from "./Permission.ts"
import * as TaskToolkit from "./TaskToolkit.ts"
import * as AgentTools from "./tools/Agents.ts"

/** The names of the sub-agent tools whose calls `rules` ask for (by name or posture). */
export const askingTools = (rules: Permission.Rules): ReadonlyArray<string> =>
  AgentTools.definitions
    .filter((definition) => Permission.askedBy(rules, definition.name, definition.posture) !== undefined)
    .map((definition) => definition.name)

/**
 * `TaskToolkit.toolkit` with `needsApproval` on each tool whose calls `rules` ask for. The tool
 * names are the same, so `TaskToolkit.layer`'s handlers serve it.
 */
export const asking = (rules: Permission.Rules): typeof TaskToolkit.toolkit => {
  const asked = new Set(askingTools(rules))
  if (asked.size === 0) return TaskToolkit.toolkit
  const tools = Object.values(TaskToolkit.toolkit.tools as Record<string, Tool.Any>).map((tool) =>
    asked.has(tool.name) ? tool.setNeedsApproval(true) : tool
  )
  return Toolkit.make(...tools) as unknown as typeof TaskToolkit.toolkit
}

/** `asking` over the root rules of the `Permission` in context (`[permissions] ask`). */
export const askingToolkit = Effect.map(Effect.service(Permission.Permission), (permission) => asking(permission.root))
