/**
 * ClusterSubAgents — core's sub-agent contract (`SubAgentManager`) on the cluster, so the
 * sub-agent tools (core's `task`, `agent_*` and `handle_read` definitions) and the MCP
 * toolkit run unchanged against durable agents. Two ways in, one implementation (`make`) over
 * a `Backend`:
 *
 * - `inWorkflow`: what the workflow body gives one sub-agent tool call. Every store read or
 *   write is an activity named after the step, the call and the order of its requests
 *   (`spawn/<step>/<index>/<n>`, `look/<step>/<index>/<n>`, ...), waits sleep on durable
 *   clocks, children are child workflows: a replay decides the same. A child's id is a
 *   function of its parent's run and the call (`AgentRun.childId`).
 * - `client`: the same contract from outside a workflow (`fibril mcp --cluster`): the agents
 *   it starts are roots, waits poll the store. (`probe`: the model step's view, below.)
 *
 * Rows become core `AgentView`s (`viewOf`), so core's result views (AgentResult's `of`, `task`,
 * `evaluation`) apply as they are; refusals are core's tagged errors, rendered
 * to text at the one tool-result boundary (the workflow body runs core's tool definitions with
 * this manager provided: AgentWorkflow's `runTool`).
 */
import type * as AgentDefinitions from "@fibril/core/AgentDefinitions"
import * as McpNarrowing from "@fibril/core/McpNarrowing"
import * as Models from "@fibril/core/Models"
import * as OutputSchema from "@fibril/core/OutputSchema"
import * as Permission from "@fibril/core/Permission"
import * as Roles from "@fibril/core/Roles"
import * as SpawnCheck from "@fibril/core/SpawnCheck"
import * as SpawnPlan from "@fibril/core/SpawnPlan"
import * as SubAgentManager from "@fibril/core/SubAgentManager"
import * as SubAgentRecord from "@fibril/core/SubAgentRecord"
import * as ToolRegistry from "@fibril/core/ToolRegistry"
import * as TranscriptView from "@fibril/core/TranscriptView"
import * as Prompt from "effect/ai/Prompt"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Schema from "effect/Schema"
import { Activity, DurableClock, type WorkflowEngine } from "effect/workflow"
import { AgentPayload, AgentWorkflow, childId, grantsOf, rowFor, traced, txActivity } from "./AgentRun.ts"
import * as ClusterClient from "./ClusterClient.ts"
import { AgentRow, ClusterStore, finished, type StoreFailure } from "./ClusterStore.ts"
import { cancelTree } from "./ClusterWatch.ts"
import { owner, viewOf, workerRecord } from "./internal/views.ts"

type Manager = SubAgentManager.SubAgentManager["Service"]

// --- Views (internal/views.ts) ---

export { outcomeOf, owner, recordOf, viewOf, workerRecord } from "./internal/views.ts"

// --- Spawn validation ---

/**
 * `isolation` in cluster mode: refused. A cluster agent runs on whichever worker claims it, so
 * a worktree would have to live on that worker's own clone of the repository, and its branch
 * be fetched back by the parent's worker to merge; the cluster does not manage clones, and a
 * process per agent is what a worker already is.
 */
const isolationRefused = (mode: SubAgentManager.Isolation) =>
  new SubAgentManager.IsolationUnavailable({
    mode,
    reason: mode === "worktree"
      ? "in cluster mode an agent runs on whichever worker claims it, and a worktree would live on that worker's own clone, which the cluster does not manage (run embedded, without --cluster, for worktrees)"
      // A child of the cluster is a workflow any worker may run, resume or take over: there is
      // no one parent process to own its OS process (docs/subagents.md, "Process isolation").
      : "in cluster mode a child is a workflow that any worker may run and take over, not a process of its parent (and every agent already runs in a worker process)",
    accepted: []
  })

/** What a worker (or a client) checks a spawn request against; absent: not checked here. */
export interface SpawnChecks {
  readonly registry?: ToolRegistry.ToolRegistry["Service"] | undefined
  readonly models?: Models.Models["Service"] | undefined
  readonly callerModel?: string | undefined // a child may name its caller's model
  /** The caller's rules: a child's MCP servers must be among those it may use (absent: any there are). */
  readonly rules?: Permission.Rules | undefined
  /** MCP servers per role (`[roles.<role>] mcp_servers`). */
  readonly roleMcpServers?: Readonly<Record<string, ReadonlyArray<string>>> | undefined
  /** The workspace's agent definitions a role may name (AgentWorkflow's `agents`). */
  readonly agents?: ReadonlyArray<AgentDefinitions.AgentDefinition> | undefined
}

