/**
 * AgentWorkflow — one durable workflow per agent run, keyed by agent id and run number, its
 * name versioned (`fibril/agent/v3`): a change to what the loop does between steps gets a new
 * name, so a journal written by older code is never replayed by newer code.
 *
 * The body is `AgentLoop` over journaled steps: `model/<step>` (reads the agent's inbox, calls
 * the model, then takes the delivered input and writes it and the answer to the transcript in
 * the transaction that journals the result) and `tool/<step>/<index>` (one tool call, its result
 * written the same way). Fibril journals these two itself (`ClusterStore.runStep`: the call
 * outside any transaction, then one short transaction and one commit); everything else that
 * must happen once is an effect/workflow activity. The sub-agent tools run in the workflow
 * itself:
 *
 * - `task` executes a child workflow and waits for it; `agent_spawn` starts one and goes on.
 *   A child is joined through `Effect.exit`, so a failed or cancelled child is a tool result.
 * - the cap (`max_concurrent`) is a permit table taken in an activity's transaction: with
 *   `reject` a spawn over the cap is refused, with `queue` the child waits durably
 *   (DurableClock sleeps between attempts; no fiber or memory is held meanwhile).
 * - `agent_wait` / `agent_result` look at the children's rows each interval (an activity) and
 *   sleep on the DurableClock between looks; a timeout is a number of intervals, so it is
 *   deterministic on replay.
 * - `agent_send_input` queues a message in the target's durable inbox, read by its next
 *   model step.
 * - `agent_cancel` cancels the agent and its non-detached descendants explicitly (interrupting
 *   a parent workflow alone does not stop the children it waits on); a step in flight watches
 *   its agent's cancellation and interrupts its model or tool call.
 * - a tool that is not idempotent commits a marker before it runs: a step run again after a
 *   crash does not run it twice (the model reads `Interrupted`).
 *
 * Replay determinism: everything the body decides depends only on its payload, the worker
 * options (the same on every worker) and journaled results. Child ids are derived from the
 * parent's id, run, step and call index.
 */
import {
  AgentLoop,
  AgentSteps,
  Heartbeat,
  Models,
  Permission,
  Roles,
  Session,
  ToolRegistry,
  Workspace
} from "@fibril/core"
import * as SpawnCheck from "@fibril/core/SpawnCheck"
import * as Prompt from "effect/ai/Prompt"
import * as Cause from "effect/Cause"
import {
  ClusterSchema,
  MessageStorage,
  RunnerHealth,
  Runners,
  RunnerStorage,
  Sharding,
  ShardingConfig
} from "effect/cluster"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import { Activity, DurableClock, DurableDeferred, Workflow, WorkflowEngine } from "effect/workflow"
import { createHash } from "node:crypto"
import {
  type AgentRow,
  ClusterStore,
  finished,
  Grant,
  type Slot,
  type StepKey,
  stepTokens,
  type StepWork,
  StoreFailure,
  zeroUsage
} from "./ClusterStore.ts"

export const AgentPayload = Schema.Struct({
  agentId: Schema.String,
  run: Schema.Int,
  parentId: Schema.NullOr(Schema.String),
  /** The tree's root (the agent itself for a root): tree budgets, event following. */
  rootId: Schema.String,
  depth: Schema.Int,
  role: Schema.String,
  model: Schema.String,
  description: Schema.String,
  /** This run's task (the first run) or input (a resume). */
  prompt: Schema.String,
  detached: Schema.Boolean,
  /** The workspace the agent works in: only a worker serving it runs the agent. */
  workspace: Schema.String,
  /**
   * The grants from the root down to this agent, itself last (its caller's `allowed_tools`
   * among them): its rules are these applied in turn to the worker's root rules. Absent (a
   * payload of an older version): its role alone.
   */
  grants: Schema.optionalKey(Schema.Array(Grant))
})
export type AgentPayload = typeof AgentPayload.Type

export const AgentOutcome = Schema.Struct({
  agentId: Schema.String,
  text: Schema.String,
  steps: Schema.Int,
  toolCalls: Schema.Int
})
export type AgentOutcome = typeof AgentOutcome.Type

export class AgentFailed extends Schema.TaggedError<AgentFailed>()("AgentFailed", {
  agentId: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `agent ${this.agentId} failed: ${this.reason}`
  }
}

export const AgentWorkflow = Workflow.make("fibril/agent/v3", {
  payload: AgentPayload,
  success: AgentOutcome,
  error: AgentFailed,
  idempotencyKey: ({ agentId, run }) => `${agentId}#${run}`
})

/** Settings that decide what the body does: they must be the same on every worker. */
export interface Options {
  readonly maxDepth: number
  readonly maxSteps: number
  readonly childMaxSteps: number
  /** A sub-agent's own token budget per run (`[subagents] max_tokens`); none by default. */
  readonly childMaxTokens?: number | undefined
  /** A sub-agent run's wall-clock budget (`[subagents] max_wall_secs`), checked at each model step. */
  readonly maxWallSecs?: number | undefined
  /** Tokens of a whole tree (`[subagents] tree_max_tokens`), checked at each model step. */
  readonly treeMaxTokens?: number | undefined
  /**
   * A running sub-agent without a step for this long, and without a running child, is cancelled
   * (`[subagents] heartbeat_timeout_secs`; the watchdog of `watchdog`). 0: none.
   */
  readonly heartbeatSecs?: number | undefined
  /** Between two looks of the heartbeat's watchdog (default a quarter of it, 1-30 s). */
  readonly heartbeatCheckMs?: number | undefined
  /** Running sub-agents cluster-wide (the root agents do not count); 0: no cap. */
  readonly maxConcurrent: number
  readonly admission: "reject" | "queue"
  /**
   * The longest an `agent_wait`, or an agent queued for a permit, sleeps between two looks when
   * no child's end (no release) wakes it: a wake lost to a crash is found then.
   */
  readonly waitFallbackMs: number
  /**
   * How often a worker looks whether the agents whose model or tool steps it is running were
   * cancelled (one query for all of them, outside any step's transaction, only while steps are
   * in flight); cancelled, the call in flight is interrupted (a `shell` command's processes are
   * killed) and the step ends at once. 0: never (a cancel waits for the step). Default 250 ms.
   */
  readonly cancelCheckMs?: number | undefined
  /** Observes each model and tool step's execution (not its replay): for logs and tests. */
  readonly onStep?:
    | ((event: "start" | "end", agentId: string, run: number, name: string) => Effect.Effect<void>)
    | undefined
}

