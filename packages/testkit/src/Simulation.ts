/**
 * Simulation — runs one `Experiment` through the real core services with the ScriptedModel in
 * place of a model, under a `TestClock`, and returns its `Trace` (SimulationTrace.ts). The
 * services are a world built once per configuration and reused (SimulationWorld.ts); a run
 * starts the root agent on it, applies the experiment's outside operations (cancel, assign,
 * send_input, resume, kill, a jump of the clock, a process crash), lets the tree finish, and
 * reads the trace off what happened.
 *
 * Cheap by construction: the store is in memory, nothing touches the disk or the network, and
 * virtual time jumps instead of passing. An experiment with a crash runs on a SQLite store of
 * its own, which the restarted process reopens.
 */
import { SubAgentManager as Manager, SubAgentRecord, SubAgentStore } from "@fibril/core"
import { type AgentEvent, AgentEvents } from "@fibril/core/AgentEvents"
import * as Heartbeat from "@fibril/core/Heartbeat"
import { Session } from "@fibril/core/Session"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import type * as FileSystem from "effect/FileSystem"
import * as Option from "effect/Option"
import type * as Path from "effect/Path"
import type { ChildProcessSpawner } from "effect/process"
import * as PubSub from "effect/PubSub"
import * as Random from "effect/Random"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as NodeFs from "node:fs"
import * as NodePath from "node:path"
import { Experiment as ExperimentSchema, tree as treeOf, type TreeNode } from "./LabGenerators.ts"
import type { Experiment } from "./LabGenerators.ts"
import type { Tamper, Trace, TraceEvent, TraceOp, TraceRecord, TraceResume } from "./SimulationTrace.ts"
import {
  buildWorld,
  leaseMs,
  nodeOf,
  type Platform,
  type RunState,
  workspace,
  type World,
  worldFor
} from "./SimulationWorld.ts"

export {
  decode,
  encode,
  type Tamper,
  type Trace,
  TraceError,
  type TraceEvent,
  type TraceOp,
  type TraceRecord,
  type TraceRequest,
  type TraceResume
} from "./SimulationTrace.ts"
export { type Platform, reset, reuse } from "./SimulationWorld.ts"

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

/** The reason a store gives the records of a process found gone (SubAgentStore.goneReason). */
const goneReason = /^Interrupted: the process that ran it .* ended before it finished$/

/**
 * A reason without what differs from process to process: generated ids, and the pid and host
 * of a process found gone (SubAgentStore.goneReason) after a crash.
 */
const anonymous = (reason: string): string =>
  reason.replace(/(agent|session)_\w+/g, "<id>").replace(/\(pid \d+ on [^)]*\)/g, "(pid <pid> on <host>)")

// ---------------------------------------------------------------------------------------------
// One run, in parts

/**
 * A run in progress: the experiment, the services of the process it is in (another process's
 * after a crash), and what its trace gathers.
 */
interface RunContext {
  readonly experiment: Experiment
  readonly options: RunOptions
  /** Builds the process that takes over after a crash. */
  readonly restart: Effect.Effect<World, never, Platform>
  readonly tree: ReadonlyArray<TreeNode>
  readonly state: RunState
  readonly t0: number
  /** The process the run is in: another one after a crash. */
  current: World
  manager: Manager.SubAgentManager["Service"]
  store: SubAgentStore.SubAgentStore["Service"]
  /** The current process's subscription (a crash replaces it: a dead process reports nothing more). */
  subscription: PubSub.Subscription<AgentEvent>
  readonly rootFiber: Fiber.Fiber<unknown, unknown>
  /** The trace's name of each agent id (`n0` the root), and the agent id of each node. */
  readonly labels: Map<string, string>
  readonly ids: Map<number, string>
  readonly events: Array<TraceEvent>
  readonly ops: Array<TraceOp>
  readonly resumes: Array<{ readonly agent: string; readonly id: string; readonly before: ReadonlyArray<string> }>
  readonly crashes: Array<{ readonly t: number; readonly interrupted: ReadonlyArray<string> }>
}

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
    const ctx = yield* start(world, experiment, options, restart)
    for (const step of experiment.schedule) {
      yield* ctx.current.clock.adjust(step.after)
      yield* settle
      yield* drain(ctx)
      yield* operate(ctx, step)
      yield* settle
    }
    const { afterRoot, agentIds } = yield* endRoot(ctx)
    return yield* traceOf(ctx, world, afterRoot, agentIds)
  })