/**
 * A child's MCP servers: its definition's, its role's (configured) and the request's, met (as
 * SpawnPlan does embedded); undefined: its parent's.
 */
const serversOf = (
  request: SubAgentManager.SpawnRequest,
  resolved: Pick<SpawnPlan.ResolvedRole, "role" | "mcpServers">,
  checks: SpawnChecks
) => [resolved.mcpServers, checks.roleMcpServers?.[resolved.role.name.toLowerCase()], request.mcpServers] as const

/**
 * A spawn request's role and model, or why it is refused: the bounds of its texts, the role
 * (`custom` needs `allowed_tools`), `allowed_tools` naming tools that exist, a model the
 * runtime serves. The one call site of spawn validation in cluster mode.
 */
export const checkSpawn = (request: SubAgentManager.SpawnRequest, checks: SpawnChecks) =>
  Effect.gen(function*() {
    // Core's checks (SpawnPlan), each the embedded engine's own: the texts' bounds, the role,
    // `allowed_tools` naming tools that exist, a model the runtime serves.
    const tooLong = SpawnCheck.checkText(request)
    if (tooLong !== undefined) return yield* tooLong
    if (request.isolation !== undefined) return yield* isolationRefused(request.isolation)
    const resolved = yield* SpawnPlan.resolveRole(checks.agents ?? [], request.role ?? "general", request.allowedTools)
    const role = resolved.role
    if (checks.registry !== undefined) {
      yield* SpawnPlan.checkAllowedTools(checks.registry, role.name, request.allowedTools)
      yield* SpawnPlan.checkAskTools(checks.registry, role.name, request.askTools)
      // Its MCP servers: among the caller's, and servers this worker has (McpNarrowing).
      const servers = serversOf(request, resolved, checks)
      const named = McpNarrowing.named(...servers)
      if (named.length > 0) {
        const universe = checks.registry.mcpServers()
        yield* McpNarrowing.grant(
          role.name,
          checks.rules ?? Permission.allowAll,
          universe,
          McpNarrowing.meet(...servers),
          named
        )
      }
    }
    const models = checks.models
    // A schema outside the supported subset is refused here, as SpawnPlan refuses it.
    if (request.outputSchema !== undefined) yield* Effect.fromResult(OutputSchema.compile(request.outputSchema))
    if (models !== undefined && request.model !== undefined) {
      const unknown = models.available === undefined
        ? SpawnCheck.checkModel(request.model, [models.defaultModel, checks.callerModel])
        : undefined
      if (unknown !== undefined) return yield* unknown
      yield* models.resolve(request.model)
    }
    return resolved
  })

// --- The contract over a backend ---

/** How a run that failed or was cancelled ended, should its row not say it yet. */
export interface Ending {
  readonly status: "failed" | "cancelled"
  readonly reason: string
}

/** What the workflow body and the client each provide; the contract is written once over it. */
export interface Backend {
  /** The store effect run once: a journaled activity in a workflow (`transactional`: its writes commit with it). */
  readonly once: <A, I>(
    kind: string,
    schema: Schema.Codec<A, I>,
    effect: Effect.Effect<A, StoreFailure, ClusterStore | WorkflowEngine.WorkflowEngine>,
    transactional: boolean
  ) => Effect.Effect<A>
  /** The parent of the agents this manager starts (none: they are roots), and their workspace. */
  readonly parent: AgentPayload | undefined
  readonly workspace: string
  /** The agents `agent_wait` without ids may wait for: the parent's children, the client's roots. */
  readonly children: Effect.Effect<ReadonlyArray<AgentRow>, StoreFailure, ClusterStore>
  /** The id of the agent a spawn request starts. */
  readonly newId: () => string
  /** Does a spawn take its child's permit itself (`reject` admission under a cap)? Else its cap. */
  readonly rejectOver: number | undefined
  /**
   * Was the child's row recorded already, by the commit of the model step that asked for it
   * (`probe`)? Then spawning records nothing.
   */
  readonly preRecorded: boolean
  readonly checks: SpawnChecks
  /** Starts a recorded agent's workflow and goes on. */
  readonly start: (payload: AgentPayload) => Effect.Effect<void>
  /** Runs a recorded agent's workflow to its end: its final row when its run gave it, or how it ended. */
  readonly runToEnd: (
    payload: AgentPayload
  ) => Effect.Effect<{ readonly row?: AgentRow | undefined; readonly ending?: Ending | undefined }>
  /** The rows of `ids` once `mode` is met or `timeoutMs` has passed (each id exists). */
  readonly waitRows: (
    ids: ReadonlyArray<string>,
    mode: "any" | "all",
    timeoutMs: number | undefined
  ) => Effect.Effect<{ readonly rows: ReadonlyArray<AgentRow>; readonly timedOut: boolean }>
  /** Results handed over by this caller (`markRead`): what `unreadChildren` leaves out. */
  readonly read: Set<string>
}

