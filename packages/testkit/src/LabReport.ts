/**
 * LabReport — a picture of one simulated run as SVG: the number of working sub-agents over
 * virtual time (against the cap), and the agent tree as a Gantt chart, one lane per agent
 * (in tree order, indented by depth) with its states: queued (spawned, not started), running,
 * waiting (blocked in agent_wait: with queue admission its permit may be lent to one it waits
 * for), and how it ended. Outside operations are marked on the time axis; a violation is
 * marked where and when it happened, and its invariant heads the picture.
 *
 * The time axis spans the run's activity (its events, model requests and operations), not the
 * virtual time the simulation let pass after the last of them to be sure nothing was left.
 *
 * Plain SVG text with no dependencies: every lane is a `<g class="lane" data-agent="nK">`, the
 * time axis a `<g class="time-axis" data-t-max=…>`, the violation a `<g class="violation">`
 * with its invariant, agent and time as data attributes, so tools (and tests) can find them.
 * PNG is not produced here: convert the SVG with a renderer such as `rsvg-convert` where one
 * is installed (`fibril lab report --png` does so).
 */
import type { Violation } from "./Invariants.ts"
import { tree as treeOf } from "./LabGenerators.ts"
import type { Trace } from "./SimulationTrace.ts"

const colors = {
  queued: "#c9ced6",
  running: "#4a90d9",
  waiting: "#a9c8ea",
  completed: "#3ba55c",
  failed: "#d9534f",
  cancelled: "#f0ad4e",
  interrupted: "#9b59b6",
  concurrency: "#4a90d9",
  cap: "#d9534f",
  violation: "#c0392b"
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

/** The lanes of a trace: one per agent that appears in its events, in tree order (depth first). */
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
  const order = new Map<string, number>()
  const visit = (index: number) => {
    order.set(`n${index}`, order.size)
    for (const child of nodes[index]?.children ?? []) visit(child)
  }
  const nodes = treeOf(trace.experiment)
  visit(0)
  const rank = (agent: string) => order.get(agent) ?? Number.MAX_SAFE_INTEGER
  return [...byAgent.values()].sort((a, b) => rank(a.agent) - rank(b.agent))
}

/** A call of agent_wait (or a variant of it): the agent is blocked until others end. */
const isWait = (event: Trace["events"][number]) =>
  (event.type === "tool_call" || event.type === "tool_result") && event.tool?.startsWith("agent_wait") === true

/**
 * Working sub-agents over time (running, and not blocked in agent_wait): `[t, count]` at every
 * change, several at one virtual instant when it went up and down within it (so a peak within
 * an instant, as when two agents start and one ends at 10 ms, is drawn, not lost).
 */
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
    if (points[points.length - 1]![1] !== active.size) points.push([event.t, active.size])
  }
  return points
}

/** The last virtual time anything happened: an event, a model request or an outside operation. */
export const lastActivity = (trace: Trace): number =>
  Math.max(0, ...trace.events.map((e) => e.t), ...trace.requests.map((r) => r.t), ...trace.ops.map((op) => op.t))

/** Ticks of a time axis from 0 to at least `last`: a step of 1, 2, 2.5 or 5 times a power of ten, at most 6 intervals. */
export const timeTicks = (last: number): ReadonlyArray<number> => {
  const span = Math.max(1, last)
  const power = 10 ** Math.floor(Math.log10(span / 6))
  const step = [1, 2, 2.5, 5, 10].map((m) => m * power).find((candidate) => span / candidate <= 6) ?? 10 * power
  const count = Math.max(1, Math.ceil(span / step - 1e-9))
  return Array.from({ length: count + 1 }, (_, i) => Math.round(i * step * 1000) / 1000)
}

const formatTime = (t: number, max: number) =>
  max >= 10_000 ? `${Number((t / 1000).toFixed(2))} s` : `${Number(t.toFixed(2))} ms`

/** A conservative estimate of a text's width in the sans-serif fonts renderers use (wider than most glyphs). */
export const textWidth = (text: string, fontSize: number): number => text.length * fontSize * 0.6

