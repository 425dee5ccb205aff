/**
 * Simulation — runs one `Experiment` through the real core services (Session, SubAgentManager,
 * the memory store, AgentEvents, the agent tools) with the ScriptedModel in place of a model,
 * under a `TestClock`, and returns its `Trace`: every event with its virtual time, every model
 * request (with the tools it offered and the child results and transcripts it carried), every
 * outside operation and its outcome, the final records, and what was left once the root was
 * interrupted.
 *
 * The trace names agents by their place in the tree (`n0` is the root, `n3` the third node),
 * never by their generated ids, and times are virtual milliseconds since the run began: the same
 * experiment gives the same trace, byte for byte, in any process (`Simulation.encode`).
 *
 * How an agent behaves is its node: an agent with children spawns them all in its first turn
 * (`agent_spawn`, detached as the node says) and waits for them by id (`agent_wait`, all); then it
 * makes `work` calls of a tool that does not exist (tool errors, which carry `transcript:<node>`
 * into its own transcript); then it answers with `result:<node>` as its summary. Every turn
 * takes `delayMs` of virtual time. The node's fault replaces the answer: a retryable error
 * (once, then the answer), a fatal error, a hang, or a crash (a defect in the model call).
 *
 * Cheap by construction: the services are built once per configuration and reused for many
 * runs (rebuilt every `reuse` runs so that no state grows without bound), the store is in
 * memory, nothing touches the disk or the network, and virtual time jumps instead of passing.
 */
import {
  Fibril,
  SqliteSubAgentStore,
  SubAgentManager as Manager,
  SubAgentRecord,
  SubAgentStore,
  ToolRegistry
} from "@fibril/core"
import { type AgentEvent, AgentEvents, make as makeEvents, withEmit } from "@fibril/core/AgentEvents"
import { type Options as SessionOptions, Session } from "@fibril/core/Session"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Path from "effect/Path"
import type { ChildProcessSpawner } from "effect/process"
import * as PubSub from "effect/PubSub"
import * as Random from "effect/Random"
import * as Scheduler from "effect/Scheduler"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import { TestClock } from "effect/testing"
import * as NodeFs from "node:fs"
import * as NodeOs from "node:os"
import * as NodePath from "node:path"
import { Experiment as ExperimentSchema, tree as treeOf, type TreeNode } from "./LabGenerators.ts"
import type { Experiment } from "./LabGenerators.ts"
import * as ScriptedModel from "./ScriptedModel.ts"

export type Platform = FileSystem.FileSystem | Path.Path | ChildProcessSpawner.ChildProcessSpawner

// ---------------------------------------------------------------------------------------------
// The trace

export interface TraceEvent {
  readonly t: number
  readonly type: AgentEvent["type"]
  readonly agent: string
  readonly depth: number
  readonly tool?: string
  readonly reason?: string
  /** A tool_result that failed. */
  readonly failed?: true
}

export interface TraceRequest {
  readonly t: number
  readonly agent: string
  readonly turn: number
  /** Child results (`result:nK`) and transcripts (`transcript:nK`) in the messages new to this request, one entry per message part. */
  readonly carried: ReadonlyArray<string>
  /** Sub-agents with a model call in flight as this one began, itself included (absent for the root's). */
  readonly working?: number
}

export interface TraceOp {
  readonly t: number
  readonly op: string
  readonly agent: string
  readonly outcome: string
}

export interface TraceRecord {
  readonly agent: string
  readonly parent: string
  readonly depth: number
  readonly role: string
  readonly detached: boolean
  /** Spawned with fork_context (absent when not). */
  readonly forked?: true
  readonly status: string
  readonly steps: number
  readonly toolCalls: number
  readonly outputTokens: number
  readonly reason?: string
  /** The tools offered to its model requests (the union), sorted. */
  readonly tools: ReadonlyArray<string>
  /** Does the stored record equal the manager's, and survive encoding to JSON and back? */
  readonly roundTrip: boolean
}

export interface TraceResume {
  readonly agent: string
  /** Transcript entries before the resume. */
  readonly before: number
  readonly after: number
  /** Are the entries before the resume still the first entries, unchanged? */
  readonly extends: boolean
}