const MaybeRow = Schema.NullOr(AgentRow)
const orNull = (row: AgentRow | undefined) => row ?? null

/** The contract's reads of the store: the agents, the unread children, a transcript page, the permits. */
const storeReads = (backend: Backend) => {
  const { once, parent } = backend
  const list: Manager["list"] = ({ includeArchived }) =>
    Effect.map(
      once(
        "list",
        Schema.Array(AgentRow),
        ClusterStore.use((store) =>
          Effect.map(store.list, (rows) =>
            rows.filter((row) =>
              row.agentId !== parent?.agentId &&
              (includeArchived || !finished(row.status) || (parent !== undefined && row.rootId === parent.rootId))
            ))
        ),
        false
      ),
      (rows) => rows.map(viewOf)
    )

  const unreadChildren: Manager["unreadChildren"] = () =>
    once(
      "children",
      Schema.Array(Schema.String),
      ClusterStore.use((store) =>
        Effect.map(
          Effect.provideService(backend.children, ClusterStore, store),
          (rows) =>
            rows.filter((row) => !finished(row.status) || !backend.read.has(row.agentId)).map((row) => row.agentId)
        )
      ),
      false
    )

  const readTranscript: Manager["readTranscript"] = (handle, page) =>
    Effect.flatMap(
      once(
        "transcript",
        Schema.NullOr(TranscriptView.Page),
        ClusterStore.use((store) =>
          Effect.gen(function*() {
            const row = yield* store.get(handle)
            if (row === undefined) return null
            // The store keeps what the agent said and was told; its system prompt, the first
            // message of a transcript as the embedded engine shows it, is the one its workflow
            // builds from the row (the role, the depth, the workspace).
            const role = yield* Effect.orDie(Roles.resolve(row.role))
            const system = Prompt.makeMessage("system", {
              content: Roles.systemPrompt(role, row.depth, row.workspace)
            })
            const messages = [system, ...yield* store.transcript(handle)]
            return TranscriptView.page(messages, { handle, agentId: handle, offset: page.offset, limit: page.limit })
          })
        ),
        false
      ),
      (found) =>
        found === null ? Effect.fail(new SubAgentManager.AgentNotFound({ agentId: handle })) : Effect.succeed(found)
    )

  const running: Manager["running"] = once(
    "running",
    Schema.Int,
    ClusterStore.use((store) => Effect.map(store.permits, (held) => held.length)),
    false
  )
  return { list, unreadChildren, readTranscript, running }
}

