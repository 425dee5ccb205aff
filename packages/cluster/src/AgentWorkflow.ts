/**
 * AgentWorkflow — one durable workflow per agent run (`AgentRun`: its payload, outcome and
 * versioned name), keyed by agent id and run number. The body is `AgentLoop` over journaled
 * steps (StepJournal): `model/<step>` (reads the agent's inbox, calls the model, then takes
 * the delivered input and writes it and the answer to the transcript in the transaction that
 * journals the result) and `tool/<step>/<index>` (one tool call, its result written the same
 * way). Everything else that must happen once is an effect/workflow activity.
 *
 * A sub-agent tool call (core's `task`, `agent_*` and `handle_read` definitions:
 * `subAgentTools`) runs in the body itself, through core's tool pipeline, with the
 * cluster's SubAgentManager (`ClusterSubAgents.inWorkflow`): `task` executes a child workflow
 * and waits for it, `agent_spawn` starts one, waits are durable looks and clocks, the cap is
 * a permit table taken in an activity's transaction (with `queue`, a child waits durably for
 * its permit in its own workflow). Its result is written to the transcript by the next step
 * that commits.
 *
 * The body's parts: setup (the run's context), admission (the cap), the start of the run, the
 * loop's two kinds of step, and the finish. A tool that is not idempotent commits a marker
 * before it runs: a step run again after a crash does not run it twice (the model reads
 * `Interrupted`). Cancellation and the heartbeat are ClusterWatch's.
 *
 * Replay determinism: everything the body decides depends only on its payload, the worker
 * options (the same on every worker) and journaled results.
 */
import {
  type AgentDefinitions,
  AgentLoop,
  AgentSteps,
  AgentTools,
  Claims,
  Models,
  OutputSchema,
  Permission,
  Roles,
  Session,
  SubAgentManager,
  ToolRegistry,
  Workspace
} from "@fibril/core"
import * as GenAiTrace from "@fibril/core/GenAiTrace"
import * as ToolStep from "@fibril/core/loop/ToolStep"
import * as Prompt from "effect/ai/Prompt"
import * as Cause from "effect/Cause"
import { MessageStorage, RunnerHealth, Runners, RunnerStorage, Sharding, ShardingConfig } from "effect/cluster"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { DurableClock, DurableDeferred, Workflow, WorkflowEngine } from "effect/workflow"
import { AgentFailed, type AgentPayload, AgentWorkflow, grantsOf, txActivity } from "./AgentRun.ts"
import * as ClusterQuestions from "./ClusterQuestions.ts"
import { type AgentRow, ClusterStore, finished, type Slot, stepTokens, zeroUsage } from "./ClusterStore.ts"
import * as ClusterSubAgents from "./ClusterSubAgents.ts"
import * as ClusterWatch from "./ClusterWatch.ts"
import { resolveRole, rulesFor } from "./internal/rules.ts"
import { cancelledCall, interruptedCall } from "./internal/toolCalls.ts"
import * as StepJournal from "./StepJournal.ts"

