/**
 * Invariants — reusable checkers over a simulation `Trace` (its events, model requests,
 * outside operations and final records). Each returns `undefined` when it holds, or a
 * `Violation` naming the agent, the virtual time and the evidence: a counterexample a person
 * can read without re-running anything.
 *
 * Add your own with `Invariants.make(name, description, (trace) => …)` and pass them to
 * `Lab.check` (or `fibril lab run --invariants`, which takes the built-in names).
 */
import * as Heartbeat from "@fibril/core/Heartbeat"
import { sessionSettings, tree as treeOf } from "./LabGenerators.ts"
import type { Trace, TraceEvent } from "./SimulationTrace.ts"

/**
 * What a failing check reports: a message, and where it can say so the agent, the virtual time
 * and the evidence (any JSON-like value: it is printed as JSON and shown on the picture).
 */
export interface Counterexample {
  readonly message: string
  /** The agent it happened to, by its place in the tree (`n2`). */
  readonly agent?: string | undefined
  /** Virtual milliseconds since the run began. */
  readonly at?: number | undefined
  readonly evidence?: unknown
}

/** A counterexample with the name of the invariant it breaks. */
export interface Violation extends Counterexample {
  readonly invariant: string
}

/**
 * An invariant: plain data and a function, so a module needs nothing from Fibril to define one
 * (`fibril lab run --invariants-from`). `check` returns `undefined` (or `true`) when the
 * invariant holds; otherwise a `Counterexample`, a message (a string), or `false` (the
 * description is the message). `counterexampleOf` reads what it returned.
 */
export interface Invariant {
  readonly name: string
  readonly description: string
  readonly check: (trace: Trace) => Counterexample | Violation | string | boolean | undefined
}

/**
 * The violation a check's result describes, or `undefined` when it holds. What the check gave
 * is kept: a string is the message; `agent`, `at` (or `t`, the trace's own name for a time) and
 * `evidence` are taken as they are; any other fields of the object are its evidence, so that
 * `{ message, end: 30000 }` prints `evidence {"end":30000}` rather than losing it.
 */
export const counterexampleOf = (invariant: Invariant, result: unknown): Violation | undefined => {
  if (result === undefined || result === null || result === true) return undefined
  if (result === false) return { invariant: invariant.name, message: invariant.description }
  if (typeof result !== "object") return { invariant: invariant.name, message: String(result) }
  const { invariant: _, message, agent, at, t, evidence, ...rest } = result as Record<string, unknown>
  const time = typeof at === "number" ? at : typeof t === "number" ? t : undefined
  const extra = Object.keys(rest).length > 0 ? rest : undefined
  return {
    invariant: invariant.name,
    message: typeof message === "string" ? message : invariant.description,
    ...(agent === undefined || agent === null
      ? {}
      : { agent: typeof agent === "number" ? `n${agent}` : String(agent) }),
    ...(time === undefined ? {} : { at: time }),
    ...(evidence !== undefined ? { evidence: extra === undefined ? evidence : { ...extra, evidence } } : {}),
    ...(evidence === undefined && extra !== undefined ? { evidence: extra } : {})
  }
}

/**
 * An invariant from a check that may build its counterexample with `fail(message, { agent, at,
 * evidence })`, or return a message or a `Counterexample` itself.
 */
export const make = (
  name: string,
  description: string,
  check: (
    trace: Trace,
    fail: (message: string, details?: Omit<Counterexample, "message">) => Violation
  ) => Counterexample | string | boolean | undefined
): Invariant => ({
  name,
  description,
  check: (trace) => check(trace, (message, details = {}) => ({ invariant: name, message, ...details }))
})

const terminal = new Set(["completed", "failed", "cancelled", "interrupted"])
const isTerminal = (event: TraceEvent) => terminal.has(event.type)

/** Agents spawned in the run (a `spawned` event), root excluded. */
const spawnedAgents = (trace: Trace): Set<string> =>
  new Set(trace.events.filter((e) => e.type === "spawned" && e.agent !== "n0").map((e) => e.agent))

