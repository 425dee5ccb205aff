/**
 * The `task` tool: delegate to a sub-agent in the foreground.
 *
 * Goes through the SubAgentManager (the cap, the record, events): a child session with the
 * role's posture, `task` and `todowrite` denied and spawning denied below max_depth, run in
 * a fiber of the calling tool call — so interrupting the parent interrupts the child — and
 * only the parsed result returned. The child's transcript never enters the parent's history.
 * A child that fails (step budget, model errors) is a `failed` result the parent's model can
 * act on, not a failure of the parent; a cap or an unknown role is a tool error.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { text } from "../internal/resource.ts"
import { spanned } from "../internal/span.ts"
import * as Roles from "../Roles.ts"
import { type AgentView, type SpawnError, SubAgentManager } from "../SubAgentManager.ts"
import { type ResultSections, resultSections } from "../SubAgentRecord.ts"
import * as ToolRegistry from "../ToolRegistry.ts"

export const TaskParameters = Schema.Struct({
  description: Schema.String.annotate({ description: "A 3-8 word label for the task" }),
  prompt: Schema.String.annotate({ description: "The full, self-contained task for the sub-agent" }),
  subagent_type: Schema.optionalKey(
    Schema.String.annotate({ description: `The sub-agent role (default general): ${Roles.acceptedNames}` })
  ),
  allowed_tools: Schema.optionalKey(
    Schema.Array(Schema.String).annotate({ description: "For custom agents: the tool names they may use" })
  )
})

export interface TaskResult {
  readonly agent_id: string
  readonly description: string
  readonly status: "completed" | "failed" | "cancelled"
  readonly summary: string
  /** CHANGES, EVIDENCE, RISKS, BLOCKERS; SUMMARY is `summary`. */
  readonly sections: ResultSections
  readonly contract_violations: ReadonlyArray<string>
  readonly tool_calls: number
  readonly steps: number
  readonly tokens: { readonly input: number; readonly output: number; readonly cached: number }
  readonly duration_ms: number
  readonly model: string
  /** The child's transcript, for `handle_read` (it never enters the parent's context by itself). */
  readonly transcript_handle: string
}

const emptySections: ResultSections = { changes: "", evidence: "", risks: "", blockers: "" }

export const definition = ToolRegistry.define({
  name: "task",
  description: text("./task.md", import.meta.url),
  parameters: TaskParameters,
  posture: "spawn",
  // A span without `Effect.fn`'s per-call stack capture, and combinators rather than a
  // generator: this runs once per sub-agent. The manager is read from the fiber in the span's
  // own step.
  handler: (params, context) =>
    spanned("tool.task", (fiber) =>
      Effect.mapEager(
        Context.get(fiber.context as Context.Context<SubAgentManager>, SubAgentManager).run(context.sessionId, {
          prompt: params.prompt,
          description: params.description,
          role: params.subagent_type ?? "general",
          allowedTools: params.allowed_tools
        }),
        taskResult
      ) as Effect.Effect<TaskResult, SpawnError, SubAgentManager>)
})

/** The `task` result of a finished agent record. */
export const taskResult = (agent: AgentView): TaskResult => ({
  agent_id: agent.agent_id,
  description: agent.description,
  status: agent.status === "completed" ? "completed" : agent.status === "cancelled" ? "cancelled" : "failed",
  summary: agent.outcome?.summary ?? agent.reason ?? "",
  sections: agent.outcome === undefined ? emptySections : resultSections(agent.outcome.sections),
  contract_violations: agent.outcome?.contract_violations ?? [],
  tool_calls: agent.tool_calls,
  steps: agent.steps,
  tokens: agent.tokens,
  duration_ms: agent.started_at !== undefined && agent.finished_at !== undefined
    ? agent.finished_at - agent.started_at
    : 0,
  model: agent.model,
  transcript_handle: agent.transcript_handle
})

/** Registers `task`; needs the SubAgentManager it delegates through. */
export const layer: Layer.Layer<never, ToolRegistry.DuplicateTool, ToolRegistry.ToolRegistry | SubAgentManager> = Layer
  .effectDiscard(ToolRegistry.ToolRegistry.use((registry) => registry.register(definition)))
