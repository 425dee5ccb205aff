/**
 * AgentRun — one run of one agent in this process: its plan and record, its admission under
 * the cap, its session's prompt as a fiber, and `finish`, which writes the outcome and
 * publishes exactly one terminal event.
 *
 * A background child is forked into its parent's running prompt scope, so interrupting or
 * cancelling the parent interrupts every descendant; a `detached` one lives in the manager's
 * scope and survives its parent; a foreground one (`task`) is a child of the caller's fiber.
 * What the run did comes back from the run itself (RunObserver.onEnd: its counts and the input
 * it never read), so ending it asks nothing of the session.
 */
import type * as Prompt from "effect/ai/Prompt"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import { bound, outcomeOf } from "../../AgentResult.ts"
import type { ClaimsReport } from "../../Claims.ts"
import { nowMillis } from "../../internal/clock.ts"
import * as Names from "../../internal/names.ts"
import * as Transcript from "../../internal/transcript.ts"
import * as OutputSchema from "../../OutputSchema.ts"
import * as Permission from "../../Permission.ts"
import * as Receipt from "../../Receipt.ts"
import { describeFailure, type PromptResult, type RunEnd, type SessionInfo } from "../../Session.ts"
import * as SpawnPlan from "../../SpawnPlan.ts"
import { CapReached } from "../../SubAgentErrors.ts"
import type { AgentView, RootOptions, RunError, SpawnRequest } from "../../SubAgentManager.ts"
import { agentOfRunId, currentRunId, isTerminal, type SubAgentRecord } from "../../SubAgentRecord.ts"
import type { SubAgentStore } from "../../SubAgentStore.ts"
import * as Workspace from "../../Workspace.ts"
import { firstSnapshot, isLive, type LiveAgent, type Mutable } from "./AgentTable.ts"
import * as Isolation from "./isolation.ts"
import type { ManagerContext } from "./ManagerContext.ts"
import * as ProcessRun from "./ProcessRun.ts"

/** A run's sub-agent permit: taken at admission, to be waited for (queue), or none (a root agent). */
export type Permit = "held" | "wait" | "none"

/** How a run is started: in the background (agent_spawn), in the caller's fiber (task), or a tree's root. */
export type Mode = "background" | "foreground" | "root"

// --- Transcripts ---

/** Queues messages for the agent's transcript in the store (committed at the end of this turn). */
export const queueMessages = (
  store: SubAgentStore["Service"],
  handle: string,
  messages: ReadonlyArray<Prompt.Message>
) => {
  // Plain messages (every one but a file's) are encoded here and now: one step, not a chain.
  const plain = Transcript.encodePlain(messages)
  return Effect.catch(
    plain === undefined
      ? Effect.flatMap(Transcript.encode(messages), (encoded) => store.queueTranscript(handle, encoded))
      : store.queueTranscript(handle, plain),
    (error) => Effect.logWarning(error.message)
  )
}

/** The conversation a new session starts with (system prompt, a fork's copied history), into the store. */
const persistStart = (ctx: ManagerContext, agent: LiveAgent) =>
  ctx.store.durable
    ? Effect.flatMap(
      // The session was created a step before: it is there.
      Effect.orDie(ctx.session.transcript(agent.record.agent_id)),
      (messages) => queueMessages(ctx.store, agent.record.transcript_handle, messages)
    )
    : Effect.void

// --- Counts ---

/** A running agent's counts as its session has them now (a list, a wait: the record is written at its end). */
export const syncFromSession = (ctx: ManagerContext, agent: LiveAgent) =>
  Effect.map(Effect.option(ctx.session.info(agent.record.agent_id)), (found) => {
    if (Option.isSome(found)) countsInto(agent.record, found.value)
  })

const countsInto = (record: Mutable<SubAgentRecord>, counts: Omit<RunEnd, "takeUnread">) => {
  // An unnamed model takes the name its provider reported (Models.unnamed).
  record.model = counts.model
  record.steps = counts.steps
  record.tool_calls = counts.toolCalls
  if (counts.lastTool !== undefined) record.last_tool = counts.lastTool
  record.tokens = counts.treeUsage
  record.usage = Receipt.usage(counts.usageSteps)
}

/** The record as a caller sees it now: a live agent's counts synced, another process's record read again. */
export const currentView = (ctx: ManagerContext, target: LiveAgent | SubAgentRecord): Effect.Effect<AgentView> =>
  isLive(target)
    ? Effect.map(
      isTerminal(target.record.status) ? Effect.void : syncFromSession(ctx, target),
      () => ctx.table.view(target.record)
    )
    : Effect.map(ctx.store.get(target.agent_id), (found) => ctx.table.view(Option.getOrElse(found, () => target)))

