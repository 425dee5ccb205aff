/**
 * ClusterClient — what a client of the cluster does (`fibril run --cluster`, `fibril agents`,
 * tests): start a root agent, wait for it, send it input, cancel a tree, resume a finished
 * agent. Works from any process with the cluster's engine and store; the agents run on the
 * workers.
 */
import * as SubAgentManager from "@fibril/core/SubAgentManager"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type { WorkflowEngine } from "effect/workflow"
import { randomBytes } from "node:crypto"
import { AgentFailed, type AgentOutcome, type AgentPayload, AgentWorkflow, rowFor, traced } from "./AgentRun.ts"
import { type AgentRow, ClusterStore, finished, type StoreFailure } from "./ClusterStore.ts"
import { cancelTree } from "./ClusterWatch.ts"

export class AgentNotFound extends Schema.TaggedError<AgentNotFound>()("AgentNotFound", { agentId: Schema.String }) {
  override get message() {
    return `no agent with id "${this.agentId}" in the cluster`
  }
}

export class NotResumable extends Schema.TaggedError<NotResumable>()("NotResumable", {
  agentId: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return this.reason
  }
}

export interface StartOptions {
  readonly prompt: string
  readonly workspace: string
  readonly role?: string | undefined
  readonly model?: string | undefined
  readonly description?: string | undefined
  /**
   * The caller's `allowed_tools`: the agent gets no tool outside it (met with its role's and the
   * workers' permissions). Names the workers do not have make the agent fail, saying which.
   */
  readonly allowedTools?: ReadonlyArray<string> | undefined
  /** The caller's `ask_tools`: tool names and postures whose calls wait for a person (only adds asks). */
  readonly askTools?: ReadonlyArray<string> | undefined
  /** Default: a new random id. */
  readonly agentId?: string | undefined
}

/** What the client functions need besides the store: the cluster's workflow engine. */
export type ClientServices = WorkflowEngine.WorkflowEngine

export const newAgentId = (): string => `ag_${randomBytes(8).toString("hex")}`

/** Records a root agent and starts its workflow; returns its id at once. */
export const start = (options: StartOptions) =>
  Effect.gen(function*() {
    const store = yield* ClusterStore
    const agentId = options.agentId ?? newAgentId()
    const role = options.role ?? "general"
    const payload: AgentPayload = {
      agentId,
      run: 0,
      parentId: null,
      rootId: agentId,
      depth: 0,
      role,
      model: options.model ?? "",
      description: options.description ?? options.prompt.slice(0, 60),
      prompt: options.prompt,
      detached: false,
      workspace: options.workspace,
      ...(options.allowedTools === undefined && options.askTools === undefined
        ? {}
        : {
          grants: [{
            role,
            depth: 0,
            ...(options.allowedTools === undefined ? {} : { allowedTools: options.allowedTools }),
            ...(options.askTools === undefined ? {} : { askTools: options.askTools })
          }]
        })
    }
    yield* store.insert(yield* rowFor(payload))
    yield* AgentWorkflow.execute(yield* traced(payload), { discard: true })
    return payload.agentId
  })

/** The agent's row (status, result), or AgentNotFound. */
export const status = (agentId: string) =>
  Effect.gen(function*() {
    const row = yield* (yield* ClusterStore).get(agentId)
    if (row === undefined) return yield* new AgentNotFound({ agentId })
    return row
  })

/**
 * Waits for the agent's current run to end: its outcome, AgentFailed, or an interrupt when
 * it was cancelled. Looks every `pollMs` (the client holds no durable state).
 */
export const await_ = (agentId: string, pollMs = 50) =>
  Effect.gen(function*() {
    while (true) {
      const row = yield* status(agentId)
      const result = yield* AgentWorkflow.poll(row.executionId)
      if (Option.isSome(result) && result.value._tag === "Complete") {
        return yield* (result.value.exit as Effect.Effect<AgentOutcome, AgentFailed>)
      }
      if (row.status === "cancelled") return yield* new AgentFailed({ agentId, reason: row.reason ?? "cancelled" })
      yield* Effect.sleep(Duration.millis(pollMs))
    }
  })

export const run = (options: StartOptions) => Effect.flatMap(start(options), (agentId) => await_(agentId))

/** Queues input for the agent's next model step; false (with the status) if it has finished. */
export const sendInput = (agentId: string, text: string) =>
  Effect.gen(function*() {
    const store = yield* ClusterStore
    const row = yield* status(agentId)
    if (finished(row.status)) return { delivered: false, status: row.status } as const
    yield* store.sendInput(agentId, text)
    return { delivered: true, status: row.status } as const
  })

/** Cancels the agent and its non-detached descendants, wherever they run. */
export const cancel = (
  agentId: string,
  reason = "cancelled"
): Effect.Effect<void, StoreFailure | AgentNotFound, ClusterStore | WorkflowEngine.WorkflowEngine> =>
  Effect.andThen(status(agentId), cancelTree(agentId, reason))

/** A new run of a finished agent, from its transcript; returns at once. */
export const resume = (agentId: string, message: string) =>
  Effect.gen(function*() {
    const next = yield* resumeRow(agentId, message)
    if (next instanceof SubAgentManager.AgentNotFound || next instanceof SubAgentManager.NotResumable) {
      return yield* new NotResumable({ agentId, reason: next.message })
    }
    yield* AgentWorkflow.execute(yield* traced(next), { discard: true })
    return next.run
  })

/**
 * The next run of a finished agent (`agent_resume`, `fibril agents resume`): bumps its run
 * number, so the new run is a new workflow execution that starts from the agent's transcript.
 * Why it cannot be resumed otherwise (core's AgentNotFound, NotResumable), as a value: a
 * workflow journals it as the activity's result.
 */
export const resumeRow = (agentId: string, message: string) =>
  Effect.gen(function*() {
    const store = yield* ClusterStore
    const row = yield* store.get(agentId)
    if (row === undefined) return new SubAgentManager.AgentNotFound({ agentId })
    if (!finished(row.status)) return new SubAgentManager.NotResumable({ agentId, status: row.status })
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
    yield* store.update(agentId, {
      run: next.run,
      executionId,
      status: "pending",
      text: null,
      claims: null,
      reason: null
    })
    return next
  })

/** The agent and its descendants, depth first. */
export const tree = (agentId: string) =>
  Effect.gen(function*() {
    const store = yield* ClusterStore
    const out: Array<AgentRow> = []
    const visit = (id: string): Effect.Effect<void, StoreFailure> =>
      Effect.gen(function*() {
        const row = yield* store.get(id)
        if (row === undefined) return
        out.push(row)
        for (const child of yield* store.children(id)) yield* visit(child.agentId)
      })
    yield* visit(agentId)
    return out
  })
