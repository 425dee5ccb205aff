/**
 * The embedded SubAgentManager: agents as fibers of this process, under one cap, recorded in
 * the SubAgentStore. This file wires the parts — this process's agents (AgentTable), one run
 * (AgentRun), other processes' agents (ForeignAgents), the permits, the heartbeat and the
 * RunObserver the sessions it creates are given — and holds the contract's methods, one
 * section each. Each section is a function of the ManagerContext.
 */
import type * as Prompt from "effect/ai/Prompt"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Latch from "effect/Latch"
import * as Option from "effect/Option"
import * as Scope from "effect/Scope"
import { type AgentEvent, AgentEvents } from "../../AgentEvents.ts"
import * as AgentResult from "../../AgentResult.ts"
import { Approvals } from "../../Approvals.ts"
import * as Heartbeat from "../../Heartbeat.ts"
import * as McpNarrowing from "../../McpNarrowing.ts"
import { Models } from "../../Models.ts"
import * as Permission from "../../Permission.ts"
import * as Receipt from "../../Receipt.ts"
import * as Roles from "../../Roles.ts"
import { type RunObserver, Session } from "../../Session.ts"
import * as SpawnCheck from "../../SpawnCheck.ts"
import * as SpawnPlan from "../../SpawnPlan.ts"
import * as StoredQuestions from "../../StoredQuestions.ts"
import { AgentNotFound, NotOwned, NotResumable } from "../../SubAgentErrors.ts"
import type {
  AgentView,
  CommandCheck,
  Embedded,
  InputResult,
  InputVia,
  Options,
  RootOptions,
  SpawnRequest,
  SubAgentManager,
  WaitResult
} from "../../SubAgentManager.ts"
import { currentRunId, isTerminal, type SubAgentRecord } from "../../SubAgentRecord.ts"
import { SubAgentStore } from "../../SubAgentStore.ts"
import { ToolRegistry } from "../../ToolRegistry.ts"
import * as TranscriptView from "../../TranscriptView.ts"
import { Workspace } from "../../Workspace.ts"
import { Worktrees } from "../../Worktrees.ts"
import * as Permits from "../permits.ts"
import { sleepUnref } from "../sleep.ts"
import { withSpan } from "../span.ts"
import * as Transcript from "../transcript.ts"
import * as AgentRun from "./AgentRun.ts"
import { AgentTable, idOf, isLive, type LiveAgent, type Target } from "./AgentTable.ts"
import * as ForeignAgents from "./ForeignAgents.ts"
import * as Isolation from "./isolation.ts"
import { lendWhile, type ManagerContext } from "./ManagerContext.ts"

// --- Session observer ---

/**
 * How the manager takes part in the runs of the sessions it creates, given to each at its
 * creation: progress and the receipt's tool results (onEvent), the durable transcript
 * (onMessage, beforeModelCall), the wait for background children (beforeFinish), and what a
 * run leaves when it ends (onEnd).
 */