// --- Admission ---

// Decided at once: it is called inside the spawn's own step, which reads the Exit at no step
// of its own. The cap error counts the permits taken at admission: every running agent took
// one, and so did one still being set up (its session and record created), so a full cap
// never reports "running 0".
export const admit = (ctx: ManagerContext): Exit.Exit<boolean, CapReached> => {
  if (ctx.config.admission === "queue") return Exit.succeed(false)
  if (ctx.permits.admit()) return Exit.succeed(true)
  return Exit.fail(new CapReached({ max: ctx.config.maxConcurrent, running: ctx.permits.held() }))
}

// --- Creation ---

/** The parent's model, for a spawn that names a model (SpawnPlan asks only when it is not a configured one). */
const parentModel = (ctx: ManagerContext, parentId: string | undefined) =>
  parentId === undefined
    ? undefined
    : Effect.suspend(() =>
      Effect.map(Effect.option(ctx.session.info(parentId)), (found) =>
        Option.isSome(found) ? found.value.model : undefined)
    )

/**
 * Creates an agent and starts its run: the plan (checked, its model resolved once), the
 * permit, the session (observed by the manager), the record, the fiber. Internal to spawn,
 * run and startRoot, whose spans cover it; untraced because it runs once per sub-agent.
 */
export const start = Effect.fnUntraced(function*(
  ctx: ManagerContext,
  parentId: string | undefined,
  request: SpawnRequest,
  mode: Mode,
  /** A root's rules and budgets from elsewhere (a process child's, from its parent's engine). */
  rootOptions?: RootOptions | undefined
) {
  const foreground = mode !== "background"
  const root = mode === "root"
  const plan = yield* SpawnPlan.resolve(request, ctx.plans, { root, parentModel: parentModel(ctx, parentId) })
  // How it is kept apart: the spawn's own, its definition's, its role's (`[subagents.isolation]`).
  const isolation = root ? undefined : request.isolation ?? plan.isolation ?? ctx.config.roleIsolation?.[plan.role.name]
  if (isolation === "process") {
    const unavailable = ProcessRun.unavailable(ctx)
    if (unavailable !== undefined) return yield* unavailable
  }
  // The run a verifier checks is the one current when it is spawned.
  const verifies = request.verifies === undefined
    ? undefined
    : currentRunId(yield* Effect.map(ctx.table.lookupAny(request.verifies), (t) => isLive(t) ? t.record : t))
  // The root of a tree (`fibril run`'s agent) is recorded but holds no sub-agent permit.
  const permit: Permit = root ? "none" : (yield* admit(ctx)) ? "held" : "wait"
  const released = permit === "held" ? Effect.sync(ctx.permits.unadmit) : Effect.void
  const created = root
    ? yield* ctx.session.create({
      role: plan.role.name,
      model: plan.model,
      languageModel: plan.languageModel,
      allowedTools: request.allowedTools,
      askTools: plan.askTools,
      // A process child's servers were checked by its parent's engine, and its rules (the
      // ceiling) carry them: its own process may have none of them to check against.
      ...(rootOptions?.ceiling === undefined
        ? { mcpServers: plan.mcpServers, mcpServersNamed: plan.mcpServersNamed }
        : {}),
      description: request.description,
      observer: ctx.observer,
      ceiling: rootOptions?.ceiling,
      budgets: rootOptions?.budgets,
      output: plan.output
    }).pipe(Effect.catchTag("UnknownModel", (error) => Effect.die(error)))
    : yield* ctx.session.createChild(parentId, {
      role: plan.role,
      description: request.description,
      model: plan.model,
      languageModel: plan.languageModel,
      allowedTools: plan.allowedTools,
      askTools: plan.askTools,
      mcpServers: plan.mcpServers,
      mcpServersNamed: plan.mcpServersNamed,
      definition: plan.definition,
      forkContext: request.forkContext,
      budgets: plan.maxSteps === undefined ? ctx.config.budgets : { ...ctx.config.budgets, maxSteps: plan.maxSteps },
      observer: ctx.observer,
      output: plan.output
    }).pipe(Effect.onError(() => released))
  // Its worktree, named after it: a spawn that cannot have one is refused, nothing left behind.
  const isolated = yield* Isolation.prepare(ctx, isolation, created.id).pipe(
    Effect.onError(() => Effect.andThen(released, ctx.session.dispose(created.id)))
  )
  // Its system message names where it works: its worktree, or its parent's (a child of an
  // isolated agent works in that agent's worktree).
  const place = isolated?.workspace ??
    (ctx.workspace === undefined ? undefined : yield* Workspace.current(ctx.workspace))
  if (place !== undefined && place.root !== ctx.workspace?.root) {
    yield* Effect.orDie(ctx.session.moveTo(created.id, place.root))
  }
  const agent = newRecord(ctx, created, request, parentId, foreground, verifies)
  if (isolated !== undefined) agent.record.worktree = isolated.info
  ctx.table.started()
  yield* ctx.store.put(agent.record)
  // A process child's transcript is its process's, kept at its end (ProcessRun).
  if (isolation !== "process") yield* persistStart(ctx, agent)
  const detached = agent.record.detached
  if (!detached && parentId !== undefined) ctx.table.addChild(ctx.table.cancelReaches, parentId, agent)
  const run = runAgent(
    ctx,
    agent,
    OutputSchema.taskMessage(request.prompt, created.output),
    permit,
    isolation === "process" ? { ...request, isolation } : undefined
  )
  let fiber: Fiber.Fiber<PromptResult, RunError>
  if (foreground) {
    fiber = yield* Effect.forkChild(run, { startImmediately: true })
  } else {
    const scope = detached || parentId === undefined
      ? ctx.scope
      : Option.getOrElse(ctx.session.scopeOf(parentId), () => ctx.scope)
    if (!detached && parentId !== undefined) ctx.table.addChild(ctx.table.childrenOf, parentId, agent)
    fiber = yield* Effect.forkIn(run, scope, { startImmediately: true })
  }
  keepFiber(agent, fiber)
  return { agent, fiber }
})

