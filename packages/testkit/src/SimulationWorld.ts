/**
 * SimulationWorld — the services a lab run drives (Simulation.ts), built once per configuration
 * and reused: the real core (Session, SubAgentManager, the memory store, AgentEvents, the agent
 * tools) on a `TestClock`, with the ScriptedModel answering every model request as the
 * experiment's node says. A world is rebuilt every `reuse` runs so that no state grows without
 * bound; an experiment with a crash gets worlds of its own, on a SQLite store.
 *
 * How an agent behaves is its node: an agent with children spawns them all in its first turn
 * (`agent_spawn`, detached as the node says) and waits for them by id (`agent_wait`, all); then it
 * makes `work` calls of a tool that does not exist (tool errors, which carry `transcript:<node>`
 * into its own transcript); then it answers with `result:<node>` as its summary. Every turn
 * takes `delayMs` of virtual time. The node's fault replaces the answer: a retryable error
 * (once, then the answer), a fatal error, a hang, or a crash (a defect in the model call).
 */
import { Fibril, SqliteSubAgentStore, SubAgentManager as Manager, SubAgentStore, ToolRegistry } from "@fibril/core"
import { type AgentEvent, AgentEvents, make as makeEvents, withEmit } from "@fibril/core/AgentEvents"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import type * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import type * as Path from "effect/Path"
import type { ChildProcessSpawner } from "effect/process"
import * as Scheduler from "effect/Scheduler"
import * as Scope from "effect/Scope"
import { TestClock } from "effect/testing"
import * as NodeFs from "node:fs"
import * as NodeOs from "node:os"
import * as NodePath from "node:path"
import { type Experiment, sessionSettings, type TreeNode } from "./LabGenerators.ts"
import * as ScriptedModel from "./ScriptedModel.ts"
import type { Tamper, TraceRequest } from "./SimulationTrace.ts"

/** The platform services a run needs (the SQLite store of an experiment with a crash uses them). */
export type Platform = FileSystem.FileSystem | Path.Path | ChildProcessSpawner.ChildProcessSpawner

/** What the scripted responder and the run share while a run is on a world. */
export interface RunState {
  readonly tree: ReadonlyArray<TreeNode>
  readonly t0: number
  readonly requests: Array<TraceRequest>
  readonly tools: Map<number, Set<string>>
  /** Model calls in flight, per node. */
  readonly live: Map<number, number>
  /** Nodes whose run has ended (its terminal event published), until they start again. */
  readonly ended: Set<number>
  /** Model attempts per node and turn (a retryable fault fails the first). */
  readonly attempts: Map<string, number>
}

/** A world: its services (built in its own scope), its clock, and the run it is serving, if any. */
export interface World {
  readonly context: Context.Context<never>
  readonly clock: TestClock.TestClock
  readonly scope: Scope.Closeable
  readonly state: { current: RunState | undefined }
  runs: number
  /** With a SQLite store (an experiment with a crash): makes the store behave like a killed process. */
  readonly crash?: Effect.Effect<void> | undefined
}

let cwd: string | undefined
/** The lab's workspace: a temporary directory, made once per process. */
export const workspace = (): string => {
  if (cwd === undefined) cwd = NodeFs.mkdtempSync(NodePath.join(NodeOs.tmpdir(), "fibril-lab-"))
  return cwd
}

const isEnd = (type: AgentEvent["type"]) =>
  type === "completed" || type === "failed" || type === "cancelled" || type === "interrupted"

export const nodeOf = (prompt: string): number | undefined => {
  const match = /node:(\d+)/.exec(prompt)
  return match === null ? undefined : Number(match[1])
}

// ---------------------------------------------------------------------------------------------
// The scripted responder

const report = (summary: string) =>
  `SUMMARY:\n${summary}\n\nCHANGES:\nnone\n\nEVIDENCE:\nnone\n\nRISKS:\nnone\n\nBLOCKERS:\nnone`

const markers = /(?:result|transcript):n\d+/g

/**
 * The markers in a value's JSON text, without writing it: those of its strings (keys
 * included). JSON's escapes cannot make or break one (a marker has no character that is
 * escaped, an escape starts with a backslash), and nothing between two strings is a letter.
 */
