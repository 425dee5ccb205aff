/**
 * McpTasks — `task` calls as MCP tasks: the Tasks extension (`io.modelcontextprotocol/tasks`,
 * SEP-2663) of the 2026-07-28 revision, served beside Effect's `McpServer`.
 *
 * Effect's server serves the revision itself (`server/discover`, per-request `_meta`) but knows
 * no extension: a handler must answer `tools/call` with a `CallToolResult`, and it has no
 * `tasks/*` methods. So the extension is served one layer below, on the request lines: the
 * stdin the server reads goes through `intercept`, which takes out
 *
 * - a `tools/call` of `task` whose arguments decode and whose request declares the extension in
 *   `_meta["io.modelcontextprotocol/clientCapabilities"].extensions`: the agent is spawned
 *   (its record is in the store before the answer goes out: "durably created") and the answer
 *   is a `CreateTaskResult` (`resultType: "task"`, the agent's id as `taskId`);
 * - `tasks/get`, `tasks/update`, `tasks/cancel`;
 *
 * and answers them here, on the server's stdout; every other line reaches the server as it
 * was (a `task` call from a client without the extension, or with arguments that do not
 * decode, gets the server's own answer). `tasks/get` reads the agent through the manager, so
 * a task outlives the MCP session: another `fibril mcp` on the same workspace answers it from
 * the store. Its `result`, once the agent has ended, is the `CallToolResult` the plain call
 * returns: the same view (`AgentResult.task`), encoded by the same schema, in the same content
 * shape as Effect's toolkit registration. One definition of the tool (TaskToolkit's) either way.
 *
 * Only `task` becomes a task: it is the call that waits for an agent. `agent_spawn` answers at
 * once with the agent's id already (it is a handle), so it stays a plain call.
 */
import * as AgentResult from "@fibril/core/AgentResult"
import type { AgentView } from "@fibril/core/AgentResult"
import type * as Approvals from "@fibril/core/Approvals"
import * as StoredQuestions from "@fibril/core/StoredQuestions"
import { SubAgentManager } from "@fibril/core/SubAgentManager"
import { SubAgentStore } from "@fibril/core/SubAgentStore"
import * as Task from "@fibril/core/tools/Task"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as Stdio from "effect/Stdio"
import * as Stream from "effect/Stream"
import * as JsonRpcLines from "./JsonRpcLines.ts"
import * as McpApprovals from "./McpApprovals.ts"

export const extension = "io.modelcontextprotocol/tasks"
const capabilitiesKey = "io.modelcontextprotocol/clientCapabilities"

/** JSON-RPC codes: unknown task (invalid params), and the extension missing from the request. */
export const INVALID_PARAMS = -32602
export const MISSING_CAPABILITY = -32021

/** How often a client is asked to poll, and how long a finished task stays readable (null: as long as its agent's record). */
export const pollIntervalMs = 1000
export const ttlMs: number | null = null

export const cancelReason = "Cancelled by the MCP client (tasks/cancel)"

type Id = string | number
type Request = { readonly id: Id; readonly method: string; readonly params: Record<string, unknown> }

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** Did this request declare the Tasks extension (in its own `_meta`, as the stateless revision sends it)? */
export const declares = (params: Record<string, unknown>): boolean => {
  const meta = params["_meta"]
  if (!isRecord(meta)) return false
  const capabilities = meta[capabilitiesKey]
  if (!isRecord(capabilities)) return false
  const extensions = capabilities["extensions"]
  return isRecord(extensions) && extensions[extension] !== undefined
}

const decodeTask = Schema.decodeUnknownOption(Task.TaskParameters)

/**
 * What this layer answers: a request (with an id) for `tasks/*`, or a `tools/call` of `task`
 * with arguments that decode from a client that declared the extension. Parsed only when the
 * line names one of these methods.
 */