/** The contract over `backend`. */
export const make = (backend: Backend, options: SubAgentManager.Options): Manager => {
  const { once, parent } = backend

  const found = (id: string) =>
    Effect.flatMap(
      once("read", MaybeRow, Effect.map(ClusterStore.use((store) => store.get(id)), orNull), false),
      (row) => row === null ? Effect.fail(new SubAgentManager.AgentNotFound({ agentId: id })) : Effect.succeed(row)
    )

  /** The payload of the agent `request` asks for, or why it is refused. */
  const payloadFor = (request: SubAgentManager.SpawnRequest, detached: boolean) =>
    Effect.map(checkSpawn(request, backend.checks), (resolved): AgentPayload => {
      const role = resolved.role
      const agentId = backend.newId()
      const depth = parent === undefined ? 0 : parent.depth + 1
      const mcpServers = McpNarrowing.meet(...serversOf(request, resolved, backend.checks))
      const allowed = {
        ...(request.allowedTools === undefined ? {} : { allowedTools: request.allowedTools }),
        ...(request.askTools === undefined ? {} : { askTools: request.askTools }),
        ...(mcpServers === undefined ? {} : { mcpServers })
      }
      const grants = parent === undefined
        ? (Object.keys(allowed).length === 0 ? [] : [{ role: role.name, depth, ...allowed }])
        : [...grantsOf(parent), { role: role.name, depth, ...allowed }]
      return {
        agentId,
        run: 0,
        parentId: parent?.agentId ?? null,
        rootId: parent?.rootId ?? agentId,
        depth,
        role: role.name,
        model: request.model ?? parent?.model ?? "",
        description: request.description ?? request.prompt.slice(0, 60),
        prompt: request.prompt,
        detached: parent !== undefined && detached,
        workspace: backend.workspace,
        ...(grants.length === 0 ? {} : { grants }),
        ...(request.outputSchema === undefined ? {} : { outputSchema: request.outputSchema })
      }
    })

  /** Records the agent (taking its permit first under `reject`); CapReached when none is free. */
  const admit = (payload: AgentPayload) =>
    Effect.gen(function*() {
      const row = yield* rowFor(payload)
      if (backend.preRecorded) return row
      const cap = backend.rejectOver
      const admitted = yield* once(
        "spawn",
        Schema.Struct({ admitted: Schema.Boolean, running: Schema.Int }),
        ClusterStore.use((store) =>
          Effect.gen(function*() {
            if (cap !== undefined && !(yield* store.acquire(payload.agentId, cap))) {
              return { admitted: false, running: (yield* store.permits).length }
            }
            yield* store.insert(row)
            return { admitted: true, running: 0 }
          })
        ),
        true
      )
      if (!admitted.admitted) {
        return yield* new SubAgentManager.CapReached({ max: cap ?? 0, running: admitted.running })
      }
      return row
    })

  const spawn: Manager["spawn"] = (_caller, request) =>
    Effect.gen(function*() {
      const payload = yield* payloadFor(request, request.detached === true)
      const row = yield* admit(payload)
      yield* backend.start(payload)
      return viewOf(row)
    })

  const run: Manager["run"] = (_caller, request) =>
    Effect.gen(function*() {
      const payload = yield* payloadFor(request, false)
      yield* admit(payload)
      const { ending, row: last } = yield* backend.runToEnd(payload)
      // The child's row says how it ended: a failed or cancelled child is a result, not an error.
      const row = last ?? (yield* Effect.orDie(found(payload.agentId)))
      return viewOf(ending === undefined || finished(row.status) ? row : { ...row, ...ending })
    })

  const wait: Manager["wait"] = (ids, { mode, timeoutMs }) =>
    Effect.gen(function*() {
      if (ids.length === 0) return { timed_out: false, completed: [], pending: [] }
      // Each id must exist (the looks then read them as they change).
      const missing = yield* once(
        "exists",
        Schema.Array(Schema.String),
        ClusterStore.use((store) =>
          Effect.map(Effect.forEach(ids, (id) => store.get(id)), (rows) => ids.filter((_, i) => rows[i] === undefined))
        ),
        false
      )
      if (missing.length > 0) return yield* new SubAgentManager.AgentNotFound({ agentId: missing[0]! })
      const seen = yield* backend.waitRows(ids, mode, timeoutMs)
      return {
        timed_out: seen.timedOut,
        completed: seen.rows.filter((row) => finished(row.status)).map(viewOf),
        pending: seen.rows.filter((row) => !finished(row.status)).map((row) => row.agentId)
      }
    })

  const result: Manager["result"] = (id, { block, timeoutMs }) =>
    Effect.gen(function*() {
      const row = yield* found(id)
      if (!block || finished(row.status)) return viewOf(row)
      const seen = yield* backend.waitRows([id], "all", timeoutMs)
      return viewOf(seen.rows[0] ?? row)
    })

  const cancel: Manager["cancel"] = (id, reason) =>
    Effect.flatMap(
      once(
        "cancel",
        MaybeRow,
        ClusterStore.use((store) =>
          Effect.gen(function*() {
            if ((yield* store.get(id)) === undefined) return null
            yield* cancelTree(id, reason ?? "cancelled")
            return orNull(yield* store.get(id))
          })
        ),
        false
      ),
      (row) =>
        row === null ? Effect.fail(new SubAgentManager.AgentNotFound({ agentId: id })) : Effect.succeed(viewOf(row))
    )

  const deliver = (id: string, message: string) =>
    Effect.gen(function*() {
      const outcome = yield* once(
        "input",
        Schema.Struct({ row: MaybeRow, delivered: Schema.Boolean }),
        ClusterStore.use((store) =>
          Effect.gen(function*() {
            const row = yield* store.get(id)
            if (row === undefined || finished(row.status)) return { row: orNull(row), delivered: false }
            yield* store.sendInput(id, message)
            return { row, delivered: true }
          })
        ),
        true
      )
      if (outcome.row === null) return yield* new SubAgentManager.AgentNotFound({ agentId: id })
      const agent = viewOf(outcome.row)
      return outcome.delivered
        ? { delivered: true, agent }
        : { delivered: false, reason: `the agent has ${agent.status}; agent_resume starts a new run`, agent }
    })

  const sendInput: Manager["sendInput"] = (id, message) => {
    const tooLong = SpawnCheck.checkMessage("message", message)
    return tooLong === undefined ? deliver(id, message) : Effect.fail(tooLong)
  }

  const resume: Manager["resume"] = (_caller, id, message) =>
    Effect.gen(function*() {
      const tooLong = SpawnCheck.checkMessage("message", message)
      if (tooLong !== undefined) return yield* tooLong
      const next = yield* once(
        "resume",
        Schema.Union([AgentPayload, SubAgentManager.AgentNotFound, SubAgentManager.NotResumable]),
        ClusterClient.resumeRow(id, message ?? "Continue."),
        true
      )
      if (next instanceof SubAgentManager.AgentNotFound || next instanceof SubAgentManager.NotResumable) {
        return yield* next
      }
      yield* backend.start(next)
      return viewOf(yield* Effect.orDie(found(id)))
    })

  // A running agent's rules are fixed for its run (its payload's grants, journaled with it):
  // a new role cannot reach it. An objective and a note are delivered as input.
  const assign: Manager["assign"] = (id, update) =>
    Effect.gen(function*() {
      const tooLong = SpawnCheck.checkMessage("objective", update.objective) ??
        SpawnCheck.checkMessage("message", update.message)
      if (tooLong !== undefined) return yield* tooLong
      if (update.role !== undefined) {
        const role = yield* Roles.resolve(update.role)
        return yield* new Roles.InvalidRoleRequest({
          role: role.name,
          reason: "cluster mode cannot change a running agent's role: its permissions are fixed for the run by its " +
            "workflow's journaled payload. Cancel it and spawn one with this role, or send it the new objective " +
            "(agent_assign without role, or agent_send_input)"
        })
      }
      const note = [
        "Your assignment was updated by your parent.",
        update.objective === undefined ? undefined : `Objective: ${update.objective}`,
        update.message
      ].filter((part) => part !== undefined).join("\n")
      return yield* deliver(id, note)
    })

  const { list, readTranscript, running, unreadChildren } = storeReads(backend)
  return SubAgentManager.SubAgentManager.of({
    bootId: owner,
    options,
    spawn,
    run,
    wait,
    result,
    cancel,
    list,
    sendInput,
    unreadChildren,
    markRead: (_caller, ids) => Effect.sync(() => ids.forEach((id) => backend.read.add(id))),
    resume,
    assign,
    running,
    resolve: (id) => Effect.succeed(SubAgentRecord.agentOfRunId(id) ?? id),
    readTranscript,
    attachVerification: (id) => Effect.fail(new SubAgentManager.NotOwned({ agentId: id, owner })),
    workerRecord: (agent) => Effect.succeed(workerRecord(agent))
  })
}