/** The services a worker's workflow body needs besides AgentSteps and the store. */
export type WorkerServices =
  | Permission.Permission
  | Workspace.Workspace
  | Models.Models
  | ToolRegistry.ToolRegistry

export const defaults: Options = {
  maxDepth: 1,
  maxSteps: 50,
  childMaxSteps: 50,
  maxConcurrent: 10,
  admission: "reject",
  waitFallbackMs: 5000
}

/** A child's id: a function of its parent's run and the call that started it. */
export const childId = (parent: string, run: number, step: number, index: number): string =>
  `ag_${createHash("sha256").update(`${parent}#${run}/${step}/${index}`).digest("hex").slice(0, 16)}`

const orchestration = new Set([
  "task",
  "agent_spawn",
  "agent_open",
  "agent_wait",
  "agent_result",
  "agent_cancel",
  "agent_close",
  "agent_send_input",
  "agent_resume"
])

const slot = { assistant: 100, tool: 1000 }

/** An activity whose store writes commit in the transaction that journals its result. */
const txActivity: typeof Activity.make = (options) =>
  Activity.make(options).annotate(ClusterSchema.WithTransaction, true)

/** How many times a step interrupted from within runs before its run fails. */
const maxStepAttempts = 5

const orDie = <A, R>(effect: Effect.Effect<A, StoreFailure, R>) => Effect.orDie(effect)

/** How a journaled step's outcome is written in Fibril's journal (JSON, as an activity's reply). */
const journalCodec = <A, E>(codec: Schema.Codec<Exit.Exit<A, E>, string>) => ({
  encode: Schema.encodeSync(codec),
  decode: Schema.decodeSync(codec)
})

const parseParams = (params: unknown): Readonly<Record<string, unknown>> => {
  let value = params
  if (typeof params === "string") {
    try {
      value = params.trim() === "" ? {} : JSON.parse(params)
    } catch {
      value = {}
    }
  }
  return typeof value === "object" && value !== null ? value as Record<string, unknown> : {}
}

const str = (params: Readonly<Record<string, unknown>>, keys: ReadonlyArray<string>): string | undefined => {
  for (const key of keys) {
    const value = params[key]
    if (typeof value === "string" && value !== "") return value
  }
  return undefined
}

const RowView = Schema.Struct({
  agent_id: Schema.String,
  status: Schema.String,
  description: Schema.String,
  role: Schema.String,
  summary: Schema.String,
  reason: Schema.optionalKey(Schema.String),
  steps: Schema.Int,
  tool_calls: Schema.Int,
  detached: Schema.Boolean
})
type RowView = typeof RowView.Type

export const view = (row: AgentRow): RowView => ({
  agent_id: row.agentId,
  status: row.status,
  description: row.description,
  role: row.role,
  summary: row.text ?? "",
  ...(row.reason === null ? {} : { reason: row.reason }),
  steps: row.steps,
  tool_calls: row.toolCalls,
  detached: row.detached
})

const ToolFailure = (error: string, message: string) => ({ error, message })

/** The result of a tool call stopped because its agent was cancelled while it ran. */
export const cancelledCall = (call: AgentSteps.StepToolCall): AgentSteps.ToolStep => ({
  id: call.id,
  name: call.name,
  isFailure: true,
  result: ToolFailure("Cancelled", `the agent was cancelled while this ${call.name} call ran: it was interrupted`)
})

/**
 * The result a non-idempotent tool call gets when its step runs again and finds the call was
 * started before (`ClusterStore.startToolCall`): the tool is not run a second time.
 */
export const interruptedCall = (call: AgentSteps.StepToolCall): AgentSteps.ToolStep => ({
  id: call.id,
  name: call.name,
  isFailure: true,
  result: ToolFailure(
    "Interrupted",
    `this ${call.name} call was started, then interrupted before its result was saved (the worker running it stopped or crashed). It was not run again because ${call.name} is not idempotent: it may have run in part or in full. Check its effects (read the files it writes, look for what it creates) before calling it again.`
  )
})

/**
 * Cancels an agent and every non-detached descendant: marks each cancelled (unless it has
 * finished) and interrupts its workflow, parent first. Usable from any process with the
 * engine (a client, a worker, an activity).
 */
export const cancelTree = (agentId: string, reason: string) =>
  Effect.gen(function*() {
    const store = yield* ClusterStore
    const visit = (id: string, root: boolean): Effect.Effect<void, StoreFailure, WorkflowEngine.WorkflowEngine> =>
      Effect.gen(function*() {
        const row = yield* store.get(id)
        if (row === undefined || (!root && row.detached)) return
        if (!finished(row.status)) {
          yield* store.update(id, { status: "cancelled", reason })
          yield* store.release(id)
        }
        yield* AgentWorkflow.interrupt(row.executionId)
        for (const child of yield* store.children(id)) yield* visit(child.agentId, false)
      })
    yield* visit(agentId, true)
  })

const failureReason = (cause: Cause.Cause<unknown>): string => {
  const error = Cause.squash(cause)
  if (error instanceof AgentFailed) return error.reason
  return error instanceof Error ? error.message : String(error)
}

/** Why a model step failed: the model call, a budget checked at the step, or a refused workspace. */
export const ModelStepFailure = Schema.Union([AgentSteps.ModelStepError, Session.BudgetExceeded, AgentFailed])

const spawning = new Set(["task", "agent_spawn", "agent_open"])

const modelJournal = journalCodec(
  Schema.fromJsonString(Schema.toCodecJson(Schema.Exit(AgentSteps.ModelStep, ModelStepFailure, Schema.Defect())))
)
const toolJournal = journalCodec(
  Schema.fromJsonString(Schema.toCodecJson(Schema.Exit(AgentSteps.ToolStep, Schema.Never, Schema.Defect())))
)