export interface Trace {
  readonly version: 1
  readonly seed?: number | undefined
  /** The deliberately broken runtime it ran on (`LabBugs`), if any. */
  readonly tamper?: string | undefined
  readonly experiment: Experiment
  readonly events: ReadonlyArray<TraceEvent>
  readonly requests: ReadonlyArray<TraceRequest>
  readonly ops: ReadonlyArray<TraceOp>
  readonly records: ReadonlyArray<TraceRecord>
  readonly resumes: ReadonlyArray<TraceResume>
  /** The tools offered to the root's model requests, sorted. */
  readonly rootTools: ReadonlyArray<string>
  /** Once the root was interrupted and everything settled (detached and outside-resumed agents excepted). */
  readonly afterRoot: {
    readonly running: number
    readonly liveModelCalls: number
    readonly notEnded: ReadonlyArray<string>
  }
  /** Virtual milliseconds the run took. */
  readonly end: number
  /** Process crashes (`crash` operations): when, and the agents the restarted process found interrupted. */
  readonly crashes?: ReadonlyArray<{ readonly t: number; readonly interrupted: ReadonlyArray<string> }>
}

/** The trace as JSON text, the same bytes for the same experiment. */
export const encode = (trace: Trace): string => JSON.stringify(trace, null, 1) + "\n"

export class TraceError extends Schema.TaggedError<TraceError>()("TraceError", {
  message: Schema.String
}) {}

/** Reads a trace written by `encode` (or `fibril lab run --out`). */
export const decode = (text: string): Effect.Effect<Trace, TraceError> =>
  Effect.try({
    try: () => JSON.parse(text) as unknown,
    catch: (error) => new TraceError({ message: `not JSON: ${String(error)}` })
  }).pipe(Effect.flatMap((value) => {
    const candidate = value as Partial<Trace> | null
    if (candidate === null || typeof candidate !== "object" || candidate.version !== 1) {
      return Effect.fail(new TraceError({ message: "not a lab trace: expected an object with version 1" }))
    }
    return Effect.mapError(
      Schema.decodeUnknownEffect(ExperimentSchema)(candidate.experiment),
      (error) => new TraceError({ message: `the trace's experiment is not valid: ${error.message}` })
    ).pipe(Effect.as(candidate as Trace))
  }))

// ---------------------------------------------------------------------------------------------
// Tampering: deliberately broken layers

/**
 * A deliberately broken runtime, to show that an invariant catches what it should. Each field
 * replaces one part of the real wiring.
 */
export interface Tamper {
  readonly name: string
  /** Manager options built from the experiment's (e.g. a cap one too high). */
  readonly subagents?: ((config: Experiment["config"]) => Partial<Manager.Options>) | undefined
  /** Wraps the events service every agent publishes to. */
  readonly events?: ((events: AgentEvents["Service"]) => AgentEvents["Service"]) | undefined
  /** Wraps the store. */
  readonly store?:
    | ((store: SubAgentStore.SubAgentStore["Service"]) => SubAgentStore.SubAgentStore["Service"])
    | undefined
  /** Answer model requests from a fiber the caller does not own (interrupting the caller leaves it running). */
  readonly leakModelCalls?: boolean | undefined
  /** Session options built from the experiment's (e.g. a step budget two steps too high). */
  readonly session?: ((config: Experiment["config"]) => Partial<SessionOptions>) | undefined
  /** Tools sub-agents are seen to be offered on top of their own. */
  readonly childTools?: ReadonlyArray<string> | undefined
  /** Extra tools registered in the runtime (e.g. a broken variant of an agent tool). */
  readonly tools?: ReadonlyArray<ToolRegistry.ToolDefinition<any, any>> | undefined
  /** The tool agents wait for their children with (default `agent_wait`). */
  readonly waitTool?: string | undefined
  /** Wraps the manager the outside operations use. */
  readonly manager?: ((manager: Manager.SubAgentManager["Service"]) => Manager.SubAgentManager["Service"]) | undefined
}

// ---------------------------------------------------------------------------------------------
// Worlds: the services, built once per configuration and reused