/** The SubAgentManager options a cluster manager reports (its cap and admission). */
export const optionsOf = (maxConcurrent: number, admission: "reject" | "queue"): SubAgentManager.Options => ({
  ...SubAgentManager.defaults,
  maxConcurrent,
  admission
})

// --- In a workflow ---

/** What one run of the workflow body gives the sub-agent tool calls it makes. */
export interface WorkflowRun {
  readonly payload: AgentPayload
  readonly maxConcurrent: number
  readonly admission: "reject" | "queue"
  /** The longest a wait sleeps between two looks when no child's end wakes it. */
  readonly waitFallbackMs: number
  readonly checks: SpawnChecks
  /** The results this run handed over (`markRead`), rebuilt the same on a replay. */
  readonly read: Set<string>
  readonly context: import("effect/Context").Context<
    ClusterStore | WorkflowEngine.WorkflowEngine | WorkflowEngine.WorkflowInstance
  >
}

const rejectOver = (run: WorkflowRun) =>
  run.maxConcurrent > 0 && run.admission === "reject" ? run.maxConcurrent : undefined
/** How a probe stops a handler once it has the request (see `probe`). */
const probed = "probed: the request is recorded"

/**
 * The contract as the model step sees a sub-agent call it asked for: the handler runs until its
 * spawn request is admitted (the same validation, the same child), then `record` gets the
 * child's row and the handler stops; any other request stops it at once. So the children of a
 * turn are recorded by its model step's commit, from the definitions' own request mapping,
 * when spawning takes no permit (`queue` admission, or no cap); `inWorkflow` then records none.
 */