export const claim = (
  line: string
): { readonly request: Request; readonly task?: typeof Task.TaskParameters.Type } | undefined => {
  if (!line.includes("\"tasks/") && !(line.includes("\"tools/call\"") && line.includes(extension))) return undefined
  let message: unknown
  try {
    message = JSON.parse(line)
  } catch {
    return undefined
  }
  if (!isRecord(message) || typeof message["method"] !== "string") return undefined
  const id = message["id"]
  if (typeof id !== "string" && typeof id !== "number") return undefined
  const params = isRecord(message["params"]) ? message["params"] : {}
  const request = { id, method: message["method"], params }
  if (request.method.startsWith("tasks/")) return { request }
  if (request.method !== "tools/call" || params["name"] !== Task.definition.name || !declares(params)) return undefined
  const task = decodeTask(params["arguments"] ?? {})
  return Option.isSome(task) ? { request, task: task.value } : undefined
}

const iso = (millis: number) => new Date(millis).toISOString()

/** The step it is on and its last tool call, for `statusMessage`. */
export const progressOf = (agent: AgentView): string => {
  const step = agent.steps === 0 ? "starting" : `step ${agent.steps}`
  const tool = agent.last_tool === undefined ? "" : `, last tool ${agent.last_tool}`
  return `${agent.role} "${agent.description}" ${agent.status}: ${step}${tool} (${agent.tool_calls} tool calls)`
}

const encodeTaskResult = Schema.encodeUnknownEffect(AgentResult.TaskResult)

/** The `CallToolResult` a plain `task` call returns for this ended agent (Effect's toolkit shape). */
export const callToolResult = (agent: AgentView) =>
  Effect.map(Effect.orDie(encodeTaskResult(AgentResult.task(agent))), (encoded) => ({
    isError: false,
    structuredContent: encoded,
    content: [{ type: "text", text: JSON.stringify(encoded) }]
  }))

const ended = (agent: AgentView) => agent.status !== "pending" && agent.status !== "running"

/**
 * The approval questions (`ask` rules, approvals before a fan-out) that wait in a task's agent
 * tree, and a way to answer one: the workspace store's (StoredQuestions), which every process
 * on the workspace shares. Absent (a cluster: its questions are not durable yet), a task is
 * never `input_required`.
 */
export interface Questions {
  readonly of: (taskId: string) => Effect.Effect<ReadonlyArray<Approvals.Question>>
  readonly answer: (id: string, answer: Approvals.Answer) => Effect.Effect<boolean>
}

export const storeQuestions = (store: SubAgentStore["Service"]): Questions => ({
  of: (taskId) =>
    Effect.map(
      StoredQuestions.pending.pipe(Effect.provideService(SubAgentStore, store)),
      (waiting) => waiting.map((entry) => entry.question).filter((question) => question.path.includes(taskId))
    ),
  answer: (id, answer) => StoredQuestions.answered(id, answer).pipe(Effect.provideService(SubAgentStore, store))
})

/** The form a person fills in (McpApprovals.Decision, the one plain calls elicit), as JSON Schema. */
const decisionForm = Schema.toJsonSchemaDocument(McpApprovals.Decision).schema
const decodeDecision = Schema.decodeUnknownOption(McpApprovals.Decision)

/** What a person is asked to decide, as an elicitation (MRTR `inputRequests`: a form). */
export const elicitationOf = (question: Approvals.Question) => ({
  method: "elicitation/create",
  params: { mode: "form", message: McpApprovals.messageOf(question), requestedSchema: decisionForm }
})

/** An elicitation's result as an answer: accepted with a decision, else (declined, cancelled) a denial. */
export const answerOf = (response: unknown): Approvals.Answer => {
  const by = "MCP client (tasks/update)"
  const accepted = isRecord(response) && response["action"] === "accept"
    ? decodeDecision(response["content"])
    : Option.none()
  if (Option.isSome(accepted)) return { ...accepted.value, by }
  const action = isRecord(response) && typeof response["action"] === "string" ? response["action"] : "no answer"
  const reason = action === "accept"
    ? "the MCP client's answer was not {decision: allow|deny, reason?}"
    : `the MCP client's person did not accept (${action})`
  return { decision: "deny", reason, by }
}

