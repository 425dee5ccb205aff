/**
 * Where `run` and `demo` draw: a live tree redrawn in place on a terminal, one line per
 * change otherwise, or one JSON object per event with `--json`.
 *
 * The live tree is redrawn by screen rows: every row is cut to the terminal's width (so one
 * line is one row), the frame is at most the screen's height, and the previous frame is
 * erased by the rows it takes at the current width (a terminal that reflows on resize wraps
 * the old rows). A ticker redraws it while agents run, for their elapsed times and spinners.
 */
import type { AgentEvent } from "@fibril/core/AgentEvents"
import * as Clock from "effect/Clock"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as TreeView from "./TreeView.ts"

/** A terminal to draw on: its size now, and raw writes (escape sequences included). */
export interface Terminal {
  readonly columns: () => number
  readonly rows: () => number
  readonly write: (text: string) => Effect.Effect<void>
}

export interface Output {
  /** Writes one line. */
  readonly line: (text: string) => Effect.Effect<void>
  /** Present when the output is a terminal that can show a live view. */
  readonly terminal?: Terminal | undefined
}

/** `1 tool call`, `2 tool calls`. */
export const count = (n: number, noun: string): string => `${n} ${noun}${n === 1 ? "" : "s"}`

/**
 * `text` broken between words into lines of at most `columns` (a word longer than that keeps
 * its own line): a terminal would wrap it mid-number otherwise. Continuation lines are
 * indented by `indent`.
 */
export const wrap = (text: string, columns: number, indent = "  "): Array<string> => {
  const lines: Array<string> = []
  let current = ""
  for (const word of text.split(" ")) {
    const next = current === "" ? `${lines.length === 0 ? "" : indent}${word}` : `${current} ${word}`
    if (current !== "" && TreeView.width(next) > columns) {
      lines.push(current)
      current = `${indent}${word}`
    } else current = next
  }
  if (current !== "") lines.push(current)
  return lines
}

/** stdout; with a terminal when `tty`. */
export const console = (tty: boolean): Output => ({
  line: (text) => Console.log(text),
  terminal: tty
    ? {
      columns: () => process.stdout.columns || 80,
      rows: () => process.stdout.rows || 24,
      write: (text) => Effect.sync(() => void process.stdout.write(text))
    }
    : undefined
})

/** One event as a JSON line (the `--json` format). */
export const eventJson = (event: AgentEvent): string =>
  JSON.stringify({
    type: event.type,
    at: event.at,
    agent_id: event.agent.agentId,
    parent_id: event.agent.parentId ?? null,
    depth: event.agent.depth,
    role: event.agent.role,
    model: event.agent.model,
    ...(event.agent.description === undefined ? {} : { description: event.agent.description }),
    step: event.agent.step,
    tool_calls: event.agent.toolCalls,
    ...(event.tool === undefined ? {} : { tool: event.tool }),
    ...(event.reason === undefined ? {} : { reason: event.reason }),
    ...(event.isFailure === undefined ? {} : { is_failure: event.isFailure }),
    ...(event.text === undefined ? {} : { delta: event.text }),
    ...(event.unverified === undefined ? {} : { unverified_claims: event.unverified }),
    ...(event.question === undefined ? {} : { question: event.question }),
    ...(event.answer === undefined ? {} : { answer: event.answer }),
    ...(event.progress === undefined ? {} : { progress: event.progress }),
    tokens: event.agent.usage
  })

// --- The `--json` stream: `root`, one line per event (`eventJson`), `final` ---
// One writer for both engines (`fibril run`, `fibril run --cluster`): docs/cli.md documents it.

/** The stream's opening line. */
export const rootJson = (agentId: string): string => JSON.stringify({ type: "root", agent_id: agentId })

export interface Totals {
  readonly agents: number
  readonly tool_calls: number
  readonly tokens: { readonly input: number; readonly output: number; readonly cached: number }
  readonly duration_ms: number
  readonly model: string
}

/** The totals of a run as its tree shows them, with the tokens and model its engine reports. */
export const totalsOf = (
  view: TreeView.View,
  run: { readonly tokens: Totals["tokens"]; readonly durationMs: number; readonly model: string }
): Totals => ({
  agents: TreeView.agents(view).length,
  tool_calls: TreeView.agents(view).reduce((n, node) => n + node.toolCalls, 0),
  tokens: run.tokens,
  duration_ms: run.durationMs,
  model: run.model
})

export interface Final {
  readonly agentId: string
  readonly status: "completed" | "failed" | "cancelled"
  /** The answer, or why the root did not complete. */
  readonly text: string
  readonly totals: Totals
  /** Detached agents stopped when the run ended. */
  readonly stopped: ReadonlyArray<string>
}

/** The stream's closing line. */
export const finalJson = (final: Final): string =>
  JSON.stringify({
    type: "final",
    agent_id: final.agentId,
    status: final.status,
    text: final.text,
    totals: final.totals,
    stopped: final.stopped
  })

/** How many screen rows `lines` take on a terminal `columns` wide. */
export const screenRows = (lines: ReadonlyArray<string>, columns: number): number =>
  lines.reduce((n, line) => n + Math.max(1, Math.ceil(TreeView.width(line) / Math.max(1, columns))), 0)

/**
 * The escape sequence that replaces a frame taking `previousRows` rows with `lines`: back to
 * the first column (a ^C echoed by the terminal moved the cursor), up to the frame's first
 * row, each line written over the old row and the rest of that row erased (EL), then the old
 * rows below the new frame erased (ED). Never an erase of the whole screen from its top-left
 * corner: terminals such as tmux (`scroll-on-clear`) push a cleared screen into the
 * scrollback, which would leave a copy of every frame there.
 */
