/**
 * `fibril mcp --cluster <url>` (or FIBRIL_CLUSTER_URL, `[cluster] url`): the same MCP tools,
 * with every agent run in the cluster. `task` starts a root agent on the workers and waits for
 * it (its tree's steps are sent as progress); `agent_spawn`/`agent_open` start one and return;
 * `agent_wait`, `agent_result`, `agent_cancel`/`agent_close`, `agent_send_input`,
 * `agent_resume`, `agent_list` and `handle_read` act on the cluster's agents, with the
 * embedded server's result shapes (tokens by kind, the run's duration) and `allowed_tools`
 * narrowing the agent as embedded. `agent_eval` (the embedded run receipt) is refused with
 * the reason. The agents are durable: closing the
 * server does not cancel background agents; an interrupted `task` cancels its tree.
 */
import * as ClusterClient from "@fibril/cluster/ClusterClient"
import type { AgentRow } from "@fibril/cluster/ClusterStore"
import { ClusterStore, durationOf, finished, tokensOf } from "@fibril/cluster/ClusterStore"
import type * as AgentResult from "@fibril/core/AgentResult"
import * as OutputContract from "@fibril/core/OutputContract"
import * as Roles from "@fibril/core/Roles"
import * as SpawnCheck from "@fibril/core/SpawnCheck"
import * as SubAgentRecord from "@fibril/core/SubAgentRecord"
import * as TaskToolkit from "@fibril/core/TaskToolkit"
import * as TranscriptView from "@fibril/core/TranscriptView"
import * as McpServer from "effect/ai/McpServer"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ClusterEvents from "./ClusterEvents.ts"
import * as Mcp from "./Mcp.ts"

export interface Options {
  readonly version: string
  /** The workspace the agents work in: only workers serving it run them. */
  readonly workspace: string
  /** Between two looks at the agents' rows while waiting. */
  readonly pollMs?: number | undefined
}

const fail = (tool: string, kind: string, message: string) => new TaskToolkit.TaskToolError({ tool, kind, message })
const failWith = (tool: string) => (error: { readonly _tag: string; readonly message: string }) =>
  fail(tool, error._tag, error.message)

/** An agent's row as the agent tools show one. */
const agentResult = (row: AgentRow): AgentResult.AgentResult => {
  const text = row.text ?? ""
  const parsed = OutputContract.parse(text)
  return {
    agent_id: row.agentId,
    session_name: row.agentId,
    run_id: `${row.agentId}#${row.run}`,
    description: row.description,
    role: row.role,
    status: row.status,
    ...(row.reason === null ? {} : { reason: row.reason }),
    summary: OutputContract.summaryOf(parsed, text),
    // A finished answer's sections, as an embedded record's outcome gives them.
    ...(row.status === "completed" ?
      {
        sections: SubAgentRecord.resultSections(parsed.sections)
      } :
      {}),
    contract_violations: [],
    steps: row.steps,
    tool_calls: row.toolCalls,
    tokens: tokensOf(row),
    ...(durationOf(row) === undefined ? {} : { duration_ms: durationOf(row)! }),
    model: row.model,
    transcript_handle: row.agentId
  }
}

const spawned = (row: AgentRow): AgentResult.Spawned => ({
  agent_id: row.agentId,
  session_name: row.agentId,
  run_id: `${row.agentId}#${row.run}`,
  status: row.status,
  role: row.role,
  model: row.model,
  description: row.description,
  detached: row.detached
})

const idOf = (tool: string, params: { readonly agent_id?: string | undefined; readonly id?: string | undefined }) => {
  const id = params.agent_id ?? params.id
  return id === undefined || id === ""
    ? Effect.fail(fail(tool, "MissingParameter", "\"agent_id\" is required (also accepted as id)"))
    : Effect.succeed(id)
}

