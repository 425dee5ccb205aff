/**
 * AgentTable — this process's agents, as the embedded SubAgentManager keeps them.
 *
 * One `LiveAgent` per agent this process started or adopted (its record, its run's fiber and
 * `done`, its permit), found by agent id, session name or run id; the background children and
 * the cancel reach of each parent; the counts of live and running agents. Agents of other
 * processes are not here: `lookupAny` reads their records from the store.
 *
 * Eviction: the store evicts finished records (by age and by count); an agent it no longer
 * holds is forgotten here too, with its session, or a long-lived process (an MCP server, an
 * embedding harness) would keep every agent it ever ran. One pass each time the table has
 * doubled since the last: amortised O(1) per agent, at most about twice the store's records.
 */
import type * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import type { AgentSnapshot } from "../../AgentEvents.ts"
import type * as Permits from "../../internal/permits.ts"
import type * as Receipt from "../../Receipt.ts"
import * as Receipts from "../../Receipt.ts"
import type { RunEnd } from "../../Session.ts"
import { AgentNotFound } from "../../SubAgentErrors.ts"
import type { AgentView } from "../../SubAgentManager.ts"
import { agentOfRunId, isTerminal, type SubAgentRecord } from "../../SubAgentRecord.ts"
import type { SubAgentStore } from "../../SubAgentStore.ts"

export type Mutable<T> = { -readonly [K in keyof T]: T[K] }

/** One of this process's agents: its record and what its current run holds. */
export interface LiveAgent extends Permits.Holder {
  record: Mutable<SubAgentRecord>
  /** The agent that spawned it (undefined: a root, or an embedder's own top-level agent). */
  readonly parentId: string | undefined
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
  /** What its session's run left when it ended (RunObserver.onEnd), until `finish` reads it. */
  ended: RunEnd | undefined
}

/** An agent as a method finds it: one of this process's, or another process's record. */
export type Target = LiveAgent | SubAgentRecord

export const isLive = (target: Target): target is LiveAgent => "done" in target

export const idOf = (target: Target): string => isLive(target) ? target.record.agent_id : target.agent_id

const nameShape = /^[a-z]+-[a-z]+(?:-\d+)?$/

export class AgentTable {
  readonly bootId: string
  readonly store: SubAgentStore["Service"]
  readonly agents = new Map<string, LiveAgent>()
  /** Session names of this process's agents. */
  readonly names = new Map<string, string>()
  /** Background, non-detached children by the agent that spawned them. */
  readonly childrenOf = new Map<string, Set<LiveAgent>>()
  /**
   * Every non-detached child (background, and foreground `task` children too) by the agent
   * that spawned it: what a cancel reaches. A foreground child ends when its parent's fiber is
   * interrupted, but only a reason set before that makes it end `cancelled`, not `interrupted`.
   */
  readonly cancelReaches = new Map<string, Set<LiveAgent>>()
  /** Agents holding a sub-agent permit and running now. */
  running = 0
  /** Own agents not yet terminal: while there are any, the watchdog and the request server run. */
  live = 0
  private pruneAt = 256
  private readonly onLive: () => void

  constructor(options: {
    readonly bootId: string
    readonly store: SubAgentStore["Service"]
    /** Called when an agent becomes live (wakes the watchdog and the request server). */
    readonly onLive: () => void
  }) {
    this.bootId = options.bootId
    this.store = options.store
    this.onLive = options.onLive
  }

  /** A record as callers see it: with whether it predates this process. */
  view(record: SubAgentRecord): AgentView {
    return { ...record, from_prior_session: record.session_boot_id !== this.bootId }
  }

  /** One more live agent (a new run: a spawn, a resume). */
  started(): void {
    this.live++
    this.onLive()
  }

  /** Adds an agent (new, or adopted from another process) under its session name. */
  add(agent: LiveAgent, sessionName: string | undefined): void {
    this.agents.set(agent.record.agent_id, agent)
    if (sessionName !== undefined && !this.names.has(sessionName)) this.names.set(sessionName, agent.record.agent_id)
  }

  /** Files `child` under `parentId` in `tree` (childrenOf or cancelReaches). */
  addChild(tree: Map<string, Set<LiveAgent>>, parentId: string, child: LiveAgent): void {
    const set = tree.get(parentId) ?? new Set<LiveAgent>()
    set.add(child)
    tree.set(parentId, set)
  }

