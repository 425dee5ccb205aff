/**
 * SubAgentManager — every sub-agent's lifecycle, under one cap.
 *
 * Both ways in go through here: `task` (foreground: the caller waits) and `agent_spawn`
 * (background: the caller goes on and collects the result later). The manager resolves the
 * role and the model (refusing unknown ones before anything exists), admits the agent under
 * `maxConcurrent` permits (only running agents hold one; with queue admission an agent
 * blocked waiting for others lends its permit to one of them), creates the child session, records the
 * agent in the SubAgentStore, and runs it as a fiber:
 *
 * - a background child is forked into its parent's running prompt scope, so interrupting
 *   or cancelling the parent interrupts every descendant; a `detached` one lives in the
 *   manager's scope and survives its parent. A cancel marks every non-detached descendant
 *   (foreground `task` children too) cancelled before the interruption reaches it, so the
 *   whole tree ends `cancelled`, each with a reason naming the agent that was cancelled;
 * - a parent whose model answers while its background children run waits for them and gets
 *   their results as a new message (the Session `beforeFinish` hook);
 * - a watchdog cancels agents that make no progress for `heartbeat_timeout_secs`.
 *
 * Lifecycle: pending -> running -> completed | failed(reason) | cancelled(reason) |
 * interrupted(reason), exactly one terminal state per run. Each record is the agent's run
 * receipt (Receipt.ts): its runs, event log, inputs, artifacts and provenance, kept in memory
 * as they happen and written with the record at its next status change. Every method that
 * takes an agent id also takes its session name (or a run id).
 */
import * as Prompt from "effect/ai/Prompt"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Latch from "effect/Latch"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as AgentDefinitions from "./AgentDefinitions.ts"
import { type AgentEvent, AgentEvents } from "./AgentEvents.ts"
import * as AgentResult from "./AgentResult.ts"
import { type AgentView, bound } from "./AgentResult.ts"
import type * as FibrilConfig from "./FibrilConfig.ts"
import { nowMillis } from "./internal/clock.ts"
import * as Names from "./internal/names.ts"
import * as Permits from "./internal/permits.ts"
import { sleepUnref } from "./internal/sleep.ts"
import { withSpan } from "./internal/span.ts"
import * as Transcript from "./internal/transcript.ts"
import { Models, type UnknownModel } from "./Models.ts"
import * as OutputContract from "./OutputContract.ts"
import * as Permission from "./Permission.ts"
import * as Receipt from "./Receipt.ts"
import * as Roles from "./Roles.ts"
import {
  type Budgets,
  describeFailure,
  type PromptError,
  type PromptResult,
  Session,
  type SessionNotFound
} from "./Session.ts"
import * as SpawnCheck from "./SpawnCheck.ts"
import {
  agentOfRunId,
  currentRunId,
  type Input,
  isTerminal,
  type Status,
  type SubAgentRecord
} from "./SubAgentRecord.ts"
import { SubAgentStore } from "./SubAgentStore.ts"
import * as TranscriptView from "./TranscriptView.ts"
import { Workspace } from "./Workspace.ts"

export interface Options {
  readonly maxConcurrent: number
  readonly admission: "reject" | "queue"
  readonly heartbeatTimeoutSecs: number
  /** Per-agent and per-tree budgets of sub-agents. */
  readonly budgets: Partial<Budgets>
  /** Model per role: `[subagents] *_model` and `[subagents.models]`. */
  readonly defaultModel?: string | undefined
  readonly roleModels: Readonly<Record<string, string>>
  /** Agent types defined in markdown files, usable as `subagent_type`. */
  readonly agents?: ReadonlyArray<AgentDefinitions.AgentDefinition> | undefined
  /** Bound on each part of a child's result (summary, each section, the answer kept in the record) and on reasons. */
  readonly maxResultChars?: number | undefined
  /**
   * The workspace whose `.fibril/state` holds this manager's store: receipts then offer a
   * person `fibril agents resume <id> --cwd <workspace>` to take an agent over. Undefined (the
   * memory store, or a store elsewhere): receipts say why no local takeover is possible.
   */
  readonly workspace?: string | undefined
}

export const defaults: Options = {
  maxConcurrent: 10,
  admission: "reject",
  heartbeatTimeoutSecs: 300,
  budgets: {},
  roleModels: {}
}

export interface SpawnRequest {
  readonly prompt: string
  readonly description?: string | undefined
  readonly role?: string | undefined
  readonly model?: string | undefined
  readonly detached?: boolean | undefined
  readonly forkContext?: boolean | undefined
  readonly allowedTools?: ReadonlyArray<string> | undefined
  /**
   * The agent (id or session name) this one checks: when it ends, its result is attached to
   * that agent's record as a verification receipt (Receipt.fromVerifier).
   */
  readonly verifies?: string | undefined
}

export class CapReached extends Schema.TaggedError<CapReached>()("CapReached", {
  max: Schema.Int,
  running: Schema.Int
}) {
  override get message() {
    return `sub-agent cap reached (max ${this.max}, running ${this.running}): nothing was spawned. ` +
      "Wait for a running agent to finish (agent_wait) or cancel one (agent_cancel), then try again."
  }
}

export class AgentNotFound extends Schema.TaggedError<AgentNotFound>()("AgentNotFound", { agentId: Schema.String }) {
  override get message() {
    return `no sub-agent with id "${this.agentId}"; agent_list shows the known ones`
  }
}

export class NotResumable extends Schema.TaggedError<NotResumable>()("NotResumable", {
  agentId: Schema.String,
  status: Schema.String
}) {
  override get message() {
    return `sub-agent ${this.agentId} is ${this.status}; only a finished agent (completed, failed, cancelled or interrupted) can be resumed`
  }
}

export class NotOwned extends Schema.TaggedError<NotOwned>()("NotOwned", {
  agentId: Schema.String,
  owner: Schema.String
}) {
  override get message() {
    return `sub-agent ${this.agentId} is recorded by another process (${this.owner}); only the process that owns its record can change it`
  }
}

export type SpawnError =
  | SpawnCheck.SpawnTextTooLong
  | Roles.UnknownRole
  | Roles.InvalidRoleRequest
  | UnknownModel
  | CapReached
  | SessionNotFound
  | AgentNotFound

export type { AgentView } from "./AgentResult.ts"

export interface WaitResult {
  readonly timed_out: boolean
  readonly completed: ReadonlyArray<AgentView>
  readonly pending: ReadonlyArray<string>
}

export interface InputResult {
  readonly delivered: boolean
  readonly reason?: string | undefined
  readonly agent: AgentView
  /** The input as the agent's record keeps it (absent when another process owns the record). */
  readonly input?: Input | undefined
}

/** Where a message sent to an agent came from (kept in the record's `inputs`). */
export type InputVia = "agent_send_input" | "agent_eval" | "agent_assign" | "request" | "api"

/** A check of an agent's work by a command, to attach to its record. */
export interface CommandCheck {
  readonly command: string
  readonly exitCode: number
  /** What it printed, or a note (kept as a bounded preview). */
  readonly summary?: string | undefined
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] }

/** A run's sub-agent permit: taken at admission, to be waited for (queue), or none (a root agent). */
type Permit = "held" | "wait" | "none"