const observerOf = (
  parts: Pick<ManagerContext, "store" | "table" | "permits">,
  relativize: (path: string) => string
): RunObserver => {
  const { permits, store, table } = parts
  return {
    onEvent: (event: AgentEvent) => {
      const agent = table.agents.get(event.agent.agentId)
      if (agent === undefined) return
      agent.lastProgress = event.at
      // The session published `started`: it will publish this run's terminal event too.
      if (event.type === "started") agent.started = true
      // Into the record in memory only: the next put carries it (no store write per tool call).
      else if (event.type === "tool_result") Receipt.toolResult(agent.record, event, relativize)
      else if (event.type === "answered") Receipt.approval(agent.record, event)
      else if (event.type === "question") Receipt.asked(agent.record, event)
    },
    // A durable store gets every message as it is added (each tool result as it lands,
    // committed at the end of that event-loop turn), and the loop's next model call waits for
    // that commit: a crash loses nothing that finished. An in-memory store would not survive
    // a crash anyway, and the session holds the conversation.
    onMessage: store.durable
      ? (sessionId, message) => {
        const agent = table.agents.get(sessionId)
        return agent === undefined
          ? Effect.void
          : AgentRun.queueMessages(store, agent.record.transcript_handle, [message])
      }
      : undefined,
    beforeModelCall: store.durable
      ? () => Effect.catch(store.sync, (error) => Effect.logWarning(error.message))
      : undefined,
    beforeFinish: (sessionId) => {
      const open = [...(table.childrenOf.get(sessionId) ?? [])].filter((agent) => !isTerminal(agent.record.status))
      if (open.length === 0) return Effect.succeed(undefined)
      return lendWhile(
        { permits, table },
        sessionId,
        open,
        Effect.forEach(open, (agent) => Deferred.await(agent.done), { discard: true })
      ).pipe(
        Effect.map(() =>
          "Your background sub-agents were still running when you answered; they have now finished. " +
          "Their results:\n" +
          JSON.stringify(open.map((agent) => AgentResult.of(table.view(agent.record))), null, 2) +
          "\nTake them into account, then give your final answer."
        )
      )
    },
    onEnd: (sessionId, end) => {
      const agent = table.agents.get(sessionId)
      if (agent !== undefined) agent.ended = end
    }
  }
}

// --- Spawn ---

const spawnOps = (ctx: ManagerContext) => {
  // spawn, startRoot, run and result run once per agent: spans without `Effect.fn`'s per-call
  // stack capture (~3 µs), and none at all when no tracer is installed (internal/span.ts).
  const spawn = Effect.fnUntraced(
    function*(parentId: string | undefined, request: SpawnRequest) {
      return ctx.table.view((yield* AgentRun.start(ctx, parentId, request, "background")).agent.record)
    },
    withSpan("SubAgentManager.spawn")
  )

  const startRoot = Effect.fnUntraced(function*(request: SpawnRequest, options?: RootOptions) {
    const { agent, fiber } = yield* AgentRun.start(ctx, undefined, request, "root", options)
    return { agent: ctx.table.view(agent.record), fiber }
  }, withSpan("SubAgentManager.startRoot"))

  // Combinators rather than a generator: `task` runs this once per sub-agent.
  const runSpan = withSpan("SubAgentManager.run")
  const run = (parentId: string | undefined, request: SpawnRequest) =>
    runSpan(
      Effect.flatMap(AgentRun.start(ctx, parentId, request, "foreground"), ({ agent, fiber }) =>
        Effect.mapEager(Fiber.await(fiber), () => {
          // Its result is task's result: the parent has it.
          agent.resultRead = true
          return ctx.table.view(agent.record)
        }))
    )

  return { spawn, startRoot, run }
}

// --- Wait and result ---

