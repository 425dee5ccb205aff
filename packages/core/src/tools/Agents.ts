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
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { text } from "../internal/resource.ts"
import * as Receipt from "../Receipt.ts"
import * as Roles from "../Roles.ts"
import { agentResultForModel, type AgentView, type InputResult, SubAgentManager } from "../SubAgentManager.ts"
import { currentRunId } from "../SubAgentRecord.ts"
import * as ToolRegistry from "../ToolRegistry.ts"

const optionalString = (description: string) => Schema.optionalKey(Schema.String.annotate({ description }))
const optionalBoolean = (description: string) => Schema.optionalKey(Schema.Boolean.annotate({ description }))
const optionalInt = (description: string) =>
  Schema.optionalKey(Schema.Int.pipe(Schema.check(Schema.isGreaterThanOrEqualTo(0))).annotate({ description }))

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

/** The first of `keys` present in `params`, or a failure saying what is required. */
const pick = (tool: string, params: Readonly<Record<string, unknown>>, keys: ReadonlyArray<string>) => {
  for (const key of keys) {
    const value = params[key]
    if (typeof value === "string" && value !== "") return Effect.succeed(value)
  }
  return Effect.fail(
    new ToolRegistry.ToolFailure({
      tool,
      reason: `"${keys[0]}" is required${keys.length > 1 ? ` (also accepted as ${keys.slice(1).join(", ")})` : ""}`
    })
  )
}

const pickOptional = (params: Readonly<Record<string, unknown>>, keys: ReadonlyArray<string>): string | undefined => {
  for (const key of keys) {
    const value = params[key]
    if (typeof value === "string" && value !== "") return value
  }
  return undefined
}

export const spawned = (agent: AgentView) => ({
  agent_id: agent.agent_id,
  session_name: Receipt.sessionName(agent),
  run_id: currentRunId(agent),
  status: agent.status,
  role: agent.role,
  model: agent.model,
  description: agent.description,
  detached: agent.detached
})

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
  verifies: optionalString(
    "An agent (id or session name) whose current run this agent checks: its result is attached to that agent's record as verification"
  )
})

const spawnHandler = (name: string) =>
  Effect.fn(`tool.${name}`)(function*(params: typeof SpawnParameters.Type, context: ToolRegistry.ToolCallContext) {
    const manager = yield* SubAgentManager
    const prompt = yield* pick(name, params, ["prompt", "message", "input", "objective"])
    const agent = yield* manager.spawn(context.sessionId, {
      prompt,
      description: params.description,
      role: pickOptional(params, ["subagent_type", "type", "agent_type"]),
      model: params.model,
      detached: params.detached,
      forkContext: params.fork_context ?? params.inherit_context,
      allowedTools: params.allowed_tools,
      verifies: params.verifies
    })
    return spawned(agent)
  })

export const spawn = ToolRegistry.define({
  name: "agent_spawn",
  description: text("./agent_spawn.md", import.meta.url),
  parameters: SpawnParameters,
  posture: "spawn",
  handler: spawnHandler("agent_spawn")
})

export const open = ToolRegistry.define({
  name: "agent_open",
  description:
    "The newer name of agent_spawn: start a background sub-agent and return its id and a short session name at once (every agent tool accepts either).",
  parameters: SpawnParameters,
  posture: "spawn",
  handler: spawnHandler("agent_open")
})

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
  handler: Effect.fn("tool.agent_wait")(function*(params, context) {
    const manager = yield* SubAgentManager
    const single = pickOptional(params, ["agent_id", "id"])
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
      completed: result.completed.map(agentResultForModel),
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
  handler: Effect.fn("tool.agent_result")(function*(params, context) {
    const manager = yield* SubAgentManager
    const id = yield* pick("agent_result", params, ["agent_id", "id"])
    const agent = yield* manager.result(id, {
      block: params.block ?? false,
      timeoutMs: params.timeout_ms,
      caller: context.sessionId
    })
    yield* manager.markRead(context.sessionId, [agent.agent_id])
    return agentResultForModel(agent)
  })
})

const CancelParameters = Schema.Struct({ ...idFields, reason: optionalString("Why (recorded)") })

const cancelHandler = (name: string) =>
  Effect.fn(`tool.${name}`)(function*(params: typeof CancelParameters.Type) {
    const manager = yield* SubAgentManager
    const id = yield* pick(name, params, ["agent_id", "id"])
    return agentResultForModel(yield* manager.cancel(id, params.reason ?? `Cancelled by its parent (${name})`))
  })

export const cancel = ToolRegistry.define({
  name: "agent_cancel",
  description: "Cancel a running sub-agent and everything it started (detached agents excepted).",
  parameters: CancelParameters,
  posture: "spawn",
  handler: cancelHandler("agent_cancel")
})

export const close = ToolRegistry.define({
  name: "agent_close",
  description: "The newer name of agent_cancel.",
  parameters: CancelParameters,
  posture: "spawn",
  handler: cancelHandler("agent_close")
})

