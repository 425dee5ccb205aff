/**
 * LabReport — a picture of one simulated run as SVG: the number of working sub-agents over
 * virtual time (against the cap), and the agent tree as a Gantt chart, one lane per agent
 * (indented by depth) with its states: queued (spawned, not started), running, waiting
 * (blocked in agent_wait: with queue admission its permit may be lent to one it waits for),
 * and how it ended. Outside operations are marked on the time axis.
 *
 * Plain SVG text with no dependencies: every lane is a `<g class="lane" data-agent="nK">`, so
 * tools (and tests) can find them. PNG is not produced here: convert the SVG with a renderer
 * such as `rsvg-convert` or ImageMagick where one is installed (`fibril lab report --png` does so).
 */
import type { Trace } from "./Simulation.ts"

const colors = {
  queued: "#c9ced6",
  running: "#4a90d9",
  waiting: "#a9c8ea",
  completed: "#3ba55c",
  failed: "#d9534f",
  cancelled: "#f0ad4e",
  interrupted: "#9b59b6",
  concurrency: "#4a90d9",
  cap: "#d9534f"
} as const

const escape = (text: string) =>
  text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;")

interface Lane {
  readonly agent: string
  readonly depth: number
  spawned: number | undefined
  started: number | undefined
  waiting: number | undefined
  readonly segments: Array<{ readonly from: number; readonly to: number; readonly state: keyof typeof colors }>
  readonly ends: Array<
    { readonly at: number; readonly state: keyof typeof colors; readonly reason?: string | undefined }
  >
}

const terminalStates = new Set(["completed", "failed", "cancelled", "interrupted"])

/** The lanes of a trace: one per agent that appears in its events, in tree order. */
export const lanes = (trace: Trace): ReadonlyArray<Lane> => {
  const byAgent = new Map<string, Lane>()
  const laneOf = (agent: string, depth: number) => {
    let lane = byAgent.get(agent)
    if (lane === undefined) {
      lane = { agent, depth, spawned: undefined, started: undefined, waiting: undefined, segments: [], ends: [] }
      byAgent.set(agent, lane)
    }
    return lane
  }
  for (const event of trace.events) {
    const lane = laneOf(event.agent, event.depth)
    if (event.type === "spawned") lane.spawned = event.t
    if (event.type === "started") {
      if (lane.spawned !== undefined && event.t > lane.spawned) {
        lane.segments.push({ from: lane.spawned, to: event.t, state: "queued" })
      }
      lane.spawned = undefined
      lane.started = event.t
    }
    if (isWait(event) && event.type === "tool_call" && lane.started !== undefined) {
      lane.segments.push({ from: lane.started, to: event.t, state: "running" })
      lane.started = undefined
      lane.waiting = event.t
    }
    if (isWait(event) && event.type === "tool_result" && lane.waiting !== undefined) {
      lane.segments.push({ from: lane.waiting, to: event.t, state: "waiting" })
      lane.waiting = undefined
      lane.started = event.t
    }
    if (terminalStates.has(event.type)) {
      if (lane.waiting !== undefined) lane.segments.push({ from: lane.waiting, to: event.t, state: "waiting" })
      else lane.segments.push({ from: lane.started ?? lane.spawned ?? event.t, to: event.t, state: "running" })
      lane.ends.push({ at: event.t, state: event.type as keyof typeof colors, reason: event.reason })
      lane.started = undefined
      lane.spawned = undefined
      lane.waiting = undefined
    }
  }
  const end = Math.max(trace.end, ...trace.events.map((e) => e.t))
  for (const lane of byAgent.values()) {
    if (lane.started !== undefined) lane.segments.push({ from: lane.started, to: end, state: "running" })
    else if (lane.waiting !== undefined) lane.segments.push({ from: lane.waiting, to: end, state: "waiting" })
    else if (lane.spawned !== undefined) lane.segments.push({ from: lane.spawned, to: end, state: "queued" })
  }
  return [...byAgent.values()].sort((a, b) => Number(a.agent.slice(1)) - Number(b.agent.slice(1)))
}

/** A call of agent_wait (or a variant of it): the agent is blocked until others end. */
const isWait = (event: Trace["events"][number]) =>
  (event.type === "tool_call" || event.type === "tool_result") && event.tool?.startsWith("agent_wait") === true

/** Working sub-agents over time (running, and not blocked in agent_wait): `[t, count]` at every change. */
export const concurrency = (trace: Trace): ReadonlyArray<readonly [number, number]> => {
  const active = new Set<string>()
  const waiting = new Set<string>()
  const points: Array<readonly [number, number]> = [[0, 0]]
  for (const event of trace.events) {
    if (event.depth === 0) continue
    if (event.type === "started") active.add(event.agent)
    else if (isWait(event) && event.type === "tool_call" && active.delete(event.agent)) waiting.add(event.agent)
    else if (isWait(event) && event.type === "tool_result" && waiting.delete(event.agent)) active.add(event.agent)
    else if (terminalStates.has(event.type)) {
      active.delete(event.agent)
      waiting.delete(event.agent)
    } else continue
    const last = points[points.length - 1]!
    if (last[0] === event.t) points[points.length - 1] = [event.t, active.size]
    else points.push([event.t, active.size])
  }
  return points
}