/** The task of an agent, as `tasks/get` and `CreateTaskResult` carry it. */
export const taskOf = (agent: AgentView, questions?: Questions) =>
  Effect.gen(function*() {
    const base = {
      taskId: agent.agent_id,
      createdAt: iso(agent.created_at),
      lastUpdatedAt: iso(agent.finished_at ?? agent.started_at ?? agent.created_at),
      ttlMs,
      pollIntervalMs
    }
    if (!ended(agent)) {
      const waiting = questions === undefined ? [] : yield* questions.of(agent.agent_id)
      if (waiting.length === 0) return { ...base, status: "working", statusMessage: progressOf(agent) }
      return {
        ...base,
        status: "input_required",
        statusMessage: `${waiting.length} question(s) wait for a person: ${waiting.map((q) => q.reason).join("; ")}`,
        inputRequests: Object.fromEntries(waiting.map((question) => [question.id, elicitationOf(question)]))
      }
    }
    if (agent.status === "cancelled") {
      return { ...base, status: "cancelled", statusMessage: agent.reason ?? "cancelled" }
    }
    // A failed or interrupted agent is a result the plain call returns too (not a JSON-RPC error).
    return {
      ...base,
      status: "completed",
      statusMessage: `${agent.status}${agent.reason === undefined ? "" : `: ${agent.reason}`}`,
      result: yield* callToolResult(agent)
    }
  })

const resultLine = (id: Id, result: unknown) => `${JSON.stringify({ jsonrpc: "2.0", id, result })}\n`
const errorLine = (id: Id, code: number, message: string, data?: unknown) =>
  `${JSON.stringify({ jsonrpc: "2.0", id, error: { code, message, ...(data === undefined ? {} : { data }) } })}\n`

const missing = (id: Id) =>
  errorLine(id, MISSING_CAPABILITY, `Missing required client capability: declare the ${extension} extension`, {
    requiredCapabilities: { extensions: { [extension]: {} } }
  })

/** The answer to one claimed request (a line, never a failure). */
export const answer = (
  manager: SubAgentManager["Service"],
  claimed: { readonly request: Request; readonly task?: typeof Task.TaskParameters.Type },
  questions?: Questions,
  settle: Effect.Effect<void, { readonly message: string }> = Effect.void
): Effect.Effect<string> => {
  const { id, method, params } = claimed.request
  const taskId = typeof params["taskId"] === "string" ? params["taskId"] : undefined
  const known = (run: (agent: AgentView) => Effect.Effect<string>) =>
    taskId === undefined
      ? Effect.succeed(errorLine(id, INVALID_PARAMS, `${method} needs params.taskId (a string)`))
      : Effect.matchEffect(manager.result(taskId, { block: false }), {
        onFailure: () => Effect.succeed(errorLine(id, INVALID_PARAMS, `no task ${taskId} on this workspace`)),
        onSuccess: run
      })
  if (claimed.task !== undefined) {
    return Effect.matchEffect(manager.spawn(undefined, Task.request(claimed.task)), {
      // Refused at spawn (the cap, an unsupported schema ...): a plain error result, no task.
      onFailure: (error) =>
        Effect.succeed(resultLine(id, {
          isError: true,
          content: [{ type: "text", text: "message" in error ? String(error.message) : String(error) }]
        })),
      // Answered once its record is committed (a task is durably created before it is announced).
      onSuccess: (agent) =>
        Effect.matchEffect(settle, {
          onFailure: (error) =>
            Effect.as(
              Effect.ignore(manager.cancel(agent.agent_id, "its record could not be saved")),
              errorLine(id, -32603, `the agent's record could not be saved, so no task was created: ${error.message}`)
            ),
          onSuccess: () =>
            Effect.map(taskOf(agent, questions), (task) => resultLine(id, { resultType: "task", ...task }))
        })
    })
  }
  if (!declares(params)) return Effect.succeed(missing(id))
  switch (method) {
    case "tasks/get":
      return known((agent) =>
        Effect.map(taskOf(agent, questions), (task) => resultLine(id, { resultType: "complete", ...task }))
      )
    case "tasks/update":
      // Each response for a question outstanding in the task's tree is its answer; others are ignored.
      return known((agent) =>
        Effect.gen(function*() {
          const responses = isRecord(params["inputResponses"]) ? params["inputResponses"] : {}
          if (questions !== undefined) {
            for (const question of yield* questions.of(agent.agent_id)) {
              if (question.id in responses) yield* questions.answer(question.id, answerOf(responses[question.id]))
            }
          }
          return resultLine(id, { resultType: "complete" })
        })
      )
    case "tasks/cancel":
      return known((agent) =>
        Effect.as(
          ended(agent) ? Effect.void : Effect.ignore(manager.cancel(agent.agent_id, cancelReason)),
          resultLine(id, { resultType: "complete" })
        )
      )
    default:
      return Effect.succeed(
        errorLine(
          id,
          -32601,
          `Method not found: ${method} (the Tasks extension has tasks/get, tasks/update and tasks/cancel)`
        )
      )
  }
}