/** Successful resumes per agent. */
const resumesOf = (trace: Trace): Map<string, number> => {
  const out = new Map<string, number>()
  for (const op of trace.ops) {
    if (op.op === "resume" && op.outcome.startsWith("resumed")) out.set(op.agent, (out.get(op.agent) ?? 0) + 1)
  }
  return out
}

export const capNeverExceeded = make(
  "cap",
  "sub-agents working at once (a model call in flight) never exceed the manager's cap (maxConcurrent); with reject admission, nor do running ones (with queue admission an agent waiting for others lends them its permit)",
  (trace, fail) => {
    const cap = trace.experiment.config.cap
    for (const request of trace.requests) {
      if (request.working !== undefined && request.working > cap) {
        return fail(`${request.working} sub-agents working at once (model calls in flight), cap ${cap}`, {
          agent: request.agent,
          at: request.t,
          evidence: { working: request.working, cap, turn: request.turn }
        })
      }
    }
    if (trace.experiment.config.admission === "queue") return undefined
    const active = new Set<string>()
    for (const event of trace.events) {
      if (event.depth === 0) continue
      if (event.type === "started") active.add(event.agent)
      if (isTerminal(event)) active.delete(event.agent)
      if (active.size > cap) {
        return fail(`${active.size} sub-agents running at once, cap ${cap}`, {
          agent: event.agent,
          at: event.t,
          evidence: { running: [...active].sort(), cap }
        })
      }
    }
    return undefined
  }
)

export const admission = make(
  "admission",
  "queue admission never refuses a spawn; reject admission refuses one only when the cap is reached",
  (trace, fail) => {
    const { admission: mode, cap } = trace.experiment.config
    const admitted = new Set<string>()
    for (const event of trace.events) {
      if (event.depth === 0 && event.type !== "tool_result") continue
      // Admitted: spawned, or started again by a resume (which has no spawned event).
      if (event.depth > 0 && (event.type === "spawned" || event.type === "started")) admitted.add(event.agent)
      if (isTerminal(event)) admitted.delete(event.agent)
      if (event.type === "tool_result" && event.tool === "agent_spawn" && event.failed === true) {
        if (!/cap reached/.test(event.reason ?? "")) continue
        if (mode === "queue") {
          return fail(`${event.agent}'s spawn was refused under queue admission`, { agent: event.agent, at: event.t })
        }
        if (admitted.size < cap) {
          return fail(`${event.agent}'s spawn was refused with ${admitted.size} of ${cap} admitted`, {
            agent: event.agent,
            at: event.t,
            evidence: { admitted: [...admitted].sort(), cap, reason: event.reason }
          })
        }
      }
    }
    return undefined
  }
)

export const oneTerminalState = make(
  "terminal",
  "each agent ends exactly once per run (once, plus once per resume; a run a process crash cut short ends by the restarted process's reconciliation), and its record ends terminal",
  (trace, fail) => {
    const crashed = new Map<string, number>()
    for (const crash of trace.crashes ?? []) {
      for (const agent of crash.interrupted) crashed.set(agent, (crashed.get(agent) ?? 0) + 1)
    }
    const counts = new Map<string, Array<number>>()
    for (const event of trace.events) {
      if (event.depth > 0 && isTerminal(event)) counts.set(event.agent, [...(counts.get(event.agent) ?? []), event.t])
    }
    const resumes = resumesOf(trace)
    for (const agent of spawnedAgents(trace)) {
      const ends = counts.get(agent) ?? []
      const expected = 1 + (resumes.get(agent) ?? 0)
      const ended = ends.length + (crashed.get(agent) ?? 0)
      if (ended !== expected) {
        return fail(`${agent} has ${ended} ends, expected ${expected}`, {
          agent,
          at: ends[expected],
          evidence: { terminalEventsAt: ends, crashes: crashed.get(agent) ?? 0, resumes: resumes.get(agent) ?? 0 }
        })
      }
    }
    for (const op of trace.ops) {
      if (op.op === "cancel" && !terminal.has(op.outcome) && op.outcome !== "not spawned") {
        return fail(`cancelling ${op.agent} returned it ${op.outcome}, not ended`, { agent: op.agent, at: op.t })
      }
    }
    for (const record of trace.records) {
      if (!terminal.has(record.status)) {
        return fail(`${record.agent}'s record ends ${record.status}`, { agent: record.agent })
      }
    }
    return undefined
  }
)