interface Entry extends Permits.Holder {
  record: Mutable<SubAgentRecord>
  readonly parentSessionId: string | undefined
  fiber: Fiber.Fiber<unknown, unknown> | undefined
  done: Deferred.Deferred<void>
  cancelReason: string | undefined
  /** Its session published `started` for this run (and so publishes its terminal event). */
  started: boolean
  lastProgress: number
  /** The record's counters when the current run started: what the run alone did is the difference. */
  runBase: Receipt.RunBase
  /** This run's result was handed to its parent (task's result, or agent_wait / agent_result). */
  resultRead: boolean
  /** Set by a resume: the record as its latest ended run ended. */
  lastEnded: AgentView | undefined
}

export const restartReason = "Interrupted by process restart"

/** Default bound on each part of a result a parent receives (summary, each section) and on stored reasons. */
export const defaultMaxResultChars = 16_384

/** How often a process with live agents reads the requests other processes left for it. */
const requestPollMs = 500
/** How long a cancel of another process's agent waits for that process to act. */
const foreignCancelWait = Duration.seconds(5)

const roleModelKey: Partial<Record<Roles.RoleName, keyof FibrilConfig.SubagentSettings>> = {
  general: "workerModel",
  implementer: "workerModel",
  tool_agent: "workerModel",
  explore: "explorerModel",
  plan: "awaiterModel",
  review: "reviewModel",
  custom: "customModel"
}

/** Model per role from settings: `[subagents.models]` wins over the `*_model` keys. */
export const roleModelsFrom = (settings: FibrilConfig.SubagentSettings): Record<string, string> => {
  const out: Record<string, string> = {}
  for (const role of Roles.roleNames) {
    const key = roleModelKey[role]
    const value = key === undefined ? undefined : settings[key]
    if (typeof value === "string") out[role] = value
  }
  for (const [name, model] of Object.entries(settings.models)) out[Roles.canonical(name) ?? name] = model
  return out
}

export const optionsFrom = (settings: FibrilConfig.Settings): Options => ({
  maxConcurrent: settings.subagents.maxConcurrent,
  admission: settings.subagents.admission,
  heartbeatTimeoutSecs: settings.subagents.heartbeatTimeoutSecs,
  budgets: {
    ...(settings.subagents.maxSteps === undefined ? {} : { maxSteps: settings.subagents.maxSteps }),
    maxTokens: settings.subagents.maxTokens,
    maxWallSecs: settings.subagents.maxWallSecs,
    treeMaxTokens: settings.subagents.treeMaxTokens
  },
  defaultModel: settings.subagents.defaultModel,
  roleModels: roleModelsFrom(settings.subagents),
  maxResultChars: settings.subagents.maxResultChars
})

export class SubAgentManager extends Context.Service<SubAgentManager, {
  readonly bootId: string
  readonly options: Options
  /** Starts a background agent and returns at once. */
  readonly spawn: (parentSessionId: string | undefined, request: SpawnRequest) => Effect.Effect<AgentView, SpawnError>
  /**
   * Starts the root agent of a tree (no parent, depth 0, no sub-agent permit) and records it
   * like any other; the fiber runs its prompt.
   */
  readonly startRoot: (request: SpawnRequest) => Effect.Effect<
    { readonly agent: AgentView; readonly fiber: Fiber.Fiber<PromptResult, PromptError> },
    SpawnError
  >
  /** Starts an agent and waits for it in the caller's fiber (the `task` tool). */
  readonly run: (parentSessionId: string | undefined, request: SpawnRequest) => Effect.Effect<AgentView, SpawnError>
  /**
   * Waits for agents. `caller`: the agent (session id) that waits; with queue admission it
   * lends its permit to one of them that is queued while it waits.
   */
  readonly wait: (
    ids: ReadonlyArray<string>,
    options: {
      readonly mode: "any" | "all"
      readonly timeoutMs?: number | undefined
      readonly caller?: string | undefined
    }
  ) => Effect.Effect<WaitResult, AgentNotFound>
  readonly result: (
    id: string,
    options: { readonly block: boolean; readonly timeoutMs?: number | undefined; readonly caller?: string | undefined }
  ) => Effect.Effect<AgentView, AgentNotFound>
  readonly cancel: (id: string, reason?: string) => Effect.Effect<AgentView, AgentNotFound>
  readonly list: (options: {
    readonly includeArchived: boolean
    readonly parentSessionId?: string | undefined
  }) => Effect.Effect<ReadonlyArray<AgentView>>
  /** Delivers a message to a running agent; either way the record keeps it (preview, time, reason). */
  readonly sendInput: (
    id: string,
    message: string,
    interrupt: boolean,
    via?: InputVia
  ) => Effect.Effect<InputResult, AgentNotFound | SpawnCheck.SpawnTextTooLong>
  /**
   * What `agent_wait` without ids waits for: the caller's children still live, and those
   * finished whose result the caller has not been handed yet (each is handed over once).
   */
  readonly unreadChildren: (parentSessionId: string | undefined) => Effect.Effect<ReadonlyArray<string>>
  /**
   * Records that these agents' results were handed to `parentSessionId`, if it is their parent
   * (undefined: the embedder's own top-level agents, e.g. an MCP client's).
   */
  readonly markRead: (parentSessionId: string | undefined, ids: ReadonlyArray<string>) => Effect.Effect<void>
  readonly resume: (
    callerSessionId: string | undefined,
    id: string,
    message?: string
  ) => Effect.Effect<
    AgentView,
    | AgentNotFound
    | NotResumable
    | CapReached
    | UnknownModel
    | Roles.UnknownRole
    | Roles.InvalidRoleRequest
    | SpawnCheck.SpawnTextTooLong
  >
  readonly assign: (
    id: string,
    update: {
      readonly objective?: string | undefined
      readonly role?: string | undefined
      readonly message?: string | undefined
    }
  ) => Effect.Effect<
    InputResult,
    | AgentNotFound
    | Roles.UnknownRole
    | Roles.InvalidRoleRequest
    | Permission.PermissionWidening
    | SpawnCheck.SpawnTextTooLong
  >
  /** Running sub-agents right now (with queue admission, one that lent its permit while it waits counts too). */
  readonly running: Effect.Effect<number>
  /** The agent id behind an id, a session name or a run id (`id` itself when nothing matches). */
  readonly resolve: (id: string) => Effect.Effect<string>
  /** A page of an agent's transcript, by its handle (or the agent's id or session name). */
  readonly readTranscript: (
    handle: string,
    page: { readonly offset?: number | undefined; readonly limit?: number | undefined }
  ) => Effect.Effect<TranscriptView.Page, AgentNotFound>
  /** Attaches a command's exit code to the agent's record as a check of its current run. */
  readonly attachVerification: (id: string, check: CommandCheck) => Effect.Effect<AgentView, AgentNotFound | NotOwned>
  /** The worker record (the whole receipt, with follow-up and takeover) of an agent, as seen from here. */
  readonly workerRecord: (agent: SubAgentRecord) => Effect.Effect<Receipt.WorkerRecord>
}>()("@fibril/core/SubAgentManager") {}