/** The handlers over the cluster client in context (engine and store). */
export const handlers = (options: Options) =>
  TaskToolkit.mcpToolkit.toLayer(Effect.gen(function*() {
    const context = yield* Effect.context<ClusterStore | ClusterClient.ClientServices>()
    const server = yield* McpServer.McpServer
    const store = yield* ClusterStore
    const pollMs = options.pollMs ?? 200
    /** Roots started through this server (agent_wait without ids waits for these). */
    const started = new Set<string>()
    const run = <A, E>(effect: Effect.Effect<A, E, ClusterStore | ClusterClient.ClientServices>) =>
      Effect.provide(effect, context)

    // The role is checked here, as the embedded server does (the tool names by the workers,
    // which have the tools: a name they do not have fails the agent, saying which).
    const start = (tool: string, request: {
      readonly prompt: string
      readonly description: string | undefined
      readonly role: string | undefined
      readonly allowedTools: ReadonlyArray<string> | undefined
      readonly model?: string | undefined
    }) =>
      // The same bounds as the embedded runtime's (SpawnCheck), before anything is submitted.
      Effect.suspend(() => {
        const tooLong = SpawnCheck.checkText(request)
        return tooLong === undefined ? Effect.void : Effect.fail(tooLong)
      }).pipe(
        Effect.andThen(Roles.forRequest(request.role ?? "general", request.allowedTools)),
        Effect.flatMap((role) =>
          run(ClusterClient.start({
            prompt: request.prompt,
            description: request.description,
            role: role.name,
            allowedTools: request.allowedTools,
            model: request.model,
            workspace: options.workspace
          }))
        ),
        Effect.mapError(failWith(tool)),
        Effect.tap((id) => Effect.sync(() => started.add(id)))
      )
    const rowOf = (tool: string, id: string) => run(ClusterClient.status(id)).pipe(Effect.mapError(failWith(tool)))

    const wait = (tool: string, ids: ReadonlyArray<string>, mode: "any" | "all", timeoutMs: number | undefined) =>
      Effect.gen(function*() {
        const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs
        while (true) {
          const rows = yield* Effect.forEach(ids, (id) => rowOf(tool, id))
          const done = rows.filter((r) => finished(r.status))
          const satisfied = rows.length === 0 || (mode === "any" ? done.length > 0 : done.length === rows.length)
          if (satisfied || (deadline !== undefined && Date.now() >= deadline)) {
            for (const r of done) started.delete(r.agentId)
            return {
              timed_out: !satisfied,
              completed: done.map(agentResult),
              still_running: rows.filter((r) => !finished(r.status)).map((r) => r.agentId)
            }
          }
          yield* Effect.sleep(Duration.millis(pollMs))
        }
      })

    const spawn = (tool: string) => (params: typeof TaskToolkit.mcpToolkit.tools.agent_spawn.parametersSchema.Type) =>
      Effect.gen(function*() {
        const prompt = params.prompt ?? params.message ?? params.input ?? params.objective
        if (prompt === undefined || prompt === "") {
          return yield* fail(tool, "MissingParameter", "\"prompt\" is required")
        }
        const id = yield* start(tool, {
          prompt,
          description: params.description,
          role: params.subagent_type ?? params.type ?? params.agent_type,
          allowedTools: params.allowed_tools,
          model: params.model
        })
        return spawned(yield* rowOf(tool, id))
      })

    const cancel =
      (tool: string) => (params: { readonly agent_id?: string; readonly id?: string; readonly reason?: string }) =>
        Effect.gen(function*() {
          const id = yield* idOf(tool, params)
          yield* run(ClusterClient.cancel(id, params.reason ?? `Cancelled by request (${tool})`)).pipe(
            Effect.mapError(failWith(tool))
          )
          return agentResult(yield* rowOf(tool, id))
        })

    return TaskToolkit.mcpToolkit.of({
      task: (params) =>
        Effect.gen(function*() {
          const id = yield* start("task", {
            prompt: params.prompt,
            description: params.description,
            role: params.subagent_type,
            allowedTools: params.allowed_tools
          })
          const progress = yield* ClusterEvents.mcpProgress(server, id).pipe(Effect.provide(context))
          const outcome = yield* run(ClusterClient.await_(id)).pipe(
            Effect.onInterrupt(() => Effect.ignore(run(ClusterClient.cancel(id, Mcp.cancelReason)))),
            Effect.exit
          )
          yield* progress
          started.delete(id)
          const row = yield* rowOf("task", id)
          const text = row.text ?? (outcome._tag === "Success" ? outcome.value.text : "")
          const parsed = OutputContract.parse(text)
          return {
            agent_id: id,
            description: row.description,
            status: row.status === "completed" ? "completed" : row.status === "cancelled" ? "cancelled" : "failed",
            summary: row.status === "completed" ? OutputContract.summaryOf(parsed, text) : row.reason ?? "failed",
            sections: SubAgentRecord.resultSections(parsed.sections),
            contract_violations: [],
            tool_calls: row.toolCalls,
            steps: row.steps,
            tokens: tokensOf(row),
            duration_ms: durationOf(row) ?? 0,
            model: row.model,
            transcript_handle: id
          } as const
        }),
      agent_spawn: spawn("agent_spawn"),
      agent_open: spawn("agent_open"),
      agent_wait: (params) =>
        wait(
          "agent_wait",
          params.ids ?? (params.agent_id ?? params.id ? [params.agent_id ?? params.id!] : [...started]),
          params.wait_mode ?? "any",
          params.timeout_ms
        ),
      agent_result: (params) =>
        Effect.gen(function*() {
          const id = yield* idOf("agent_result", params)
          if (params.block === true) yield* wait("agent_result", [id], "all", params.timeout_ms)
          return agentResult(yield* rowOf("agent_result", id))
        }),
      agent_cancel: cancel("agent_cancel"),
      agent_close: cancel("agent_close"),
      agent_assign: () =>
        Effect.fail(
          fail("agent_assign", "NotInClusterMode", "agent_assign is not available in cluster mode")
        ),
      agent_eval: () =>
        Effect.fail(
          fail(
            "agent_eval",
            "NotInClusterMode",
            "agent_eval is not available in cluster mode: its run receipt (per-run log, artifacts, verification, takeover) is built from the embedded runtime's records, which the cluster does not keep; use agent_result (status, summary, tokens, duration) and handle_read (the transcript)"
          )
        ),
      handle_read: (params) =>
        Effect.gen(function*() {
          const id = params.handle ?? params.agent_id ?? params.id
          if (id === undefined) return yield* fail("handle_read", "MissingParameter", "\"handle\" is required")
          yield* rowOf("handle_read", id)
          const messages = yield* store.transcript(id).pipe(Effect.mapError(failWith("handle_read")))
          return TranscriptView.page(messages, { handle: id, agentId: id, offset: params.offset, limit: params.limit })
        }),
      agent_list: (params) =>
        Effect.gen(function*() {
          const rows = yield* store.list.pipe(Effect.mapError(failWith("agent_list")))
          const shown = params.include_archived === true ? rows : rows.filter((r) => !finished(r.status))
          return {
            agents: shown.map((r) => ({
              agent_id: r.agentId,
              session_name: r.agentId,
              ...(r.parentId === null ? {} : { parent_id: r.parentId }),
              depth: r.depth,
              description: r.description,
              role: r.role,
              status: r.status,
              ...(r.reason === null ? {} : { reason: r.reason }),
              detached: r.detached,
              steps: r.steps,
              tool_calls: r.toolCalls
            }))
          }
        }),
      agent_send_input: (params) =>
        Effect.gen(function*() {
          const id = yield* idOf("agent_send_input", params)
          const message = params.message ?? params.input
          if (message === undefined || message === "") {
            return yield* fail("agent_send_input", "MissingParameter", "\"message\" is required")
          }
          const sent = yield* run(ClusterClient.sendInput(id, message)).pipe(
            Effect.mapError(failWith("agent_send_input"))
          )
          return {
            delivered: sent.delivered,
            ...(sent.delivered ? {} : { reason: `the agent has ${sent.status}; agent_resume starts a new run` }),
            agent: agentResult(yield* rowOf("agent_send_input", id))
          }
        }),
      agent_resume: (params) =>
        Effect.gen(function*() {
          const id = yield* idOf("agent_resume", params)
          yield* run(ClusterClient.resume(id, params.message ?? params.input ?? "Continue.")).pipe(
            Effect.mapError(failWith("agent_resume"))
          )
          started.add(id)
          return spawned(yield* rowOf("agent_resume", id))
        })
    })
  }))

/** The stdio server over the cluster client in context. */
export const layerStdio = (options: Options) =>
  McpServer.layerStdio({
    name: "fibril",
    version: options.version,
    description: "Fibril sub-agents in a cluster: task (run one and wait) and agent_* (background agents)",
    instructions: "Use `task` to delegate a self-contained piece of work to a sub-agent and get its result; it runs " +
      "durably on the cluster's workers. Use `agent_spawn` to start one in the background, then " +
      "`agent_wait`/`agent_result` to collect it and `handle_read` to page through its transcript.",
    protocols: Mcp.protocols,
    registrations: McpServer.toolkit(TaskToolkit.mcpToolkit).pipe(
      Layer.provide(handlers(options)),
      Layer.provide(Mcp.requiringIds)
    )
  })