export const cancelReachesDescendants = make(
  "cancel-cascade",
  "when an agent is cancelled, every non-detached descendant it spawned has ended by then (the same virtual instant)",
  (trace, fail) => {
    const tree = treeOf(trace.experiment)
    const spawnedAt = new Map<string, number>()
    const endedAt = new Map<string, Array<number>>()
    for (const event of trace.events) {
      if (event.type === "spawned" && !spawnedAt.has(event.agent)) spawnedAt.set(event.agent, event.t)
      if (isTerminal(event)) endedAt.set(event.agent, [...(endedAt.get(event.agent) ?? []), event.t])
    }
    for (const event of trace.events) {
      if (event.type !== "cancelled") continue
      const index = Number(event.agent.slice(1))
      const stack = [...(tree[index]?.children ?? [])]
      while (stack.length > 0) {
        const child = tree[stack.pop()!]!
        if (child.spec?.detached === true) continue
        const born = spawnedAt.get(child.label)
        if (born !== undefined && born <= event.t) {
          const ended = (endedAt.get(child.label) ?? []).some((t) => t >= born && t <= event.t)
          if (!ended) {
            return fail(
              `${event.agent} was cancelled at ${event.t}ms but its descendant ${child.label} had not ended`,
              {
                agent: child.label,
                at: event.t,
                evidence: { cancelled: event.agent, descendant: child.label, ends: endedAt.get(child.label) ?? [] }
              }
            )
          }
        }
        stack.push(...child.children)
      }
    }
    return undefined
  }
)

export const nothingLeftAfterRoot = make(
  "nothing-left",
  "once the root is interrupted, no sub-agent (detached ones aside) runs and no model call is in flight",
  (trace, fail) => {
    const left = trace.afterRoot
    if (left.notEnded.length > 0 || left.running > 0 || left.liveModelCalls > 0) {
      return fail(
        `after the root was interrupted: ${left.running} running, ${left.liveModelCalls} model calls in flight, not ended: ${
          left.notEnded.join(", ") || "none"
        }`,
        { evidence: left }
      )
    }
    return undefined
  }
)

export const permissionsOnlyNarrow = make(
  "permissions",
  "an agent's tools are a subset of its parent's (effective permissions only narrow)",
  (trace, fail) => {
    const toolsOf = new Map(trace.records.map((record) => [record.agent, record.tools]))
    const rootTools = trace.rootTools
    for (const record of trace.records) {
      const parentTools = record.parent === "n0" ? rootTools : toolsOf.get(record.parent)
      if (parentTools === undefined || parentTools.length === 0 || record.tools.length === 0) continue
      const allowed = new Set(parentTools)
      const wider = record.tools.filter((tool) => !allowed.has(tool))
      if (wider.length > 0) {
        return fail(`${record.agent} has tools its parent ${record.parent} does not: ${wider.join(", ")}`, {
          agent: record.agent,
          evidence: { wider }
        })
      }
    }
    return undefined
  }
)