interface RunState {
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

interface World {
  readonly context: Context.Context<never>
  readonly clock: TestClock.TestClock
  readonly scope: Scope.Closeable
  readonly state: { current: RunState | undefined }
  runs: number
  /** With a SQLite store (an experiment with a crash): makes the store behave like a killed process. */
  readonly crash?: Effect.Effect<void> | undefined
}

let cwd: string | undefined
const workspace = (): string => {
  if (cwd === undefined) cwd = NodeFs.mkdtempSync(NodePath.join(NodeOs.tmpdir(), "fibril-lab-"))
  return cwd
}

const isEnd = (type: AgentEvent["type"]) =>
  type === "completed" || type === "failed" || type === "cancelled" || type === "interrupted"

const nodeOf = (prompt: string): number | undefined => {
  const match = /node:(\d+)/.exec(prompt)
  return match === null ? undefined : Number(match[1])
}

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

/** The reason a store gives the records of a process found gone (SubAgentStore.goneReason). */
const goneReason = /^Interrupted: the process that ran it .* ended before it finished$/

/**
 * A reason without what differs from process to process: generated ids, and the pid and host
 * of a process found gone (SubAgentStore.goneReason) after a crash.
 */
const anonymous = (reason: string): string =>
  reason.replace(/(agent|session)_\w+/g, "<id>").replace(/\(pid \d+ on [^)]*\)/g, "(pid <pid> on <host>)")

/** A crashed process's lease, after which another process may declare it gone. */
const leaseMs = 15_000

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

const buildWorld = (config: Experiment["config"], tamper: Tamper | undefined, sqliteDir?: string) =>
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
        maxRetries: 1,
        retryBaseMs: 500,
        retryMaxMs: 500,
        apiTimeoutSecs: 60,
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

const worldFor = (config: Experiment["config"], tamper: Tamper | undefined) =>
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

// ---------------------------------------------------------------------------------------------
// Running an experiment

export interface RunOptions {
  /** Recorded in the trace (the seed that generated the experiment). */
  readonly seed?: number | undefined
  readonly tamper?: Tamper | undefined
}

const settle = Effect.gen(function*() {
  for (let i = 0; i < 8; i++) yield* Effect.yieldNow
})

/**
 * An experiment in the terms: the tree (node `i` is agent `n<i+1>`, `n0` the root;
 * unset fields take `defaults`), the faults by agent (`{ n2: "hang" }`), the outside schedule,
 * and the seed. The configuration defaults to `defaultConfig`.
 */
export interface Spec {
  readonly seed?: number | undefined
  readonly config?: Partial<Experiment["config"]> | undefined
  readonly tree: ReadonlyArray<Partial<Omit<Experiment["nodes"][number], "fault">>>
  readonly faults?: Readonly<Record<string, Experiment["nodes"][number]["fault"]>> | undefined
  readonly schedule?: Experiment["schedule"] | undefined
  readonly tamper?: Tamper | undefined
}

export const defaultConfig: Experiment["config"] = {
  cap: 10,
  admission: "queue",
  maxDepth: 3,
  maxSteps: 8,
  heartbeatSecs: 300
}

/** A node's fields when a `Spec` leaves them out. */
export const defaults: Omit<Experiment["nodes"][number], "fault"> = {
  parent: 0,
  role: "general",
  detached: false,
  work: 0,
  delayMs: 10,
  tokens: 10
}

export class SpecError extends Schema.TaggedError<SpecError>()("SpecError", { message: Schema.String }) {}

/** The `Experiment` a `Spec` describes; a fault for an agent not in the tree is an error. */
export const experimentOf = (spec: Spec): Effect.Effect<Experiment, SpecError> =>
  Effect.gen(function*() {
    const faults = spec.faults ?? {}
    for (const agent of Object.keys(faults)) {
      const index = /^n(\d+)$/.exec(agent)
      if (index === null || Number(index[1]) < 1 || Number(index[1]) > spec.tree.length) {
        return yield* new SpecError({
          message: `faults: "${agent}" is not a sub-agent of the tree; expected n1..n${spec.tree.length}`
        })
      }
    }
    const experiment = {
      config: { ...defaultConfig, ...spec.config },
      nodes: spec.tree.map((node, i) => ({ ...defaults, ...node, fault: faults[`n${i + 1}`] ?? "none" })),
      schedule: spec.schedule ?? []
    }
    return yield* Effect.mapError(
      Schema.decodeUnknownEffect(ExperimentSchema)(experiment),
      (error) => new SpecError({ message: `not a valid experiment: ${error.message}` })
    )
  })

/**
 * Runs an experiment and returns its trace: `run({ seed, tree, faults, schedule })`, or
 * `run(experiment, { seed })` with a generated `Experiment`.
 */