/** What a step's call gives: its result, and the writes its commit makes. */
interface Done<A, R> {
  readonly value: A
  readonly commit: Effect.Effect<void, StoreFailure, R>
}

/**
 * A step's outcome as its journal keeps it: a success (with its writes) or a typed failure
 * (with none) is journaled; a defect or an interruption is not (nothing is committed, and the
 * step runs again).
 */
const settle = <A, E, R1, R2>(
  encode: (exit: Exit.Exit<A, E>) => string,
  execute: Effect.Effect<Done<A, R2>, E, R1>
): Effect.Effect<StepWork<R2>, never, R1> =>
  Effect.flatMap(Effect.exit(execute), (exit): Effect.Effect<StepWork<R2>> =>
    Exit.isSuccess(exit)
      ? Effect.sync(() => ({ result: encode(Exit.succeed(exit.value.value)), commit: exit.value.commit }))
      : exit.cause.reasons.every(Cause.isFailReason)
      ? Effect.sync(() => ({ result: encode(exit as Exit.Exit<never, E>), commit: Effect.void }))
      : Cause.hasInterruptsOnly(exit.cause)
      ? Effect.failCause(exit.cause as Cause.Cause<never>)
      : Effect.die(Cause.squash(exit.cause)))

/**
 * An agent's rules: its chain's grants applied in turn to the root rules (Permission, rule 1),
 * as the embedded runtime derives a child's rules from its parent's.
 */
export const rulesFor = (root: Permission.Rules, maxDepth: number, grants: ReadonlyArray<Grant>) =>
  Effect.orDie(Effect.gen(function*() {
    let rules = root
    for (const grant of grants) {
      const role = yield* Roles.resolve(grant.role)
      rules = Permission.effective(
        rules,
        Permission.grantFor(grant.depth, maxDepth, role, { allowedTools: grant.allowedTools })
      )
    }
    return rules
  }))

/**
 * Why a spawn request's role and `allowed_tools` are refused (the embedded runtime's checks:
 * `custom` needs a non-empty list; every name must be a tool that exists), or undefined.
 */
export const refusedRequest = (
  registry: ToolRegistry.ToolRegistry["Service"],
  role: string,
  allowedTools: ReadonlyArray<string> | undefined
): string | undefined => {
  const spec = Roles.canonical(role)
  if (spec === undefined) return `unknown role "${role}"; accepted: ${Roles.acceptedNames}`
  if (Roles.roles[spec].needsAllowedTools && (allowedTools === undefined || allowedTools.length === 0)) {
    return `role ${spec}: custom agents need a non-empty allowed_tools list`
  }
  const unknown = allowedTools?.filter((name) => Option.isNone(registry.get(name))) ?? []
  if (unknown.length === 0) return undefined
  return `role ${spec}: allowed_tools names ${unknown.length === 1 ? "a tool that does" : "tools that do"} not exist: ${
    unknown.map((name) => JSON.stringify(name)).join(", ")
  }`
}

/** The reason an agent cancelled by the heartbeat gets (the embedded runtime's words). */
export const heartbeatReason = Heartbeat.reason

/**
 * The heartbeat in cluster mode: every worker looks, every `checkMs`, for running sub-agents
 * whose last step ended more than `seconds` ago (the store's clock, one for the whole
 * cluster) and that have no running child, and cancels each with its non-detached
 * descendants. A model call in flight is bounded by the API timeout, which the heartbeat
 * outlives (the config clamps it so); a child still queued for a permit is not progress, so a
 * parent holding a permit while its children queue is cancelled (the queue's deadlock breaker).
 * Several workers may cancel the same agent: a cancel is idempotent.
 */
export const watchdog = (seconds: number, checkMs: number) =>
  Effect.gen(function*() {
    const store = yield* ClusterStore
    while (true) {
      yield* Effect.sleep(checkMs)
      const stale = yield* Effect.orElseSucceed(store.stale(seconds), () => [])
      yield* Effect.forEach(stale, (id) => Effect.ignore(cancelTree(id, heartbeatReason(seconds))), { discard: true })
    }
  })

/**
 * The steps in flight on this worker, by agent, and one look for all of them every `checkMs`
 * (only while there are some): the agents cancelled meanwhile have their steps' calls stopped.
 * One query per look whatever the number of steps in flight.
 */
export class CancelWatch extends Context.Service<CancelWatch, {
  readonly enabled: boolean
  /** Resolves when the agent is seen cancelled; watched until the scope closes. */
  readonly watch: (agentId: string) => Effect.Effect<Effect.Effect<void>, never, Scope.Scope>
}>()("@fibril/cluster/AgentWorkflow/CancelWatch") {}

export const cancelWatch = (checkMs: number) =>
  Layer.effect(
    CancelWatch,
    Effect.gen(function*() {
      const store = yield* ClusterStore
      const inFlight = new Map<string, Set<Deferred.Deferred<void>>>()
      if (checkMs > 0) {
        yield* Effect.forkScoped(Effect.forever(Effect.gen(function*() {
          yield* Effect.sleep(checkMs)
          if (inFlight.size === 0) return
          const cancelled = yield* Effect.orElseSucceed(store.cancelledAmong([...inFlight.keys()]), () => [])
          for (const agentId of cancelled) {
            for (const deferred of inFlight.get(agentId) ?? []) Deferred.doneUnsafe(deferred, Exit.void)
          }
        })))
      }
      return CancelWatch.of({
        enabled: checkMs > 0,
        watch: (agentId) =>
          Effect.map(
            Effect.acquireRelease(
              Effect.sync(() => {
                const deferred = Deferred.makeUnsafe<void>()
                let set = inFlight.get(agentId)
                if (set === undefined) inFlight.set(agentId, set = new Set())
                set.add(deferred)
                return deferred
              }),
              (deferred) =>
                Effect.sync(() => {
                  const set = inFlight.get(agentId)
                  set?.delete(deferred)
                  if (set?.size === 0) inFlight.delete(agentId)
                })
            ),
            Deferred.await
          )
      })
    })
  )