export const resultOnceNoTranscript = make(
  "result-once",
  "a parent receives each completed child's result exactly once, and never a child's transcript",
  (trace, fail) => {
    const tree = treeOf(trace.experiment)
    const completedAt = new Map<string, number>()
    const parentEnd = new Map<string, string>()
    // Event indices: each agent's ends, and its closed agent_wait calls.
    const endIndices = new Map<string, Array<number>>()
    const waits = new Map<string, Array<readonly [number, number]>>()
    const openWait = new Map<string, number>()
    trace.events.forEach((event, i) => {
      if (event.type === "completed") completedAt.set(event.agent, event.t)
      if (isTerminal(event)) {
        parentEnd.set(event.agent, event.type)
        endIndices.set(event.agent, [...(endIndices.get(event.agent) ?? []), i])
      }
      if (event.tool?.startsWith("agent_wait") === true) {
        if (event.type === "tool_call") openWait.set(event.agent, i)
        else if (event.type === "tool_result" && openWait.has(event.agent)) {
          waits.set(event.agent, [...(waits.get(event.agent) ?? []), [openWait.get(event.agent)!, i] as const])
          openWait.delete(event.agent)
        }
      }
    })
    for (const request of trace.requests) {
      for (const marker of request.carried) {
        if (marker.startsWith("transcript:") && marker !== `transcript:${request.agent}`) {
          return fail(`${request.agent} was given ${marker.slice("transcript:".length)}'s transcript`, {
            agent: request.agent,
            at: request.t,
            evidence: { request }
          })
        }
      }
    }
    const resumes = resumesOf(trace)
    for (const node of tree) {
      if (node.index === 0 || node.parent === undefined) continue
      const parent = `n${node.parent}`
      // A retried request repeats its turn's messages: count each turn once.
      const turns = new Set<number>()
      const first = trace.requests.filter((r) => r.agent === parent && !turns.has(r.turn) && turns.add(r.turn))
      const seen = first.flatMap((r) => r.carried.filter((m) => m === `result:${node.label}`).map(() => r.t))
      const limit = 1 + (resumes.get(node.label) ?? 0)
      if (seen.length > limit) {
        return fail(`${parent} received ${node.label}'s result ${seen.length} times`, {
          agent: parent,
          at: seen[limit],
          evidence: { child: node.label, receivedAt: seen }
        })
      }
      // A child whose latest run to end before its parent's agent_wait (all its children, by
      // id) returned had completed during that wait was handed over by it, even if resumed from
      // outside at that very instant, once the parent went on to complete.
      if (seen.length === 0 && parentEnd.get(parent) === "completed" && (resumes.get(parent) ?? 0) === 0) {
        const ends = endIndices.get(node.label) ?? []
        for (const [from, to] of waits.get(parent) ?? []) {
          const last = ends.filter((i) => i < to).at(-1)
          if (last !== undefined && last > from && trace.events[last]!.type === "completed") {
            return fail(
              `${parent}'s agent_wait returned without ${node.label}'s result, which completed during the wait`,
              {
                agent: parent,
                at: trace.events[last]!.t,
                evidence: { child: node.label, completedAt: trace.events[last]!.t }
              }
            )
          }
        }
      }
      // A child that completed while its parent still waited for it (and the parent went on
      // to complete) must have been delivered — unless either was resumed from outside (a
      // resume takes the child out of its parent's hands; see docs/lab.md).
      const done = completedAt.get(node.label)
      if (
        done !== undefined && node.spec?.detached !== true && parentEnd.get(parent) === "completed" &&
        (resumes.get(parent) ?? 0) === 0 && (resumes.get(node.label) ?? 0) === 0 && seen.length === 0
      ) {
        return fail(`${parent} completed without ever receiving ${node.label}'s result`, {
          agent: parent,
          at: done,
          evidence: { child: node.label, completedAt: done }
        })
      }
    }
    return undefined
  }
)

export const storeRoundTrip = make(
  "round-trip",
  "every record read back from the store equals the manager's and survives JSON encoding and decoding",
  (trace, fail) => {
    const bad = trace.records.find((record) => !record.roundTrip)
    return bad === undefined ? undefined : fail(`${bad.agent}'s record does not round-trip through the store`, {
      agent: bad.agent,
      evidence: bad
    })
  }
)