export const run: {
  (
    spec: Spec
  ): Effect.Effect<
    Trace,
    SpecError,
    FileSystem.FileSystem | Path.Path | ChildProcessSpawner.ChildProcessSpawner
  >
  (
    experiment: Experiment,
    options?: RunOptions
  ): Effect.Effect<Trace, never, FileSystem.FileSystem | Path.Path | ChildProcessSpawner.ChildProcessSpawner>
} = ((input: Spec | Experiment, options: RunOptions = {}) =>
  "tree" in input
    ? Effect.flatMap(experimentOf(input), (experiment) =>
      runExperiment(experiment, { seed: input.seed, tamper: input.tamper }))
    : runExperiment(input, options)) as never

const runExperiment = Effect.fn("Simulation.run")(function*(experiment: Experiment, options: RunOptions = {}) {
  // An experiment with a crash runs on a SQLite store of its own (the restarted process
  // reopens it), in worlds built for it and closed after it.
  const crashes = experiment.schedule.some((step) => step.op === "crash")
  const dir = crashes ? NodeFs.mkdtempSync(NodePath.join(workspace(), "store-")) : undefined
  const world = dir === undefined
    ? yield* Effect.orDie(worldFor(experiment.config, options.tamper))
    : yield* Effect.orDie(buildWorld(experiment.config, options.tamper, dir))
  world.runs++
  const built: Array<World> = [world]
  const restart = Effect.tap(
    Effect.orDie(buildWorld(experiment.config, options.tamper, dir)),
    (next) => Effect.sync(() => void built.push(next))
  )
  const traced = runIn(world, experiment, options, restart).pipe(
    Effect.provideContext(
      world.context as Context.Context<Session | Manager.SubAgentManager | SubAgentStore.SubAgentStore | AgentEvents>
    ),
    Effect.scoped,
    withLazySeed(() => options.seed ?? JSON.stringify(experiment))
  )
  if (dir === undefined) {
    const trace = yield* traced
    // One turn of the event loop per run (its fibers ran from the microtask queue): a long
    // check still lets timers, I/O and signals through between runs.
    yield* Effect.yieldNow
    return trace
  }
  return yield* traced.pipe(
    Effect.ensuring(Effect.andThen(
      Effect.forEach(built, (opened) => Scope.close(opened.scope, Exit.void), { discard: true }),
      Effect.sync(() => NodeFs.rmSync(dir, { recursive: true, force: true }))
    ))
  )
})

/**
 * `Random.withSeed(seed())`, the generator made at its first draw: most runs draw nothing (a
 * retry's jitter does), and seeding one is most of what it costs. The same draws either way.
 */
const withLazySeed = (seed: () => string | number) => <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.suspend(() => {
    let seeded: Random.Random | undefined
    const generator = () => (seeded ??= Effect.runSync(Random.withSeed(Effect.service(Random.Random), seed())))
    return Effect.provideService(effect, Random.Random, {
      nextIntUnsafe: () => generator().nextIntUnsafe(),
      nextDoubleUnsafe: () => generator().nextDoubleUnsafe()
    })
  })

const runIn = (
  world: World,
  experiment: Experiment,
  options: RunOptions,
  restart: Effect.Effect<World, never, Platform>
): Effect.Effect<
  Trace,
  never,
  Session | Manager.SubAgentManager | SubAgentStore.SubAgentStore | AgentEvents | Scope.Scope | Platform