const markersIn = (value: unknown, seen: Set<string>): void => {
  if (typeof value === "string") {
    if (value.includes(":n")) { for (const marker of value.match(markers) ?? []) seen.add(marker) }
  } else if (Array.isArray(value)) {
    for (const item of value) markersIn(item, seen)
  } else if (typeof value === "object" && value !== null) {
    if (typeof (value as { toJSON?: unknown }).toJSON === "function") {
      for (const marker of JSON.stringify(value).match(markers) ?? []) seen.add(marker)
      return
    }
    for (const key of Object.keys(value)) {
      const field = (value as Record<string, unknown>)[key]
      // JSON leaves out what it cannot write.
      if (field === undefined || typeof field === "function" || typeof field === "symbol") continue
      markersIn(key, seen)
      markersIn(field, seen)
    }
  }
}

/** The markers in the messages after the last assistant message, one per message part. */
const carriedOf = (conversation: ScriptedModel.Conversation): Array<string> => {
  const messages = conversation.messages
  let start = messages.length
  while (start > 0 && messages[start - 1]!.role !== "assistant") start--
  const found: Array<string> = []
  for (let i = start; i < messages.length; i++) {
    const message = messages[i]!
    const parts: ReadonlyArray<unknown> = typeof message.content === "string" ? [message.content] : message.content
    for (const part of parts) {
      const seen = new Set<string>()
      markersIn(part, seen)
      if (seen.size > 0) found.push(...[...seen].sort())
    }
  }
  return found
}

/**
 * The scripted responder: answers each model request as the node its prompt names (`node:<k>`)
 * says, and records the request (its time, what it carried, the sub-agents working) in the
 * run's state. A request from no run of an experiment gets a plain report.
 */
const respondWith = (world: { readonly state: { current: RunState | undefined } }, tamper: Tamper | undefined) =>
(
  conversation: ScriptedModel.Conversation
): Effect.Effect<ScriptedModel.Turn, never> =>
  Effect.suspend(() => {
    const run = world.state.current
    const index = nodeOf(conversation.prompt)
    if (run === undefined || index === undefined || run.tree[index] === undefined) {
      return Effect.succeed<ScriptedModel.Turn>({ text: report("not part of an experiment") })
    }
    const node = run.tree[index]
    const spec = node.spec
    const toolsSeen = run.tools.get(index) ?? new Set<string>()
    for (const tool of conversation.tools) toolsSeen.add(tool)
    if (index !== 0) { for (const tool of tamper?.childTools ?? []) toolsSeen.add(tool) }
    run.tools.set(index, toolsSeen)
    const turn = conversation.turn
    const delay = spec?.delayMs ?? 10
    const answer = (now: number): ScriptedModel.Turn | "hang" | "crash" => {
      let working = 0
      // An agent whose run has ended is not working, even while its last call is torn down.
      if (index !== 0) { for (const [at, live] of run.live) if (at !== 0 && live > 0 && !run.ended.has(at)) working++ }
      run.requests.push({
        t: now - run.t0,
        agent: node.label,
        turn,
        carried: carriedOf(conversation),
        ...(index === 0 ? {} : { working })
      })
      let phase = turn
      if (node.children.length > 0) {
        if (turn === 0) {
          const [first, ...rest] = node.children.map((child) => {
            const childSpec = run.tree[child]!.spec!
            return {
              name: "agent_spawn",
              args: {
                prompt: `node:${child}`,
                description: `node:${child}`,
                subagent_type: childSpec.role,
                detached: childSpec.detached,
                ...(childSpec.fork === true ? { fork_context: true } : {})
              }
            }
          })
          return { tool_calls: [first!, ...rest] }
        }
        if (turn === 1) {
          // Waits for the children it spawned by id, as a careful model does (agent_wait with no
          // ids waits only for children still running: one that already finished is skipped).
          const ids = conversation.lastToolResults.flatMap((result) => {
            const value = result.result as { readonly agent_id?: unknown } | null
            return result.name === "agent_spawn" && !result.isFailure && typeof value?.agent_id === "string"
              ? [value.agent_id]
              : []
          })
          return { tool_calls: [{ name: tamper?.waitTool ?? "agent_wait", args: { ids, wait_mode: "all" } }] }
        }
        phase = turn - 2
      }
      const work = spec?.work ?? 0
      if (phase < work) {
        return { tool_calls: [{ name: "lab_probe", args: { marker: `transcript:${node.label}` } }] }
      }
      const final: ScriptedModel.Turn = {
        text: report(`result:${node.label}`),
        usage: { input: 100, output: spec?.tokens ?? 10 }
      }
      // The fault hits the answer of the first run only: a resumed agent answers.
      if (phase > work || spec === undefined) return final
      switch (spec.fault) {
        case "none":
          return final
        case "retryable": {
          // Counted per run here, not by the model (whose attempt counters outlive a run): the
          // first attempt fails, the retry answers.
          const key = `${index}:${turn}`
          const attempt = (run.attempts.get(key) ?? 0) + 1
          run.attempts.set(key, attempt)
          return attempt === 1 ? { error: { kind: "retryable", message: "lab: retryable model error" } } : final
        }
        case "fatal":
          return { error: { kind: "fatal", message: "lab: fatal model error" } }
        case "hang":
          return "hang"
        case "crash":
          return "crash"
      }
    }
    const body = Effect.flatMap(Effect.clockWith((clock) => clock.currentTimeMillis), (now) => {
      const out = answer(now)
      const wait = out === "hang" ? Effect.never : Effect.sleep(delay)
      return Effect.flatMap(
        wait,
        () => (out === "crash" ? Effect.die("lab: model call crashed") : Effect.succeed(out as ScriptedModel.Turn))
      )
    })
    const counted = Effect.suspend(() => {
      run.live.set(index, (run.live.get(index) ?? 0) + 1)
      return Effect.ensuring(body, Effect.sync(() => void run.live.set(index, run.live.get(index)! - 1)))
    })
    if (tamper?.leakModelCalls === true) {
      // The bug: the answer comes from a fiber nobody owns; interrupting the caller leaves it.
      return Effect.flatMap(Effect.forkDetach(counted), Fiber.join) as Effect.Effect<ScriptedModel.Turn>
    }
    return counted
  })