const decoder = new TextDecoder()
const encoder = new TextEncoder()

/**
 * The answer to a claimed request, over the SubAgentManager in context (the embedded manager,
 * or the cluster client's) and its store's questions, if it has a store.
 */
export const answerClaimed = (
  claimed: { readonly request: Request; readonly task?: typeof Task.TaskParameters.Type }
): Effect.Effect<string, never, SubAgentManager> =>
  Effect.gen(function*() {
    const manager = yield* SubAgentManager
    const store = yield* Effect.serviceOption(SubAgentStore)
    return Option.isSome(store)
      ? yield* answer(manager, claimed, storeQuestions(store.value), store.value.settle)
      : yield* answer(manager, claimed)
  })

/**
 * `stdin` with the requests this layer answers taken out: each is answered (`answerTo`) in a
 * fiber of `scope`, its line written with `reply`. The stream carries whole lines
 * (JsonRpcLines.guard splits them first).
 */
export const intercept = <E, R>(
  stdin: Stream.Stream<Uint8Array, E, R>,
  answerTo: (claimed: NonNullable<ReturnType<typeof claim>>) => Effect.Effect<string>,
  reply: (line: string) => Effect.Effect<void>,
  scope: Scope.Scope
): Stream.Stream<Uint8Array, E, R> =>
  stdin.pipe(
    Stream.mapEffect((chunk) => {
      const text = decoder.decode(chunk)
      if (!text.includes("\"tasks/") && !text.includes(extension)) return Effect.succeed(chunk)
      const kept: Array<string> = []
      const claimed: Array<NonNullable<ReturnType<typeof claim>>> = []
      for (const line of text.split("\n")) {
        const found = line === "" ? undefined : claim(line)
        if (found === undefined) kept.push(line)
        else claimed.push(found)
      }
      return Effect.as(
        Effect.forEach(claimed, (c) => Effect.forkIn(Effect.flatMap(answerTo(c), reply), scope), {
          discard: true
        }),
        encoder.encode(kept.join("\n"))
      )
    }),
    Stream.filter((bytes) => bytes.length > 0)
  )

/**
 * The `Stdio` the MCP server reads: the one in context, its stdin through `intercept`, each
 * request answered `within` what gives it the agents' services (run with this layer's context:
 * `fibril mcp` gives its runtime's, once built, McpRuntime.use; the cluster its client's).
 */
export const stdioWithin = <R>(
  within: <A, E>(effect: Effect.Effect<A, E, SubAgentManager>) => Effect.Effect<A, E, R>
) =>
  Layer.effect(
    Stdio.Stdio,
    Effect.gen(function*() {
      const outer = yield* Stdio.Stdio
      const context = yield* Effect.context<R>()
      const scope = yield* Scope.Scope
      const reply = (line: string) => Stream.run(Stream.make(encoder.encode(line)), outer.stdout()).pipe(Effect.ignore)
      return JsonRpcLines.withStdin(
        outer,
        intercept(outer.stdin, (c) => Effect.provideContext(within(answerClaimed(c)), context), reply, scope)
      )
    })
  )

/** `stdioWithin` the context the layer is built in (its SubAgentManager, and a store if any). */
export const stdio = stdioWithin<SubAgentManager>((effect) => effect)
