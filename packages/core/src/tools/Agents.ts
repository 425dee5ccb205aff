/**
 * The background sub-agent tools (DeepSeek TUI style): `agent_spawn` returns an id at once;
 * the parent goes on and later uses `agent_wait`, `agent_result`, `agent_cancel`,
 * `agent_list`, `agent_send_input`, `agent_resume` and `agent_assign`. `agent_open`,
 * `agent_eval` and `agent_close` are accepted as the newer names of spawn, result+input and
 * cancel; `agent_eval` returns the agent's run receipt (Receipt.ts), and `handle_read` reads
 * a transcript by its handle, a page at a time. Every tool takes an agent's session name in
 * place of its id. Common parameter spellings are accepted (`id`/`agent_id`,
 * `message`/`input`, `type`/`agent_type`/`subagent_type`, `fork_context`/`inherit_context`),
 * because models trained on other harnesses use them.
 *
 * These are the only definitions of the sub-agent tools (with `task`, tools/Task.ts), written
 * against the `SubAgentManager` contract: Fibril's loop registers them, `TaskToolkit` serves
 * them as an `effect/ai` Toolkit and through MCP, and the cluster's workflow runs them with
 * its own implementation of the contract. `definitions` is the one list of them.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as AgentResult from "../AgentResult.ts"
import { text } from "../internal/resource.ts"
import { InvalidArguments } from "../loop/ToolStep.ts"
import * as OutputSchema from "../OutputSchema.ts"
import * as Roles from "../Roles.ts"
import { type SpawnRequest, SubAgentManager } from "../SubAgentManager.ts"
import * as ToolRegistry from "../ToolRegistry.ts"
import * as TranscriptView from "../TranscriptView.ts"
import * as Merge from "./Merge.ts"
import * as Task from "./Task.ts"

const optionalString = (description: string) => Schema.optionalKey(Schema.String.annotate({ description }))
const optionalBoolean = (description: string) => Schema.optionalKey(Schema.Boolean.annotate({ description }))
const optionalInt = (description: string) =>
  Schema.optionalKey(Schema.Int.pipe(Schema.check(Schema.isGreaterThanOrEqualTo(0))).annotate({ description }))

// ---------------------------------------------------------------------------
// Parameters and their accepted spellings
// ---------------------------------------------------------------------------

const idFields = {
  agent_id: optionalString("The sub-agent's id or session name (from agent_spawn or agent_list)"),
  id: optionalString("Alias of agent_id")
}
const messageFields = (what: string) => ({
  message: optionalString(what),
  input: optionalString("Alias of message")
})
const typeFields = {
  subagent_type: optionalString(`The role (default general): ${Roles.acceptedNames}`),
  type: optionalString("Alias of subagent_type"),
  agent_type: optionalString("Alias of subagent_type")
}

const idKeys = ["agent_id", "id"]
const messageKeys = ["message", "input"]
const promptKeys = ["prompt", "message", "input", "objective"]
const roleKeys = ["subagent_type", "type", "agent_type"]

/** The first non-empty string among `keys` (the accepted spellings of one parameter). */
const optional = (params: object, keys: ReadonlyArray<string>): string | undefined => {
  for (const key of keys) {
    const value = (params as Record<string, unknown>)[key]
    if (typeof value === "string" && value !== "") return value
  }
  return undefined
}

/** The first of `keys` present, or a refusal saying what is required and what is accepted. */
const required = (tool: string, params: object, keys: ReadonlyArray<string>) => {
  const value = optional(params, keys)
  return value !== undefined ? Effect.succeed(value) : Effect.fail(
    new InvalidArguments({
      tool,
      reason: `"${keys[0]}" is required${keys.length > 1 ? ` (also accepted as ${keys.slice(1).join(", ")})` : ""}`
    })
  )
}