const waitOps = (ctx: ManagerContext) => {
  const doneOf = (target: Target): Effect.Effect<void> =>
    isLive(target) ? Deferred.await(target.done) : ForeignAgents.awaitForeign(ctx, target.agent_id)

  /** Waits for the targets (own agents, or another process's); true when the timeout came first. */
  const waitFor = (targets: ReadonlyArray<Target>, mode: "any" | "all", timeoutMs: number | undefined) =>
    Effect.flatMap(Effect.forEach(targets, (target) => AgentRun.currentView(ctx, target)), (views) => {
      const open = targets.filter((_, i) => !isTerminal(views[i]!.status))
      if (open.length === 0 || (mode === "any" && open.length < targets.length)) return Effect.succeed(false)
      const waiting = mode === "any"
        ? Effect.raceAll(open.map(doneOf))
        : Effect.forEach(open, doneOf, { concurrency: "unbounded", discard: true })
      return timeoutMs === undefined
        ? Effect.as(waiting, false)
        : Effect.map(Effect.timeoutOption(waiting, Duration.millis(timeoutMs)), Option.isNone)
    })

  /** The run a waiter waits for: its `done` when the wait began. */
  const runOf = (target: Target) => (isLive(target) ? target.done : undefined)

  /**
   * The target as a waiter that began waiting on `run` should see it: its latest ended run. If
   * a resume started a new run since (from outside, at the instant the awaited run ended) and
   * that run is still going, that is the record as the previous run ended, so the waiter still
   * gets the result it waited for; else the current view.
   */
  const endedView = (target: Target, run: Deferred.Deferred<void> | undefined): Effect.Effect<AgentView> =>
    isLive(target) && run !== undefined && target.done !== run && !isTerminal(target.record.status) &&
      target.lastEnded !== undefined
      ? Effect.succeed(target.lastEnded)
      : AgentRun.currentView(ctx, target)

  const wait = Effect.fn("SubAgentManager.wait")(function*(
    ids: ReadonlyArray<string>,
    options: {
      readonly mode: "any" | "all"
      readonly timeoutMs?: number | undefined
      readonly caller?: string | undefined
    }
  ) {
    const targets = yield* Effect.forEach(ids, (id) => ctx.table.lookupAny(id))
    const runs = targets.map(runOf)
    const timedOut = yield* lendWhile(ctx, options.caller, targets, waitFor(targets, options.mode, options.timeoutMs))
    const views = yield* Effect.forEach(targets, (target, i) => endedView(target, runs[i]))
    return {
      timed_out: timedOut,
      completed: views.filter((v) => isTerminal(v.status)),
      pending: views.filter((v) => !isTerminal(v.status)).map((v) => v.agent_id)
    } satisfies WaitResult
  })

  const result = Effect.fnUntraced(function*(
    id: string,
    options: { readonly block: boolean; readonly timeoutMs?: number | undefined; readonly caller?: string | undefined }
  ) {
    const target = yield* ctx.table.lookupAny(id)
    if (!options.block) return yield* AgentRun.currentView(ctx, target)
    const run = runOf(target)
    yield* lendWhile(ctx, options.caller, [target], waitFor([target], "all", options.timeoutMs))
    return yield* endedView(target, run)
  }, withSpan("SubAgentManager.result"))

  return { wait, result }
}

// --- Cancel ---

const cancelOps = (ctx: ManagerContext) => {
  // The reason is set before the interruption so the run ends `cancelled`, not `interrupted`.
  const markCancelled = (agent: LiveAgent, reason: string) => {
    agent.cancelReason = reason
    return ctx.session.markCancelled(agent.record.agent_id, reason)
  }

  const markDescendants = (agentId: string, reason: string): Effect.Effect<void> =>
    Effect.forEach(ctx.table.cancelReaches.get(agentId) ?? [], (child) => {
      if (isTerminal(child.record.status)) return Effect.void
      return Effect.andThen(markCancelled(child, reason), markDescendants(child.record.agent_id, reason))
    }, { discard: true })

  const cancel = Effect.fn("SubAgentManager.cancel")(function*(id: string, reason = "Cancelled by request") {
    const target = yield* ctx.table.lookupAny(id)
    if (!isLive(target)) return yield* ForeignAgents.cancelForeign(ctx, target, reason)
    const agent = target
    if (isTerminal(agent.record.status) || agent.fiber === undefined) return ctx.table.view(agent.record)
    yield* markCancelled(agent, reason)
    // By agent id, whichever name it was asked by (a session name, a run id): children are
    // known by their parent's agent id.
    const agentId = agent.record.agent_id
    yield* markDescendants(agentId, `Cancelled because its parent ${agentId} was cancelled`)
    yield* Fiber.interrupt(agent.fiber)
    yield* Deferred.await(agent.done)
    return ctx.table.view(agent.record)
  })

  return { cancel }
}

// --- List ---

/**
 * This process's agents (current ones, or every one with `includeArchived`), and those of
 * other processes sharing the store: the live ones, or every one with `includeArchived`.
 * Records whose owner is gone are reconciled first.
 */