export const budgetsHold = make(
  "budgets",
  "no sub-agent takes more model steps than its budget (maxSteps per run)",
  (trace, fail) => {
    const resumes = resumesOf(trace)
    const budget = trace.experiment.config.maxSteps
    for (const record of trace.records) {
      const limit = budget * (1 + (resumes.get(record.agent) ?? 0))
      if (record.steps > limit) {
        return fail(`${record.agent} took ${record.steps} steps, budget ${limit}`, {
          agent: record.agent,
          evidence: { steps: record.steps, budget: limit }
        })
      }
    }
    return undefined
  }
)

export const resumeExtends = make(
  "resume-extends",
  "a resumed agent's transcript extends its earlier transcript, never rewrites it",
  (trace, fail) => {
    const bad = trace.resumes.find((resume) => !resume.extends || resume.after < resume.before)
    return bad === undefined ? undefined : fail(`${bad.agent}'s transcript was rewritten by a resume`, {
      agent: bad.agent,
      evidence: bad
    })
  }
)

/**
 * How long a running sub-agent may go without a sign of life in the lab: the heartbeat's timeout
 * (or, for a model call in flight, which is progress, the request timeout plus the retry backoff),
 * plus one watchdog check. A hung child must end by then.
 */
export const livenessBoundMs = (heartbeatSecs: number): number =>
  Math.max(heartbeatSecs * 1000, sessionSettings.apiTimeoutSecs * 1000 + sessionSettings.retryMaxMs) +
  Heartbeat.checkIntervalMs(heartbeatSecs)

/** A stretch of a sub-agent's run without a sign of life (`silences`). */
export interface Silence {
  readonly agent: string
  readonly from: number
  readonly to: number
  /** Its length less the clock jumps inside it (a suspended machine: no watchdog ran then). */
  readonly silentMs: number
}

/**
 * Every stretch of every sub-agent run without a sign of life (its own event or model request,
 * or a descendant's event: a coordinator in agent_wait lives through its children), from one
 * sign to the next (or to the run's end, the crash that cut it short, or the trace's end).
 * Waiting for a permit is not stalling and is left out: a stretch that `cap` other agents (not
 * its ancestors, which lend theirs while they wait) lived through whole.
 */
export const silences = (trace: Trace): ReadonlyArray<Silence> => {
  const tree = treeOf(trace.experiment)
  const signs = new Map<string, Array<number>>(tree.map((node) => [node.label, []]))
  const ancestors = (label: string): Array<string> => {
    const out: Array<string> = []
    for (let node = tree[Number(label.slice(1))]; node !== undefined; node = tree[node.parent ?? -1]) {
      out.push(node.label)
    }
    return out
  }
  for (const event of trace.events) for (const label of ancestors(event.agent)) signs.get(label)?.push(event.t)
  for (const request of trace.requests) signs.get(request.agent)?.push(request.t)
  const jumps = trace.ops.filter((op) => op.op === "jump").map((op) => ({
    from: op.t,
    to: op.t + parseInt(op.outcome, 10)
  }))
  const crashedAt = new Map<string, number>()
  for (const crash of trace.crashes ?? []) for (const agent of crash.interrupted) crashedAt.set(agent, crash.t)
  // Each run of a sub-agent, from its start to its end (or the crash that cut it short, or the run's end).
  const lives: Array<{ readonly label: string; readonly from: number; readonly to: number }> = []
  for (const node of tree) {
    if (node.index === 0) continue
    const own = trace.events.filter((e) => e.agent === node.label)
    own.forEach((start, i) => {
      if (start.type !== "started") return
      const end = own.slice(i).find(isTerminal)?.t
      const crash = crashedAt.get(node.label)
      lives.push({
        label: node.label,
        from: start.t,
        to: end ?? (crash !== undefined && crash >= start.t ? crash : trace.end)
      })
    })
  }
  const cap = trace.experiment.config.cap
  const out: Array<Silence> = []
  for (const life of lives) {
    const label = life.label
    const family = new Set(ancestors(label))
    const times = [...signs.get(label)!.filter((t) => t >= life.from && t <= life.to), life.to].sort((a, b) => a - b)
    for (let i = 1; i < times.length; i++) {
      const [from, to] = [times[i - 1]!, times[i]!]
      const jumped = jumps.reduce((sum, j) => sum + Math.max(0, Math.min(to, j.to) - Math.max(from, j.from)), 0)
      const holders = lives.filter((o) =>
        o.label !== label && !family.has(o.label) && !ancestors(o.label).includes(label) && o.from <= from &&
        o.to >= to
      )
      if (holders.length < cap) out.push({ agent: label, from, to, silentMs: to - from - jumped })
    }
  }
  return out
}