/** Who cancelled, in the reason an agent's record keeps. */
const cancelledBy = (tool: string, context: ToolRegistry.ToolCallContext) =>
  context.sessionId === undefined ? `Cancelled by request (${tool})` : `Cancelled by its parent (${tool})`

const startsAgents = { readOnly: false, destructive: true, idempotent: false, openWorld: true } as const
const reads = { readOnly: true, destructive: false, idempotent: true, openWorld: false } as const
const cancels = { readOnly: false, destructive: true, idempotent: true, openWorld: false } as const
const sends = { readOnly: false, destructive: false, idempotent: false, openWorld: false } as const
const needsId = ["agent_id"]

// ---------------------------------------------------------------------------
// agent_spawn / agent_open
// ---------------------------------------------------------------------------

export const SpawnParameters = Schema.Struct({
  prompt: optionalString("The full, self-contained task for the sub-agent"),
  ...messageFields("Alias of prompt"),
  objective: optionalString("Alias of prompt"),
  description: optionalString("A 3-8 word label for the agent"),
  ...typeFields,
  model: optionalString("A model id for this agent (default: per role from configuration)"),
  detached: optionalBoolean("Keep running after this agent finishes or is cancelled (default false)"),
  fork_context: optionalBoolean("Start from a copy of this conversation (default false: the prompt only)"),
  inherit_context: optionalBoolean("Alias of fork_context"),
  allowed_tools: Schema.optionalKey(
    Schema.Array(Schema.String).annotate({ description: "For custom agents: the tools they may use" })
  ),
  ask_tools: Schema.optionalKey(
    Schema.Array(Schema.String).annotate({
      description:
        "Tool names or postures (read, write, shell, spawn, plan, memory) whose calls wait for a person's approval in this agent and its sub-agents"
    })
  ),
  mcp_servers: Schema.optionalKey(Task.McpServersParameter),
  verifies: optionalString(
    "An agent (id or session name) whose current run this agent checks: its result is attached to that agent's record as verification"
  ),
  output_schema: Schema.optionalKey(OutputSchema.Parameter),
  isolation: Schema.optionalKey(Task.IsolationParameter)
})

/** The spawn request an `agent_spawn` call makes. */
export const spawnRequest = (tool: string, params: typeof SpawnParameters.Type) =>
  Effect.map(required(tool, params, promptKeys), (prompt): SpawnRequest => ({
    prompt,
    description: params.description,
    role: optional(params, roleKeys),
    model: params.model,
    detached: params.detached,
    forkContext: params.fork_context ?? params.inherit_context,
    allowedTools: params.allowed_tools,
    ...(params.ask_tools === undefined ? {} : { askTools: params.ask_tools }),
    ...(params.mcp_servers === undefined ? {} : { mcpServers: params.mcp_servers }),
    verifies: params.verifies,
    ...(params.output_schema === undefined ? {} : { outputSchema: params.output_schema }),
    isolation: params.isolation
  }))

const spawnHandler = (name: string) =>
  Effect.fn(`tool.${name}`)(function*(params: typeof SpawnParameters.Type, context: ToolRegistry.ToolCallContext) {
    const manager = yield* SubAgentManager
    const agent = yield* manager.spawn(context.sessionId, yield* spawnRequest(name, params))
    return AgentResult.spawned(agent)
  })

export const spawn = ToolRegistry.define({
  name: "agent_spawn",
  description: text("./agent_spawn.md", import.meta.url),
  parameters: SpawnParameters,
  posture: "spawn",
  served: { title: "Start a background sub-agent", success: AgentResult.Spawned, ...startsAgents },
  handler: spawnHandler("agent_spawn")
})

export const open = ToolRegistry.define({
  name: "agent_open",
  description:
    "The newer name of agent_spawn: start a background sub-agent and return its id and a short session name at once (every agent tool accepts either).",
  parameters: SpawnParameters,
  posture: "spawn",
  served: {
    title: "Start a background sub-agent (newer name of agent_spawn)",
    success: AgentResult.Spawned,
    ...startsAgents
  },
  handler: spawnHandler("agent_open")
})