// ---------------------------------------------------------------------------------------------
// Worlds: the services, built once per configuration and reused

/** A crashed process's lease, after which another process may declare it gone. */
export const leaseMs = 15_000

let processes = 0
/**
 * A simulated process of the lab runs in this one, with this pid: each is given a host of its
 * own, where only its lease tells whether it lives (on one host a live pid would keep a
 * "crashed" process alive for good).
 */
const simulatedProcess = (): SqliteSubAgentStore.Identity => ({
  pid: process.pid,
  host: `lab-process-${++processes}.invalid`,
  start: undefined,
  probe: () => ({ alive: true, start: undefined })
})

/** The scheduler of memory-store worlds: tasks run from the microtask queue, in the default one's order. */
const microtasks = new Scheduler.MixedScheduler("sync")

export const buildWorld = (config: Experiment["config"], tamper: Tamper | undefined, sqliteDir?: string) =>
  Effect.gen(function*() {
    let crash: Effect.Effect<void> | undefined
    const platform = yield* Effect.context<FileSystem.FileSystem | Path.Path>()
    const scope = yield* Scope.make()
    const testContext = yield* Layer.buildWithScope(TestClock.layer(), scope)
    const clock = Context.get(testContext, Clock.Clock) as TestClock.TestClock
    // The TestClock as is: the runtime sleeps whole milliseconds (a retry's jittered backoff is
    // rounded), so records keep integer times without help (the `round-trip` invariant checks).
    // With the memory store nothing waits for the event loop (no I/O, no timers: virtual time),
    // so fibers are resumed from the microtask queue instead of one `setImmediate` per wake-up:
    // the same tasks in the same order, without a trip round the event loop for each. A SQLite
    // world keeps the default scheduler.
    const clockContext = sqliteDir === undefined
      ? Context.make(Clock.Clock, clock).pipe(Context.add(Scheduler.Scheduler, microtasks))
      : Context.make(Clock.Clock, clock)
    const state: { current: RunState | undefined } = { current: undefined }
    const store = tamper?.store
    // Every event as it is published (before a planted bug can drop it): which runs have ended.
    const observe = (events: AgentEvents["Service"]): AgentEvents["Service"] =>
      withEmit(events, (event) => {
        const run = state.current
        const index = event.agent.depth === 0 ? 0 : nodeOf(event.agent.description ?? "")
        if (run !== undefined && index !== undefined) {
          if (event.type === "started") run.ended.delete(index)
          else if (isEnd(event.type)) run.ended.add(index)
        }
        events.emit(event)
      })
    const fibril = Fibril.layer({
      cwd: workspace(),
      session: {
        ...sessionSettings,
        maxDepth: config.maxDepth,
        childMaxSteps: config.maxSteps,
        ...tamper?.session?.(config)
      },
      subagents: {
        maxConcurrent: config.cap,
        admission: config.admission,
        heartbeatTimeoutSecs: config.heartbeatSecs,
        ...tamper?.subagents?.(config)
      },
      layers: {
        events: Layer.effect(
          AgentEvents,
          Effect.map(makeEvents, (events) => observe(tamper?.events === undefined ? events : tamper.events(events)))
        ),
        store: sqliteDir !== undefined
          ? Layer.effect(
            SubAgentStore.SubAgentStore,
            Effect.map(
              Effect.provideContext(
                SqliteSubAgentStore.makeSqliteWithControl({ dir: sqliteDir, leaseMs, identity: simulatedProcess() }),
                platform
              ),
              (made) => {
                crash = made.control.crash
                return store === undefined ? made.store : store(made.store)
              }
            )
          )
          : store === undefined
          ? undefined
          : Layer.effect(
            SubAgentStore.SubAgentStore,
            Effect.map(
              Layer.build(Layer.fresh(SubAgentStore.layerMemory)),
              (built) => store(Context.get(built, SubAgentStore.SubAgentStore))
            )
          )
      }
    }).pipe(Layer.provide(ScriptedModel.layer({ rules: [{ respond: respondWith({ state }, tamper) }] })))
    const context = yield* Layer.buildWithScope(fibril, scope).pipe(Effect.provideContext(clockContext))
    const extra = tamper?.tools ?? []
    if (extra.length > 0) {
      const registry = Context.get(context, ToolRegistry.ToolRegistry)
      yield* Effect.forEach(
        extra,
        (tool) => registry.register(tool) as Effect.Effect<void, ToolRegistry.DuplicateTool, Manager.SubAgentManager>,
        { discard: true }
      ).pipe(
        Effect.provideContext(Context.merge(context, clockContext)),
        Effect.orDie
      )
    }
    return {
      context: Context.merge(context, clockContext) as Context.Context<never>,
      clock,
      scope,
      state,
      runs: 0,
      crash
    } satisfies World
  })

