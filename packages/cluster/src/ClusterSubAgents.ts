/**
 * ClusterSubAgents — core's sub-agent contract (`SubAgentManager`) on the cluster, so the
 * sub-agent tools (core's `task`, `agent_*` and `handle_read` definitions) and the MCP
 * toolkit run unchanged against durable agents. Two ways in, one implementation (`make`) over
 * a `Backend`:
 *
 * - `inWorkflow`: what the workflow body gives one sub-agent tool call. Every store read or
 *   write is an activity named after the step, the call and the order of its requests
 *   (`spawn/<step>/<index>/<n>`, `look/<step>/<index>/<n>`, ...), waits sleep on durable
 *   clocks (those of a turn share one, completed once all the turn's waits are satisfied),
 *   children are workflows started detached: a replay decides the same. A child's id is a
 *   function of its parent's run and the call (`AgentRun.childId`).
 * - `client`: the same contract from outside a workflow (`fibril mcp --cluster`): the agents
 *   it starts are roots, waits poll the store. (`probe`: the model step's view, below.)
 *
 * Rows become core `AgentView`s (`viewOf`), so core's result views (AgentResult's `of`, `task`,
 * `evaluation`) apply as they are; refusals are core's tagged errors, rendered
 * to text at the one tool-result boundary (the workflow body runs core's tool definitions with
 * this manager provided: AgentWorkflow's `runTool`).
 */
import * as Roles from "@fibril/core/Roles"
import * as SpawnCheck from "@fibril/core/SpawnCheck"
import * as SubAgentManager from "@fibril/core/SubAgentManager"
import * as SubAgentRecord from "@fibril/core/SubAgentRecord"
import * as TranscriptView from "@fibril/core/TranscriptView"
import * as Prompt from "effect/ai/Prompt"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { Activity, DurableClock, DurableDeferred, type WorkflowEngine } from "effect/workflow"
import {
  AgentPayload,
  AgentWorkflow,
  childId,
  fallbackAfter,
  grantsOf,
  rowFor,
  traced,
  txActivity
} from "./AgentRun.ts"
import * as ClusterClient from "./ClusterClient.ts"
import { AgentRow, ClusterStore, finished, type StoreFailure, waitSatisfied } from "./ClusterStore.ts"
import { cancelTree } from "./ClusterWatch.ts"
import { checkSpawn, mcpServersOf, type SpawnChecks } from "./internal/spawnChecks.ts"
import { owner, viewOf, workerRecord } from "./internal/views.ts"

type Manager = SubAgentManager.SubAgentManager["Service"]

// --- Views (internal/views.ts) ---

export { outcomeOf, owner, recordOf, viewOf, workerRecord } from "./internal/views.ts"

// --- Spawn validation (internal/spawnChecks.ts) ---

export { checkSpawn, type SpawnChecks } from "./internal/spawnChecks.ts"