export { AgentFailed, AgentOutcome, AgentPayload, AgentWorkflow, childId, grantsOf } from "./AgentRun.ts"
export { cancelTree, CancelWatch, cancelWatch, heartbeatReason, watchdog } from "./ClusterWatch.ts"
export { resolveRole, rulesFor } from "./internal/rules.ts"

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
   * (`[subagents] heartbeat_timeout_secs`; ClusterWatch's watchdog). 0: none.
   */
  readonly heartbeatSecs?: number | undefined
  /** Between two looks of the heartbeat's watchdog (default a quarter of it, 1-30 s). */
  readonly heartbeatCheckMs?: number | undefined
  /** Running sub-agents cluster-wide (the root agents do not count); 0: no cap. */
  readonly maxConcurrent: number
  readonly admission: "reject" | "queue"
  /** MCP servers per role (`[roles.<role>] mcp_servers`), met with a spawn's own (McpNarrowing). */
  readonly roleMcpServers?: Readonly<Record<string, ReadonlyArray<string>>> | undefined
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
  readonly onStep?: StepJournal.Run["onStep"]
  /**
   * The workspace's agent definitions (AgentDefinitions.load: `.fibril/agents`, Claude Code's,
   * opencode's), as the embedded runtime loads them: a role may name one, whose prompt, tools,
   * denials and asks its agent gets. Loaded once per worker; every worker of a workspace has the same.
   */
  readonly agents?: ReadonlyArray<AgentDefinitions.AgentDefinition> | undefined
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

/** Transcript slots within a step: delivered input first, then the answer, then tool results. */
// A typed answer's repair request follows the step's tool results (AgentLoop's onLoopMessage).
const slot = { assistant: 100, tool: 1000, repair: 1_000_000 }

// The results of a call stopped by a cancel, and of one not run again after a crash.
export { cancelledCall, interruptedCall } from "./internal/toolCalls.ts"

const failureReason = (cause: Cause.Cause<unknown>): string => {
  const error = Cause.squash(cause)
  if (error instanceof AgentFailed) return error.reason
  return error instanceof Error ? error.message : String(error)
}

/** Why a model step failed: the model call, a budget checked at the step, or a refused workspace. */
export const ModelStepFailure = Schema.Union([AgentSteps.ModelStepError, Session.BudgetExceeded, AgentFailed])

const modelCodec = StepJournal.codec(AgentSteps.ModelStep, ModelStepFailure)
const toolCodec = StepJournal.codec(AgentSteps.ToolStep, Schema.Never)

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
export const layer = (options: Partial<Options> = {}) =>
  Layer.merge(
    body(options).pipe(Layer.provide(ClusterWatch.cancelWatch(options.cancelCheckMs ?? 250))),
    ClusterWatch.heartbeat(options.heartbeatSecs ?? 0, options.heartbeatCheckMs)
  )

// --- Setup ---

/** One run of the body: what its parts share (set up once, by `setup`). */
interface RunContext {
  readonly config: Options
  readonly payload: AgentPayload
  readonly executionId: string
  readonly store: ClusterStore["Service"]
  readonly steps: AgentSteps.AgentSteps["Service"]
  readonly permission: Permission.Permission["Service"]
  readonly registry: ToolRegistry.ToolRegistry["Service"]
  readonly watch: ClusterWatch.CancelWatch["Service"]
  readonly role: Roles.RoleSpec
  readonly rules: Permission.Rules
  readonly modelId: string
  readonly system: Prompt.SystemMessage
  /** Does this agent hold a sub-agent permit (a sub-agent under a cap)? */
  readonly capped: boolean
  readonly maxTokens: number | undefined
  readonly maxWallSecs: number | undefined
  readonly journal: StepJournal.Journal
  readonly subAgents: ClusterSubAgents.WorkflowRun
  readonly prompt: Prompt.Message
  /** A typed result (`output_schema`, checked at spawn): decoded by the loop, with one repair turn. */
  readonly output: OutputSchema.Check | undefined
  /** Where the run's prompt goes in its transcript. */
  readonly promptAt: Slot
  /** Refuses a workspace this worker does not have, or a refused request. */
  readonly admitRun: Effect.Effect<void, AgentFailed>
  /**
   * The results of the sub-agent tools (which run in the body, not in a step), written to the
   * transcript by the next step that commits: the next model step, or the finish.
   */
  readonly unwritten: Array<{ readonly at: Slot; readonly message: Prompt.Message }>
}

const setup = Effect.fnUntraced(function*(config: Options, payload: AgentPayload, executionId: string) {
  const store = yield* ClusterStore
  const permission = yield* Permission.Permission
  const workspace = yield* Workspace.Workspace
  const models = yield* Models.Models
  const registry = yield* ToolRegistry.ToolRegistry
  const { agentId, depth } = payload
  // "": the worker's default model (every worker must have the same one).
  const modelId = payload.model === "" ? models.defaultModel : payload.model
  const agents = config.agents ?? []
  const { role } = yield* Effect.orDie(resolveRole(agents, payload.role))
  const grants = grantsOf(payload)
  const rules = yield* rulesFor(permission.root, config.maxDepth, grants, agents, registry.mcpServers())
  const checks = { registry, models, callerModel: modelId, rules, roleMcpServers: config.roleMcpServers, agents }
  // Checked at spawn (ClusterSubAgents.checkSpawn); the model decides how the child is told.
  const output = payload.outputSchema === undefined ? undefined : {
    compiled: yield* Effect.orDie(Effect.fromResult(OutputSchema.compile(payload.outputSchema))),
    via: OutputSchema.viaOf(yield* Effect.orDie(models.resolve(modelId)))
  }
  const admitRun = Effect.gen(function*() {
    if (payload.workspace !== workspace.root) {
      return yield* new AgentFailed({
        agentId,
        reason:
          `refused by this worker: it serves the workspace ${workspace.root}, not ${payload.workspace}; start a worker with --cwd ${payload.workspace} on a machine that has it`
      })
    }
    const own = grants.at(-1)
    if (own === undefined) return
    yield* ClusterSubAgents.checkSpawn({
      prompt: "",
      role: own.role,
      allowedTools: own.allowedTools,
      askTools: own.askTools,
      mcpServers: own.mcpServers
    }, { registry, agents })
      .pipe(Effect.mapError((refused) => new AgentFailed({ agentId, reason: `refused: ${refused.message}` })))
  })
  const context: RunContext = {
    config,
    payload,
    executionId,
    store,
    steps: yield* AgentSteps.AgentSteps,
    permission,
    registry,
    watch: yield* ClusterWatch.CancelWatch,
    role,
    rules,
    modelId,
    system: Prompt.makeMessage("system", { content: Roles.systemPrompt(role, depth, payload.workspace) }),
    capped: depth > 0 && config.maxConcurrent > 0,
    maxTokens: depth === 0 ? undefined : config.childMaxTokens,
    maxWallSecs: depth === 0 ? undefined : config.maxWallSecs,
    journal: StepJournal.make({ agentId, run: payload.run, executionId, onStep: config.onStep }),
    subAgents: {
      payload,
      maxConcurrent: config.maxConcurrent,
      admission: config.admission,
      waitFallbackMs: config.waitFallbackMs,
      checks,
      read: new Set(),
      context: yield* Effect.context<ClusterStore | WorkflowEngine.WorkflowEngine | WorkflowEngine.WorkflowInstance>()
    },
    prompt: Prompt.makeMessage("user", {
      content: [Prompt.makePart("text", {
        text: payload.run === 0 ? OutputSchema.taskMessage(payload.prompt, output) : payload.prompt
      })]
    }),
    output,
    promptAt: { run: payload.run, step: -1, slot: 0 },
    admitRun,
    unwritten: []
  }
  return context
})

// --- Admission, waking, finalizer ---

/** Completes the durable clock `clock` of execution `executionId` (a waiting parent, a queued agent). */
const wake = (executionId: string, clock: string) => {
  const deferred = DurableClock.make({ name: clock, duration: 0 }).deferred
  const token = DurableDeferred.tokenFromExecutionId(deferred, { workflow: AgentWorkflow, executionId })
  return DurableDeferred.done(deferred, { token, exit: Exit.void })
}

// A parent waiting in agent_wait sleeps on a durable clock it recorded: this agent's end
// completes it, so the parent looks again at once. (Run again on a replay: a clock completes
// once; a parent that is not waiting has nothing recorded.)
const signalParent = (run: RunContext) =>
  run.payload.parentId === null ? Effect.void : Effect.ignore(Effect.gen(function*() {
    const parent = yield* run.store.parentWaiting(run.payload.agentId)
    if (parent !== undefined && parent.waitingOn !== null) yield* wake(parent.executionId, parent.waitingOn)
  }))

// A permit given back is handed to the oldest agent queued for one, which is woken; so are
// those handed one over `resendWakeAfterMs` earlier and not admitted yet (a wake lost to a crash
// is sent again by a later release, or found by the fallback). Not sooner: in a wave of releases
// each would send every earlier one's wake again (K = 100 children over a cap of 20 sent 636
// wakes for 100 hand-offs), ahead of its own. Handed, not just freed: a woken agent's try is
// admitted, where a newcomer could take a freed permit first and send it back to sleep (a
// further try, durable clock and replay), and the oldest waiter keeps its turn.
const resendWakeAfterMs = 1000
const wakeQueued = (run: RunContext) =>
  !run.capped ? Effect.void : Effect.ignore(Effect.gen(function*() {
    for (const waiter of yield* run.store.handOff(run.config.maxConcurrent, resendWakeAfterMs)) {
      yield* wake(waiter.executionId, waiter.clock)
    }
  }))

// A failed or cancelled run records why and gives its permit back (suspensions do not count);
// every end wakes a waiting parent and the agents queued for a permit.
const finalizer = (run: RunContext) => (exit: Exit.Exit<unknown, unknown>) =>
  Exit.isSuccess(exit)
    ? Effect.andThen(signalParent(run), wakeQueued(run))
    : Effect.ignore(Effect.gen(function*() {
      const row = yield* run.store.get(run.payload.agentId)
      if (row !== undefined && !finished(row.status)) {
        const cancelled = Cause.hasInterruptsOnly(exit.cause)
        yield* run.store.update(run.payload.agentId, {
          status: cancelled ? "cancelled" : "failed",
          reason: cancelled ? "cancelled" : failureReason(exit.cause)
        })
      }
      if (run.capped) yield* run.store.release(run.payload.agentId)
    })).pipe(Effect.andThen(signalParent(run)), Effect.andThen(wakeQueued(run)))

// A queued agent's fallback doubles with each try, up to a minute (or `waitFallbackMs`, when
// longer): a release wakes it (and every later release wakes it again once handed a permit),
// so the fallback is for a wake lost with no release after it. At a fixed 5 s, an agent queued
// behind long waves (K = 300 on one worker waited up to 80 s) tried again every 5 s, each try a
// journaled activity, a durable clock and a replay.
const fallbackAfter = (waitFallbackMs: number, attempt: number) =>
  Math.min(waitFallbackMs * 2 ** attempt, Math.max(waitFallbackMs, 60_000))

// Admission under the cluster-wide cap (a `reject` spawn took the permit already). Queued, the
// agent sleeps on a durable clock a release wakes (`wakeQueued`); nothing polls.
const admission = (run: RunContext) =>
  Effect.gen(function*() {
    if (!run.capped) return
    for (let attempt = 0;; attempt++) {
      const clock = `permit/${attempt}`
      const admitted = yield* txActivity({
        name: clock,
        success: Schema.Boolean,
        execute: Effect.orDie(
          run.store.acquire(run.payload.agentId, run.config.maxConcurrent, { executionId: run.executionId, clock })
        )
      })
      if (admitted) return
      yield* DurableClock.sleep({
        name: clock,
        duration: fallbackAfter(run.config.waitFallbackMs, attempt),
        inMemoryThreshold: 0
      })
    }
  })

// A first run's conversation is its prompt, and its first model step starts it. A resumed run
// reads the conversation so far (the agent's transcript) in a step of its own; starting it marks
// it running (its clock and heartbeat start) and writes its prompt.
const history = (run: RunContext) =>
  run.payload.run === 0 ? Effect.succeed([run.prompt]) : txActivity({
    name: "start",
    success: Schema.Array(Prompt.Message),
    error: AgentFailed,
    execute: Effect.andThen(
      Effect.andThen(run.admitRun, Effect.orDie(run.store.startRun(run.payload.agentId, run.promptAt, run.prompt))),
      Effect.map(
        Effect.orDie(run.store.transcript(run.payload.agentId)),
        (messages) => messages.filter((m) => m.role !== "system")
      )
    )
  })

// --- The sub-agent tools ---

/**
 * Core's sub-agent tool definitions (`AgentTools.definitions`), by name: a call to one of
 * these runs in the workflow body with `inWorkflow`'s manager (`runTool`); any other is a
 * journaled step.
 */
export const subAgentTools: ReadonlyMap<string, ToolRegistry.Callable<SubAgentManager.SubAgentManager>> = new Map(
  AgentTools.definitions.map((definition) => [definition.name, ToolRegistry.callable(definition)])
)

/**
 * A sub-agent tool call through core's tool-call pipeline (permission, Schema decoding of the
 * arguments, the paths it names, the handler) with `manager` as the SubAgentManager. Every
 * refusal is a result the model reads: `{error: tag, message}`.
 */
export const runTool = (
  tool: ToolRegistry.Callable<SubAgentManager.SubAgentManager>,
  manager: SubAgentManager.SubAgentManager["Service"],
  permission: Permission.Permission["Service"],
  caller: ToolStep.Caller,
  call: AgentSteps.StepToolCall
): Effect.Effect<AgentSteps.ToolStep> =>
  Effect.provideService(ToolStep.runCall(permission, caller, tool, call), SubAgentManager.SubAgentManager, manager)

// --- The loop's steps ---

const takeUnwritten = (run: RunContext) => run.unwritten.splice(0, run.unwritten.length)

/** One tool call: a sub-agent tool in the body (core's definition), any other a journaled step. */
const toolStep = (run: RunContext) => (step: number, call: AgentSteps.StepToolCall, index: number) => {
  const { agentId, depth } = run.payload
  const at = { run: run.payload.run, step, slot: slot.tool + index }
  const subAgentTool = subAgentTools.get(call.name)
  if (subAgentTool !== undefined) {
    const manager = ClusterSubAgents.inWorkflow(run.subAgents, step, index)
    const caller = { id: agentId, role: run.role.name, depth, rules: run.rules }
    return Effect.tap(
      runTool(subAgentTool, manager, run.permission, caller, call),
      (result) => Effect.sync(() => run.unwritten.push({ at, message: AgentSteps.toolMessage([result]) }))
    )
  }
  // A call whose rules ask waits for a durable answer first, before a marker (ClusterQuestions).
  // Its tool is known once the MCP servers its agent may use are started: a worker restarted
  // after the model step has not started those (started on first use) yet.
  const caller = { id: agentId, role: run.role.name, depth, rules: run.rules }
  return Effect.andThen(run.registry.prepare(run.rules), () => {
    const asks = ClusterQuestions.askOf(
      run.permission,
      caller,
      Option.getOrUndefined(run.registry.get(call.name)),
      call.params
    )
    return run.journal.step(
      `tool/${step}/${index}`,
      toolCodec,
      ClusterQuestions.guard(
        ClusterQuestions.questionId(agentId, at),
        asks,
        Effect.gen(function*() {
          // Steps are at-least-once: this one may be running again after a crash. A tool that is
          // not idempotent commits a marker before it runs; found, it is not run twice. (An unknown
          // tool only fails: it may run again.)
          const idempotent = Option.match(run.registry.get(call.name), {
            onNone: () => true,
            onSome: (t) => t.idempotent
          })
          const first = idempotent || (yield* Effect.orDie(run.store.startToolCall(agentId, at)))
          const result = first
            ? yield* ClusterWatch.stopOnCancel(
              run.watch,
              agentId,
              run.steps.tool({ agentId, step, role: run.role.name, depth, rules: run.rules, call }),
              Effect.succeed(cancelledCall(call))
            )
            : interruptedCall(call)
          return {
            value: result,
            commit: run.store.recordStep(agentId, [{ at, message: AgentSteps.toolMessage([result]) }], zeroUsage)
          }
        })
      )
    )
  })
}

/** The rows of the children a turn's sub-agent calls ask for, when its model step records them. */
const requestedChildren = (run: RunContext, step: number, calls: ReadonlyArray<AgentSteps.StepToolCall>) =>
  Effect.gen(function*() {
    const rows: Array<AgentRow> = []
    if (!ClusterSubAgents.recordsChildren(run.subAgents)) return rows
    const { agentId, depth } = run.payload
    yield* Effect.forEach(calls, (call, index) => {
      const tool = subAgentTools.get(call.name)
      if (tool === undefined) return Effect.void
      const manager = ClusterSubAgents.probe(run.subAgents, step, index, (row) => rows.push(row))
      const caller = { id: agentId, role: run.role.name, depth, rules: run.rules }
      return Effect.exit(runTool(tool, manager, run.permission, caller, call))
    }, { discard: true })
    return rows
  })

/** What the loop has done so far, from journaled results only (so a replay computes the same). */
interface Progress {
  runTokens: number
  toolCalls: number
  /** Did the last model step end the run (its final answer, within the run's token budget)? */
  ended: boolean
}

// A typed answer is decoded by the loop first (it may need its repair turn): its run ends in the finish.
const endsRun = (run: RunContext, result: AgentSteps.ModelStep, tokensBefore: number) =>
  run.output === undefined && result.toolCalls.length === 0 &&
  (run.maxTokens === undefined || tokensBefore + stepTokens(result.usage) <= run.maxTokens)

/** One model step: the budgets checked at the step, the call, and the writes of its commit. */
const modelStep = (run: RunContext, progress: Progress) =>
(
  step: number,
  messages: ReadonlyArray<Prompt.Message>
) => {
  const { agentId, rootId } = run.payload
  const config = run.config
  const earlier = takeUnwritten(run)
  const tokensBefore = progress.runTokens
  const toolCallsBefore = progress.toolCalls
  const execute = Effect.gen(function*() {
    // A first run starts in its first model step, in the statement of the step's first read:
    // the inbox, and the budgets that are checked at each step.
    const starts = step === 0 && run.payload.run === 0
    if (starts) yield* run.admitRun
    const begin = yield* Effect.orDie(
      run.store.beginStep(agentId, {
        treeOf: config.treeMaxTokens === undefined ? undefined : rootId,
        runAge: run.maxWallSecs !== undefined,
        start: starts ? { at: run.promptAt, prompt: run.prompt } : undefined
      })
    )
    if (run.maxWallSecs !== undefined && begin.runSecs > run.maxWallSecs) {
      return yield* new Session.BudgetExceeded({ sessionId: agentId, budget: "max_wall_secs", limit: run.maxWallSecs })
    }
    if (config.treeMaxTokens !== undefined && begin.treeTokens > config.treeMaxTokens) {
      return yield* new Session.BudgetExceeded({
        sessionId: agentId,
        budget: "tree_max_tokens",
        limit: config.treeMaxTokens
      })
    }
    const answer = yield* ClusterWatch.stopOnCancel(
      run.watch,
      agentId,
      run.steps.model({
        agentId,
        step,
        model: run.modelId,
        system: run.system,
        messages,
        rules: run.rules,
        takeInbox: Effect.succeed(begin.inbox),
        output: run.output?.compiled
      }),
      Effect.fail(new AgentFailed({ agentId, reason: "cancelled while its model call was in flight" }))
    )
    const delivered = answer.delivered.map((text) => AgentSteps.userMessage(text))
    // A provider that reports no usage gets an estimate in core's model step (loop/ModelStep.ts).
    const result: AgentSteps.ModelStep = answer
    // A final answer ends the run in the statement that records it.
    const final = endsRun(run, result, tokensBefore)
    const record = run.store.recordStep(
      agentId,
      [
        ...earlier,
        ...delivered.map((message, i) => ({ at: { run: run.payload.run, step, slot: i }, message })),
        { at: { run: run.payload.run, step, slot: slot.assistant }, message: result.assistant }
      ],
      result.usage,
      final
        ? {
          update: {
            status: "completed",
            text: result.text,
            // Its claims checked against the conversation that led to the answer (core's Claims,
            // as the embedded engine checks them over its session's transcript).
            claims: Claims.ofAnswer(result.text, messages),
            reason: null,
            steps: step + 1,
            toolCalls: toolCallsBefore
          },
          release: run.capped
        }
        : undefined,
      // The queued input this step delivered is taken by its commit.
      begin.inboxIds.slice(0, result.delivered.length)
    )
    // The children this turn asks for are recorded with it (unless each takes a permit in an
    // activity of its own), so they exist before their workflows start.
    const children = yield* requestedChildren(run, step, result.toolCalls)
    return {
      value: result,
      commit: children.length === 0 ? record : Effect.andThen(record, run.store.insertMany(children))
    }
  })
  return Effect.tap(run.journal.step(`model/${step}`, modelCodec, execute), (result) =>
    Effect.sync(() => {
      progress.ended = endsRun(run, result, tokensBefore)
      progress.runTokens = tokensBefore + stepTokens(result.usage)
      progress.toolCalls = toolCallsBefore + result.toolCalls.length
    }))
}

// --- Finish ---

// Interrupted: cancelled (the finalizer records it), or suspended in a durable wait (the run is
// replayed when it wakes). Either way nothing is finished here. A run the last model step did
// not end (a failure, a budget, the step limit) is finished in an activity of its own.
const finish = (run: RunContext, progress: Progress, exit: Exit.Exit<AgentLoop.LoopResult, unknown>) =>
  Effect.gen(function*() {
    if (Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause)) return yield* Effect.interrupt
    const { agentId } = run.payload
    if (!(Exit.isSuccess(exit) && progress.ended)) {
      const outcome = Exit.isSuccess(exit)
        ? {
          status: "completed" as const,
          text: exit.value.text,
          claims: Claims.ofAnswer(exit.value.text, exit.value.messages),
          reason: null
        }
        : { status: "failed" as const, text: null, claims: null, reason: failureReason(exit.cause) }
      const rest = takeUnwritten(run)
      yield* txActivity({
        name: "finish",
        execute: Effect.orDie(Effect.gen(function*() {
          if (rest.length > 0) yield* run.store.recordStep(agentId, rest, zeroUsage)
          yield* run.store.finishRun(agentId, {
            ...outcome,
            ...(Exit.isSuccess(exit) ? { steps: exit.value.steps, toolCalls: exit.value.toolCalls } : {})
          }, run.capped)
        }))
      })
    }
    if (Exit.isFailure(exit)) return yield* new AgentFailed({ agentId, reason: failureReason(exit.cause) })
    // The run has ended: its row is final (a replay of this end reads the same).
    const row = yield* Effect.orDie(run.store.get(agentId))
    return {
      agentId,
      text: exit.value.text,
      steps: exit.value.steps,
      toolCalls: exit.value.toolCalls,
      ...(row === undefined ? {} : { row })
    }
  })