/** In the current process's services (after a crash, the restarted one's). */
const inWorld = <A, E>(ctx: RunContext, effect: Effect.Effect<A, E, any>): Effect.Effect<A, E> =>
  Effect.provideContext(effect, ctx.current.context as Context.Context<any>) as Effect.Effect<A, E>

/** Virtual milliseconds since the run began. */
const now = (ctx: RunContext) => Effect.sync(() => ctx.current.clock.currentTimeMillisUnsafe() - ctx.t0)

const labelOf = (ctx: RunContext, event: AgentEvent): string => {
  const known = ctx.labels.get(event.agent.agentId)
  if (known !== undefined) return known
  const index = event.agent.depth === 0 ? 0 : nodeOf(event.agent.description ?? "")
  const label = index === undefined ? `?${event.agent.agentId}` : `n${index}`
  ctx.labels.set(event.agent.agentId, label)
  if (index !== undefined && index !== 0) ctx.ids.set(index, event.agent.agentId)
  return label
}

/** The events published since the last drain, into the trace. */
const drain = (ctx: RunContext) =>
  Effect.map(Effect.suspend(() => PubSub.takeUpTo(ctx.subscription, Number.MAX_SAFE_INTEGER)), (taken) => {
    for (const event of taken) {
      ctx.events.push({
        t: event.at - ctx.t0,
        type: event.type,
        agent: labelOf(ctx, event),
        depth: event.agent.depth,
        ...(event.tool === undefined ? {} : { tool: event.tool }),
        ...(event.isFailure === true ? { failed: true as const } : {}),
        ...(event.reason === undefined ? {} : { reason: anonymous(event.reason) })
      })
    }
  })

/** The agent's transcript (the live session's, else the store's), message by message as JSON. */
const transcriptOf = (ctx: RunContext, id: string) =>
  Effect.map(
    Effect.orElseSucceed(inWorld(ctx, ctx.manager.readTranscript(id, { limit: 10_000 })), () => undefined),
    (page) => (page === undefined ? [] : page.messages.map((message) => JSON.stringify(message)))
  )

/** The world's clock aligned, the run's state in place, and the root agent started on `node:0`. */
const start = Effect.fnUntraced(function*(
  world: World,
  experiment: Experiment,
  options: RunOptions,
  restart: Effect.Effect<World, never, Platform>
) {
  const session = yield* Session
  const realManager = yield* Manager.SubAgentManager
  const manager = options.tamper?.manager?.(realManager) ?? realManager
  const store = yield* SubAgentStore.SubAgentStore
  const subscription = yield* (yield* AgentEvents).subscribe
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

  const root = yield* Effect.orDie(session.create())
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
  return {
    experiment,
    options,
    restart,
    tree,
    state,
    t0,
    current: world,
    manager,
    store,
    subscription,
    rootFiber,
    labels: new Map([[root.id, "n0"]]),
    ids: new Map(),
    events: [],
    ops: [],
    resumes: [],
    crashes: []
  } satisfies RunContext as RunContext
})

