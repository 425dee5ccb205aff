/**
 * ForeignAgents — agents that other processes sharing the store own.
 *
 * This process never runs them: it leaves a request in the store (cancel, input) that their
 * owner acts on within a second, polls their record until it ends, and takes one over
 * (`adopt`) only once it is finished or its owner is gone. The other way round, it serves the
 * requests other processes leave for its own agents, while it has live ones.
 */
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Latch from "effect/Latch"
import * as Option from "effect/Option"
import * as Receipt from "../../Receipt.ts"
import { NotResumable } from "../../SubAgentErrors.ts"
import type { InputResult } from "../../SubAgentManager.ts"
import { isTerminal, type SubAgentRecord } from "../../SubAgentRecord.ts"
import { SubAgentStore } from "../../SubAgentStore.ts"
import { sleepUnref } from "../sleep.ts"
import { isLive, type LiveAgent } from "./AgentTable.ts"
import type { ManagerContext } from "./ManagerContext.ts"

/** How often a process with live agents reads the requests other processes left for it. */
const requestPollMs = 500
/** How long a cancel of another process's agent waits for that process to act. */
const foreignCancelWait = Duration.seconds(5)

// --- Requests to other processes ---

/** Polls another process's agent in the store until it ends (or its owner is found gone). */
export const untilTerminal = (id: string) =>
  Effect.gen(function*() {
    const store = yield* SubAgentStore
    while (true) {
      yield* store.reconcile
      const found = yield* store.get(id)
      if (Option.isNone(found) || isTerminal(found.value.status)) return
      yield* Effect.sleep(Duration.millis(requestPollMs / 2))
    }
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

/** Waits until another process's agent ends. */
export const awaitForeign = (ctx: ManagerContext, id: string): Effect.Effect<void> =>
  Effect.provideService(untilTerminal(id), SubAgentStore, ctx.store)

/** Cancels another process's agent (requestCancel), as callers see it then. */
export const cancelForeign = (ctx: ManagerContext, record: SubAgentRecord, reason: string) =>
  Effect.map(Effect.provideService(requestCancel(record, reason), SubAgentStore, ctx.store), (r) => ctx.table.view(r))

/** A message for another process's running agent: its owner delivers it at its next request poll, and records it. */
export const sendForeign = (ctx: ManagerContext, record: SubAgentRecord, message: string) =>
  Effect.as(
    ctx.store.request(record.session_boot_id, { agent_id: record.agent_id, kind: "input", payload: message }),
    {
      delivered: true,
      reason: `queued for the process that runs it (pid ${
        record.owner_pid ?? "unknown"
      }); it delivers it within a second`,
      agent: ctx.table.view(record)
    } satisfies InputResult
  )

// --- Adoption ---

/**
 * Takes over another process's agent to resume it here: only once it is finished, or its
 * owner is gone. Its record then names this process.
 */
export const adopt = (ctx: ManagerContext, id: string) =>
  Effect.gen(function*() {
    const existing = ctx.table.agents.get(id)
    if (existing !== undefined) return existing
    const target = yield* ctx.table.lookupAny(id)
    if (isLive(target)) return target
    const agentId = target.agent_id
    if (!(yield* ctx.store.adopt(agentId))) {
      return yield* new NotResumable({
        agentId,
        status: `${target.status} in another live process (pid ${target.owner_pid ?? "unknown"})`
      })
    }
    const adopted = Option.getOrElse(yield* ctx.store.get(agentId), () => target)
    const done = yield* Deferred.make<void>()
    yield* Deferred.succeed(done, undefined)
    const agent: LiveAgent = {
      record: { ...adopted },
      parentId: adopted.parent_id,
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
      lastEnded: undefined,
      ended: undefined
    }
    ctx.table.add(agent, Receipt.sessionName(adopted))
    return agent
  })

// --- The request server ---

/**
 * Requests from other processes sharing the store (cancel, input), read while this process
 * has live agents — and only then, so an idle process polls nothing (`wake` is opened when an
 * agent starts). Reading them also renews this process's lease.
 */
export const serveRequests = (
  ctx: ManagerContext,
  wake: Latch.Latch,
  handle: {
    readonly cancel: (agentId: string, reason: string) => Effect.Effect<unknown, unknown>
    readonly input: (agentId: string, message: string) => Effect.Effect<unknown, unknown>
    readonly answer: (payload: string) => Effect.Effect<unknown, unknown>
  }
) =>
  Effect.gen(function*() {
    yield* wake.await
    yield* wake.close
    // The questions each agent's record last carried to the store (StoredQuestions.ts).
    const saved = new Map<string, unknown>()
    while (ctx.table.live > 0) {
      for (const agent of ctx.table.agents.values()) {
        if ((saved.get(agent.record.agent_id) ?? undefined) === agent.record.questions) continue
        saved.set(agent.record.agent_id, agent.record.questions)
        yield* ctx.store.put(agent.record)
      }
      for (const request of yield* ctx.store.takeRequests) {
        if (!ctx.table.agents.has(request.agent_id)) continue
        yield* request.kind === "cancel"
          ? Effect.forkIn(handle.cancel(request.agent_id, request.payload), ctx.scope)
          : request.kind === "answer"
          ? Effect.ignore(handle.answer(request.payload))
          : Effect.ignore(handle.input(request.agent_id, request.payload))
      }
      yield* sleepUnref(Duration.millis(requestPollMs))
    }
  })