/**
 * How often a runner reads its unprocessed messages from storage (workers and the in-memory
 * runner alike). The durable clocks (`agent_wait`'s timeouts, a queued agent's fallback) are
 * delivered by this read, so it bounds how late they fire.
 */
export const messagePollInterval = Duration.millis(200)

/**
 * effect/cluster's in-memory runner (TestRunner's parts: one process, messages in memory) with
 * the workers' `messagePollInterval` instead of TestRunner's 10 s: the engine of the unit tests
 * and of the in-memory benchmarks.
 */
export const memoryRunner = Sharding.layer.pipe(
  Layer.provideMerge(Runners.layerNoop),
  Layer.provideMerge(MessageStorage.layerMemory),
  Layer.provide([RunnerStorage.layerMemory, RunnerHealth.layerNoop]),
  Layer.provide(ShardingConfig.layer({ entityMessagePollInterval: messagePollInterval }))
)

/** The workflow's body on a worker (and the heartbeat's watchdog, when there is one). */
export const layer = (options: Partial<Options> = {}) => {
  const heartbeat = options.heartbeatSecs ?? 0
  const watching = heartbeat > 0
    ? Layer.effectDiscard(Effect.forkScoped(
      watchdog(heartbeat, options.heartbeatCheckMs ?? Heartbeat.checkIntervalMs(heartbeat))
    ))
    : Layer.empty
  return Layer.merge(body(options).pipe(Layer.provide(cancelWatch(options.cancelCheckMs ?? 250))), watching)
}