export interface SvgOptions {
  readonly title?: string | undefined
  readonly width?: number | undefined
}

/** The SVG text of a run. */
export const svg = (trace: Trace, options: SvgOptions = {}): string => {
  const width = options.width ?? 960
  const left = 120
  const right = 20
  const plot = width - left - right
  const all = lanes(trace)
  const end = Math.max(1, trace.end, ...trace.events.map((e) => e.t))
  const x = (t: number) => (left + (t / end) * plot).toFixed(1)
  const cap = trace.experiment.config.cap
  const points = concurrency(trace)
  const peak = Math.max(cap, ...points.map(([, n]) => n), 1)
  const chartTop = 40
  const chartHeight = 120
  const y = (n: number) => (chartTop + chartHeight - (n / peak) * chartHeight).toFixed(1)
  const laneTop = chartTop + chartHeight + 50
  const laneHeight = 22
  const height = laneTop + all.length * laneHeight + 40
  const out: Array<string> = []
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="11">`
  )
  out.push(`<rect x="0" y="0" width="${width}" height="${height}" fill="#ffffff"/>`)
  const title = options.title ??
    `cap ${cap}, ${trace.experiment.config.admission} admission, ${all.length} agents, ${end} ms virtual`
  out.push(`<text x="${left}" y="20" font-size="14">${escape(title)}</text>`)
  // Concurrency over time.
  out.push(`<g class="concurrency">`)
  out.push(`<text x="10" y="${chartTop + 12}">working</text>`)
  out.push(
    `<line x1="${left}" y1="${y(cap)}" x2="${left + plot}" y2="${
      y(cap)
    }" stroke="${colors.cap}" stroke-dasharray="4 3"/>`
  )
  out.push(`<text x="${left + plot - 40}" y="${Number(y(cap)) - 4}" fill="${colors.cap}">cap ${cap}</text>`)
  let path = `M${x(0)},${y(0)}`
  let previous = 0
  for (const [t, n] of points) {
    path += ` L${x(t)},${y(previous)} L${x(t)},${y(n)}`
    previous = n
  }
  path += ` L${x(end)},${y(previous)}`
  out.push(`<path d="${path}" fill="none" stroke="${colors.concurrency}" stroke-width="2"/>`)
  out.push(
    `<line x1="${left}" y1="${chartTop + chartHeight}" x2="${left + plot}" y2="${
      chartTop + chartHeight
    }" stroke="#888"/>`
  )
  for (let i = 0; i <= 4; i++) {
    const t = Math.round((end * i) / 4)
    out.push(`<text x="${x(t)}" y="${chartTop + chartHeight + 14}" text-anchor="middle">${t} ms</text>`)
  }
  out.push(`</g>`)
  // Outside operations.
  out.push(`<g class="ops">`)
  for (const op of trace.ops) {
    out.push(
      `<line x1="${x(op.t)}" y1="${laneTop - 12}" x2="${x(op.t)}" y2="${
        height - 30
      }" stroke="#555" stroke-dasharray="2 2"><title>${escape(`${op.op} ${op.agent}: ${op.outcome}`)}</title></line>`
    )
    out.push(`<text x="${x(op.t)}" y="${laneTop - 16}" text-anchor="middle">${escape(op.op)}</text>`)
  }
  out.push(`</g>`)
  // One lane per agent.
  all.forEach((lane, i) => {
    const top = laneTop + i * laneHeight
    out.push(`<g class="lane" data-agent="${lane.agent}">`)
    out.push(`<text x="${10 + lane.depth * 12}" y="${top + 14}">${lane.agent}</text>`)
    for (const segment of lane.segments) {
      const w = Math.max(1, Number(x(segment.to)) - Number(x(segment.from)))
      out.push(
        `<rect x="${x(segment.from)}" y="${top + 3}" width="${w.toFixed(1)}" height="${laneHeight - 6}" fill="${
          colors[segment.state]
        }"><title>${segment.state} ${segment.from}-${segment.to} ms</title></rect>`
      )
    }
    for (const ending of lane.ends) {
      out.push(
        `<rect x="${Number(x(ending.at)) - 3}" y="${top + 2}" width="6" height="${laneHeight - 4}" fill="${
          colors[ending.state]
        }"><title>${
          escape(`${ending.state} at ${ending.at} ms${ending.reason === undefined ? "" : `: ${ending.reason}`}`)
        }</title></rect>`
      )
    }
    out.push(`</g>`)
  })
  // Legend.
  const legendY = height - 12
  let lx = left
  for (const state of ["queued", "running", "waiting", "completed", "failed", "cancelled", "interrupted"] as const) {
    out.push(`<rect x="${lx}" y="${legendY - 9}" width="10" height="10" fill="${colors[state]}"/>`)
    out.push(`<text x="${lx + 14}" y="${legendY}">${state}</text>`)
    lx += 95
  }
  out.push(`</svg>`)
  return out.join("\n") + "\n"
}