// ---------------------------------------------------------------------------
// agent_wait / agent_result
// ---------------------------------------------------------------------------

export const WaitParameters = Schema.Struct({
  ids: Schema.optionalKey(Schema.Array(Schema.String).annotate({ description: "The agents to wait for" })),
  ...idFields,
  wait_mode: Schema.optionalKey(
    Schema.Literals(["any", "all"]).annotate({
      description: "any: return when one finishes (default); all: when all have"
    })
  ),
  timeout_ms: optionalInt("Return after this long even if they are still running (default: wait)")
})

export const wait = ToolRegistry.define({
  name: "agent_wait",
  description:
    "Wait for background sub-agents to finish. Returns the finished ones (with their results) and the ids still running; with no ids, waits for the agents you spawned whose results you have not received yet (each result is handed over once).",
  parameters: WaitParameters,
  posture: "spawn",
  served: { title: "Wait for background sub-agents", success: AgentResult.WaitResult, ...reads },
  handler: Effect.fn("tool.agent_wait")(function*(params, context) {
    const manager = yield* SubAgentManager
    const single = optional(params, idKeys)
    const ids = params.ids ?? (single === undefined ? undefined : [single])
    // Without ids: the caller's children still running, and those that finished before it
    // asked but whose results it has not been handed yet.
    const targets = ids ?? (yield* manager.unreadChildren(context.sessionId))
    const result = yield* manager.wait(targets, {
      mode: params.wait_mode ?? "any",
      timeoutMs: params.timeout_ms,
      caller: context.sessionId
    })
    yield* manager.markRead(context.sessionId, result.completed.map((agent) => agent.agent_id))
    return {
      timed_out: result.timed_out,
      completed: result.completed.map(AgentResult.of),
      still_running: result.pending
    }
  })
})

const ResultParameters = Schema.Struct({
  ...idFields,
  block: optionalBoolean("Wait until the agent has finished (default false: return its current state)"),
  timeout_ms: optionalInt("With block: give up waiting after this long")
})

export const result = ToolRegistry.define({
  name: "agent_result",
  description:
    "The state or result of a sub-agent: status, summary, the five sections, usage. With block: true, waits for it to finish first.",
  parameters: ResultParameters,
  posture: "spawn",
  served: { title: "A sub-agent's state or result", success: AgentResult.AgentResult, required: needsId, ...reads },
  handler: Effect.fn("tool.agent_result")(function*(params, context) {
    const manager = yield* SubAgentManager
    const id = yield* required("agent_result", params, idKeys)
    const agent = yield* manager.result(id, {
      block: params.block ?? false,
      timeoutMs: params.timeout_ms,
      caller: context.sessionId
    })
    yield* manager.markRead(context.sessionId, [agent.agent_id])
    return AgentResult.of(agent)
  })
})

// ---------------------------------------------------------------------------
// agent_cancel / agent_close
// ---------------------------------------------------------------------------

const CancelParameters = Schema.Struct({ ...idFields, reason: optionalString("Why (recorded)") })

const cancelHandler = (name: string) =>
  Effect.fn(`tool.${name}`)(function*(params: typeof CancelParameters.Type, context: ToolRegistry.ToolCallContext) {
    const manager = yield* SubAgentManager
    const id = yield* required(name, params, idKeys)
    return AgentResult.of(yield* manager.cancel(id, params.reason ?? cancelledBy(name, context)))
  })

export const cancel = ToolRegistry.define({
  name: "agent_cancel",
  description: "Cancel a running sub-agent and everything it started (detached agents excepted).",
  parameters: CancelParameters,
  posture: "spawn",
  served: {
    title: "Cancel a sub-agent and its descendants",
    success: AgentResult.AgentResult,
    required: needsId,
    ...cancels
  },
  handler: cancelHandler("agent_cancel")
})