> =>
  Effect.gen(function*() {
    // The process the run is in: another one after a crash.
    let current = world
    const session = yield* Session
    const realManager = yield* Manager.SubAgentManager
    let manager = options.tamper?.manager?.(realManager) ?? realManager
    let store = yield* SubAgentStore.SubAgentStore
    let subscription = yield* (yield* AgentEvents).subscribe
    /** In the current process's services (after a crash, the restarted one's). */
    const inWorld = <A, E>(effect: Effect.Effect<A, E, any>): Effect.Effect<A, E> =>
      Effect.provideContext(effect, current.context as Context.Context<any>) as Effect.Effect<A, E>
    const crashes: Array<{ t: number; interrupted: Array<string> }> = []
    const tree = treeOf(experiment)
    // Start where the world's periodic timers (the heartbeat watchdog) are in the same phase
    // as in a new world, so that a run does not depend on the runs before it.
    const period = periodOf(experiment.config)
    const offset = Math.floor(world.clock.currentTimeMillisUnsafe()) % period
    if (offset !== 0) yield* world.clock.adjust(period - offset)
    const t0 = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
    const state: RunState = {
      tree,
      t0,
      requests: [],
      tools: new Map(),
      live: new Map(),
      ended: new Set(),
      attempts: new Map()
    }
    world.state.current = state
    const now = Effect.sync(() => current.clock.currentTimeMillisUnsafe() - t0)

    const root = yield* Effect.orDie(session.create())
    const labels = new Map<string, string>([[root.id, "n0"]])
    const ids = new Map<number, string>()
    const events: Array<TraceEvent> = []
    const labelOf = (event: AgentEvent): string => {
      const known = labels.get(event.agent.agentId)
      if (known !== undefined) return known
      const index = event.agent.depth === 0 ? 0 : nodeOf(event.agent.description ?? "")
      const label = index === undefined ? `?${event.agent.agentId}` : `n${index}`
      labels.set(event.agent.agentId, label)
      if (index !== undefined && index !== 0) ids.set(index, event.agent.agentId)
      return label
    }
    // The current process's subscription (a crash replaces it: a dead process reports nothing more).
    const drain = Effect.map(Effect.suspend(() => PubSub.takeUpTo(subscription, Number.MAX_SAFE_INTEGER)), (taken) => {
      for (const event of taken) {
        events.push({
          t: event.at - t0,
          type: event.type,
          agent: labelOf(event),
          depth: event.agent.depth,
          ...(event.tool === undefined ? {} : { tool: event.tool }),
          ...(event.isFailure === true ? { failed: true as const } : {}),
          ...(event.reason === undefined ? {} : { reason: anonymous(event.reason) })
        })
      }
    })

    const started = yield* Deferred.make<void>()
    const rootFiber = yield* Effect.forkChild(
      Effect.andThen(
        Deferred.succeed(started, undefined),
        session.prompt(root.id, "node:0").pipe(Effect.provideService(Manager.SubAgentManager, manager))
      ),
      { startImmediately: true }
    )
    yield* Deferred.await(started)
    yield* settle
    const ops: Array<TraceOp> = []
    const resumes: Array<{ agent: string; id: string; before: ReadonlyArray<string> }> = []
    // The agent's transcript (the live session's, else the store's), message by message as JSON.
    const transcriptOf = (id: string) =>
      Effect.map(
        Effect.orElseSucceed(inWorld(manager.readTranscript(id, { limit: 10_000 })), () => undefined),
        (page) => (page === undefined ? [] : page.messages.map((message) => JSON.stringify(message)))
      )

    for (const step of experiment.schedule) {
      yield* current.clock.adjust(step.after)
      yield* settle
      yield* drain
      const count = tree.length - 1
      const index = count === 0 ? 0 : 1 + (step.target % count)
      const id = ids.get(index)
      const t = yield* now
      const label = `n${index}`
      const record = (outcome: string) => ops.push({ t, op: step.op, agent: label, outcome })
      if (step.op === "crash") {
        // The process dies: its store writes nothing more, every fiber stops. A new process
        // opens the same SQLite store once the dead one's lease has run out, and reconciles:
        // what was pending or running is interrupted; resumes replay from the stored transcript.
        if (current.crash === undefined) {
          ops.push({ t, op: "crash", agent: "-", outcome: "already crashed" })
        } else {
          // What was still going when it died.
          const live = new Set(
            (yield* inWorld(manager.list({ includeArchived: true })))
              .filter((record) => !SubAgentRecord.isTerminal(record.status))
              .map((record) => record.agent_id)
          )
          yield* current.crash
          yield* Effect.exit(inWorld(Fiber.interrupt(rootFiber)))
          yield* Scope.close(current.scope, Exit.void)
          const at = current.clock.currentTimeMillisUnsafe()
          const next = yield* restart
          yield* next.clock.setTime(at + leaseMs + 1000)
          next.state.current = state
          current = next
          const services = current.context as Context.Context<
            Manager.SubAgentManager | SubAgentStore.SubAgentStore | AgentEvents
          >
          const restarted = Context.get(services, Manager.SubAgentManager)
          manager = options.tamper?.manager?.(restarted) ?? restarted
          store = Context.get(services, SubAgentStore.SubAgentStore)
          subscription = yield* Context.get(services, AgentEvents).subscribe
          const found = yield* inWorld(manager.list({ includeArchived: true }))
          const interrupted = found
            .filter((record) =>
              live.has(record.agent_id) && record.status === "interrupted" && goneReason.test(record.reason ?? "")
            )
            .flatMap((record) => {
              const label = labels.get(record.agent_id)
              return label === undefined || label === "n0" ? [] : [label]
            })
            .sort((a, b) => Number(a.slice(1)) - Number(b.slice(1)))
          crashes.push({ t, interrupted })
          ops.push({
            t,
            op: "crash",
            agent: "-",
            outcome: `restarted; interrupted: ${interrupted.join(",") || "none"}`
          })
        }
      } else if (step.op === "kill") {
        yield* Fiber.interrupt(rootFiber)
        ops.push({ t, op: "kill", agent: "n0", outcome: "interrupted" })
      } else if (step.op === "jump") {
        const ms = (step.target % 600) * 1000
        yield* current.clock.adjust(ms)
        ops.push({ t, op: "jump", agent: "-", outcome: `${ms}ms` })
      } else if (id === undefined) {
        record("not spawned")
      } else if (step.op === "cancel") {
        const exit = yield* Effect.exit(inWorld(manager.cancel(id, "lab: cancelled from outside")))
        record(Exit.isSuccess(exit) ? exit.value.status : "error")
      } else if (step.op === "assign") {
        // A new objective and a role: explore narrows a general agent; general for an explore
        // agent is a widening, which is refused.
        const role = step.target % 2 === 0 ? "explore" : "general"
        const exit = yield* Effect.exit(
          inWorld(manager.assign(id, { objective: `node:${index} (reassigned)`, role, message: "lab: new assignment" }))
        )
        if (Exit.isSuccess(exit)) record(`assigned ${role}, ${exit.value.delivered ? "delivered" : "not delivered"}`)
        else {
          const error = Option.getOrUndefined(Exit.findErrorOption(exit))
          record(error === undefined ? "defect" : (error as { _tag: string })._tag)
        }
      } else if (step.op === "send_input") {
        const exit = yield* Effect.exit(inWorld(manager.sendInput(id, "lab: more input", false, "api")))
        record(Exit.isSuccess(exit) ? (exit.value.delivered ? "delivered" : "not delivered") : "error")
      } else {
        const before = yield* transcriptOf(id)
        const exit = yield* Effect.exit(inWorld(manager.resume(undefined, id, "lab: resume")))
        if (Exit.isSuccess(exit)) {
          resumes.push({ agent: label, id, before })
          record(`resumed ${exit.value.status}`)
        } else {
          const error = Option.getOrUndefined(Exit.findErrorOption(exit))
          record(error === undefined ? "defect" : (error as { _tag: string })._tag)
        }
      }
      yield* settle
    }

    // Let the tree finish (virtual time passes quickly), then interrupt the root in any case.
    // After a crash the root is gone; agents resumed in the new process get the same time.
    for (let i = 0; i < 24 && (rootFiber.pollUnsafe() === undefined || crashes.length > 0); i++) {
      yield* current.clock.adjust(30_000)
      yield* settle
    }
    yield* Fiber.interrupt(rootFiber)
    yield* settle
    yield* drain

    const viewsOf = Effect.forEach(
      [...ids.values()],
      (id) => Effect.option(inWorld(manager.result(id, { block: false })))
    ).pipe(Effect.map((found) => found.flatMap((view) => (Option.isSome(view) ? [view.value] : []))))
    const mine = yield* viewsOf
    // Detached agents, and agents resumed from outside (no caller: they belong to no tree), may go on.
    const detachedIds = detachedSubtrees(tree, ids, new Set(resumes.map((resume) => Number(resume.agent.slice(1)))))
    const notEnded = mine
      .filter((record) => !SubAgentRecord.isTerminal(record.status) && !detachedIds.has(record.agent_id))
      .map((record) => labels.get(record.agent_id)!)
      .sort()
    const afterRoot = {
      running: Math.max(0, (yield* inWorld(manager.running)) - countRunning(mine, detachedIds)),
      liveModelCalls: [...state.live].reduce(
        (sum, [index, live]) => sum + (detachedIds.has(ids.get(index) ?? "") ? 0 : live),
        0
      ),
      notEnded
    }

    // Detached agents may still run: end them so the next run starts from nothing.
    for (const record of mine) {
      if (!SubAgentRecord.isTerminal(record.status)) {
        yield* Effect.ignore(inWorld(manager.cancel(record.agent_id, "lab: end of run")))
      }
    }
    yield* settle
    yield* drain

    const resumed = yield* Effect.forEach(resumes, ({ agent, before, id }) =>
      Effect.map(transcriptOf(id), (after): TraceResume => ({
        agent,
        before: before.length,
        after: after.length,
        extends: before.every((entry, i) =>
          after[i] === entry
        )
      })))

    const finals = yield* viewsOf
    const records: Array<TraceRecord> = []
    for (const record of finals) {
      const label = labels.get(record.agent_id)
      if (label === undefined || label === "n0") continue
      const index = Number(label.slice(1))
      const node = tree[index]
      const stored = yield* inWorld(store.get(record.agent_id))
      records.push({
        agent: label,
        parent: node?.parent === undefined ? "?" : `n${node.parent}`,
        depth: record.depth,
        role: record.role,
        detached: record.detached,
        ...(record.fork_context ? { forked: true as const } : {}),
        status: record.status,
        steps: record.steps ?? 0,
        toolCalls: record.tool_calls ?? 0,
        outputTokens: record.tokens.output,
        ...(record.reason === undefined ? {} : { reason: anonymous(record.reason) }),
        tools: [...(state.tools.get(index) ?? [])].sort(),
        roundTrip: Option.isSome(stored) && roundTrips(stored.value, record)
      })
    }
    records.sort((a, b) => Number(a.agent.slice(1)) - Number(b.agent.slice(1)))
    world.state.current = undefined
    current.state.current = undefined
    return {
      version: 1,
      ...(options.seed === undefined ? {} : { seed: options.seed }),
      ...(options.tamper === undefined ? {} : { tamper: options.tamper.name }),
      experiment,
      events,
      requests: state.requests,
      ops,
      records,
      resumes: resumed,
      rootTools: [...(state.tools.get(0) ?? [])].sort(),
      afterRoot,
      end: yield* now,
      ...(crashes.length === 0 ? {} : { crashes })
    } satisfies Trace as Trace
  })