const worlds = new Map<string, World>()

/** Runs per built world before it is rebuilt (state such as the manager's table only grows). */
export const reuse = 96

/** Worlds kept alive at once. */
const keep = 24

export const worldFor = (config: Experiment["config"], tamper: Tamper | undefined) =>
  Effect.gen(function*() {
    const key = `${
      tamper?.name ?? ""
    }|${config.cap}|${config.admission}|${config.maxDepth}|${config.maxSteps}|${config.heartbeatSecs}`
    const found = worlds.get(key)
    if (found !== undefined && found.runs < reuse) {
      worlds.delete(key)
      worlds.set(key, found)
      return found
    }
    if (found !== undefined) {
      worlds.delete(key)
      yield* Scope.close(found.scope, Exit.void)
    }
    // At most `keep` worlds alive: the least recently used one is closed.
    if (worlds.size >= keep) {
      const [oldest, old] = worlds.entries().next().value!
      worlds.delete(oldest)
      yield* Scope.close(old.scope, Exit.void)
    }
    const world = yield* buildWorld(config, tamper)
    worlds.set(key, world)
    return world
  })

/** Closes every cached world (their services, fibers and timers). */
export const reset: Effect.Effect<void> = Effect.suspend(() => {
  const all = [...worlds.values()]
  worlds.clear()
  return Effect.forEach(all, (world) => Scope.close(world.scope, Exit.void), { discard: true })
})