export const close = ToolRegistry.define({
  name: "agent_close",
  description: "The newer name of agent_cancel.",
  parameters: CancelParameters,
  posture: "spawn",
  served: {
    title: "Cancel a sub-agent (newer name of agent_cancel)",
    success: AgentResult.AgentResult,
    required: needsId,
    ...cancels
  },
  handler: cancelHandler("agent_close")
})

// ---------------------------------------------------------------------------
// agent_list
// ---------------------------------------------------------------------------

export const list = ToolRegistry.define({
  name: "agent_list",
  description:
    "List sub-agents of this run (and any still running). With include_archived: true, also those of earlier runs, flagged from_prior_session.",
  parameters: Schema.Struct({ include_archived: optionalBoolean("Include finished agents of earlier runs") }),
  posture: "spawn",
  served: { title: "List sub-agents", success: AgentResult.ListResult, ...reads },
  handler: Effect.fn("tool.agent_list")(function*(params) {
    const manager = yield* SubAgentManager
    const agents = yield* manager.list({ includeArchived: params.include_archived ?? false })
    return { agents: agents.map(AgentResult.summary) }
  })
})

// ---------------------------------------------------------------------------
// agent_send_input / agent_eval / agent_assign: messages to an agent
// ---------------------------------------------------------------------------

const InputParameters = Schema.Struct({
  ...idFields,
  ...messageFields("The message to deliver"),
  interrupt: optionalBoolean("Cancel the agent's current model step and deliver now (default: before its next step)")
})

export const sendInput = ToolRegistry.define({
  name: "agent_send_input",
  description:
    "Send a message to a running sub-agent; it is delivered before its next model step (interrupt: true delivers now). To a finished agent it returns delivered: false with the reason.",
  parameters: InputParameters,
  posture: "spawn",
  served: {
    title: "Send a message to a running sub-agent",
    success: AgentResult.InputResult,
    required: needsId,
    ...sends
  },
  handler: Effect.fn("tool.agent_send_input")(function*(params) {
    const manager = yield* SubAgentManager
    const id = yield* required("agent_send_input", params, idKeys)
    const message = yield* required("agent_send_input", params, messageKeys)
    return AgentResult.delivery(
      yield* manager.sendInput(id, message, params.interrupt ?? false, "agent_send_input")
    )
  })
})

export const EvalParameters = Schema.Struct({
  ...idFields,
  ...messageFields("A message to deliver first (optional)"),
  interrupt: optionalBoolean("With message: cancel the agent's current model step and deliver now"),
  block: optionalBoolean("Wait until the agent has finished (default false: return at once)"),
  timeout_ms: optionalInt("With block: give up waiting after this long")
})

export const evaluate = ToolRegistry.define({
  name: "agent_eval",
  description: text("./agent_eval.md", import.meta.url),
  parameters: EvalParameters,
  posture: "spawn",
  served: {
    title: "A sub-agent's state and run receipt (optionally deliver a message first)",
    success: AgentResult.EvalResult,
    required: needsId,
    ...sends
  },
  // Deliver (optional), then the state (or wait), then the receipt.
  handler: Effect.fn("tool.agent_eval")(function*(params) {
    const manager = yield* SubAgentManager
    const id = yield* required("agent_eval", params, idKeys)
    const message = optional(params, messageKeys)
    const sent = message === undefined
      ? undefined
      : yield* manager.sendInput(id, message, params.interrupt ?? false, "agent_eval")
    const agent = yield* manager.result(id, { block: params.block ?? false, timeoutMs: params.timeout_ms })
    return AgentResult.evaluation(agent, yield* manager.workerRecord(agent), sent)
  })
})