const decodeRecord = Schema.decodeUnknownSync(SubAgentRecord.SubAgentRecord, { onExcessProperty: "error" })

/** Structural equality of JSON-like values (key order ignored; an undefined field counts as absent). */
const same = (a: unknown, b: unknown): boolean => {
  if (a === b) return true
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false
    for (let i = 0; i < a.length; i++) if (!same(a[i], b[i])) return false
    return true
  }
  if (Array.isArray(b)) return false
  const left = a as Record<string, unknown>
  const right = b as Record<string, unknown>
  // Without allocating: the defined fields of each side, counted, and each of the left's compared.
  let count = 0
  for (const key of Object.keys(left)) {
    const value = left[key]
    if (value === undefined) continue
    count++
    if (!same(value, right[key])) return false
  }
  for (const key in right) if (right[key] !== undefined) count--
  return count === 0
}

// The stored record equals the manager's, and its JSON decodes (strictly) to the same record.
const roundTrips = (stored: SubAgentRecord.SubAgentRecord, live: Manager.AgentView): boolean => {
  const { from_prior_session: _, ...record } = live
  if (!same(stored, record)) return false
  try {
    return same(decodeRecord(JSON.parse(JSON.stringify(stored))), stored)
  } catch {
    return false
  }
}

const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b))

/** The period after which the manager's timers repeat: its watchdog's (see SubAgentManager) and whole seconds. */
const periodOf = (config: Experiment["config"]): number => {
  const watchdog = Math.round(Math.max(1000, Math.min(30_000, (config.heartbeatSecs * 1000) / 4)))
  return (watchdog * 1000) / gcd(watchdog, 1000)
}

/** Agent ids of detached (or outside-resumed) nodes and all their descendants. */
const detachedSubtrees = (
  tree: ReadonlyArray<TreeNode>,
  ids: ReadonlyMap<number, string>,
  resumed: ReadonlySet<number>
): Set<string> => {
  const out = new Set<string>()
  const visit = (index: number, inside: boolean) => {
    const node = tree[index]!
    const here = inside || node.spec?.detached === true || resumed.has(index)
    const id = ids.get(index)
    if (here && id !== undefined) out.add(id)
    for (const child of node.children) visit(child, here)
  }
  visit(0, false)
  return out
}

const countRunning = (records: ReadonlyArray<SubAgentRecord.SubAgentRecord>, ids: ReadonlySet<string>) =>
  records.filter((record) => ids.has(record.agent_id) && record.status === "running").length