/** One operation of the schedule, from outside the tree, recorded with its outcome. */
const operate = Effect.fnUntraced(function*(ctx: RunContext, step: Experiment["schedule"][number]) {
  const count = ctx.tree.length - 1
  const index = count === 0 ? 0 : 1 + (step.target % count)
  const id = ctx.ids.get(index)
  const t = yield* now(ctx)
  const label = `n${index}`
  const record = (outcome: string) => ctx.ops.push({ t, op: step.op, agent: label, outcome })
  const failure = (exit: Exit.Exit<unknown, unknown>) => {
    const error = Option.getOrUndefined(Exit.findErrorOption(exit))
    return error === undefined ? "defect" : (error as { _tag: string })._tag
  }
  if (step.op === "crash") {
    yield* crash(ctx, t)
  } else if (step.op === "kill") {
    yield* Fiber.interrupt(ctx.rootFiber)
    ctx.ops.push({ t, op: "kill", agent: "n0", outcome: "interrupted" })
  } else if (step.op === "jump") {
    const ms = (step.target % 600) * 1000
    yield* ctx.current.clock.adjust(ms)
    ctx.ops.push({ t, op: "jump", agent: "-", outcome: `${ms}ms` })
  } else if (id === undefined) {
    record("not spawned")
  } else if (step.op === "cancel") {
    const exit = yield* Effect.exit(inWorld(ctx, ctx.manager.cancel(id, "lab: cancelled from outside")))
    record(Exit.isSuccess(exit) ? exit.value.status : "error")
  } else if (step.op === "assign") {
    // A new objective and a role: explore narrows a general agent; general for an explore
    // agent is a widening, which is refused.
    const role = step.target % 2 === 0 ? "explore" : "general"
    const exit = yield* Effect.exit(
      inWorld(
        ctx,
        ctx.manager.assign(id, { objective: `node:${index} (reassigned)`, role, message: "lab: new assignment" })
      )
    )
    if (Exit.isSuccess(exit)) record(`assigned ${role}, ${exit.value.delivered ? "delivered" : "not delivered"}`)
    else record(failure(exit))
  } else if (step.op === "send_input") {
    const exit = yield* Effect.exit(inWorld(ctx, ctx.manager.sendInput(id, "lab: more input", false, "api")))
    record(Exit.isSuccess(exit) ? (exit.value.delivered ? "delivered" : "not delivered") : "error")
  } else {
    const before = yield* transcriptOf(ctx, id)
    const exit = yield* Effect.exit(inWorld(ctx, ctx.manager.resume(undefined, id, "lab: resume")))
    if (Exit.isSuccess(exit)) {
      ctx.resumes.push({ agent: label, id, before })
      record(`resumed ${exit.value.status}`)
    } else {
      record(failure(exit))
    }
  }
})

/**
 * The process dies: its store writes nothing more, every fiber stops. A new process opens the
 * same SQLite store once the dead one's lease has run out, and reconciles: what was pending or
 * running is interrupted; resumes replay from the stored transcript.
 */
const crash = Effect.fnUntraced(function*(ctx: RunContext, t: number) {
  const dying = ctx.current
  if (dying.crash === undefined) {
    ctx.ops.push({ t, op: "crash", agent: "-", outcome: "already crashed" })
    return
  }
  // What was still going when it died.
  const live = new Set(
    (yield* inWorld(ctx, ctx.manager.list({ includeArchived: true })))
      .filter((record) => !SubAgentRecord.isTerminal(record.status))
      .map((record) => record.agent_id)
  )
  yield* dying.crash
  yield* Effect.exit(inWorld(ctx, Fiber.interrupt(ctx.rootFiber)))
  yield* Scope.close(dying.scope, Exit.void)
  const at = dying.clock.currentTimeMillisUnsafe()
  const next = yield* ctx.restart
  yield* next.clock.setTime(at + leaseMs + 1000)
  next.state.current = ctx.state
  ctx.current = next
  const services = next.context as Context.Context<
    Manager.SubAgentManager | SubAgentStore.SubAgentStore | AgentEvents
  >
  const restarted = Context.get(services, Manager.SubAgentManager)
  ctx.manager = ctx.options.tamper?.manager?.(restarted) ?? restarted
  ctx.store = Context.get(services, SubAgentStore.SubAgentStore)
  ctx.subscription = yield* Context.get(services, AgentEvents).subscribe
  const found = yield* inWorld(ctx, ctx.manager.list({ includeArchived: true }))
  const interrupted = found
    .filter((record) =>
      live.has(record.agent_id) && record.status === "interrupted" && goneReason.test(record.reason ?? "")
    )
    .flatMap((record) => {
      const label = ctx.labels.get(record.agent_id)
      return label === undefined || label === "n0" ? [] : [label]
    })
    .sort((a, b) => Number(a.slice(1)) - Number(b.slice(1)))
  ctx.crashes.push({ t, interrupted })
  ctx.ops.push({
    t,
    op: "crash",
    agent: "-",
    outcome: `restarted; interrupted: ${interrupted.join(",") || "none"}`
  })
})

/** The views of these agents that the manager has. */
const viewsOf = (ctx: RunContext, ids: ReadonlyArray<string>) =>
  Effect.forEach(ids, (id) => Effect.option(inWorld(ctx, ctx.manager.result(id, { block: false })))).pipe(
    Effect.map((found) => found.flatMap((view) => (Option.isSome(view) ? [view.value] : [])))
  )