const listOf = (ctx: ManagerContext) =>
  Effect.fn("SubAgentManager.list")(function*(options: {
    readonly includeArchived: boolean
    readonly parentId?: string | undefined
  }) {
    const out: Array<AgentView> = []
    for (const agent of ctx.table.agents.values()) {
      const record = agent.record
      if (options.parentId !== undefined && record.parent_id !== options.parentId) continue
      const current = record.session_boot_id === ctx.bootId || !isTerminal(record.status)
      if (current || options.includeArchived) {
        if (!isTerminal(record.status)) yield* AgentRun.syncFromSession(ctx, agent)
        out.push(ctx.table.view(record))
      }
    }
    if (!ctx.store.durable) return out
    yield* ctx.store.reconcile
    for (const record of yield* ctx.store.all) {
      if (ctx.table.agents.has(record.agent_id)) continue
      if (options.parentId !== undefined && record.parent_id !== options.parentId) continue
      if (options.includeArchived || !isTerminal(record.status)) out.push(ctx.table.view(record))
    }
    return out
  })

// --- Input ---

const inputOps = (ctx: ManagerContext) => {
  const deliverInput = Effect.fn("SubAgentManager.sendInput")(function*(
    id: string,
    message: string,
    interrupt: boolean,
    via: InputVia
  ) {
    const target = yield* ctx.table.lookupAny(id)
    const agentId = idOf(target)
    const status = isLive(target) ? target.record.status : target.status
    const now = yield* Clock.currentTimeMillis
    if (status !== "running" && status !== "pending") {
      const reason = `agent ${agentId} is ${status}; nothing is running to receive input (agent_resume continues it)`
      if (!isLive(target)) {
        return { delivered: false, reason, agent: yield* AgentRun.currentView(ctx, target) } satisfies InputResult
      }
      // Kept in the record, so an instruction sent too late is not lost without a trace.
      const input = Receipt.input(target.record, { now, message, delivered: false, reason, interrupt, via })
      yield* ctx.store.put(target.record)
      return { delivered: false, reason, agent: ctx.table.view(target.record), input } satisfies InputResult
    }
    // Another process runs it: its owner delivers the message at its next request poll, and records it.
    if (!isLive(target)) return yield* ForeignAgents.sendForeign(ctx, target, message)
    yield* Effect.orDie(ctx.session.deliver(agentId, message, interrupt))
    target.lastProgress = now
    // In memory only: the next put (its next status change) carries it.
    const input = Receipt.input(target.record, { now, message, delivered: true, interrupt, via })
    return { delivered: true, agent: ctx.table.view(target.record), input } satisfies InputResult
  })

  /** A message within its bound, delivered (or recorded undelivered) by `deliverInput`. */
  const sendInput = (id: string, message: string, interrupt: boolean, via: InputVia = "api") => {
    const tooLong = SpawnCheck.checkMessage("message", message)
    return tooLong === undefined ? deliverInput(id, message, interrupt, via) : Effect.fail(tooLong)
  }

  return { deliverInput, sendInput }
}

// --- Resume and assign ---

const resumeOf = (ctx: ManagerContext) =>
  Effect.fn("SubAgentManager.resume")(function*(callerId: string | undefined, id: string, message?: string) {
    const tooLong = SpawnCheck.checkMessage("message", message)
    if (tooLong !== undefined) return yield* tooLong
    const agent = yield* ForeignAgents.adopt(ctx, id)
    const status = agent.record.status
    if (!isTerminal(status)) return yield* new NotResumable({ agentId: agent.record.agent_id, status })
    // Its branch is settled: more work on it would be work no merge could bring back.
    const settled = agent.record.worktree?.state
    if (settled !== undefined) {
      return yield* new NotResumable({
        agentId: agent.record.agent_id,
        status,
        reason: `its worktree was ${settled}${agent.record.worktree?.removed === true ? " and removed" : ""}; ` +
          "spawn a new agent for more work (this one's transcript stays readable with handle_read)"
      })
    }
    return yield* AgentRun.resume(ctx, agent, callerId, message)
  })