const body = (options: Partial<Options>) =>
  AgentWorkflow.toLayer(Effect.fnUntraced(function*(payload, executionId) {
    const config: Options = { ...defaults, ...options }
    const steps = yield* AgentSteps.AgentSteps
    const store = yield* ClusterStore
    const permission = yield* Permission.Permission
    const workspace = yield* Workspace.Workspace
    const models = yield* Models.Models
    const registry = yield* ToolRegistry.ToolRegistry
    const { agentId, depth, run, rootId } = payload
    // "": the worker's default model (every worker must have the same one).
    const modelId = payload.model === "" ? models.defaultModel : payload.model
    const role = yield* Effect.orDie(Roles.resolve(payload.role))
    const grants = Permission.grantsOf(payload)
    const rules = yield* rulesFor(permission.root, config.maxDepth, grants)
    const system = Prompt.makeMessage("system", { content: Roles.systemPrompt(role, depth, payload.workspace) })
    const capped = depth > 0 && config.maxConcurrent > 0
    // With `reject` a spawn takes the child's permit in an activity of its own (the refusal is
    // the tool's result); otherwise the model step that asks for children records them.
    const rejecting = config.maxConcurrent > 0 && config.admission === "reject"
    const maxTokens = depth === 0 ? undefined : config.childMaxTokens
    const maxWallSecs = depth === 0 ? undefined : config.maxWallSecs
    const onStep = config.onStep
    // A step in flight watches the agent's cancellation (the workflow's interrupt reaches it only
    // at the next step boundary): cancelled, the call is interrupted and `onCancel` is the step's
    // outcome. The workflow, interrupted by the cancel, then stops at that boundary.
    const watch = yield* CancelWatch
    const stopOnCancel = <A, E, R, A2, E2>(effect: Effect.Effect<A, E, R>, onCancel: Effect.Effect<A2, E2>) =>
      watch.enabled
        ? Effect.scoped(
          Effect.flatMap(watch.watch(agentId), (cancelled) =>
            Effect.raceFirst(effect, Effect.andThen(cancelled, onCancel)))
        )
        : effect
    // The model and tool steps, the loop's hot path, are journaled by Fibril
    // (`ClusterStore.runStep`: the call, then its claim, writes and result in one short
    // transaction), not as effect/workflow activities (an activity is a persisted cluster
    // message, its read-back, a lock check and its reply: about 12 statements and 4 commits, and
    // it holds a connection for its whole call). The run's journal is read once, at its first
    // step: a replay returns the journaled results without running them. A cancelled agent's
    // next step does not run: the run suspends as at an activity boundary, and the cancel's
    // interrupt (sent again here, should the cancel have stopped before sending it) ends it.
    const instance = yield* WorkflowEngine.WorkflowInstance
    let journal: ReadonlyMap<string, string> | undefined
    // A step interrupted from within (nothing of it committed) runs again, as effect/workflow
    // runs an interrupted activity again; an interruption of the run itself stops the run.
    const runOnce = <R1, R2>(key: StepKey, execute: Effect.Effect<StepWork<R2>, never, R1>) =>
      Effect.gen(function*() {
        for (let attempt = 1;; attempt++) {
          const exit = yield* Effect.exit(orDie(store.runStep(key, execute)))
          if (Exit.isSuccess(exit) || !Cause.hasInterruptsOnly(exit.cause)) {
            return yield* exit
          }
          if (attempt === maxStepAttempts) {
            return yield* Effect.die(`step ${key.name} of ${agentId} was interrupted ${attempt} times`)
          }
        }
      })
    const journaled = <A, E, R1, R2>(
      name: string,
      codec: {
        readonly encode: (exit: Exit.Exit<A, E>) => string
        readonly decode: (encoded: string) => Exit.Exit<A, E>
      },
      execute: Effect.Effect<Done<A, R2>, E, R1>
    ) =>
      Effect.gen(function*() {
        journal ??= yield* orDie(store.journal(executionId))
        let encoded = journal.get(name)
        if (encoded === undefined) {
          const outcome = yield* runOnce({ agentId, executionId, name }, settle(codec.encode, execute))
          if (outcome._tag === "Cancelled") {
            yield* AgentWorkflow.interrupt(executionId)
            return yield* Workflow.suspend(instance)
          }
          encoded = outcome.result
        }
        return yield* codec.decode(encoded)
      })
    const observed = <A, E, R>(name: string, effect: Effect.Effect<A, E, R>) =>
      onStep === undefined ? effect : Effect.andThen(
        onStep("start", agentId, run, name),
        Effect.tap(effect, () =>
          onStep("end", agentId, run, name))
      )

    // A parent waiting in agent_wait sleeps on a durable clock it recorded: this agent's end
    // completes it, so the parent looks again at once. (Run again on a replay: a clock completes
    // once; a parent that is not waiting has nothing recorded.)
    const signalParent = payload.parentId === null ? Effect.void : Effect.ignore(Effect.gen(function*() {
      const parent = yield* store.parentWaiting(agentId)
      if (parent === undefined || parent.waitingOn === null) return
      const deferred = DurableClock.make({ name: parent.waitingOn, duration: 0 }).deferred
      const token = DurableDeferred.tokenFromExecutionId(deferred, {
        workflow: AgentWorkflow,
        executionId: parent.executionId
      })
      yield* DurableDeferred.done(deferred, { token, exit: Exit.void })
    }))

    // A permit given back wakes the agents queued for one (as many as permits are free, oldest
    // first); a wake lost (a crash, a race with another release) is found by the fallback.
    const wakeQueued = !capped ? Effect.void : Effect.ignore(Effect.gen(function*() {
      for (const waiter of yield* store.waiters(config.maxConcurrent)) {
        const deferred = DurableClock.make({ name: waiter.clock, duration: 0 }).deferred
        const token = DurableDeferred.tokenFromExecutionId(deferred, {
          workflow: AgentWorkflow,
          executionId: waiter.executionId
        })
        yield* DurableDeferred.done(deferred, { token, exit: Exit.void })
      }
    }))

    // A failed or cancelled run records why and gives its permit back (suspensions do not count);
    // every end wakes a waiting parent and the agents queued for a permit.
    yield* Workflow.addFinalizer((exit) =>
      Exit.isSuccess(exit) ? Effect.andThen(signalParent, wakeQueued) : Effect.ignore(Effect.gen(function*() {
        const row = yield* store.get(agentId)
        if (row !== undefined && !finished(row.status)) {
          const cancelled = Cause.hasInterruptsOnly(exit.cause)
          yield* store.update(agentId, {
            status: cancelled ? "cancelled" : "failed",
            reason: cancelled ? "cancelled" : failureReason(exit.cause)
          })
        }
        if (capped) yield* store.release(agentId)
      })).pipe(Effect.andThen(signalParent), Effect.andThen(wakeQueued))
    )

    // Admission under the cluster-wide cap (a `reject` spawn took the permit already).
    // Queued, the agent sleeps on a durable clock a release wakes (`wakeQueued`); nothing polls.
    if (capped) {
      for (let attempt = 0;; attempt++) {
        const clock = `permit/${attempt}`
        const admitted = yield* txActivity({
          name: clock,
          success: Schema.Boolean,
          execute: orDie(store.acquire(agentId, config.maxConcurrent, { executionId, clock }))
        })
        if (admitted) break
        yield* DurableClock.sleep({ name: clock, duration: config.waitFallbackMs, inMemoryThreshold: 0 })
      }
    }

    const promptMessage = Prompt.makeMessage("user", {
      content: [Prompt.makePart("text", { text: payload.prompt })]
    })
    // Refuses a workspace this worker does not have or a refused request.
    const admitRun = Effect.gen(function*() {
      if (payload.workspace !== workspace.root) {
        return yield* new AgentFailed({
          agentId,
          reason:
            `refused by this worker: it serves the workspace ${workspace.root}, not ${payload.workspace}; start a worker with --cwd ${payload.workspace} on a machine that has it`
        })
      }
      const own = grants.at(-1)
      const refused = own === undefined ? undefined : refusedRequest(registry, own.role, own.allowedTools)
      if (refused !== undefined) return yield* new AgentFailed({ agentId, reason: `refused: ${refused}` })
    })
    // Where the run's prompt goes in its transcript. Starting the run marks it running (its clock
    // and heartbeat start) and writes its prompt.
    const promptAt = { run, step: -1, slot: 0 }

    // A first run's conversation is its prompt, and its first model step starts it. A resumed
    // run reads the conversation so far (the agent's transcript) in a step of its own.
    const history: ReadonlyArray<Prompt.Message> = run === 0 ? [promptMessage] : yield* txActivity({
      name: "start",
      success: Schema.Array(Prompt.Message),
      error: AgentFailed,
      execute: Effect.andThen(
        Effect.andThen(admitRun, orDie(store.startRun(agentId, promptAt, promptMessage))),
        Effect.map(orDie(store.transcript(agentId)), (messages) => messages.filter((m) => m.role !== "system"))
      )
    })

    const execute = (child: AgentPayload) => AgentWorkflow.execute(child)

    /** The child a spawning call asks for (a function of the call alone), or why it is refused. */
    const childFor = (step: number, index: number, call: AgentSteps.StepToolCall) => {
      const params = parseParams(call.params)
      const prompt = str(params, ["prompt", "message", "input", "objective"])
      if (prompt === undefined) return { refused: ToolFailure("InvalidArguments", "\"prompt\" is required") } as const
      const roleName = str(params, ["subagent_type", "type", "agent_type"]) ?? "general"
      const childRole = Roles.canonical(roleName)
      if (childRole === undefined) {
        return {
          refused: ToolFailure("UnknownRole", `unknown role "${roleName}"; accepted: ${Roles.acceptedNames}`)
        } as const
      }
      const allowedTools = Array.isArray(params["allowed_tools"])
        ? params["allowed_tools"].filter((x): x is string => typeof x === "string")
        : undefined
      const refused = refusedRequest(registry, childRole, allowedTools)
      if (refused !== undefined) return { refused: ToolFailure("InvalidRoleRequest", refused) } as const
      const tooLong = SpawnCheck.checkText({ description: str(params, ["description"]), prompt })
      if (tooLong !== undefined) return { refused: ToolFailure(tooLong._tag, tooLong.message) } as const
      const child: AgentPayload = {
        agentId: childId(agentId, run, step, index),
        run: 0,
        parentId: agentId,
        rootId,
        depth: depth + 1,
        role: childRole,
        model: str(params, ["model"]) ?? payload.model,
        description: str(params, ["description"]) ?? prompt.slice(0, 60),
        prompt,
        detached: call.name !== "task" && params["detached"] === true,
        workspace: payload.workspace,
        grants: [...grants, {
          role: childRole,
          depth: depth + 1,
          ...(allowedTools === undefined ? {} : { allowedTools })
        }]
      }
      return { child } as const
    }

    const rowOf = (child: AgentPayload) =>
      Effect.map(AgentWorkflow.executionId(child), (childExecution): AgentRow => ({
        ...child,
        status: "pending",
        executionId: childExecution,
        text: null,
        reason: null,
        steps: 0,
        toolCalls: 0,
        tokens: 0
      }))

    const spawnChild = (step: number, index: number, call: AgentSteps.StepToolCall) =>
      Effect.gen(function*() {
        const made = childFor(step, index, call)
        if ("refused" in made) return made
        if (!rejecting) return made // its row was written by the model step that asked for it
        const id = made.child.agentId
        const row = yield* rowOf(made.child)
        const admitted = yield* txActivity({
          name: `spawn/${step}/${index}`,
          success: Schema.Boolean,
          execute: orDie(Effect.gen(function*() {
            if (!(yield* store.acquire(id, config.maxConcurrent))) return false
            yield* store.insert(row)
            return true
          }))
        })
        if (!admitted) {
          return {
            refused: ToolFailure(
              "CapReached",
              `max_concurrent=${config.maxConcurrent} sub-agents are running across the cluster; wait for one (agent_wait) and try again`
            )
          } as const
        }
        return made
      })

    const readRows = (step: number, index: number, look: number, ids: ReadonlyArray<string> | undefined) =>
      Activity.make({
        name: `look/${step}/${index}/${look}`,
        success: Schema.Array(RowView),
        execute: orDie(Effect.gen(function*() {
          const rows = ids === undefined
            ? (yield* store.children(agentId)).filter((r) => !finished(r.status))
            : (yield* Effect.forEach(ids, (id) => store.get(id))).filter((r) => r !== undefined)
          return rows.map(view)
        }))
      })

    /** A look of `agent_wait`: records the clock it will sleep on, reads the children (journaled). */
    const lookAt = (step: number, index: number, n: number, ids: ReadonlyArray<string> | undefined) =>
      txActivity({
        name: `look/${step}/${index}/${n}`,
        success: Schema.Struct({ rows: Schema.Array(RowView), now: Schema.Number }),
        execute: orDie(
          Effect.map(
            store.look(agentId, ids, `wait/${step}/${index}/${n}`),
            ({ now, rows }) => ({ rows: rows.map(view), now })
          )
        )
      })

    // Between two looks the parent sleeps on a durable clock (the workflow suspends; nothing is
    // polled); a child's end completes that clock early (`signalParent`), and the clock itself
    // fires at the timeout, or after `waitFallbackMs`. The deadline is the first look's store
    // time plus the timeout: journaled, so a replay decides the same.
    const waitFor = (
      step: number,
      index: number,
      ids: ReadonlyArray<string> | undefined,
      mode: "any" | "all",
      timeoutMs: number | undefined
    ) =>
      Effect.gen(function*() {
        // Without ids: the children running at the first look (as the embedded agent_wait does).
        let targets = ids
        let deadline: number | undefined
        for (let n = 0;; n++) {
          const seen = yield* lookAt(step, index, n, targets)
          const rows = seen.rows
          if (targets === undefined) targets = rows.map((r) => r.agent_id)
          if (deadline === undefined && timeoutMs !== undefined) deadline = seen.now + timeoutMs
          const done = rows.filter((r) => finished(r.status as AgentRow["status"]))
          const running = rows.filter((r) => !finished(r.status as AgentRow["status"]))
          const satisfied = rows.length === 0 || (mode === "any" ? done.length > 0 : running.length === 0)
          const timedOut = deadline !== undefined && seen.now >= deadline
          if (satisfied || timedOut) {
            return {
              timed_out: !satisfied,
              completed: done,
              still_running: running.map((r) => r.agent_id)
            }
          }
          const wait = deadline === undefined
            ? config.waitFallbackMs
            : Math.max(1, Math.min(config.waitFallbackMs, deadline - seen.now))
          yield* DurableClock.sleep({ name: `wait/${step}/${index}/${n}`, duration: wait, inMemoryThreshold: 0 })
        }
      })

    // The results of the sub-agent tools (which run in the workflow, not in an activity) are
    // written to the transcript by the next step that commits: the next model step, or the end.
    const unwritten: Array<{ readonly at: Slot; readonly message: Prompt.Message }> = []
    const takeUnwritten = () => unwritten.splice(0, unwritten.length)

    const orchestrate = (step: number, call: AgentSteps.StepToolCall, index: number) =>
      Effect.gen(function*() {
        const params = parseParams(call.params)
        const ok = (result: unknown): AgentSteps.ToolStep => ({
          id: call.id,
          name: call.name,
          isFailure: false,
          result
        })
        const bad = (result: unknown): AgentSteps.ToolStep => ({
          id: call.id,
          name: call.name,
          isFailure: true,
          result
        })
        const decision = Permission.decideTool(rules, call.name, "spawn")
        if (!decision.allowed) return bad(ToolFailure("PermissionDenied", decision.reason))
        switch (call.name) {
          case "task": {
            const spawned = yield* spawnChild(step, index, call)
            if ("refused" in spawned) return bad(spawned.refused)
            const exit = yield* Effect.exit(execute(spawned.child))
            if (Exit.isSuccess(exit)) {
              return ok({
                agent_id: spawned.child.agentId,
                description: spawned.child.description,
                status: "completed",
                summary: exit.value.text,
                steps: exit.value.steps,
                tool_calls: exit.value.toolCalls
              })
            }
            const cancelled = Cause.hasInterruptsOnly(exit.cause)
            return bad({
              error: cancelled ? "Cancelled" : "TaskFailed",
              agent_id: spawned.child.agentId,
              message: cancelled ? "the sub-agent was cancelled" : failureReason(exit.cause)
            })
          }
          case "agent_spawn":
          case "agent_open": {
            const spawned = yield* spawnChild(step, index, call)
            if ("refused" in spawned) return bad(spawned.refused)
            const detached = spawned.child.detached
            yield* AgentWorkflow.execute(spawned.child, { discard: true, detached })
            return ok({
              agent_id: spawned.child.agentId,
              status: "running",
              role: spawned.child.role,
              description: spawned.child.description,
              detached
            })
          }
          case "agent_wait": {
            const single = str(params, ["agent_id", "id"])
            const ids = Array.isArray(params["ids"])
              ? params["ids"].filter((x): x is string => typeof x === "string")
              : single === undefined
              ? undefined
              : [single]
            const timeout = typeof params["timeout_ms"] === "number" ? params["timeout_ms"] : undefined
            return ok(yield* waitFor(step, index, ids, params["wait_mode"] === "all" ? "all" : "any", timeout))
          }
          case "agent_result": {
            const id = str(params, ["agent_id", "id"])
            if (id === undefined) return bad(ToolFailure("InvalidArguments", "\"agent_id\" is required"))
            const timeout = typeof params["timeout_ms"] === "number" ? params["timeout_ms"] : undefined
            const result = params["block"] === true
              ? yield* waitFor(step, index, [id], "all", timeout)
              : { completed: [], still_running: [], rows: yield* readRows(step, index, 0, [id]) }
            const rows = "rows" in result ? result.rows : [...result.completed]
            const row = rows[0] ??
              (yield* readRows(step, index, 1_000_000, [id]))[0]
            if (row === undefined) return bad(ToolFailure("AgentNotFound", `no agent with id "${id}"`))
            return ok({ ...row, ...("timed_out" in result ? { timed_out: result.timed_out } : {}) })
          }
          case "agent_cancel":
          case "agent_close": {
            const id = str(params, ["agent_id", "id"])
            if (id === undefined) return bad(ToolFailure("InvalidArguments", "\"agent_id\" is required"))
            const reason = str(params, ["reason"]) ?? `Cancelled by its parent (${call.name})`
            const found = yield* Activity.make({
              name: `cancel/${step}/${index}`,
              success: Schema.Boolean,
              execute: orDie(Effect.gen(function*() {
                if ((yield* store.get(id)) === undefined) return false
                yield* cancelTree(id, reason)
                return true
              }))
            })
            return found
              ? ok({ agent_id: id, status: "cancelled", reason })
              : bad(ToolFailure("AgentNotFound", `no agent with id "${id}"`))
          }
          case "agent_send_input": {
            const id = str(params, ["agent_id", "id"])
            const text = str(params, ["message", "input"])
            if (id === undefined || text === undefined) {
              return bad(ToolFailure("InvalidArguments", "\"agent_id\" and \"message\" are required"))
            }
            const tooLong = SpawnCheck.checkMessage("message", text)
            if (tooLong !== undefined) return bad(ToolFailure(tooLong._tag, tooLong.message))
            const outcome = yield* txActivity({
              name: `input/${step}/${index}`,
              success: Schema.String,
              execute: orDie(Effect.gen(function*() {
                const row = yield* store.get(id)
                if (row === undefined) return "missing"
                if (finished(row.status)) return row.status
                yield* store.sendInput(id, text)
                return "queued"
              }))
            })
            if (outcome === "missing") return bad(ToolFailure("AgentNotFound", `no agent with id "${id}"`))
            return outcome === "queued"
              ? ok({ delivered: true, agent_id: id })
              : ok({
                delivered: false,
                agent_id: id,
                reason: `the agent has ${outcome}; agent_resume starts a new run`
              })
          }
          default: {
            // agent_resume: a new run of a finished agent, from its transcript.
            const id = str(params, ["agent_id", "id"])
            const text = str(params, ["message", "input", "prompt"])
            if (id === undefined || text === undefined) {
              return bad(ToolFailure("InvalidArguments", "\"agent_id\" and \"message\" are required"))
            }
            const next = yield* resumeActivity(`resume/${step}/${index}`, id, text)
            if (typeof next === "string") return bad(ToolFailure("NotResumable", next))
            yield* AgentWorkflow.execute(next, { discard: true })
            return ok({ agent_id: id, status: "running", run: next.run })
          }
        }
      })

    const tool = (step: number, call: AgentSteps.StepToolCall, index: number) =>
      orchestration.has(call.name)
        ? Effect.tap(orchestrate(step, call, index), (result) =>
          Effect.sync(() =>
            unwritten.push({ at: { run, step, slot: slot.tool + index }, message: AgentSteps.toolMessage([result]) })
          ))
        : journaled(
          `tool/${step}/${index}`,
          toolJournal,
          observed(
            `tool/${step}/${index}`,
            Effect.gen(function*() {
              const at = { run, step, slot: slot.tool + index }
              // Steps are at-least-once: this one may be running again after a crash. A tool that
              // is not idempotent commits a marker before it runs; found, it is not run twice.
              // (An unknown tool only fails: it may run again.)
              const idempotent = registry.get(call.name).pipe(Option.match({
                onNone: () =>
                  true,
                onSome: (tool) =>
                  tool.idempotent
              }))
              const first = idempotent || (yield* orDie(store.startToolCall(agentId, at)))
              const result = first
                ? yield* stopOnCancel(
                  steps.tool({ agentId, step, role: role.name, depth, rules, call }),
                  Effect.succeed(cancelledCall(call))
                )
                : interruptedCall(call)
              return {
                value: result,
                commit: store.recordStep(agentId, [{ at, message: AgentSteps.toolMessage([result]) }], zeroUsage)
              }
            })
          )
        )

    // What the loop has done so far, from journaled results only (so a replay computes the same).
    let runTokens = 0
    let toolCallsSoFar = 0
    /** Did the last model step end the run (its final answer, within the run's token budget)? */
    let ended = false
    const endsRun = (result: AgentSteps.ModelStep, tokensBefore: number) =>
      result.toolCalls.length === 0 &&
      (maxTokens === undefined || tokensBefore + stepTokens(result.usage) <= maxTokens)

    const model = (step: number, messages: ReadonlyArray<Prompt.Message>) => {
      const earlier = takeUnwritten()
      const tokensBefore = runTokens
      const toolCallsBefore = toolCallsSoFar
      return journaled(
        `model/${step}`,
        modelJournal,
        observed(
          `model/${step}`,
          Effect.gen(function*() {
            // A first run starts in its first model step, in the statement of the step's first
            // read: the inbox, and the budgets that are checked at each step.
            const starts = step === 0 && run === 0
            if (starts) yield* admitRun
            const begin = yield* orDie(
              store.beginStep(agentId, {
                treeOf: config.treeMaxTokens === undefined ? undefined : rootId,
                runAge: maxWallSecs !== undefined,
                start: starts ? { at: promptAt, prompt: promptMessage } : undefined
              })
            )
            if (maxWallSecs !== undefined && begin.runSecs > maxWallSecs) {
              return yield* new Session.BudgetExceeded({
                sessionId: agentId,
                budget: "max_wall_secs",
                limit: maxWallSecs
              })
            }
            if (config.treeMaxTokens !== undefined && begin.treeTokens > config.treeMaxTokens) {
              return yield* new Session.BudgetExceeded({
                sessionId: agentId,
                budget: "tree_max_tokens",
                limit: config.treeMaxTokens
              })
            }
            const result = yield* stopOnCancel(
              steps.model({
                agentId,
                step,
                model: modelId,
                system,
                messages,
                rules,
                takeInbox: Effect.succeed(begin.inbox)
              }),
              Effect.fail(new AgentFailed({ agentId, reason: "cancelled while its model call was in flight" }))
            )
            // A final answer ends the run in the statement that records it.
            const final = endsRun(result, tokensBefore)
            // The children this turn asks for are recorded with it (unless each takes a permit
            // in a step of its own), so they exist before their workflows start.
            const children = rejecting ? [] : result.toolCalls.flatMap((call, index) => {
              if (!spawning.has(call.name) || !Permission.decideTool(rules, call.name, "spawn").allowed) return []
              const made = childFor(step, index, call)
              return "child" in made ? [made.child] : []
            })
            const rows = children.length === 0 ? [] : yield* Effect.forEach(children, rowOf)
            const record = store.recordStep(
              agentId,
              [
                ...earlier,
                ...result.delivered.map((text, i) => ({
                  at: { run, step, slot: i },
                  message: Prompt.makeMessage("user", { content: [Prompt.makePart("text", { text })] })
                })),
                { at: { run, step, slot: slot.assistant }, message: result.assistant }
              ],
              result.usage,
              final
                ? {
                  update: {
                    status: "completed",
                    text: result.text,
                    reason: null,
                    steps: step + 1,
                    toolCalls: toolCallsBefore
                  },
                  release: capped
                }
                : undefined,
              // The queued input this step delivered is taken by its commit.
              begin.inboxIds.slice(0, result.delivered.length)
            )
            return {
              value: result,
              commit: rows.length === 0 ? record : Effect.andThen(record, store.insertMany(rows))
            }
          })
        )
      ).pipe(Effect.tap((result) =>
        Effect.sync(() => {
          ended = endsRun(result, tokensBefore)
          runTokens = tokensBefore + stepTokens(result.usage)
          toolCallsSoFar = toolCallsBefore + result.toolCalls.length
        })
      ))
    }

    const exit = yield* Effect.exit(AgentLoop.run(
      {
        agentId,
        messages: history,
        maxSteps: depth === 0 ? config.maxSteps : config.childMaxSteps,
        maxTokens
      },
      { model, tool }
    ))
    // Interrupted: cancelled (the finalizer records it), or suspended in a durable wait (the run
    // is replayed when it wakes). Either way nothing is finished here.
    if (Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause)) return yield* Effect.interrupt
    if (!(Exit.isSuccess(exit) && ended)) {
      const outcome = Exit.isSuccess(exit)
        ? { status: "completed" as const, text: exit.value.text, reason: null }
        : { status: "failed" as const, text: null, reason: failureReason(exit.cause) }
      const rest = takeUnwritten()
      yield* txActivity({
        name: "finish",
        execute: orDie(Effect.gen(function*() {
          if (rest.length > 0) yield* store.recordStep(agentId, rest, zeroUsage)
          yield* store.finishRun(agentId, {
            ...outcome,
            ...(Exit.isSuccess(exit) ? { steps: exit.value.steps, toolCalls: exit.value.toolCalls } : {})
          }, capped)
        }))
      })
    }
    if (Exit.isFailure(exit)) return yield* new AgentFailed({ agentId, reason: failureReason(exit.cause) })
    void executionId
    return { agentId, text: exit.value.text, steps: exit.value.steps, toolCalls: exit.value.toolCalls }
  }))