export const probe = (run: WorkflowRun, step: number, index: number, record: (row: AgentRow) => void): Manager => {
  const stop = (payload: AgentPayload) =>
    Effect.flatMap(rowFor(payload), (row) => Effect.andThen(Effect.sync(() => record(row)), Effect.die(probed)))
  return make({
    once: () => Effect.die(probed),
    parent: run.payload,
    workspace: run.payload.workspace,
    children: Effect.die(probed),
    newId: () => childId(run.payload.agentId, run.payload.run, step, index),
    rejectOver: undefined,
    preRecorded: true,
    checks: run.checks,
    start: stop,
    runToEnd: stop,
    waitRows: () => Effect.die(probed),
    read: new Set()
  }, optionsOf(run.maxConcurrent, run.admission))
}

/** Does the model step record the children its turn asks for (`probe`)? */
export const recordsChildren = (run: WorkflowRun): boolean => rejectOver(run) === undefined

/**
 * The contract for the sub-agent tool call `index` of model step `step`: its requests are
 * activities named after the call and their order, its waits durable looks and clocks.
 */
export const inWorkflow = (run: WorkflowRun, step: number, index: number): Manager => {
  const parent = run.payload
  let requests = 0
  const provide = <A, E>(
    effect: Effect.Effect<A, E, ClusterStore | WorkflowEngine.WorkflowEngine | WorkflowEngine.WorkflowInstance>
  ) => Effect.provide(effect, run.context)
  // Between two looks the caller sleeps on a durable clock (the workflow suspends; nothing is
  // polled); a child's end completes that clock early (the child's `signalParent`), and the
  // clock itself fires at the timeout, or after `waitFallbackMs`. The deadline is the first
  // look's store time plus the timeout: journaled, so a replay decides the same.
  const waitRows: Backend["waitRows"] = (ids, mode, timeoutMs) =>
    provide(Effect.gen(function*() {
      let deadline: number | undefined
      while (true) {
        const look = requests++
        const clock = `wait/${step}/${index}/${look}`
        const seen = yield* txActivity({
          name: `look/${step}/${index}/${look}`,
          success: Schema.Struct({ rows: Schema.Array(AgentRow), now: Schema.Number }),
          execute: Effect.orDie(ClusterStore.use((store) => store.look(parent.agentId, ids, clock)))
        })
        if (deadline === undefined && timeoutMs !== undefined) deadline = seen.now + timeoutMs
        const done = seen.rows.filter((row) => finished(row.status)).length
        const satisfied = seen.rows.length === 0 || (mode === "any" ? done > 0 : done === seen.rows.length)
        if (satisfied || (deadline !== undefined && seen.now >= deadline)) {
          return { rows: seen.rows, timedOut: !satisfied }
        }
        const wait = deadline === undefined
          ? run.waitFallbackMs
          : Math.max(1, Math.min(run.waitFallbackMs, deadline - seen.now))
        yield* DurableClock.sleep({ name: clock, duration: wait, inMemoryThreshold: 0 })
      }
    }))
  return make({
    once: (kind, schema, effect, transactional) =>
      Effect.suspend(() => {
        const options = {
          name: `${kind}/${step}/${index}/${requests++}`,
          success: schema,
          execute: Effect.orDie(effect)
        }
        return provide(transactional ? txActivity(options) : Activity.make(options))
      }),
    parent,
    workspace: parent.workspace,
    children: ClusterStore.use((store) => store.children(parent.agentId)),
    newId: () => childId(parent.agentId, parent.run, step, index),
    rejectOver: rejectOver(run),
    preRecorded: rejectOver(run) === undefined,
    checks: run.checks,
    // The caller's span is read here, outside `provide`: the run's context holds the span its
    // body started under, not the tool call's.
    start: (payload) =>
      Effect.flatMap(
        traced(payload),
        (sent) => provide(AgentWorkflow.execute(sent, { discard: true, detached: sent.detached }))
      ),
    runToEnd: (payload) =>
      Effect.flatMap(traced(payload), (sent) =>
        provide(Effect.map(
          Effect.exit(AgentWorkflow.execute(sent)),
          (exit) =>
            Exit.isSuccess(exit)
              ? { row: exit.value.row }
              : exit.cause.reasons.every((reason) => reason._tag === "Interrupt")
              ? { ending: { status: "cancelled" as const, reason: "the sub-agent was cancelled" } }
              : { ending: { status: "failed" as const, reason: String(exit.cause) } }
        ))),
    waitRows,
    read: run.read
  }, optionsOf(run.maxConcurrent, run.admission))
}