const assignOf = (
  ctx: ManagerContext,
  deliverInput: (
    id: string,
    message: string,
    interrupt: boolean,
    via: InputVia
  ) => Effect.Effect<InputResult, AgentNotFound>
) =>
  Effect.fn("SubAgentManager.assign")(function*(
    id: string,
    update: {
      readonly objective?: string | undefined
      readonly role?: string | undefined
      readonly message?: string | undefined
    }
  ) {
    const tooLong = SpawnCheck.checkMessage("objective", update.objective) ??
      SpawnCheck.checkMessage("message", update.message)
    if (tooLong !== undefined) return yield* tooLong
    const agent = yield* ctx.table.lookup(id)
    // A new role only narrows: a live agent's rules are re-derived at once (its loop sees
    // them at its next tool call); a finished one is checked against its recorded role, which
    // is what a resume derives its rules from. Either way a widening is refused, unchanged.
    const resolved = update.role === undefined
      ? undefined
      : yield* SpawnPlan.resolveRole(ctx.plans.agents, update.role, ["*"])
    const role = resolved?.role
    if (resolved !== undefined) {
      // Its new role's MCP servers (its definition's, `[roles.<role>]`): met with its own.
      const mcpServers = McpNarrowing.meet(
        resolved.mcpServers,
        ctx.plans.roleMcpServers?.[resolved.role.name.toLowerCase()]
      )
      const target = { role: resolved.role, definition: resolved.definition, mcpServers }
      const live = yield* ctx.session.reassign(agent.record.agent_id, target).pipe(
        Effect.map((info) => {
          agent.record.permissions = Permission.toJson(info.rules)
          return true
        }),
        Effect.catchTag("SessionNotFound", () => Effect.succeed(false))
      )
      if (!live) {
        const current = yield* SpawnPlan.resolveRole(ctx.plans.agents, agent.record.role, ["*"])
        const ceiling = (r: SpawnPlan.ResolvedRole) =>
          Permission.effective(Permission.allowAll, {
            label: r.role.name,
            role: Roles.ceiling(r.role),
            definition: r.definition
          })
        const grants = Permission.widening(ceiling(current), ceiling(resolved))
        if (grants.length > 0) {
          return yield* new Permission.PermissionWidening({
            agentId: id,
            from: agent.record.role,
            to: resolved.role.name,
            grants
          })
        }
      }
    }
    if (update.objective !== undefined) agent.record.objective = update.objective
    if (role !== undefined) agent.record.role = role.name
    Receipt.log(agent.record, {
      at: yield* Clock.currentTimeMillis,
      type: "assigned",
      detail: [
        role === undefined ? undefined : `role ${role.name}`,
        update.objective === undefined ? undefined : `objective: ${update.objective}`
      ]
        .filter((part) => part !== undefined).join("; ") || "note"
    })
    yield* ctx.store.put(agent.record)
    const note = [
      "Your assignment was updated by your parent.",
      update.objective === undefined ? undefined : `Objective: ${update.objective}`,
      role === undefined ? undefined : `Role: ${role.name} — ${role.description}`,
      update.message
    ].filter((line) => line !== undefined).join("\n")
    // Its parts were checked above; together they may be longer than one message may be.
    return yield* deliverInput(agent.record.agent_id, note, false, "agent_assign")
  })

// --- Transcripts and checks ---