export const livenessBound = make(
  "liveness",
  "a running sub-agent never goes longer than heartbeat_timeout_secs (or a model call's timeout and backoff) plus one watchdog check without a sign of life (its own event or model request, or a descendant's event): a stalled child ends by then",
  (trace, fail) => {
    const bound = livenessBoundMs(trace.experiment.config.heartbeatSecs)
    const stalled = silences(trace).find((silence) => silence.silentMs > bound)
    if (stalled === undefined) return undefined
    const allowed = bound + (stalled.to - stalled.from - stalled.silentMs)
    return fail(`${stalled.agent} went ${stalled.to - stalled.from} ms without a sign of life, bound ${allowed} ms`, {
      agent: stalled.agent,
      at: stalled.from,
      evidence: {
        silentFrom: stalled.from,
        until: stalled.to,
        boundMs: allowed,
        heartbeatSecs: trace.experiment.config.heartbeatSecs
      }
    })
  }
)

export const noRepeatedToolCalls = make(
  "no-rerun",
  "no tool call runs twice: an agent's work calls never exceed its script's, and it spawns each child once, across cancels, resumes and crashes",
  (trace, fail) => {
    for (const node of treeOf(trace.experiment)) {
      if (node.index === 0) continue
      const calls = trace.events.filter((e) => e.agent === node.label && e.type === "tool_call")
      const probes = calls.filter((e) => e.tool === "lab_probe")
      const spawns = calls.filter((e) => e.tool === "agent_spawn")
      const work = node.spec?.work ?? 0
      if (probes.length > work || spawns.length > node.children.length) {
        return fail(
          `${node.label} ran ${probes.length} work calls (script: ${work}) and ${spawns.length} spawns (children: ${node.children.length})`,
          {
            agent: node.label,
            at: (probes.length > work ? probes[work] : spawns[node.children.length])?.t,
            evidence: { probesAt: probes.map((e) => e.t), spawnsAt: spawns.map((e) => e.t) }
          }
        )
      }
    }
    return undefined
  }
)

/** Every built-in invariant. */
export const all: ReadonlyArray<Invariant> = [
  capNeverExceeded,
  admission,
  oneTerminalState,
  cancelReachesDescendants,
  nothingLeftAfterRoot,
  permissionsOnlyNarrow,
  resultOnceNoTranscript,
  storeRoundTrip,
  budgetsHold,
  resumeExtends,
  livenessBound,
  noRepeatedToolCalls
]

/** The first violation of `invariants` in `trace`, if any. */
export const firstViolation = (trace: Trace, invariants: ReadonlyArray<Invariant> = all): Violation | undefined => {
  for (const invariant of invariants) {
    const violation = counterexampleOf(invariant, invariant.check(trace))
    if (violation !== undefined) return violation
  }
  return undefined
}

/** Built-in invariants by name (`cap,terminal`); an unknown name is an error listing the known ones. */
export const byNames = (names: ReadonlyArray<string>): ReadonlyArray<Invariant> | { readonly unknown: string } => {
  const out: Array<Invariant> = []
  for (const name of names) {
    const found = all.find((invariant) => invariant.name === name)
    if (found === undefined) return { unknown: name }
    out.push(found)
  }
  return out
}