/** `text` cut (with an ellipsis) to fit `width` pixels at `fontSize`. */
const fit = (text: string, width: number, fontSize: number) => {
  if (textWidth(text, fontSize) <= width) return text
  const chars = Math.max(1, Math.floor(width / (fontSize * 0.6)) - 1)
  return `${text.slice(0, chars)}…`
}

export interface SvgOptions {
  /** The heading (default: the violated invariant and its message, else the configuration). */
  readonly title?: string | undefined
  readonly width?: number | undefined
  /** The violation to mark (`fibril lab report` finds it with the invariants). */
  readonly violation?: Violation | undefined
}

/** The SVG text of a run. */
export const svg = (trace: Trace, options: SvgOptions = {}): string => {
  const width = Math.max(480, options.width ?? 960)
  const left = 120
  const right = 40
  const plot = width - left - right
  const all = lanes(trace)
  const violation = options.violation
  const ticks = timeTicks(Math.max(lastActivity(trace), violation?.at ?? 0))
  const tMax = ticks[ticks.length - 1]!
  const x = (t: number) => (left + (Math.min(t, tMax) / tMax) * plot).toFixed(1)
  const { cap, admission } = trace.experiment.config
  const points = concurrency(trace)
  const peak = Math.max(cap, ...points.map(([, n]) => n), 1)
  const yStep = Math.max(1, Math.ceil(peak / 5))
  const yMax = Math.ceil(peak / yStep) * yStep
  const chartTop = 72
  const chartHeight = 120
  const y = (n: number) => (chartTop + chartHeight - (n / yMax) * chartHeight).toFixed(1)
  const opsTop = chartTop + chartHeight + 40
  const laneTop = opsTop + 14
  const laneHeight = 22
  const lanesBottom = laneTop + all.length * laneHeight
  const legend = [
    ...(["queued", "running", "waiting", "completed", "failed", "cancelled", "interrupted"] as const).map((state) => ({
      label: state,
      mark: `<rect width="10" height="10" fill="${colors[state]}"/>`
    })),
    { label: "operation", mark: `<line x1="5" y1="-1" x2="5" y2="11" stroke="#555" stroke-dasharray="2 2"/>` },
    ...(violation === undefined ? [] : [{
      label: "violation",
      mark: `<circle cx="5" cy="5" r="5" fill="${colors.violation}"/>`
    }])
  ]
  const legendItem = 95
  const perRow = Math.max(1, Math.floor((width - left - 10) / legendItem))
  const legendTop = lanesBottom + 24
  const height = legendTop + Math.ceil(legend.length / perRow) * 18 + 8
  const out: Array<string> = []
  /** A text, cut (with an ellipsis) to what fits between its anchor and the picture's edges. */
  const text = (
    at: { readonly x: number | string; readonly y: number | string },
    content: string,
    attributes = ""
  ) => {
    const anchor = /text-anchor="(\w+)"/.exec(attributes)?.[1] ?? "start"
    const size = Number(/font-size="([\d.]+)"/.exec(attributes)?.[1] ?? 11)
    const from = Number(at.x)
    const room = anchor === "end"
      ? from - 4
      : anchor === "middle"
      ? 2 * Math.min(from, width - from) - 8
      : width - 4 - from
    return `<text x="${at.x}" y="${at.y}"${attributes}>${escape(fit(content, room, size))}</text>`
  }

  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="11">`
  )
  const setting = `cap ${cap}, ${admission} admission, ${all.length} agents${
    trace.tamper === undefined ? "" : `, planted bug ${trace.tamper}`
  }`
  const heading = options.title ?? (violation === undefined
    ? `${setting}: every checked invariant holds`
    : `invariant ${violation.invariant} violated: ${violation.message}`)
  out.push(`<title>${escape(heading)}</title>`)
  out.push(`<rect x="0" y="0" width="${width}" height="${height}" fill="#ffffff"/>`)
  out.push(
    text(
      { x: 10, y: 22 },
      heading,
      ` font-size="14" font-weight="bold" class="heading"${
        violation === undefined ? "" : ` fill="${colors.violation}"`
      }`
    )
  )
  const idle = trace.end > tMax ? `; the run then idled to ${formatTime(trace.end, trace.end)} (not drawn)` : ""
  out.push(
    text({ x: 10, y: 40 }, `${setting}; activity over ${formatTime(tMax, tMax)} of virtual time${idle}`, ` fill="#555"`)
  )

  // The violation's time, drawn first so that the chart's line stays visible over it.
  if (violation?.at !== undefined) {
    const cx = x(violation.at)
    out.push(
      `<line class="violation-time" x1="${cx}" y1="${chartTop}" x2="${cx}" y2="${lanesBottom}" stroke="${colors.violation}" stroke-opacity="0.6" stroke-width="1.5" stroke-dasharray="5 3"/>`
    )
  }

  // --- Working sub-agents over time, with a y scale ---
  out.push(`<g class="concurrency" data-y-max="${yMax}">`)
  out.push(text({ x: left, y: chartTop - 10 }, "working sub-agents (running, not blocked in agent_wait)"))
  for (let n = 0; n <= yMax; n += yStep) {
    out.push(`<line x1="${left}" y1="${y(n)}" x2="${left + plot}" y2="${y(n)}" stroke="#eeeeee"/>`)
    out.push(text({ x: left - 6, y: Number(y(n)) + 4 }, String(n), ` text-anchor="end" class="y-tick"`))
  }
  out.push(`<line x1="${left}" y1="${chartTop}" x2="${left}" y2="${chartTop + chartHeight}" stroke="#888"/>`)
  out.push(
    `<line x1="${left}" y1="${y(cap)}" x2="${left + plot}" y2="${
      y(cap)
    }" stroke="${colors.cap}" stroke-dasharray="4 3"/>`
  )
  out.push(text({ x: left + plot, y: Number(y(cap)) - 4 }, `cap ${cap}`, ` text-anchor="end" fill="${colors.cap}"`))
  let path = `M${x(0)},${y(0)}`
  let previous = 0
  for (const [t, n] of points) {
    path += ` L${x(t)},${y(previous)} L${x(t)},${y(n)}`
    previous = n
  }
  path += ` L${x(tMax)},${y(previous)}`
  out.push(`<path d="${path}" fill="none" stroke="${colors.concurrency}" stroke-width="2"/>`)
  // A peak that came and went within one virtual instant is a line of no width: a dot shows it.
  points.forEach(([t, n], i) => {
    const next = points[i + 1]
    const before = points[i - 1]
    if (next !== undefined && next[0] === t && next[1] < n && before !== undefined && before[1] < n) {
      out.push(
        `<circle class="instant-peak" cx="${x(t)}" cy="${
          y(n)
        }" r="3" fill="${colors.concurrency}"><title>${n} working at ${t} ms, within that instant</title></circle>`
      )
    }
  })
  out.push(`</g>`)

  // --- The time axis (under the chart; its grid runs through the lanes) ---
  out.push(`<g class="time-axis" data-t-max="${tMax}" data-x0="${left}" data-x1="${left + plot}">`)
  const axisY = chartTop + chartHeight
  out.push(`<line x1="${left}" y1="${axisY}" x2="${left + plot}" y2="${axisY}" stroke="#888"/>`)
  ticks.forEach((t, i) => {
    const label = formatTime(t, tMax)
    // The last label ends at its tick, so it never runs past the picture's edge.
    const anchor = i === ticks.length - 1 ? "end" : i === 0 ? "start" : "middle"
    out.push(`<line x1="${x(t)}" y1="${axisY}" x2="${x(t)}" y2="${axisY + 4}" stroke="#888"/>`)
    out.push(`<line x1="${x(t)}" y1="${laneTop}" x2="${x(t)}" y2="${lanesBottom}" stroke="#f2f2f2"/>`)
    out.push(text({ x: x(t), y: axisY + 16 }, label, ` text-anchor="${anchor}" class="x-tick" data-t="${t}"`))
  })
  out.push(text({ x: left + plot / 2, y: axisY + 30 }, "virtual time", ` text-anchor="middle" fill="#555"`))
  out.push(`</g>`)

  // --- Outside operations ---
  out.push(`<g class="ops">`)
  let lastLabelEnd = -Infinity
  for (const op of trace.ops) {
    out.push(
      `<line x1="${x(op.t)}" y1="${opsTop}" x2="${
        x(op.t)
      }" y2="${lanesBottom}" stroke="#555" stroke-dasharray="2 2"><title>${
        escape(`${op.op} ${op.agent} at ${op.t} ms: ${op.outcome}`)
      }</title></line>`
    )
    // Labels of operations close together would overlap: the later ones are left to the hover text.
    const labelWidth = textWidth(op.op, 11)
    const at = Math.min(Number(x(op.t)) - labelWidth / 2, width - 2 - labelWidth)
    if (at > lastLabelEnd + 4) {
      out.push(text({ x: at.toFixed(1), y: opsTop - 2 }, op.op))
      lastLabelEnd = at + labelWidth
    }
  }
  out.push(`</g>`)

  // --- One lane per agent ---
  all.forEach((lane, i) => {
    const top = laneTop + i * laneHeight
    out.push(`<g class="lane" data-agent="${escape(lane.agent)}" data-top="${top}" data-height="${laneHeight}">`)
    out.push(
      text({ x: 10 + Math.min(lane.depth, 6) * 12, y: top + 14 }, fit(lane.agent, left - 20 - lane.depth * 12, 11))
    )
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

  // --- The violation: where (the agent's lane) and when (a line through chart and lanes) ---
  if (violation !== undefined) out.push(...violationMark(violation))

  // --- Legend ---
  legend.forEach((item, i) => {
    const lx = left + (i % perRow) * legendItem
    const ly = legendTop + Math.floor(i / perRow) * 18
    out.push(`<g transform="translate(${lx},${ly - 9})">${item.mark}</g>`)
    out.push(text({ x: lx + 14, y: ly }, item.label))
  })
  out.push(`</svg>`)
  return out.join("\n") + "\n"

  function violationMark(found: Violation): Array<string> {
    const lane = found.agent === undefined ? -1 : all.findIndex((candidate) => candidate.agent === found.agent)
    const laneY = lane === -1 ? undefined : laneTop + lane * laneHeight + laneHeight / 2
    const details = [
      `invariant ${found.invariant} violated: ${found.message}`,
      ...(found.agent === undefined ? [] : [`agent ${found.agent}`]),
      ...(found.at === undefined ? [] : [`at ${found.at} ms`]),
      ...(found.evidence === undefined ? [] : [`evidence ${JSON.stringify(found.evidence)}`])
    ].join("; ")
    const mark: Array<string> = [
      `<g class="violation" data-invariant="${escape(found.invariant)}"${
        found.agent === undefined ? "" : ` data-agent="${escape(found.agent)}"`
      }${found.at === undefined ? "" : ` data-at="${found.at}"`}><title>${escape(details)}</title>`
    ]
    const where = [found.agent, found.at === undefined ? undefined : formatTime(found.at, tMax)]
      .filter((part) => part !== undefined).join(" at ")
    const label = `${found.invariant} violated${where === "" ? "" : `: ${where}`}`
    if (found.at !== undefined) {
      const cx = Number(x(found.at))
      if (laneY !== undefined) {
        mark.push(
          `<circle class="marker" cx="${cx}" cy="${laneY}" r="7" fill="${colors.violation}" stroke="#ffffff" stroke-width="2"/>`
        )
      }
      // The label beside the line, on the side with room for it.
      const labelWidth = textWidth(label, 11)
      const onRight = cx + 6 + labelWidth <= width - 4
      mark.push(
        text(
          { x: onRight ? cx + 6 : Math.max(4 + labelWidth, cx - 6), y: chartTop + 12 },
          label,
          ` text-anchor="${
            onRight ? "start" : "end"
          }" fill="${colors.violation}" font-weight="bold" class="violation-label"`
        )
      )
    } else {
      // No time given: the agent's whole lane is outlined, or, with no agent either, the heading says it.
      if (laneY !== undefined) {
        mark.push(
          `<rect class="marker" x="${left - 2}" y="${laneY - laneHeight / 2}" width="${
            plot + 4
          }" height="${laneHeight}" fill="none" stroke="${colors.violation}" stroke-width="2"/>`
        )
      }
      mark.push(
        text(
          { x: left + plot, y: chartTop + 12 },
          label,
          ` text-anchor="end" fill="${colors.violation}" font-weight="bold" class="violation-label"`
        )
      )
    }
    mark.push(`</g>`)
    return mark
  }
}