  /**
   * The agent id behind `id`: an id, a session name (this process's agents first, then the
   * store's, the most recent one) or a run id. `id` itself when nothing matches.
   */
  resolve(id: string): Effect.Effect<string> {
    const local = this.names.get(id)
    if (local !== undefined) return Effect.succeed(local)
    const run = agentOfRunId(id)
    if (run !== undefined && this.agents.has(run)) return Effect.succeed(run)
    if (!this.store.durable || !(nameShape.test(id) || run !== undefined)) return Effect.succeed(id)
    return Effect.map(this.store.all, (records) => {
      let found: SubAgentRecord | undefined
      // A session name, or a run id (an agent id is neither: it has an underscore, no run suffix).
      for (const record of records) {
        if (record.agent_id === run || Receipts.sessionName(record) === id) {
          if (found === undefined || record.created_at >= found.created_at) found = record
        }
      }
      return found?.agent_id ?? id
    })
  }

  /** One of this process's agents. */
  lookup(id: string): Effect.Effect<LiveAgent, AgentNotFound> {
    return Effect.flatMap(this.resolve(id), (agentId) => {
      const agent = this.agents.get(agentId)
      return agent === undefined ? Effect.fail(new AgentNotFound({ agentId: id })) : Effect.succeed(agent)
    })
  }

  /** One of this process's agents, or the record of another process's (reconciled first). */
  lookupAny(id: string): Effect.Effect<Target, AgentNotFound> {
    return Effect.flatMap(this.resolve(id), (agentId): Effect.Effect<Target, AgentNotFound> => {
      const local = this.agents.get(agentId)
      if (local !== undefined) return Effect.succeed(local)
      return Effect.flatMap(
        this.store.reconcile,
        () =>
          Effect.flatMap(
            this.store.get(agentId),
            (found) =>
              Option.isSome(found) ? Effect.succeed(found.value) : Effect.fail(new AgentNotFound({ agentId: id }))
          )
      )
    })
  }

  /** True when one of `agentId`'s background children is running (a parent waiting on it makes progress). */
  hasRunningChild(agentId: string): boolean {
    const children = this.childrenOf.get(agentId)
    if (children === undefined) return false
    for (const child of children) {
      if (child.record.status === "running") return true
    }
    return false
  }

  /**
   * What `agent_wait` without ids waits for: `parentId`'s children still live, and those
   * finished whose result it has not been handed yet.
   */
  unreadChildren(parentId: string | undefined): ReadonlyArray<string> {
    const out: Array<string> = []
    for (const agent of this.agents.values()) {
      // A root (depth 0) is nobody's child.
      if (agent.parentId !== parentId || agent.record.depth === 0) continue
      if (!isTerminal(agent.record.status) || !agent.resultRead) out.push(agent.record.agent_id)
    }
    return out
  }

  /** Records that these agents' results were handed to `parentId`, if it is their parent. */
  markRead(parentId: string | undefined, ids: ReadonlyArray<string>): void {
    for (const id of ids) {
      const agent = this.agents.get(id)
      if (agent === undefined || agent.parentId !== parentId) continue
      if (isTerminal(agent.record.status)) agent.resultRead = true
    }
  }

  /** Forgets the finished agents the store no longer holds, when the table has doubled since the last pass. */
  evictIfGrown(dispose: (agentId: string) => Effect.Effect<void>): Effect.Effect<void> {
    if (this.agents.size < this.pruneAt) return Effect.void
    this.pruneAt = Math.max(256, this.agents.size * 2)
    // One read of what the store holds, then one synchronous pass; a store that cannot be read
    // now is asked again at the next doubling.
    return this.store.ids.pipe(
      Effect.flatMap((held) => {
        const gone = this.forgetUnheld(held)
        return gone.length === 0 ? Effect.void : Effect.forEach(gone, dispose, { discard: true })
      }),
      Effect.ignore
    )
  }

  private forgetUnheld(held: ReadonlySet<string>): ReadonlyArray<string> {
    const gone: Array<string> = []
    for (const [id, agent] of this.agents) {
      if (!isTerminal(agent.record.status) || held.has(id)) continue
      gone.push(id)
      this.agents.delete(id)
      const name = agent.record.session_name
      if (name !== undefined && this.names.get(name) === id) this.names.delete(name)
      for (const tree of [this.childrenOf, this.cancelReaches]) {
        tree.delete(id)
        const siblings = agent.parentId === undefined ? undefined : tree.get(agent.parentId)
        if (siblings?.delete(agent) === true && siblings.size === 0) tree.delete(agent.parentId!)
      }
    }
    return gone
  }
}

/** An agent's snapshot before its session has said anything of it (no step, no tool call yet). */
export const firstSnapshot = (record: SubAgentRecord): AgentSnapshot => ({
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
})