/**
 * The next run of a finished agent (`agent_resume`, `fibril agents resume`): an activity that
 * bumps its run number, so the new run is a new workflow execution that starts from the
 * agent's transcript. A reason string when it cannot be resumed.
 */
export const resumeActivity = (name: string, agentId: string, message: string) =>
  txActivity({
    name,
    success: Schema.Union([Schema.String, AgentPayload]),
    execute: Effect.orDie(resumeRow(agentId, message))
  })

export const resumeRow = (agentId: string, message: string) =>
  Effect.gen(function*() {
    const store = yield* ClusterStore
    const row = yield* store.get(agentId)
    if (row === undefined) return `no agent with id "${agentId}"`
    if (!finished(row.status)) return `agent ${agentId} is ${row.status}; send it input instead (agent_send_input)`
    const next: AgentPayload = {
      agentId,
      run: row.run + 1,
      parentId: row.parentId,
      rootId: row.rootId,
      depth: row.depth,
      role: row.role,
      model: row.model,
      description: row.description,
      prompt: message,
      detached: row.detached,
      workspace: row.workspace,
      ...(row.grants === undefined ? {} : { grants: row.grants })
    }
    const executionId = yield* AgentWorkflow.executionId(next)
    yield* store.update(agentId, { run: next.run, executionId, status: "pending", text: null, reason: null })
    return next
  })
