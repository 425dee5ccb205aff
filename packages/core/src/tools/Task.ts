/**
 * The `task` tool: delegate to a sub-agent in the foreground.
 *
 * Creates a child session (role posture, `task` and `todowrite` denied, spawning denied
 * below max_depth), runs `Session.prompt` on it in the calling fiber — so interrupting the
 * parent interrupts the child — and returns only the parsed result. The child's transcript
 * never enters the parent's history. A child that fails (step budget, model errors) is a
 * `failed` result the parent's model can act on, not a failure of the parent.
 */
import { Clock, Effect, Layer, Schema } from "effect"
import { text } from "../internal/resource.ts"
import * as OutputContract from "../OutputContract.ts"
import * as Roles from "../Roles.ts"
import { Session } from "../Session.ts"
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
  readonly status: "completed" | "failed"
  readonly summary: string
  readonly sections: OutputContract.Sections
  readonly contract_violations: ReadonlyArray<string>
  readonly tool_calls: number
  readonly steps: number
  readonly tokens: { readonly input: number; readonly output: number; readonly cached: number }
  readonly duration_ms: number
  readonly model: string
}

const emptySections: OutputContract.Sections = { summary: "", changes: "", evidence: "", risks: "", blockers: "" }

export const definition = ToolRegistry.define({
  name: "task",
  description: text("./task.md", import.meta.url),
  parameters: TaskParameters,
  posture: "spawn",
  handler: Effect.fn("tool.task")(function*(params, context) {
    const session = yield* Session
    const role = yield* Roles.forRequest(params.subagent_type ?? "general", params.allowed_tools)
    const child = yield* session.createChild(context.sessionId, {
      role,
      description: params.description,
      allowedTools: params.allowed_tools
    })
    const started = yield* Clock.currentTimeMillis
    const outcome = yield* Effect.result(session.prompt(child.id, params.prompt))
    const finished = yield* Clock.currentTimeMillis
    const after = yield* session.info(child.id)
    const common = {
      agent_id: child.id,
      description: params.description,
      tool_calls: after.toolCalls,
      steps: after.steps,
      tokens: after.treeUsage,
      duration_ms: finished - started,
      model: child.model
    }
    if (outcome._tag === "Failure") {
      return {
        ...common,
        status: "failed",
        summary: outcome.failure.message,
        sections: emptySections,
        contract_violations: []
      } satisfies TaskResult
    }
    const parsed = OutputContract.parse(outcome.success.text)
    return {
      ...common,
      status: "completed",
      summary: OutputContract.summaryOf(parsed, outcome.success.text),
      sections: parsed.sections,
      contract_violations: parsed.violations.map((violation) => violation.message)
    } satisfies TaskResult
  })
})

/** Registers `task`; needs the Session it delegates through. */
export const layer: Layer.Layer<never, ToolRegistry.DuplicateTool, ToolRegistry.ToolRegistry | Session> = Layer
  .effectDiscard(ToolRegistry.ToolRegistry.use((registry) => registry.register(definition)))