/** The new agent's record and its entry in the table. */
const newRecord = (
  ctx: ManagerContext,
  created: SessionInfo,
  request: SpawnRequest,
  parentId: string | undefined,
  foreground: boolean,
  verifies: string | undefined
): LiveAgent => {
  const now = nowMillis()
  const detached = request.detached === true && !foreground
  const sessionName = Names.unique(created.id, (name) => ctx.table.names.has(name))
  const receipt = Receipt.initial({
    agentId: created.id,
    sessionName,
    transcriptHandle: `${created.id}.jsonl`,
    now,
    bootId: ctx.bootId,
    pid: ctx.store.owner.pid,
    message: request.prompt,
    detail: verifies === undefined ? undefined : `verifies ${verifies}`
  })
  // Constant keys, no spread: the literal is copied from its template at once (after a
  // spread, each of these 30 fields would be added one at a time). A root has no parent
  // and most agents verify nothing: those two keys are added only when they have a value.
  const record: Mutable<SubAgentRecord> = {
    record_version: receipt.record_version,
    session_name: receipt.session_name,
    runs: receipt.runs,
    events: receipt.events,
    artifacts: receipt.artifacts,
    usage: receipt.usage,
    agent_id: created.id,
    depth: created.depth,
    role: created.role,
    model: created.model,
    description: request.description ?? request.prompt.slice(0, 60),
    objective: request.prompt,
    status: "pending",
    detached,
    fork_context: request.forkContext === true,
    session_boot_id: ctx.bootId,
    owner_pid: ctx.store.owner.pid,
    owner_host: ctx.store.owner.host,
    created_at: now,
    steps: 0,
    tool_calls: 0,
    tokens: { input: 0, output: 0, cached: 0 },
    transcript_handle: `${created.id}.jsonl`,
    permissions: Permission.toJson(created.rules)
  }
  if (parentId !== undefined) record.parent_id = parentId
  if (verifies !== undefined) record.verifies = verifies
  if (created.output !== undefined) record.output_schema = created.output.compiled.jsonSchema
  const agent: LiveAgent = {
    record,
    parentId,
    fiber: undefined,
    done: Deferred.makeUnsafe<void>(),
    cancelReason: undefined,
    started: false,
    lastProgress: now,
    runBase: { steps: 0, toolCalls: 0, tokens: record.tokens },
    resultRead: false,
    permit: undefined,
    lending: undefined,
    lentTo: undefined,
    lastEnded: undefined,
    ended: undefined
  }
  ctx.table.add(agent, sessionName)
  return agent
}

// --- The run ---