/**
 * Lets the tree finish (virtual time passes quickly), then interrupts the root in any case, and
 * says what was left: agents still running, model calls still live, agents whose run did not
 * end. Detached agents still going are then ended, so that the next run starts from nothing.
 */
const endRoot = Effect.fnUntraced(function*(ctx: RunContext) {
  // After a crash the root is gone; agents resumed in the new process get the same time.
  for (let i = 0; i < 24 && (ctx.rootFiber.pollUnsafe() === undefined || ctx.crashes.length > 0); i++) {
    yield* ctx.current.clock.adjust(30_000)
    yield* settle
  }
  yield* Fiber.interrupt(ctx.rootFiber)
  yield* settle
  yield* drain(ctx)

  // The agents spawned by now: the records of the trace are theirs.
  const agentIds = [...ctx.ids.values()]
  const mine = yield* viewsOf(ctx, agentIds)
  // Detached agents, and agents resumed from outside (no caller: they belong to no tree), may go on.
  const detachedIds = detachedSubtrees(
    ctx.tree,
    ctx.ids,
    new Set(ctx.resumes.map((resume) => Number(resume.agent.slice(1))))
  )
  const notEnded = mine
    .filter((record) => !SubAgentRecord.isTerminal(record.status) && !detachedIds.has(record.agent_id))
    .map((record) => ctx.labels.get(record.agent_id)!)
    .sort()
  const afterRoot: Trace["afterRoot"] = {
    running: Math.max(0, (yield* inWorld(ctx, ctx.manager.running)) - countRunning(mine, detachedIds)),
    liveModelCalls: [...ctx.state.live].reduce(
      (sum, [index, live]) => sum + (detachedIds.has(ctx.ids.get(index) ?? "") ? 0 : live),
      0
    ),
    notEnded
  }

  for (const record of mine) {
    if (!SubAgentRecord.isTerminal(record.status)) {
      yield* Effect.ignore(inWorld(ctx, ctx.manager.cancel(record.agent_id, "lab: end of run")))
    }
  }
  yield* settle
  yield* drain(ctx)
  return { afterRoot, agentIds }
})

/** The trace: the resumed transcripts compared, the records read back, and what was gathered. */
const traceOf = Effect.fnUntraced(function*(
  ctx: RunContext,
  world: World,
  afterRoot: Trace["afterRoot"],
  agentIds: ReadonlyArray<string>
) {
  const resumed = yield* Effect.forEach(
    ctx.resumes,
    ({ agent, before, id }) =>
      Effect.map(transcriptOf(ctx, id), (after): TraceResume => ({
        agent,
        before: before.length,
        after: after.length,
        extends: before.every((entry, i) => after[i] === entry)
      }))
  )

  const finals = yield* viewsOf(ctx, agentIds)
  const records: Array<TraceRecord> = []
  for (const record of finals) {
    const label = ctx.labels.get(record.agent_id)
    if (label === undefined || label === "n0") continue
    const index = Number(label.slice(1))
    const node = ctx.tree[index]
    const stored = yield* inWorld(ctx, ctx.store.get(record.agent_id))
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
      tools: [...(ctx.state.tools.get(index) ?? [])].sort(),
      roundTrip: Option.isSome(stored) && roundTrips(stored.value, record)
    })
  }
  records.sort((a, b) => Number(a.agent.slice(1)) - Number(b.agent.slice(1)))
  world.state.current = undefined
  ctx.current.state.current = undefined
  const { options } = ctx
  return {
    version: 1,
    ...(options.seed === undefined ? {} : { seed: options.seed }),
    ...(options.tamper === undefined ? {} : { tamper: options.tamper.name }),
    experiment: ctx.experiment,
    events: ctx.events,
    requests: ctx.state.requests,
    ops: ctx.ops,
    records,
    resumes: resumed,
    rootTools: [...(ctx.state.tools.get(0) ?? [])].sort(),
    afterRoot,
    end: yield* now(ctx),
    ...(ctx.crashes.length === 0 ? {} : { crashes: ctx.crashes })
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
  const watchdog = Math.round(Heartbeat.checkIntervalMs(config.heartbeatSecs))
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