export const list = ToolRegistry.define({
  name: "agent_list",
  description:
    "List sub-agents of this run (and any still running). With include_archived: true, also those of earlier runs, flagged from_prior_session.",
  parameters: Schema.Struct({ include_archived: optionalBoolean("Include finished agents of earlier runs") }),
  posture: "spawn",
  handler: Effect.fn("tool.agent_list")(function*(params) {
    const manager = yield* SubAgentManager
    const agents = yield* manager.list({ includeArchived: params.include_archived ?? false })
    return agents.map((agent) => ({
      agent_id: agent.agent_id,
      session_name: Receipt.sessionName(agent),
      parent_id: agent.parent_id,
      description: agent.description,
      role: agent.role,
      status: agent.status,
      ...(agent.reason === undefined ? {} : { reason: agent.reason }),
      steps: agent.steps,
      tool_calls: agent.tool_calls,
      ...(agent.from_prior_session ? { from_prior_session: true } : {})
    }))
  })
})

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
  handler: Effect.fn("tool.agent_send_input")(function*(params) {
    const manager = yield* SubAgentManager
    const id = yield* pick("agent_send_input", params, ["agent_id", "id"])
    const message = yield* pick("agent_send_input", params, ["message", "input"])
    const outcome = yield* manager.sendInput(id, message, params.interrupt ?? false, "agent_send_input")
    return { delivered: outcome.delivered, reason: outcome.reason, agent: agentResultForModel(outcome.agent) }
  })
})

export const EvalParameters = Schema.Struct({
  ...idFields,
  ...messageFields("A message to deliver first (optional)"),
  interrupt: optionalBoolean("With message: cancel the agent's current model step and deliver now"),
  block: optionalBoolean("Wait until the agent has finished (default false: return at once)"),
  timeout_ms: optionalInt("With block: give up waiting after this long")
})

/**
 * What `agent_eval` returns: the result, the delivery of its message (if any), the receipt
 * fields at the top level, and the whole receipt as `worker_record`.
 */
export const evaluation = (agent: AgentView, worker: Receipt.WorkerRecord, delivery: InputResult | undefined) => {
  const { sections, duration_ms, ...result } = agentResultForModel(agent)
  return {
    ...(delivery === undefined ? {} : {
      delivered: delivery.delivered,
      ...(delivery.reason === undefined ? {} : { delivery_reason: delivery.reason }),
      ...(delivery.input === undefined ? {} : { delivery: delivery.input })
    }),
    ...result,
    ...(sections === undefined ? {} : { sections }),
    ...(duration_ms === undefined ? {} : { duration_ms }),
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
  }
}

/** agent_eval over the manager in context: deliver (optional), then the state (or wait), then the receipt. */
export const runEval = Effect.fnUntraced(function*(
  params: typeof EvalParameters.Type,
  id: string,
  message: string | undefined
) {
  const manager = yield* SubAgentManager
  const delivery = message === undefined
    ? undefined
    : yield* manager.sendInput(id, message, params.interrupt ?? false, "agent_eval")
  const agent = yield* manager.result(id, { block: params.block ?? false, timeoutMs: params.timeout_ms })
  return evaluation(agent, yield* manager.workerRecord(agent), delivery)
})

export const evaluate = ToolRegistry.define({
  name: "agent_eval",
  description: text("./agent_eval.md", import.meta.url),
  parameters: EvalParameters,
  posture: "spawn",
  handler: Effect.fn("tool.agent_eval")(function*(params) {
    const id = yield* pick("agent_eval", params, ["agent_id", "id"])
    return yield* runEval(params, id, pickOptional(params, ["message", "input"]))
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
  handler: Effect.fn("tool.handle_read")(function*(params) {
    const manager = yield* SubAgentManager
    const handle = yield* pick("handle_read", params, ["handle", "agent_id", "id"])
    return yield* manager.readTranscript(handle, { offset: params.offset, limit: params.limit })
  })
})

export const resume = ToolRegistry.define({
  name: "agent_resume",
  description:
    "Continue a finished (interrupted, cancelled, failed or completed) sub-agent from its transcript, optionally with a new message. Runs in the background like agent_spawn.",
  parameters: Schema.Struct({ ...idFields, ...messageFields("What to do next (default: continue)") }),
  posture: "spawn",
  handler: Effect.fn("tool.agent_resume")(function*(params, context) {
    const manager = yield* SubAgentManager
    const id = yield* pick("agent_resume", params, ["agent_id", "id"])
    return spawned(yield* manager.resume(context.sessionId, id, pickOptional(params, ["message", "input"])))
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
  handler: Effect.fn("tool.agent_assign")(function*(params) {
    const manager = yield* SubAgentManager
    const id = yield* pick("agent_assign", params, ["agent_id", "id"])
    const outcome = yield* manager.assign(id, {
      objective: params.objective,
      role: pickOptional(params, ["role", "subagent_type", "type", "agent_type"]),
      message: pickOptional(params, ["message", "input"])
    })
    return { delivered: outcome.delivered, reason: outcome.reason, agent: agentResultForModel(outcome.agent) }
  })
})

/**
 * The agent_* tools and handle_read (what `layer` registers): the definitions cluster mode runs
 * over its own SubAgentManager.
 */
export const definitions = [
  spawn,
  open,
  wait,
  result,
  cancel,
  close,
  list,
  sendInput,
  evaluate,
  resume,
  assign,
  handleRead
] as const

export const names = [
  "agent_spawn",
  "agent_open",
  "agent_wait",
  "agent_result",
  "agent_cancel",
  "agent_close",
  "agent_list",
  "agent_send_input",
  "agent_eval",
  "agent_resume",
  "agent_assign",
  "handle_read"
] as const

/** Registers the agent_* tools; they need the SubAgentManager. */
export const layer: Layer.Layer<never, ToolRegistry.DuplicateTool, ToolRegistry.ToolRegistry | SubAgentManager> = Layer
  .effectDiscard(
    ToolRegistry.ToolRegistry.use((registry) =>
      Effect.all([
        registry.register(spawn),
        registry.register(open),
        registry.register(wait),
        registry.register(result),
        registry.register(cancel),
        registry.register(close),
        registry.register(list),
        registry.register(sendInput),
        registry.register(evaluate),
        registry.register(resume),
        registry.register(assign),
        registry.register(handleRead)
      ], { discard: true })
    )
  )