// The agent's run: (wait for a permit,) run the session's prompt, record the outcome.
const runAgent = (
  ctx: ManagerContext,
  agent: LiveAgent,
  message: string,
  permit: Permit,
  /** An `isolation: "process"` request: the run is in a process of its own. */
  ownProcess?: SpawnRequest | undefined
) => {
  if (permit === "held") agent.permit = "pool"
  let counted = false
  const body = Effect.suspend(() => {
    const now = nowMillis()
    // Counted and marked running in one synchronous step, so an interruption cannot split them.
    if (permit !== "none") {
      ctx.table.running++
      counted = true
    }
    agent.record.status = "running"
    agent.record.started_at = now
    agent.lastProgress = now
    agent.ended = undefined
    const record = agent.record
    Receipt.started(record, now)
    // A process child's prompt runs in its own OS process, on the same engine (ProcessRun).
    const prompt = ownProcess !== undefined
      ? ProcessRun.prompt(ctx, agent, ownProcess.prompt, ownProcess.model)
      : ctx.session.prompt(record.agent_id, message)
    return Effect.flatMap(ctx.store.put(record), (): Effect.Effect<PromptResult, RunError> => prompt)
  })
  const confined = Isolation.confine(ctx, agent.record, body)
  // One finalizer for the count, the permit taken at admission and the outcome: each
  // finalizer is a step to unwind when the agent is interrupted.
  const admitted = permit === "wait" ? Effect.andThen(ctx.permits.take(agent), confined) : confined
  return Effect.onExit(admitted, (exit) => {
    if (counted) ctx.table.running--
    ctx.permits.release(agent, permit === "held")
    return finish(ctx, agent, exit)
  })
}

/** A run that finished while being forked (`finish` cleared the field already) is not kept. */
export const keepFiber = (agent: LiveAgent, fiber: Fiber.Fiber<unknown, unknown>) => {
  if (!isTerminal(agent.record.status)) agent.fiber = fiber
}

// --- The end ---

/** The outcome of a run into its record: the answer parsed and bounded, or why it ended. */
const outcomeInto = (
  ctx: ManagerContext,
  agent: LiveAgent,
  exit: Exit.Exit<{ readonly text: string; readonly output?: unknown }, unknown>,
  claims: ClaimsReport | undefined
): "completed" | "failed" | "cancelled" | "interrupted" => {
  const record = agent.record
  const max = ctx.maxResultChars
  if (Exit.isSuccess(exit)) {
    // What the record keeps, and so what a parent receives, is bounded part by part; the
    // whole answer is in the transcript.
    record.status = "completed"
    delete record.reason
    record.outcome = outcomeOf(exit.value.text, max, { claims, output: exit.value.output })
    return record.status
  }
  if (Cause.hasInterruptsOnly(exit.cause)) {
    record.status = agent.cancelReason === undefined ? "interrupted" : "cancelled"
    record.reason = bound(
      agent.cancelReason ?? "Interrupted: its parent was interrupted or the runtime shut down",
      max
    )
    return record.status
  }
  record.status = "failed"
  record.reason = bound(describeFailure(exit.cause), max)
  return record.status
}

/** The run's end: its counts and outcome into the record, its one terminal event, the record written. */
const finish = (
  ctx: ManagerContext,
  agent: LiveAgent,
  exit: Exit.Exit<{ readonly text: string; readonly output?: unknown }, unknown>
) =>
  Effect.gen(function*() {
    const record = agent.record
    if (isTerminal(record.status)) return
    // What the run did, and the messages delivered that it never read (it ended first), come
    // back from the run. A run whose prompt never ran (cancelled while queued, or refused) left
    // no end: then the session is asked.
    const end = agent.ended
    agent.ended = undefined
    let unread: ReadonlyArray<string>
    // A completed answer's claims, checked by the run as it ended (Session: Claims.ofAnswer).
    const claims = end?.claims
    if (end !== undefined) {
      countsInto(record, end)
      unread = end.takeUnread()
    } else {
      yield* syncFromSession(ctx, agent)
      unread = yield* ctx.session.takeUnread(record.agent_id)
    }
    record.finished_at = nowMillis()
    const status = outcomeInto(ctx, agent, exit, claims)
    Receipt.unread(
      record,
      unread.length,
      `the agent ended (${status}) before its next step read it; agent_resume with this message delivers it`,
      record.finished_at
    )
    Receipt.finished(record, agent.runBase)
    yield* Isolation.commit(ctx, record)
    // An agent that never started its prompt has no session events: say it here, so every
    // agent publishes exactly one terminal event.
    if (!agent.started) {
      yield* ctx.events.publish({
        type: status,
        reason: record.reason,
        at: record.finished_at,
        agent: firstSnapshot(record)
      })
    }
    yield* ctx.store.put(record)
    if (record.verifies !== undefined) yield* attachVerifierResult(ctx, record)
    ctx.table.live--
    yield* Deferred.succeed(agent.done, undefined)
    // A finished run's fiber (its context, spans, exit) is not kept for as long as the record.
    agent.fiber = undefined
    yield* ctx.table.evictIfGrown(ctx.session.dispose)
  })