// --- The contract over a backend ---

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
  /** Runs a recorded agent's workflow to its end: its final row (absent: read it). */
  readonly runToEnd: (payload: AgentPayload) => Effect.Effect<AgentRow | undefined>
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
      const mcpServers = mcpServersOf(request, resolved, backend.checks)
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
      // The child's row says how it ended: a failed or cancelled child is a result, not an error.
      return viewOf((yield* backend.runToEnd(payload)) ?? (yield* Effect.orDie(found(payload.agentId))))
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
  // polled). Each look records the wait while it stays open, closes it when it does not
  // (`ClusterStore.waitOpen`); a child's end completes the clocks of the parent's turn once all
  // its waits are satisfied (the child's `signalParent`), and a clock fires by itself at the
  // timeout, or after the fallback (`fallbackAfter`, doubling). The deadline is the first look's
  // store time plus the timeout: journaled, so a replay decides the same.
  const looks = (ids: ReadonlyArray<string>, mode: "any" | "all", timeoutMs: number | undefined) =>
    Effect.gen(function*() {
      let deadline: number | undefined
      for (let attempt = 0;; attempt++) {
        const look = requests++
        // A wait without a timeout sleeps on its turn's clock, shared by the turn's calls at the
        // same attempt: a child's end completes one clock for the whole turn, and so resumes
        // the run once (a clock per call, each completed in turn, resumed it once per clock).
        const clock = timeoutMs === undefined ? `turn/${step}/${attempt}` : `wait/${step}/${index}/${look}`
        const wait = { call: `${parent.run}/${step}/${index}`, run: parent.run, step, clock, mode, deadline, timeoutMs }
        const seen = yield* txActivity({
          name: `look/${step}/${index}/${look}`,
          success: Schema.Struct({ rows: Schema.Array(AgentRow), now: Schema.Number }),
          execute: Effect.orDie(ClusterStore.use((store) => store.look(parent.agentId, ids, wait)))
        })
        if (deadline === undefined && timeoutMs !== undefined) deadline = seen.now + timeoutMs
        const satisfied = waitSatisfied(seen.rows.map((row) => finished(row.status)), mode)
        if (satisfied || (deadline !== undefined && seen.now >= deadline)) {
          return { rows: seen.rows, timedOut: !satisfied }
        }
        // A turn's clock, when it falls back, has every call of the turn look again: it starts at
        // four times the fallback (a child's end is signalled at least once: its run's finalizer
        // runs before its end is saved, and runs again if the worker dies before that).
        const fallback = fallbackAfter(timeoutMs === undefined ? 4 * run.waitFallbackMs : run.waitFallbackMs, attempt)
        const duration = deadline === undefined ? fallback : Math.max(1, Math.min(fallback, deadline - seen.now))
        yield* DurableClock.sleep({ name: clock, duration, inMemoryThreshold: 0 })
      }
    })
  // A call that waits is held (effect/workflow's durable race of one effect): the run does not
  // suspend while it is on its way to its first sleep, so every call of a turn has started its
  // child and recorded its wait before the run suspends (else a turn's K calls would suspend at
  // the first one parked, the others' children not started nor their waits recorded, and be
  // woken by partial turns). Its outcome is journaled: a later replay reads it instead of
  // replaying the call's looks, so it is a call's last request (nothing may be numbered after
  // it). (The effect is not given the run's context again: it must see the hold's own instance.)
  const held = <A, I>(
    schema: Schema.Codec<A, I>,
    effect: Effect.Effect<A, never, ClusterStore | WorkflowEngine.WorkflowEngine | WorkflowEngine.WorkflowInstance>
  ) =>
    Effect.suspend(() =>
      provide(DurableDeferred.raceAll({
        name: `call/${step}/${index}/${requests++}`,
        success: schema,
        error: Schema.Never,
        effects: [effect]
      }))
    )
  const Seen = Schema.Struct({ rows: Schema.Array(AgentRow), timedOut: Schema.Boolean })
  const waitRows: Backend["waitRows"] = (ids, mode, timeoutMs) => held(Seen, looks(ids, mode, timeoutMs))
  // Detached for the engine: the parent's wakes are Fibril's (its waits), not effect/workflow's
  // resume of an attached parent at each child's end. The caller's span is read outside
  // `provide`: the run's context holds the span its body started under, not the tool call's.
  const execute = (sent: AgentPayload) => AgentWorkflow.execute(sent, { discard: true, detached: true })
  const start = (payload: AgentPayload) => Effect.flatMap(traced(payload), (sent) => provide(execute(sent)))
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
    start,
    // A `task` child is started as any child and waited for as `agent_wait` waits: its end wakes
    // the parent once the turn's other waits are satisfied too, where a child workflow run
    // attached to its parent resumes it at each end (K `task` calls: K replays of the turn).
    runToEnd: (payload) =>
      Effect.flatMap(traced(payload), (sent) =>
        Effect.map(
          held(
            MaybeRow,
            Effect.andThen(
              execute(sent),
              Effect.map(looks([payload.agentId], "all", undefined), (s) => orNull(s.rows[0]))
            )
          ),
          (row) => row ?? undefined
        )),
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
          const satisfied = waitSatisfied(rows.map((row) => finished(row.status)), mode)
          if (satisfied || (deadline !== undefined && (yield* Clock.currentTimeMillis) >= deadline)) {
            return { rows, timedOut: !satisfied }
          }
          yield* Effect.sleep(pollMs)
        }
      }))
    const start = (payload: AgentPayload) =>
      Effect.sync(() => started.add(payload.agentId)).pipe(
        Effect.andThen(traced(payload)),
        Effect.flatMap((sent) => provide(AgentWorkflow.execute(sent, { discard: true })))
      )
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
      start,
      runToEnd: (payload) =>
        Effect.andThen(
          start(payload),
          Effect.map(waitRows([payload.agentId], "all", undefined), (seen) => seen.rows[0])
        ),
      waitRows,
      read: new Set()
    }, optionsOf(0, "reject"))
  })