export const make = Effect.fn("SubAgentManager.make")(function*(options: Partial<Options> = {}) {
  const config: Options = { ...defaults, ...options }
  const session = yield* Session
  const models = yield* Models
  const store = yield* SubAgentStore
  const events = yield* AgentEvents
  const workspace = yield* Effect.serviceOption(Workspace)
  const managerScope = yield* Effect.scope
  const bootId = store.owner.boot_id
  const maxResultChars = config.maxResultChars ?? defaultMaxResultChars
  // Permits, `maxConcurrent` of them (internal/permits.ts): taken at admission (reject), or
  // waited for in order (queue), when a blocked agent may lend its own to one it waits for.
  const permits = Permits.make(config.maxConcurrent)
  /** `waiting`, in the run of agent `callerId`: its permit lent meanwhile to one of `targets` that is queued. */
  const lendWhile = <A, E>(
    callerId: string | undefined,
    targets: ReadonlyArray<Entry | SubAgentRecord>,
    waiting: Effect.Effect<A, E>
  ): Effect.Effect<A, E> =>
    Effect.suspend(() => {
      const lender = callerId === undefined ? undefined : entries.get(callerId)
      return lender === undefined ? waiting : permits.lendWhile(lender, new Set(targets), waiting)
    })
  const entries = new Map<string, Entry>()
  /** Background, non-detached children by the session that spawned them. */
  const childrenOf = new Map<string, Set<Entry>>()
  /**
   * Every non-detached child (background, and foreground `task` children too) by the session
   * that spawned it: what a cancel reaches. A foreground child ends when its parent's fiber is
   * interrupted, but only a reason set before that makes it end `cancelled`, not `interrupted`.
   */
  const cancelReaches = new Map<string, Set<Entry>>()
  let runningCount = 0

  // Agents of processes that ended without finishing them are interrupted; those of live
  // processes are theirs. This process's own agents are those it starts or adopts.
  yield* store.reconcile
  /** Own agents not yet terminal: while there are any, requests from other processes are read. */
  let liveCount = 0
  const requestsWake = yield* Latch.make()
  /** Opened when an agent starts: the heartbeat watchdog runs while agents are live. */
  const watchdogWake = yield* Latch.make()
  const agentStarted = () => {
    liveCount++
    requestsWake.openUnsafe()
    watchdogWake.openUnsafe()
  }

  const view = (record: SubAgentRecord): AgentView => ({
    ...record,
    from_prior_session: record.session_boot_id !== bootId
  })

  /** Session names of this process's agents. */
  const names = new Map<string, string>()
  const nameShape = /^[a-z]+-[a-z]+(?:-\d+)?$/

  const named = (name: string | undefined, agentId: string) => {
    if (name !== undefined && !names.has(name)) names.set(name, agentId)
  }

  /**
   * The agent id behind `id`: an id, a session name (this process's agents first, then the
   * store's, the most recent one) or a run id. `id` itself when nothing matches.
   */
  const resolve = (id: string): Effect.Effect<string> => {
    const local = names.get(id)
    if (local !== undefined) return Effect.succeed(local)
    const run = agentOfRunId(id)
    if (run !== undefined && entries.has(run)) return Effect.succeed(run)
    if (!store.durable || !(nameShape.test(id) || run !== undefined)) return Effect.succeed(id)
    return Effect.map(store.all, (records) => {
      let found: SubAgentRecord | undefined
      // A session name, or a run id (an agent id is neither: it has an underscore, no run suffix).
      for (const record of records) {
        if (record.agent_id === run || Receipt.sessionName(record) === id) {
          if (found === undefined || record.created_at >= found.created_at) found = record
        }
      }
      return found?.agent_id ?? id
    })
  }

  const lookup = (id: string): Effect.Effect<Entry, AgentNotFound> =>
    Effect.flatMap(resolve(id), (agentId) => {
      const entry = entries.get(agentId)
      return entry === undefined ? Effect.fail(new AgentNotFound({ agentId: id })) : Effect.succeed(entry)
    })

  /** One of this process's agents, or the record of another process's (reconciled first). */
  const lookupAny = (id: string): Effect.Effect<Entry | SubAgentRecord, AgentNotFound> =>
    Effect.flatMap(resolve(id), (agentId): Effect.Effect<Entry | SubAgentRecord, AgentNotFound> => {
      const local = entries.get(agentId)
      if (local !== undefined) return Effect.succeed(local)
      return Effect.flatMap(
        store.reconcile,
        () =>
          Effect.flatMap(
            store.get(agentId),
            (found) =>
              Option.isSome(found) ? Effect.succeed(found.value) : Effect.fail(new AgentNotFound({ agentId: id }))
          )
      )
    })

  /** Paths as receipts keep them: workspace-relative. */
  const relativize = Option.isSome(workspace) ? workspace.value.relativize : (path: string) => path

  const workerRecord = (record: SubAgentRecord): Effect.Effect<Receipt.WorkerRecord> =>
    Effect.map(
      record.session_boot_id === bootId ? Effect.succeed("self" as const) : store.liveness(record.session_boot_id),
      (owner) => Receipt.workerRecord(record, { workspace: config.workspace, durable: store.durable, owner })
    )

  const isEntry = (target: Entry | SubAgentRecord): target is Entry => "done" in target

  const awaitForeign = (id: string): Effect.Effect<void> =>
    Effect.provideService(untilTerminal(id), SubAgentStore, store)

  const currentView = (target: Entry | SubAgentRecord): Effect.Effect<AgentView> =>
    isEntry(target)
      ? Effect.map(isTerminal(target.record.status) ? Effect.void : syncFromSession(target), () => view(target.record))
      : Effect.map(store.get(target.agent_id), (found) => view(Option.getOrElse(found, () => target)))

  const modelFor = (role: Roles.RoleSpec, explicit: string | undefined, parentModel: string | undefined) =>
    explicit ?? config.roleModels[role.name] ?? config.defaultModel ?? parentModel ?? models.defaultModel

  const definitions = config.agents ?? []
  const customNames = definitions.filter((d) => d.usableAsSubagent).map((d) => d.name)

  interface ResolvedRole {
    readonly role: Roles.RoleSpec
    readonly allowedTools: ReadonlyArray<string> | undefined
    readonly definition: Permission.Ceiling | undefined
    readonly model: string | undefined
    readonly maxSteps: number | undefined
  }
  type RoleError = Roles.UnknownRole | Roles.InvalidRoleRequest

  /**
   * A built-in role, or an agent defined in markdown (its base role's posture, its own prompt,
   * its tools as a ceiling of their own). The caller's `allowed_tools` stay a separate
   * ceiling: they narrow a definition's tools, never replace them. Eager forms: a role is
   * decided at once, so the spawn path reads the result as an Exit, at no step of its own.
   */
  const resolveRole = (
    name: string,
    allowedTools: ReadonlyArray<string> | undefined
  ): Effect.Effect<ResolvedRole, RoleError> =>
    Effect.catchEager(
      Effect.mapEager(Roles.forRequest(name, allowedTools), (role): ResolvedRole => ({
        role,
        allowedTools,
        definition: undefined,
        model: undefined,
        maxSteps: undefined
      })),
      (error): Effect.Effect<ResolvedRole, RoleError> => {
        if (error._tag !== "UnknownRole") return Effect.fail(error)
        const definition = AgentDefinitions.find(definitions, name)
        if (definition === undefined) {
          return Effect.fail(new Roles.UnknownRole({ name, accepted: error.accepted, custom: customNames }))
        }
        const base = Roles.roles[definition.baseRole]
        const role: Roles.RoleSpec = {
          ...base,
          name: definition.name,
          description: definition.description,
          needsAllowedTools: false,
          prompt: `${definition.prompt}\n\n${Roles.outputContract}`
        }
        return Effect.succeed({
          role,
          allowedTools,
          definition: { allow: definition.allowedTools, deny: definition.deniedTools },
          model: definition.model,
          maxSteps: definition.maxSteps
        })
      }
    )

  /** Queues messages for the agent's transcript in the store (committed at the end of this turn). */
  const queueMessages = (handle: string, messages: ReadonlyArray<Prompt.Message>) => {
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
  const persistStart = (entry: Entry) =>
    store.durable
      ? Effect.flatMap(
        // The session was created a step before: it is there.
        Effect.orDie(session.transcript(entry.record.agent_id)),
        (messages) => queueMessages(entry.record.transcript_handle, messages)
      )
      : Effect.void

  const syncFromSession = (entry: Entry) =>
    Effect.map(Effect.option(session.info(entry.record.agent_id)), (found) => {
      if (Option.isNone(found)) return
      const info = found.value
      // An unnamed model takes the name its provider reported (Models.unnamed).
      entry.record.model = info.model
      entry.record.steps = info.steps
      entry.record.tool_calls = info.toolCalls
      if (info.lastTool !== undefined) entry.record.last_tool = info.lastTool
      entry.record.tokens = info.treeUsage
      entry.record.usage = Receipt.usage(info.usageSteps)
    })

  /**
   * A verifier's result, as a receipt on the record of the agent it checked (when this process
   * owns that record; another process's record keeps only the verifier's own `verifies`).
   */
  const attachVerifierResult = (verifier: SubAgentRecord) =>
    Effect.gen(function*() {
      const checked = verifier.verifies!
      const target = entries.get(agentOfRunId(checked) ?? checked)
      if (target === undefined) {
        return yield* Effect.logWarning(
          `verifier ${verifier.agent_id}: ${verifier.verifies} is not an agent of this process; its result stays in the verifier's record`
        )
      }
      const now = yield* Clock.currentTimeMillis
      Receipt.attach(target.record, Receipt.fromVerifier(verifier, checked, now))
      yield* store.put(target.record)
    })

  const finish = (entry: Entry, exit: Exit.Exit<{ readonly text: string }, unknown>) =>
    Effect.gen(function*() {
      const record = entry.record
      if (isTerminal(record.status)) return
      yield* syncFromSession(entry)
      // Messages delivered that the run never read (it ended first) are recorded as such.
      const unread = yield* session.takeUnread(record.agent_id)
      record.finished_at = nowMillis()
      if (Exit.isSuccess(exit)) {
        // What the record keeps, and so what a parent receives, is bounded part by part; the
        // whole answer is in the transcript.
        const text = exit.value.text
        const parsed = OutputContract.parse(text)
        const sections = parsed.sections
        record.status = "completed"
        delete record.reason
        record.outcome = {
          text: bound(text, maxResultChars),
          summary: bound(OutputContract.summaryOf(parsed, text), maxResultChars),
          sections: {
            summary: bound(sections.summary, maxResultChars),
            changes: bound(sections.changes, maxResultChars),
            evidence: bound(sections.evidence, maxResultChars),
            risks: bound(sections.risks, maxResultChars),
            blockers: bound(sections.blockers, maxResultChars)
          },
          contract_violations: parsed.violations.map((v) => v.message)
        }
      } else if (Cause.hasInterruptsOnly(exit.cause)) {
        record.status = entry.cancelReason === undefined ? "interrupted" : "cancelled"
        record.reason = bound(
          entry.cancelReason ?? "Interrupted: its parent was interrupted or the runtime shut down",
          maxResultChars
        )
      } else {
        record.status = "failed"
        record.reason = bound(describeFailure(exit.cause), maxResultChars)
      }
      Receipt.unread(
        record,
        unread.length,
        `the agent ended (${record.status}) before its next step read it; agent_resume with this message delivers it`,
        record.finished_at
      )
      Receipt.finished(record, entry.runBase)
      // An agent that never started its prompt has no session events: say it here, so every
      // agent publishes exactly one terminal event.
      if (!entry.started) {
        yield* events.publish({
          type: record.status,
          reason: record.reason,
          at: record.finished_at,
          agent: {
            agentId: record.agent_id,
            parentId: record.parent_id,
            depth: record.depth,
            role: record.role,
            model: record.model,
            description: record.description,
            step: 0,
            toolCalls: 0,
            lastTool: undefined,
            usage: record.tokens
          }
        })
      }
      yield* store.put(record)
      if (record.verifies !== undefined) yield* attachVerifierResult(record)
      liveCount--
      yield* Deferred.succeed(entry.done, undefined)
      // A finished run's fiber (its context, spans, exit) is not kept for as long as the record.
      entry.fiber = undefined
      if (entries.size >= pruneAt) yield* forgetEvicted
    })

  // The store evicts finished records (by age and by count); an agent it no longer holds is
  // forgotten here too, with its session, or a long-lived process (an MCP server, an embedding
  // harness) would keep every agent it ever ran. One pass each time the map has doubled since
  // the last: amortised O(1) per agent, and at most about twice the store's records are kept.
  let pruneAt = 256
  const forgetEvicted = Effect.suspend(() => {
    pruneAt = Math.max(256, entries.size * 2)
    // One read of what the store holds, then one synchronous pass; a store that cannot be read
    // now is asked again at the next doubling.
    return store.ids.pipe(
      Effect.flatMap((held) => {
        const gone: Array<string> = []
        for (const [id, entry] of entries) {
          if (!isTerminal(entry.record.status) || held.has(id)) continue
          gone.push(id)
          entries.delete(id)
          if (entry.record.session_name !== undefined && names.get(entry.record.session_name) === id) {
            names.delete(entry.record.session_name)
          }
          for (const tree of [childrenOf, cancelReaches]) {
            tree.delete(id)
            const siblings = entry.parentSessionId === undefined ? undefined : tree.get(entry.parentSessionId)
            if (siblings?.delete(entry) === true && siblings.size === 0) tree.delete(entry.parentSessionId!)
          }
        }
        return gone.length === 0 ? Effect.void : Effect.forEach(gone, session.dispose, { discard: true })
      }),
      Effect.ignore
    )
  })

  // The agent's run: (wait for a permit,) run the session's prompt, record the outcome.
  const runAgent = (entry: Entry, message: string, permit: Permit) => {
    if (permit === "held") entry.permit = "pool"
    let counted = false
    const body = Effect.suspend(() => {
      const now = nowMillis()
      // Counted and marked running in one synchronous step, so an interruption cannot split them.
      if (permit !== "none") {
        runningCount++
        counted = true
      }
      entry.record.status = "running"
      entry.record.started_at = now
      entry.lastProgress = now
      const record = entry.record
      Receipt.started(record, now)
      return Effect.flatMap(store.put(record), () => session.prompt(record.agent_id, message))
    })
    // One finalizer for the count, the permit taken at admission and the outcome: each
    // finalizer is a step to unwind when the agent is interrupted.
    const admitted = permit === "wait" ? Effect.andThen(permits.take(entry), body) : body
    return Effect.onExit(admitted, (exit) => {
      if (counted) runningCount--
      permits.release(entry, permit === "held")
      return finish(entry, exit)
    })
  }

  // A run that finished while being forked (`finish` cleared the field already) is not kept.
  const keepFiber = (entry: Entry, fiber: Fiber.Fiber<unknown, unknown>) => {
    if (!isTerminal(entry.record.status)) entry.fiber = fiber
  }

  // Decided at once: it is called inside the spawn's own step, which reads the Exit at no step
  // of its own. The cap error counts the permits taken at admission: every running agent took
  // one, and so did one still being set up (its session and record created), so a full cap
  // never reports "running 0".
  const admit = (): Exit.Exit<boolean, CapReached> => {
    if (config.admission === "queue") return Exit.succeed(false)
    if (permits.admit()) return Exit.succeed(true)
    return Exit.fail(new CapReached({ max: config.maxConcurrent, running: permits.held() }))
  }

  // Internal to spawn and run, whose spans cover it; untraced because it runs once per
  // sub-agent on the spawn path.
  const start = Effect.fnUntraced(function*(
    parentSessionId: string | undefined,
    request: SpawnRequest,
    mode: "background" | "foreground" | "root"
  ) {
    const foreground = mode !== "background"
    // A root's prompt is the user's own (`fibril run --prompt-file`): only sub-agents' are bounded.
    const tooLong = mode === "root" ? undefined : SpawnCheck.checkText(request)
    if (tooLong !== undefined) return yield* tooLong
    const resolved = yield* resolveRole(request.role ?? "general", request.allowedTools)
    const role = resolved.role
    const parent = parentSessionId === undefined ? undefined : yield* session.info(parentSessionId)
    // A catalog that lists its models checks the id itself (resolve); one LanguageModel serves
    // any id, so a named one must be a model configured here.
    const unknownModel = models.available !== undefined ? undefined : SpawnCheck.checkModel(request.model, [
      models.defaultModel,
      config.defaultModel,
      parent?.model,
      ...Object.values(config.roleModels),
      ...definitions.map((definition) => definition.model)
    ])
    if (unknownModel !== undefined) return yield* unknownModel
    const model = modelFor(role, request.model ?? resolved.model, parent?.model)
    yield* models.resolve(model)
    // The run a verifier checks is the one current when it is spawned.
    const verifies = request.verifies === undefined
      ? undefined
      : currentRunId(yield* Effect.map(lookupAny(request.verifies), (t) => isEntry(t) ? t.record : t))
    // The root of a tree (`fibril run`'s agent) is recorded but holds no sub-agent permit.
    const permit: Permit = mode === "root" ? "none" : (yield* admit()) ? "held" : "wait"
    const released = permit === "held" ? Effect.sync(permits.unadmit) : Effect.void
    const created = mode === "root"
      ? yield* session.create({
        role: role.name,
        model,
        allowedTools: request.allowedTools,
        description: request.description
      }).pipe(
        Effect.catchTag("UnknownModel", (error) => Effect.die(error))
      )
      : yield* session.createChild(parentSessionId, {
        role,
        description: request.description,
        model,
        allowedTools: resolved.allowedTools,
        definition: resolved.definition,
        forkContext: request.forkContext,
        budgets: resolved.maxSteps === undefined ? config.budgets : { ...config.budgets, maxSteps: resolved.maxSteps }
      }).pipe(Effect.onError(() => released))
    const now = nowMillis()
    const detached = request.detached === true && !foreground
    const sessionName = Names.unique(created.id, (name) => names.has(name))
    const receipt = Receipt.initial({
      agentId: created.id,
      sessionName,
      transcriptHandle: `${created.id}.jsonl`,
      now,
      bootId,
      pid: store.owner.pid,
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
      role: role.name,
      model,
      description: request.description ?? request.prompt.slice(0, 60),
      objective: request.prompt,
      status: "pending",
      detached,
      fork_context: request.forkContext === true,
      session_boot_id: bootId,
      owner_pid: store.owner.pid,
      owner_host: store.owner.host,
      created_at: now,
      steps: 0,
      tool_calls: 0,
      tokens: { input: 0, output: 0, cached: 0 },
      transcript_handle: `${created.id}.jsonl`,
      permissions: Permission.toJson(created.rules)
    }
    if (parentSessionId !== undefined) record.parent_id = parentSessionId
    if (verifies !== undefined) record.verifies = verifies
    const entry: Entry = {
      record,
      parentSessionId,
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
      lastEnded: undefined
    }
    entries.set(record.agent_id, entry)
    names.set(sessionName, record.agent_id)
    agentStarted()
    yield* store.put(record)
    yield* persistStart(entry)
    if (!detached && parentSessionId !== undefined) {
      const set = cancelReaches.get(parentSessionId) ?? new Set<Entry>()
      set.add(entry)
      cancelReaches.set(parentSessionId, set)
    }
    const run = runAgent(entry, request.prompt, permit)
    let fiber: Fiber.Fiber<PromptResult, PromptError>
    if (foreground) {
      fiber = yield* Effect.forkChild(run, { startImmediately: true })
    } else {
      const scope = detached || parentSessionId === undefined
        ? managerScope
        : Option.getOrElse(session.scopeOf(parentSessionId), () => managerScope)
      if (!detached && parentSessionId !== undefined) {
        const set = childrenOf.get(parentSessionId) ?? new Set<Entry>()
        set.add(entry)
        childrenOf.set(parentSessionId, set)
      }
      fiber = yield* Effect.forkIn(run, scope, { startImmediately: true })
    }
    keepFiber(entry, fiber)
    return { entry, fiber }
  })

  // spawn, startRoot, run and result run once per agent: spans without `Effect.fn`'s per-call
  // stack capture (~3 µs), and none at all when no tracer is installed (internal/span.ts).
  const spawn = Effect.fnUntraced(
    function*(parentSessionId: string | undefined, request: SpawnRequest) {
      return view((yield* start(parentSessionId, request, "background")).entry.record)
    },
    withSpan("SubAgentManager.spawn")
  )

  const startRoot = Effect.fnUntraced(function*(request: SpawnRequest) {
    const { entry, fiber } = yield* start(undefined, request, "root")
    return { agent: view(entry.record), fiber }
  }, withSpan("SubAgentManager.startRoot"))

  // Combinators rather than a generator: `task` runs this once per sub-agent.
  const runSpan = withSpan("SubAgentManager.run")
  const run = (parentSessionId: string | undefined, request: SpawnRequest) =>
    runSpan(
      Effect.flatMap(start(parentSessionId, request, "foreground"), ({ entry, fiber }) =>
        Effect.mapEager(Fiber.await(fiber), () => {
          // Its result is task's result: the parent has it.
          entry.resultRead = true
          return view(entry.record)
        }))
    )

  type Target = Entry | SubAgentRecord

  const doneOf = (target: Target): Effect.Effect<void> =>
    isEntry(target) ? Deferred.await(target.done) : awaitForeign(target.agent_id)

  /** Waits for the targets (own agents, or another process's); true when the timeout came first. */
  const waitFor = (targets: ReadonlyArray<Target>, mode: "any" | "all", timeoutMs: number | undefined) =>
    Effect.flatMap(Effect.forEach(targets, currentView), (views) => {
      const open = targets.filter((_, i) => !isTerminal(views[i]!.status))
      if (open.length === 0 || (mode === "any" && open.length < targets.length)) return Effect.succeed(false)
      const waiting = mode === "any"
        ? Effect.raceAll(open.map(doneOf))
        : Effect.forEach(open, doneOf, { concurrency: "unbounded", discard: true })
      return timeoutMs === undefined
        ? Effect.as(waiting, false)
        : Effect.map(Effect.timeoutOption(waiting, Duration.millis(timeoutMs)), Option.isNone)
    })

  const idOf = (target: Target) => (isEntry(target) ? target.record.agent_id : target.agent_id)

  /** The run a waiter waits for: its `done` when the wait began. */
  const runOf = (target: Target) => (isEntry(target) ? target.done : undefined)

  /**
   * The target as a waiter that began waiting on `run` should see it: its latest ended run. If
   * a resume started a new run since (from outside, at the instant the awaited run ended) and
   * that run is still going, that is the record as the previous run ended, so the waiter still
   * gets the result it waited for; else the current view.
   */
  const endedView = (target: Target, run: Deferred.Deferred<void> | undefined): Effect.Effect<AgentView> =>
    isEntry(target) && run !== undefined && target.done !== run && !isTerminal(target.record.status) &&
      target.lastEnded !== undefined
      ? Effect.succeed(target.lastEnded)
      : currentView(target)

  const wait = Effect.fn("SubAgentManager.wait")(function*(
    ids: ReadonlyArray<string>,
    options: {
      readonly mode: "any" | "all"
      readonly timeoutMs?: number | undefined
      readonly caller?: string | undefined
    }
  ) {
    const targets = yield* Effect.forEach(ids, lookupAny)
    const runs = targets.map(runOf)
    const timedOut = yield* lendWhile(options.caller, targets, waitFor(targets, options.mode, options.timeoutMs))
    const views = yield* Effect.forEach(targets, (target, i) => endedView(target, runs[i]))
    return {
      timed_out: timedOut,
      completed: views.filter((v) => isTerminal(v.status)),
      pending: views.filter((v) => !isTerminal(v.status)).map((v) => v.agent_id)
    } satisfies WaitResult
  })

  const unreadChildren = (parentSessionId: string | undefined) =>
    Effect.sync(() => {
      const out: Array<string> = []
      for (const entry of entries.values()) {
        // A root (startRoot, depth 0) is nobody's child.
        if (entry.parentSessionId !== parentSessionId || entry.record.depth === 0) continue
        if (!isTerminal(entry.record.status) || !entry.resultRead) out.push(entry.record.agent_id)
      }
      return out
    })

  const markRead = (parentSessionId: string | undefined, ids: ReadonlyArray<string>) =>
    Effect.sync(() => {
      for (const id of ids) {
        const entry = entries.get(id)
        if (entry === undefined || entry.parentSessionId !== parentSessionId) continue
        if (isTerminal(entry.record.status)) entry.resultRead = true
      }
    })

  const result = Effect.fnUntraced(function*(
    id: string,
    options: { readonly block: boolean; readonly timeoutMs?: number | undefined; readonly caller?: string | undefined }
  ) {
    const target = yield* lookupAny(id)
    if (!options.block) return yield* currentView(target)
    const run = runOf(target)
    yield* lendWhile(options.caller, [target], waitFor([target], "all", options.timeoutMs))
    return yield* endedView(target, run)
  }, withSpan("SubAgentManager.result"))

  // The reason is set before the interruption so the run ends `cancelled`, not `interrupted`.
  const markCancelled = (entry: Entry, reason: string) => {
    entry.cancelReason = reason
    return session.markCancelled(entry.record.agent_id, reason)
  }

  const markDescendants = (sessionId: string, reason: string): Effect.Effect<void> =>
    Effect.forEach(cancelReaches.get(sessionId) ?? [], (child) => {
      if (isTerminal(child.record.status)) return Effect.void
      return Effect.andThen(markCancelled(child, reason), markDescendants(child.record.agent_id, reason))
    }, { discard: true })

  /**
   * Cancels another process's agent: a request its owner acts on within a second (it cancels
   * the agent's tree there); waits a few seconds for the record to say so.
   */
  const cancelForeign = (record: SubAgentRecord, reason: string) =>
    Effect.map(Effect.provideService(requestCancel(record, reason), SubAgentStore, store), view)

  const cancel = Effect.fn("SubAgentManager.cancel")(function*(id: string, reason = "Cancelled by request") {
    const target = yield* lookupAny(id)
    if (!isEntry(target)) return yield* cancelForeign(target, reason)
    const entry = target
    if (isTerminal(entry.record.status) || entry.fiber === undefined) return view(entry.record)
    yield* markCancelled(entry, reason)
    // By agent id, whichever name it was asked by (a session name, a run id): children are
    // known by their parent's agent id.
    const agentId = entry.record.agent_id
    yield* markDescendants(agentId, `Cancelled because its parent ${agentId} was cancelled`)
    yield* Fiber.interrupt(entry.fiber)
    yield* Deferred.await(entry.done)
    return view(entry.record)
  })

  /**
   * This process's agents (current ones, or every one with `includeArchived`), and those of
   * other processes sharing the store: the live ones, or every one with `includeArchived`.
   * Records whose owner is gone are reconciled first.
   */
  const list = Effect.fn("SubAgentManager.list")(function*(options: {
    readonly includeArchived: boolean
    readonly parentSessionId?: string | undefined
  }) {
    const out: Array<AgentView> = []
    for (const entry of entries.values()) {
      const record = entry.record
      if (options.parentSessionId !== undefined && record.parent_id !== options.parentSessionId) continue
      const current = record.session_boot_id === bootId || !isTerminal(record.status)
      if (current || options.includeArchived) {
        if (!isTerminal(record.status)) yield* syncFromSession(entry)
        out.push(view(record))
      }
    }
    if (!store.durable) return out
    yield* store.reconcile
    for (const record of yield* store.all) {
      if (entries.has(record.agent_id)) continue
      if (options.parentSessionId !== undefined && record.parent_id !== options.parentSessionId) continue
      if (options.includeArchived || !isTerminal(record.status)) out.push(view(record))
    }
    return out
  })

  /** A message within its bound, delivered (or recorded undelivered) by {@link deliverInput}. */
  const sendInput = (id: string, message: string, interrupt: boolean, via: InputVia = "api") => {
    const tooLong = SpawnCheck.checkMessage("message", message)
    return tooLong === undefined ? deliverInput(id, message, interrupt, via) : Effect.fail(tooLong)
  }

  const deliverInput = Effect.fn("SubAgentManager.sendInput")(function*(
    id: string,
    message: string,
    interrupt: boolean,
    via: InputVia
  ) {
    const target = yield* lookupAny(id)
    const agentId = idOf(target)
    const status = isEntry(target) ? target.record.status : target.status
    const now = yield* Clock.currentTimeMillis
    if (status !== "running" && status !== "pending") {
      const reason = `agent ${agentId} is ${status}; nothing is running to receive input (agent_resume continues it)`
      if (!isEntry(target)) return { delivered: false, reason, agent: yield* currentView(target) } satisfies InputResult
      // Kept in the record, so an instruction sent too late is not lost without a trace.
      const input = Receipt.input(target.record, { now, message, delivered: false, reason, interrupt, via })
      yield* store.put(target.record)
      return { delivered: false, reason, agent: view(target.record), input } satisfies InputResult
    }
    if (!isEntry(target)) {
      // Another process runs it: its owner delivers the message at its next request poll, and records it.
      yield* store.request(target.session_boot_id, { agent_id: agentId, kind: "input", payload: message })
      return {
        delivered: true,
        reason: `queued for the process that runs it (pid ${
          target.owner_pid ?? "unknown"
        }); it delivers it within a second`,
        agent: view(target)
      } satisfies InputResult
    }
    yield* Effect.orDie(session.deliver(agentId, message, interrupt))
    target.lastProgress = now
    // In memory only: the next put (its next status change) carries it.
    const input = Receipt.input(target.record, { now, message, delivered: true, interrupt, via })
    return { delivered: true, agent: view(target.record), input } satisfies InputResult
  })

  /**
   * Takes over another process's agent to resume it here: only once it is finished, or its
   * owner is gone. Its record then names this process.
   */
  const adopt = (id: string) =>
    Effect.gen(function*() {
      const existing = entries.get(id)
      if (existing !== undefined) return existing
      const target = yield* lookupAny(id)
      if (isEntry(target)) return target
      const agentId = target.agent_id
      if (!(yield* store.adopt(agentId))) {
        return yield* new NotResumable({
          agentId,
          status: `${target.status} in another live process (pid ${target.owner_pid ?? "unknown"})`
        })
      }
      const adopted = Option.getOrElse(yield* store.get(agentId), () => target)
      const done = yield* Deferred.make<void>()
      yield* Deferred.succeed(done, undefined)
      const entry: Entry = {
        record: { ...adopted },
        parentSessionId: adopted.parent_id,
        fiber: undefined,
        done,
        cancelReason: undefined,
        started: false,
        lastProgress: yield* Clock.currentTimeMillis,
        runBase: { steps: adopted.steps, toolCalls: adopted.tool_calls, tokens: adopted.tokens },
        // A run of another process: whoever waited for it was there.
        resultRead: true,
        permit: undefined,
        lending: undefined,
        lentTo: undefined,
        lastEnded: undefined
      }
      entries.set(agentId, entry)
      named(Receipt.sessionName(adopted), agentId)
      return entry
    })

  const resume = Effect.fn("SubAgentManager.resume")(function*(
    callerSessionId: string | undefined,
    id: string,
    message?: string
  ) {
    const tooLong = SpawnCheck.checkMessage("message", message)
    if (tooLong !== undefined) return yield* tooLong
    const entry = yield* adopt(id)
    const record = entry.record
    const agentId = record.agent_id
    const status: Status = record.status
    if (!isTerminal(status)) return yield* new NotResumable({ agentId, status })
    const { definition, role } = yield* resolveRole(record.role, undefined)
    // After a restart the session is gone: rebuild it from its transcript, where each tool
    // result was written as it landed.
    const restore = Effect.gen(function*() {
      // One that cannot be read or decoded: a fresh conversation.
      const transcript = yield* Effect.orElseSucceed(
        Effect.flatMap(store.readTranscript(record.transcript_handle), Transcript.decode),
        () => [] as ReadonlyArray<Prompt.Message>
      )
      return yield* session.restore({
        id: agentId,
        parentId: record.parent_id,
        depth: record.depth,
        role,
        definition,
        recorded: record.permissions === undefined ? undefined : Permission.ceilingFromJson(record.permissions),
        model: record.model,
        description: record.description,
        transcript: Transcript.mergeToolMessages(transcript),
        budgets: config.budgets
      })
    })
    // What the session has counted so far (nothing, when restored): the new run adds to it.
    const before = yield* session.info(agentId).pipe(Effect.catchTag("SessionNotFound", () => restore))
    entry.runBase = { steps: before.steps, toolCalls: before.toolCalls, tokens: before.treeUsage }
    const permit: Permit = (yield* admit()) ? "held" : "wait"
    const previous = `${status}${record.reason === undefined ? "" : `: ${record.reason}`}`
    // An agent that never started (cancelled while queued) never read its task: it comes first.
    const prompt = record.started_at === undefined
      ? (message === undefined ? record.objective : `${record.objective}\n\n${message}`)
      : message ?? `Continue where you left off. Your previous run ended ${previous}.`
    // Whoever still waits for the run that ended gets it as it ended.
    entry.lastEnded = view(structuredClone(record))
    // The run that ended stays in `runs`: a resume that fails does not erase what the agent did before.
    Receipt.beginResume(record, { now: yield* Clock.currentTimeMillis, bootId, pid: store.owner.pid, message: prompt })
    record.status = "pending"
    delete record.reason
    delete record.finished_at
    delete record.outcome
    record.session_boot_id = bootId
    record.owner_pid = store.owner.pid
    record.owner_host = store.owner.host
    entry.cancelReason = undefined
    entry.started = false
    entry.resultRead = false
    entry.done = yield* Deferred.make<void>()
    agentStarted()
    yield* store.put(record)
    const run = runAgent(entry, prompt, permit)
    const scope = callerSessionId === undefined || record.detached
      ? managerScope
      : Option.getOrElse(session.scopeOf(callerSessionId), () => managerScope)
    keepFiber(entry, yield* Effect.forkIn(run, scope, { startImmediately: true }))
    return view(record)
  })

  const assign = Effect.fn("SubAgentManager.assign")(function*(
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
    const entry = yield* lookup(id)
    // A new role only narrows: a live agent's rules are re-derived at once (its loop sees
    // them at its next tool call); a finished one is checked against its recorded role, which
    // is what a resume derives its rules from. Either way a widening is refused, unchanged.
    const resolved = update.role === undefined ? undefined : yield* resolveRole(update.role, ["*"])
    const role = resolved?.role
    if (resolved !== undefined) {
      const target = { role: resolved.role, definition: resolved.definition }
      const live = yield* session.reassign(entry.record.agent_id, target).pipe(
        Effect.map((info) => {
          entry.record.permissions = Permission.toJson(info.rules)
          return true
        }),
        Effect.catchTag("SessionNotFound", () => Effect.succeed(false))
      )
      if (!live) {
        const current = yield* resolveRole(entry.record.role, ["*"])
        const ceiling = (r: typeof resolved) =>
          Permission.effective(Permission.allowAll, {
            label: r.role.name,
            role: Roles.ceiling(r.role),
            definition: r.definition
          })
        const grants = Permission.widening(ceiling(current), ceiling(resolved))
        if (grants.length > 0) {
          return yield* new Permission.PermissionWidening({
            agentId: id,
            from: entry.record.role,
            to: resolved.role.name,
            grants
          })
        }
      }
    }
    if (update.objective !== undefined) entry.record.objective = update.objective
    if (role !== undefined) entry.record.role = role.name
    Receipt.log(entry.record, {
      at: yield* Clock.currentTimeMillis,
      type: "assigned",
      detail: [
        role === undefined ? undefined : `role ${role.name}`,
        update.objective === undefined ? undefined : `objective: ${update.objective}`
      ]
        .filter((part) => part !== undefined).join("; ") || "note"
    })
    yield* store.put(entry.record)
    const note = [
      "Your assignment was updated by your parent.",
      update.objective === undefined ? undefined : `Objective: ${update.objective}`,
      role === undefined ? undefined : `Role: ${role.name} — ${role.description}`,
      update.message
    ].filter((line) => line !== undefined).join("\n")
    // Its parts were checked above; together they may be longer than one message may be.
    return yield* deliverInput(entry.record.agent_id, note, false, "agent_assign")
  })

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
    const target = yield* lookupAny(byHandle).pipe(
      Effect.catchTag("AgentNotFound", () => Effect.fail(new AgentNotFound({ agentId: handle })))
    )
    const record = isEntry(target) ? target.record : target
    const live = isEntry(target) ? yield* Effect.option(session.transcript(record.agent_id)) : Option.none()
    const messages = store.durable || Option.isNone(live)
      ? yield* Effect.orElseSucceed(
        Effect.flatMap(store.readTranscript(record.transcript_handle), Transcript.decode),
        () => [] as ReadonlyArray<Prompt.Message>
      )
      : live.value
    return TranscriptView.page(messages, {
      handle: record.transcript_handle,
      agentId: record.agent_id,
      offset: page.offset,
      limit: page.limit
    })
  })

  const attachVerification = Effect.fn("SubAgentManager.attachVerification")(
    function*(id: string, check: CommandCheck) {
      const target = yield* lookupAny(id)
      if (!isEntry(target)) {
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
      yield* store.put(record)
      return view(record)
    }
  )

  // Session hooks: progress and transcripts, and the wait for background children.
  yield* session.setHooks({
    onEvent: (event: AgentEvent) => {
      const entry = entries.get(event.agent.agentId)
      if (entry === undefined) return
      entry.lastProgress = event.at
      // The session published `started`: it will publish this run's terminal event too.
      if (event.type === "started") entry.started = true
      // Into the record in memory only: the next put carries it (no store write per tool call).
      else if (event.type === "tool_result") Receipt.toolResult(entry.record, event, relativize)
    },
    // A durable store gets every message as it is added (each tool result as it lands,
    // committed at the end of that event-loop turn), and the loop's next model call waits for
    // that commit: a crash loses nothing that finished. An in-memory store would not survive
    // a crash anyway, and the session holds the conversation.
    onMessage: store.durable
      ? (sessionId, message) => {
        const entry = entries.get(sessionId)
        return entry === undefined ? Effect.void : queueMessages(entry.record.transcript_handle, [message])
      }
      : undefined,
    beforeModelCall: store.durable
      ? () => Effect.catch(store.sync, (error) => Effect.logWarning(error.message))
      : undefined,
    beforeFinish: (sessionId) => {
      const open = [...(childrenOf.get(sessionId) ?? [])].filter((entry) => !isTerminal(entry.record.status))
      if (open.length === 0) return Effect.succeed(undefined)
      return lendWhile(sessionId, open, Effect.forEach(open, (entry) => Deferred.await(entry.done), { discard: true }))
        .pipe(
          Effect.map(() =>
            "Your background sub-agents were still running when you answered; they have now finished. " +
            "Their results:\n" +
            JSON.stringify(open.map((entry) => AgentResult.of(view(entry.record))), null, 2) +
            "\nTake them into account, then give your final answer."
          )
        )
    }
  })

  // Liveness: no progress for heartbeat_timeout_secs -> cancelled. A model call in flight
  // is progress (its own timeout bounds it), reported as a tick; so is a running background
  // child (a coordinator blocked in agent_wait): the child's own heartbeat bounds it. A child
  // still queued for a permit is not (with queue admission a waiting parent lends it its
  // permit, so that lasts only while other agents hold every permit).
  const heartbeatMs = config.heartbeatTimeoutSecs * 1000
  const hasRunningChild = (agentId: string): boolean => {
    const children = childrenOf.get(agentId)
    if (children === undefined) return false
    for (const child of children) {
      if (child.record.status === "running") return true
    }
    return false
  }
  const checkEvery = Duration.millis(Math.max(1000, Math.min(30_000, heartbeatMs / 4)))
  const watchdog = Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    for (const entry of entries.values()) {
      if (entry.record.status !== "running" || now - entry.lastProgress < heartbeatMs) continue
      const info = yield* Effect.option(session.info(entry.record.agent_id))
      if ((Option.isSome(info) && info.value.waitingOnModel) || hasRunningChild(entry.record.agent_id)) {
        entry.lastProgress = now
        continue
      }
      yield* Effect.forkIn(
        cancel(
          entry.record.agent_id,
          `Auto-cancelled after ${config.heartbeatTimeoutSecs}s without sub-agent progress.`
        ),
        managerScope
      )
    }
  })
  // It runs while this process has live agents, and only then, on a timer that does not keep
  // the process alive (internal/sleep.ts): a process whose runs ended (or were aborted) exits
  // on its own without disposing the runtime.
  const watch = Effect.gen(function*() {
    yield* watchdogWake.await
    yield* watchdogWake.close
    while (liveCount > 0) {
      yield* sleepUnref(checkEvery)
      if (liveCount > 0) yield* watchdog
    }
  })
  yield* Effect.forkIn(Effect.forever(watch), managerScope)

  // Requests from other processes sharing the store (cancel, input), read while this process
  // has live agents — and only then, so an idle process polls nothing. Reading them also
  // renews this process's lease.
  const serveRequests = Effect.gen(function*() {
    yield* requestsWake.await
    yield* requestsWake.close
    while (liveCount > 0) {
      for (const request of yield* store.takeRequests) {
        if (!entries.has(request.agent_id)) continue
        yield* request.kind === "cancel"
          ? Effect.forkIn(cancel(request.agent_id, request.payload), managerScope)
          : Effect.ignore(sendInput(request.agent_id, request.payload, false, "request"))
      }
      yield* sleepUnref(Duration.millis(requestPollMs))
    }
  })
  if (store.durable) yield* Effect.forkIn(Effect.forever(serveRequests), managerScope)

  yield* Scope.addFinalizer(managerScope, store.flush.pipe(Effect.ignore))

  return SubAgentManager.of({
    bootId,
    options: config,
    spawn,
    startRoot,
    run,
    wait,
    result,
    cancel,
    list,
    sendInput,
    resume,
    unreadChildren,
    markRead,
    assign,
    running: Effect.sync(() => runningCount),
    resolve,
    readTranscript,
    attachVerification,
    workerRecord
  })
})