export const assign = ToolRegistry.define({
  name: "agent_assign",
  description:
    "Update a sub-agent's objective and/or role and deliver a note about it (delivered before its next step). A new role only narrows what the agent may do, from its next tool call on; a role that would grant more (e.g. review to general) is refused and nothing changes.",
  parameters: Schema.Struct({
    ...idFields,
    objective: optionalString("The new objective"),
    role: optionalString("The new role"),
    ...typeFields,
    ...messageFields("A note to deliver with the update")
  }),
  posture: "spawn",
  served: {
    title: "Change a sub-agent's objective or narrow its role",
    success: AgentResult.InputResult,
    required: needsId,
    ...sends
  },
  handler: Effect.fn("tool.agent_assign")(function*(params) {
    const manager = yield* SubAgentManager
    const id = yield* required("agent_assign", params, idKeys)
    return AgentResult.delivery(
      yield* manager.assign(id, {
        objective: params.objective,
        role: optional(params, ["role", ...roleKeys]),
        message: optional(params, messageKeys)
      })
    )
  })
})

// ---------------------------------------------------------------------------
// agent_resume / handle_read
// ---------------------------------------------------------------------------

export const resume = ToolRegistry.define({
  name: "agent_resume",
  description:
    "Continue a finished (interrupted, cancelled, failed or completed) sub-agent from its transcript, optionally with a new message. Runs in the background like agent_spawn.",
  parameters: Schema.Struct({ ...idFields, ...messageFields("What to do next (default: continue)") }),
  posture: "spawn",
  served: { title: "Continue a finished sub-agent", success: AgentResult.Spawned, required: needsId, ...startsAgents },
  handler: Effect.fn("tool.agent_resume")(function*(params, context) {
    const manager = yield* SubAgentManager
    const id = yield* required("agent_resume", params, idKeys)
    return AgentResult.spawned(yield* manager.resume(context.sessionId, id, optional(params, messageKeys)))
  })
})

export const HandleReadParameters = Schema.Struct({
  handle: optionalString(
    "A transcript handle (transcript_handle from agent_eval, agent_result or task), or an agent id or session name"
  ),
  ...idFields,
  offset: optionalInt("The first message to read (0 = the system prompt; default 0)"),
  limit: optionalInt("How many messages (default 20, at most 100)")
})

export const handleRead = ToolRegistry.define({
  name: "handle_read",
  description: text("./handle_read.md", import.meta.url),
  parameters: HandleReadParameters,
  posture: "read",
  served: { title: "Read a sub-agent's transcript by handle, paged", success: TranscriptView.Page, ...reads },
  handler: Effect.fn("tool.handle_read")(function*(params) {
    const manager = yield* SubAgentManager
    const handle = yield* required("handle_read", params, ["handle", ...idKeys])
    return yield* manager.readTranscript(handle, { offset: params.offset, limit: params.limit })
  })
})

// ---------------------------------------------------------------------------
// The one list
// ---------------------------------------------------------------------------

/** Every sub-agent tool, `task` first: what a loop, a Toolkit and an MCP server offer. */
export const definitions = [
  Task.definition,
  spawn,
  open,
  wait,
  result,
  cancel,
  close,
  list,
  sendInput,
  evaluate,
  assign,
  resume,
  handleRead,
  Merge.definition
] as const

/** The names of the sub-agent tools (`task` included). */
export const names: ReadonlyArray<string> = definitions.map((definition) => definition.name)

/** The background tools: every sub-agent tool but `task` (which Fibril registers on its own). */
export const background = definitions.slice(1)

/** Registers the agent_* tools; they need the SubAgentManager. */
export const layer: Layer.Layer<never, ToolRegistry.DuplicateTool, ToolRegistry.ToolRegistry | SubAgentManager> = Layer
  .effectDiscard(
    ToolRegistry.ToolRegistry.use((registry) =>
      Effect.forEach(
        background,
        (definition) =>
          registry.register(definition as ToolRegistry.ToolDefinition<ToolRegistry.Parameters, SubAgentManager>),
        { discard: true }
      )
    )
  )