export const redrawSequence = (previousRows: number, lines: ReadonlyArray<string>): string =>
  `\r${previousRows > 0 ? `\x1b[${previousRows}A` : ""}${lines.map((line) => `${line}\x1b[K\n`).join("")}${
    previousRows > lines.length ? "\x1b[J" : ""
  }`

export interface Follower {
  readonly view: TreeView.View
  /** Folds an event in and shows it. */
  readonly show: (event: AgentEvent) => Effect.Effect<void>
  /** Redraws the live view (elapsed times, spinners) while an agent runs; nothing otherwise. */
  readonly tick: Effect.Effect<void>
  /**
   * The final tree, printed once (not with `--json`): on a terminal it replaces the live
   * view; otherwise it follows the log, under `header`.
   */
  readonly finish: (header: string) => Effect.Effect<void>
  /**
   * Lines drawn under the live tree (the terminal's approval prompt, TerminalApprovals.ts),
   * read at every redraw; the final tree is printed without them.
   */
  readonly setFooter: (lines: () => ReadonlyArray<string>) => void
  /** Redraws the live view now (after the footer changed). */
  readonly redraw: Effect.Effect<void>
}

/** The prefix of a line of the root's answer printed as it streams (not on a terminal). */
export const streamedPrefix = "  ┊ "

/**
 * Not on a terminal, the root agent's streamed text is printed line by line as each line is
 * complete (a log cannot take a partial line back); the rest of a turn's text when the turn
 * ends. A retry drops the partial line: the retry's own line says the attempt started again.
 */
const rootLines = () => {
  let partial = ""
  return (event: AgentEvent): ReadonlyArray<string> => {
    if (event.agent.depth !== 0) return []
    switch (event.type) {
      case "text": {
        const lines = (partial + (event.text ?? "")).split("\n")
        partial = lines.pop()!
        return lines
      }
      case "step": {
        const rest = partial
        partial = ""
        return rest === "" ? [] : [rest]
      }
      case "retry":
        partial = ""
        return []
      default:
        return []
    }
  }
}

/** Folds events into a tree and shows them the way `output` can. */
export const follower = (output: Output, json: boolean): Follower => {
  const view = TreeView.empty()
  const streamed = rootLines()
  const terminal = json ? undefined : output.terminal
  let drawn: { readonly lines: ReadonlyArray<string> } | undefined
  let finished = false
  // Redraws are at most one per 50 ms of the clock: a burst of events (a fan-out of 20
  // agents) is one frame, and the ticker draws what a skipped redraw left behind.
  let drawnAt = Number.NEGATIVE_INFINITY
  let dirty = false
  let footer: () => ReadonlyArray<string> = () => []

  const redraw = (lines: ReadonlyArray<string>, columns: number) =>
    Effect.suspend(() => {
      const previous = drawn === undefined ? 0 : screenRows(drawn.lines, columns)
      drawn = { lines }
      return terminal!.write(redrawSequence(previous, lines))
    })

  const draw = Effect.suspend(() => {
    if (terminal === undefined || finished) return Effect.void
    return Effect.flatMap(Clock.currentTimeMillis, (now) => {
      drawnAt = now
      dirty = false
      const columns = terminal.columns()
      const below = footer().map((line) => TreeView.cut(line, columns - 1))
      // One column spare: a row exactly as wide as the screen wraps in some terminals.
      const tree = TreeView.frame(view, { now, columns: columns - 1, rows: terminal.rows() - 1 - below.length })
      return redraw([...tree, ...below], columns)
    })
  })

  const show = (event: AgentEvent): Effect.Effect<void> =>
    Effect.suspend(() => {
      TreeView.apply(view, event)
      if (json) return output.line(eventJson(event))
      if (terminal !== undefined) {
        return Effect.flatMap(Clock.currentTimeMillis, (now) => {
          if (now - drawnAt >= 50) return draw
          dirty = true
          return Effect.void
        })
      }
      if (event.type === "text" || event.type === "step") {
        const lines = streamed(event)
        return lines.length === 0
          ? Effect.void
          : Effect.forEach(lines, (line) => output.line(`${streamedPrefix}${line}`), { discard: true })
      }
      if (event.type === "retry") streamed(event)
      const line = TreeView.progressLine(view, event)
      return line === undefined ? Effect.void : output.line(line)
    })

  const tick = Effect.suspend(() =>
    dirty || [...view.nodes.values()].some((node) => node.status === "running" || node.status === "pending")
      ? draw
      : Effect.void
  )

  const finish = (header: string) =>
    Effect.gen(function*() {
      if (json || finished) return
      const now = yield* Clock.currentTimeMillis
      if (terminal !== undefined) {
        const columns = terminal.columns()
        yield* redraw(TreeView.render(view, { now, columns: columns - 1 }), columns)
        finished = true
        return
      }
      finished = true
      yield* output.line("")
      yield* output.line(header)
      for (const line of TreeView.render(view, { now })) yield* output.line(line)
    })

  const setFooter = (lines: () => ReadonlyArray<string>) => {
    footer = lines
  }

  return { view, show, tick, finish, setFooter, redraw: draw }
}

/** Runs `follower.tick` every 100 ms of the clock until interrupted. */
export const ticker = (following: Follower): Effect.Effect<never> =>
  Effect.forever(Effect.andThen(Effect.sleep("100 millis"), following.tick))