/**
 * Cancels an agent that another process runs, through the store: the owner acts on the
 * request within a second (and cancels the agent's tree there). Waits up to a few seconds
 * for the record to say so; an owner found gone makes the record `interrupted` instead.
 * Needs no model and no manager (`fibril agents cancel`).
 */
export const requestCancel = (record: SubAgentRecord, reason: string) =>
  Effect.gen(function*() {
    const store = yield* SubAgentStore
    const latest = () => Effect.map(store.get(record.agent_id), Option.getOrElse(() => record))
    yield* store.reconcile
    const now = yield* latest()
    if (isTerminal(now.status)) return now
    yield* store.request(now.session_boot_id, { agent_id: now.agent_id, kind: "cancel", payload: reason })
    yield* untilTerminal(record.agent_id).pipe(Effect.timeoutOption(foreignCancelWait))
    return yield* latest()
  })

/** Polls another process's agent in the store until it ends (or its owner is found gone). */
const untilTerminal = (id: string) =>
  Effect.gen(function*() {
    const store = yield* SubAgentStore
    while (true) {
      yield* store.reconcile
      const found = yield* store.get(id)
      if (Option.isNone(found) || isTerminal(found.value.status)) return
      yield* Effect.sleep(Duration.millis(requestPollMs / 2))
    }
  })

export const layer = (
  options: Partial<Options> = {}
): Layer.Layer<SubAgentManager, never, Session | Models | SubAgentStore | AgentEvents> =>
  Layer.effect(SubAgentManager, make(options))