/**
 * A verifier's result, as a receipt on the record of the agent it checked (when this process
 * owns that record; another process's record keeps only the verifier's own `verifies`).
 */
const attachVerifierResult = (ctx: ManagerContext, verifier: SubAgentRecord) =>
  Effect.gen(function*() {
    const checked = verifier.verifies!
    const target = ctx.table.agents.get(agentOfRunId(checked) ?? checked)
    if (target === undefined) {
      return yield* Effect.logWarning(
        `verifier ${verifier.agent_id}: ${verifier.verifies} is not an agent of this process; its result stays in the verifier's record`
      )
    }
    const now = yield* Clock.currentTimeMillis
    Receipt.attach(target.record, Receipt.fromVerifier(verifier, checked, now))
    yield* ctx.store.put(target.record)
  })

// --- Resume ---

/**
 * A new run of a finished agent of this process (adopted first if it was another's): its
 * session restored from the transcript if it is gone, its record reset to `pending` (the
 * ended run stays in `runs`), and the run forked into the caller's scope.
 */
export const resume = Effect.fnUntraced(function*(
  ctx: ManagerContext,
  agent: LiveAgent,
  callerId: string | undefined,
  message: string | undefined
) {
  const record = agent.record
  const agentId = record.agent_id
  const status = record.status
  const { definition, role } = yield* SpawnPlan.resolveRole(ctx.plans.agents, record.role, undefined)
  // After a restart the session is gone: rebuild it from its transcript, where each tool
  // result was written as it landed.
  const restore = Effect.gen(function*() {
    // One that cannot be read or decoded: a fresh conversation.
    const transcript = yield* Effect.orElseSucceed(
      Effect.flatMap(ctx.store.readTranscript(record.transcript_handle), Transcript.decode),
      () => [] as ReadonlyArray<Prompt.Message>
    )
    return yield* ctx.session.restore({
      id: agentId,
      parentId: record.parent_id,
      depth: record.depth,
      role,
      definition,
      recorded: record.permissions === undefined ? undefined : Permission.ceilingFromJson(record.permissions),
      model: record.model,
      description: record.description,
      transcript: Transcript.mergeToolMessages(transcript),
      // Compiled when spawned, so it compiles again; a record altered since gets no schema.
      output: record.output_schema === undefined
        ? undefined
        : Result.getOrUndefined(OutputSchema.compile(record.output_schema)),
      budgets: ctx.config.budgets,
      observer: ctx.observer
    })
  })
  // What the session has counted so far (nothing, when restored): the new run adds to it.
  const before = yield* ctx.session.info(agentId).pipe(Effect.catchTag("SessionNotFound", () => restore))
  agent.runBase = { steps: before.steps, toolCalls: before.toolCalls, tokens: before.treeUsage }
  const permit: Permit = (yield* admit(ctx)) ? "held" : "wait"
  const previous = `${status}${record.reason === undefined ? "" : `: ${record.reason}`}`
  // An agent that never started (cancelled while queued) never read its task: it comes first.
  const prompt = record.started_at === undefined
    ? (message === undefined ? record.objective : `${record.objective}\n\n${message}`)
    : message ?? `Continue where you left off. Your previous run ended ${previous}.`
  // Whoever still waits for the run that ended gets it as it ended.
  agent.lastEnded = ctx.table.view(structuredClone(record))
  // The run that ended stays in `runs`: a resume that fails does not erase what the agent did before.
  Receipt.beginResume(record, {
    now: yield* Clock.currentTimeMillis,
    bootId: ctx.bootId,
    pid: ctx.store.owner.pid,
    message: prompt
  })
  record.status = "pending"
  delete record.reason
  delete record.finished_at
  delete record.outcome
  record.session_boot_id = ctx.bootId
  record.owner_pid = ctx.store.owner.pid
  record.owner_host = ctx.store.owner.host
  agent.cancelReason = undefined
  agent.started = false
  agent.resultRead = false
  agent.done = yield* Deferred.make<void>()
  ctx.table.started()
  yield* ctx.store.put(record)
  const run = runAgent(ctx, agent, prompt, permit)
  const scope = callerId === undefined || record.detached
    ? ctx.scope
    : Option.getOrElse(ctx.session.scopeOf(callerId), () => ctx.scope)
  keepFiber(agent, yield* Effect.forkIn(run, scope, { startImmediately: true }))
  return ctx.table.view(record)
})
