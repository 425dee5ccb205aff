/**
 * ClusterWatch — how cluster mode stops agents: a cancel that reaches a whole tree
 * (`cancelTree`), the heartbeat's watchdog that cancels sub-agents without progress, and the
 * worker's watch that stops a model or tool call in flight when its agent is cancelled
 * (`CancelWatch`).
 */
import * as Heartbeat from "@fibril/core/Heartbeat"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import type { WorkflowEngine } from "effect/workflow"
import { AgentWorkflow } from "./AgentRun.ts"
import { ClusterQuestions } from "./ClusterQuestions.ts"
import { ClusterStore, finished, type StoreFailure } from "./ClusterStore.ts"

// --- Cancel ---

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

// --- Heartbeat ---

/** The reason an agent cancelled by the heartbeat gets: core's (Heartbeat.ts), as the embedded engine's. */
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
      const candidates = yield* Effect.orElseSucceed(store.stale(seconds), () => [])
      // A person's thinking time is not a stall (nor the answered call's run right after it).
      const questions = yield* ClusterQuestions
      const waiting = questions === undefined || candidates.length === 0
        ? []
        : yield* questions.waitingAmong(candidates, seconds * 1000)
      const stale = candidates.filter((id) => !waiting.includes(id))
      yield* Effect.forEach(stale, (id) => Effect.ignore(cancelTree(id, heartbeatReason(seconds))), { discard: true })
    }
  })

/** The watchdog of a worker, when `seconds` > 0 (`[subagents] heartbeat_timeout_secs`). */
export const heartbeat = (seconds: number, checkMs?: number | undefined) =>
  seconds > 0
    ? Layer.effectDiscard(Effect.forkScoped(watchdog(seconds, checkMs ?? Heartbeat.checkIntervalMs(seconds))))
    : Layer.empty

// --- A step's call, stopped by a cancel ---

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
 * `effect`, stopped when the agent is seen cancelled (the workflow's interrupt reaches a step
 * only at its boundary): then `onCancel` is the outcome.
 */
export const stopOnCancel = <A, E, R, A2, E2>(
  watch: CancelWatch["Service"],
  agentId: string,
  effect: Effect.Effect<A, E, R>,
  onCancel: Effect.Effect<A2, E2>
): Effect.Effect<A | A2, E | E2, R> =>
  watch.enabled
    ? Effect.scoped(
      Effect.flatMap(watch.watch(agentId), (cancelled) => Effect.raceFirst(effect, Effect.andThen(cancelled, onCancel)))
    )
    : effect