const recordOps = (ctx: ManagerContext) => {
  /**
   * A page of a transcript by its handle, or by the agent's id, session name or run id. A
   * durable store holds every message as it landed; with the memory store, this process's
   * session holds the conversation.
   */
  const readTranscript = Effect.fn("SubAgentManager.readTranscript")(function*(
    handle: string,
    page: { readonly offset?: number | undefined; readonly limit?: number | undefined }
  ) {
    const byHandle = handle.endsWith(".jsonl") ? handle.slice(0, -".jsonl".length) : handle
    const target = yield* ctx.table.lookupAny(byHandle).pipe(
      Effect.catchTag("AgentNotFound", () => Effect.fail(new AgentNotFound({ agentId: handle })))
    )
    const record = isLive(target) ? target.record : target
    const stored = yield* Effect.orElseSucceed(
      Effect.flatMap(ctx.store.readTranscript(record.transcript_handle), Transcript.decode),
      () => [] as ReadonlyArray<Prompt.Message>
    )
    // An in-memory store keeps only a process child's transcript (sent at its end); the
    // session holds every other live agent's.
    const live = ctx.store.durable || stored.length > 0 || !isLive(target)
      ? Option.none()
      : yield* Effect.option(ctx.session.transcript(record.agent_id))
    const messages = Option.isSome(live) ? live.value : stored
    return TranscriptView.page(messages, {
      handle: record.transcript_handle,
      agentId: record.agent_id,
      offset: page.offset,
      limit: page.limit
    })
  })

  const attachVerification = Effect.fn("SubAgentManager.attachVerification")(
    function*(id: string, check: CommandCheck) {
      const target = yield* ctx.table.lookupAny(id)
      if (!isLive(target)) {
        return yield* new NotOwned({
          agentId: target.agent_id,
          owner: `pid ${target.owner_pid ?? "unknown"}${
            target.owner_host === undefined ? "" : ` on ${target.owner_host}`
          }`
        })
      }
      const record = target.record
      Receipt.attach(
        record,
        Receipt.fromCommand({
          command: check.command,
          exitCode: check.exitCode,
          summary: check.summary,
          runId: currentRunId(record),
          now: yield* Clock.currentTimeMillis
        })
      )
      yield* ctx.store.put(record)
      return ctx.table.view(record)
    }
  )

  return { readTranscript, attachVerification }
}

// --- Heartbeat ---

/**
 * Liveness: no progress for heartbeat_timeout_secs -> cancelled (Heartbeat). A model call in
 * flight is progress (its own timeout bounds it), reported as a tick; so is a running
 * background child (a coordinator blocked in agent_wait): the child's own heartbeat bounds it.
 * A child still queued for a permit is not (with queue admission a waiting parent lends it
 * its permit, so that lasts only while other agents hold every permit). The watchdog runs
 * while this process has live agents, and only then, on a timer that does not keep the
 * process alive (internal/sleep.ts): a process whose runs ended exits on its own.
 */
const watchdogOf = (
  ctx: ManagerContext,
  wake: Latch.Latch,
  cancel: (id: string, reason: string) => Effect.Effect<unknown, unknown>
) => {
  const timeoutSecs = ctx.config.heartbeatTimeoutSecs
  const look = Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    // A person's thinking time is not a stall: a question has its own timeout (Approvals).
    const approvals = yield* Effect.service(Approvals)
    for (const agent of ctx.table.agents.values()) {
      if (agent.record.status !== "running" || !Heartbeat.isStale(agent.lastProgress, now, timeoutSecs)) continue
      const info = yield* Effect.option(ctx.session.info(agent.record.agent_id))
      if (
        (Option.isSome(info) && info.value.waitingOnModel) || ctx.table.hasRunningChild(agent.record.agent_id) ||
        approvals.waiting(agent.record.agent_id)
      ) {
        agent.lastProgress = now
        continue
      }
      yield* Effect.forkIn(cancel(agent.record.agent_id, Heartbeat.reason(timeoutSecs)), ctx.scope)
    }
  })
  const every = Duration.millis(Heartbeat.checkIntervalMs(timeoutSecs))
  return Effect.gen(function*() {
    yield* wake.await
    yield* wake.close
    while (ctx.table.live > 0) {
      yield* sleepUnref(every)
      if (ctx.table.live > 0) yield* look
    }
  })
}

// --- Wiring ---