// --- From a client ---

export interface ClientOptions {
  /** The workspace the agents work in: only workers serving it run them. */
  readonly workspace: string
  /** Between two looks at the agents' rows while waiting (default 200 ms). */
  readonly pollMs?: number | undefined
}

/**
 * The contract from outside the cluster's workflows (`fibril mcp --cluster`): the agents it
 * starts are roots on the workers; waits poll the store. Agents are durable: the client going
 * away does not cancel them.
 */
export const client = (options: ClientOptions) =>
  Effect.gen(function*() {
    const context = yield* Effect.context<ClusterStore | WorkflowEngine.WorkflowEngine>()
    const pollMs = Duration.millis(options.pollMs ?? 200)
    const started = new Set<string>()
    const provide = <A, E>(effect: Effect.Effect<A, E, ClusterStore | WorkflowEngine.WorkflowEngine>) =>
      Effect.provide(effect, context)
    const waitRows: Backend["waitRows"] = (ids, mode, timeoutMs) =>
      provide(Effect.gen(function*() {
        const store = yield* ClusterStore
        const deadline = timeoutMs === undefined ? undefined : (yield* Clock.currentTimeMillis) + timeoutMs
        while (true) {
          const rows = (yield* Effect.orDie(Effect.forEach(ids, (id) => store.get(id)))).filter((row) =>
            row !== undefined
          )
          const done = rows.filter((row) => finished(row.status)).length
          const satisfied = rows.length === 0 || (mode === "any" ? done > 0 : done === rows.length)
          if (satisfied || (deadline !== undefined && (yield* Clock.currentTimeMillis) >= deadline)) {
            return { rows, timedOut: !satisfied }
          }
          yield* Effect.sleep(pollMs)
        }
      }))
    return make({
      once: (_kind, _schema, effect) => Effect.orDie(provide(effect)),
      parent: undefined,
      workspace: options.workspace,
      children: ClusterStore.use((store) =>
        Effect.map(
          Effect.forEach([...started], (id) => store.get(id)),
          (rows) => rows.filter((row) => row !== undefined)
        )
      ),
      newId: ClusterClient.newAgentId,
      rejectOver: undefined,
      preRecorded: false,
      checks: {},
      start: (payload) =>
        Effect.sync(() => started.add(payload.agentId)).pipe(
          Effect.andThen(traced(payload)),
          Effect.flatMap((sent) => provide(AgentWorkflow.execute(sent, { discard: true })))
        ),
      runToEnd: (payload) =>
        Effect.sync(() => started.add(payload.agentId)).pipe(
          Effect.andThen(traced(payload)),
          Effect.flatMap((sent) => provide(AgentWorkflow.execute(sent, { discard: true }))),
          Effect.andThen(Effect.as(waitRows([payload.agentId], "all", undefined), {}))
        ),
      waitRows,
      read: new Set()
    }, optionsOf(0, "reject"))
  })