// --- The body ---

const body = (options: Partial<Options>) =>
  AgentWorkflow.toLayer(Effect.fnUntraced(function*(payload, executionId) {
    const config: Options = { ...defaults, ...options }
    const run = yield* setup(config, payload, executionId)
    yield* Workflow.addFinalizer(finalizer(run))
    yield* admission(run)
    const messages = yield* history(run)
    const progress: Progress = { runTokens: 0, toolCalls: 0, ended: false }
    // Under the run's `invoke_agent` span, hung under its starter's (from the payload): one per
    // execution of the body, so a run suspended and resumed, or moved, shows one per stretch.
    const exit = yield* Effect.exit(GenAiTrace.invokeAgent(
      {
        agentId: payload.agentId,
        role: run.role.name,
        model: run.modelId,
        depth: payload.depth,
        parentId: payload.parentId ?? undefined,
        description: payload.description,
        prompt: payload.prompt
      },
      () =>
        AgentLoop.run(
          {
            agentId: payload.agentId,
            messages,
            maxSteps: payload.depth === 0 ? config.maxSteps : config.childMaxSteps,
            maxTokens: run.maxTokens,
            output: run.output
          },
          { model: modelStep(run, progress), tool: toolStep(run) },
          {
            // A typed answer's tool results and repair request: written by the next commit.
            onLoopMessage: (message, step) =>
              Effect.sync(() => {
                const at = { run: payload.run, step, slot: message.role === "tool" ? slot.tool : slot.repair }
                run.unwritten.push({ at, message })
              })
          }
        ),
      payload.trace
    ))
    return yield* finish(run, progress, exit)
  }))