/** The embedded manager over the services in context, and its embedded-only surface. */
export const make = Effect.fnUntraced(function*(config: Options) {
  const session = yield* Session
  const models = yield* Models
  const store = yield* SubAgentStore
  const events = yield* AgentEvents
  const registry = yield* ToolRegistry
  const workspace = yield* Effect.serviceOption(Workspace)
  const worktrees = yield* Effect.serviceOption(Worktrees)
  const scope = yield* Effect.scope
  const bootId = store.owner.boot_id
  // Permits, `maxConcurrent` of them (internal/permits.ts): taken at admission (reject), or
  // waited for in order (queue), when a blocked agent may lend its own to one it waits for.
  const permits = Permits.make(config.maxConcurrent)
  const requestsWake = yield* Latch.make()
  const watchdogWake = yield* Latch.make()
  const table = new AgentTable({
    bootId,
    store,
    onLive: () => {
      requestsWake.openUnsafe()
      watchdogWake.openUnsafe()
    }
  })
  // Agents of processes that ended without finishing them are interrupted; those of live
  // processes are theirs. This process's own agents are those it starts or adopts.
  yield* store.reconcile
  /** Paths as receipts keep them: workspace-relative. */
  const relativize = Option.isSome(workspace) ? workspace.value.relativize : (path: string) => path
  const ctx: ManagerContext = {
    config,
    session,
    store,
    events,
    plans: {
      models,
      registry,
      agents: config.agents ?? [],
      roleModels: config.roleModels,
      defaultModel: config.defaultModel,
      roleMcpServers: config.roleMcpServers
    },
    permits,
    table,
    bootId,
    scope,
    maxResultChars: config.maxResultChars ?? AgentResult.defaultMaxResultChars,
    workspaceRoot: Option.isSome(workspace) ? workspace.value.root : undefined,
    observer: observerOf({ store, table, permits }, relativize),
    workspace: Option.getOrUndefined(workspace),
    worktrees
  }

  const { run, spawn, startRoot } = spawnOps(ctx)
  const { result, wait } = waitOps(ctx)
  const { cancel } = cancelOps(ctx)
  const { deliverInput, sendInput } = inputOps(ctx)

  yield* Effect.forkIn(Effect.forever(watchdogOf(ctx, watchdogWake, cancel)), scope)
  if (store.durable) {
    yield* Effect.forkIn(
      Effect.forever(ForeignAgents.serveRequests(ctx, requestsWake, {
        cancel,
        input: (agentId, message) => sendInput(agentId, message, false, "request"),
        answer: (payload) =>
          Option.match(StoredQuestions.decodeRequest(payload), {
            onNone: () => Effect.logWarning(`an answer request that does not decode: ${payload}`),
            onSome: (request) => Effect.flatMap(Effect.service(Approvals), (a) => a.decide(request.id, request.answer))
          })
      })),
      scope
    )
  }
  yield* Scope.addFinalizer(scope, store.flush.pipe(Effect.ignore))

  const workerRecord = (record: SubAgentRecord): Effect.Effect<Receipt.WorkerRecord> =>
    Effect.map(
      record.session_boot_id === bootId ? Effect.succeed("self" as const) : store.liveness(record.session_boot_id),
      (owner) => Receipt.workerRecord(record, { workspace: config.workspace, durable: store.durable, owner })
    )

  const manager: SubAgentManager["Service"] = {
    bootId,
    options: config,
    spawn,
    run,
    wait,
    result,
    cancel,
    list: listOf(ctx),
    sendInput,
    resume: resumeOf(ctx),
    unreadChildren: (parentId) => Effect.sync(() => table.unreadChildren(parentId)),
    markRead: (parentId, ids) => Effect.sync(() => table.markRead(parentId, ids)),
    assign: assignOf(ctx, deliverInput),
    running: Effect.sync(() => table.running),
    resolve: (id) => table.resolve(id),
    ...recordOps(ctx),
    workerRecord
  }
  const embedded: Embedded["Service"] = {
    startRoot,
    mergeWorktree: Effect.fn("SubAgentManager.mergeWorktree")((request) => Isolation.merge(ctx, request))
  }
  return { manager, embedded }
})
