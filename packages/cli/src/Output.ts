/**
 * Where `run` and `demo` draw: a live tree redrawn in place on a terminal, one line per
 * change otherwise, or one JSON object per event with `--json`.
 */
import type { AgentEvent } from "@fibril/core/AgentEvents"
import { Console, Effect } from "effect"
import * as TreeView from "./TreeView.ts"

export interface Output {
  /** Writes one line. */
  readonly line: (text: string) => Effect.Effect<void>
  /** Replaces the last `previous` lines with `lines` (a live view on a terminal). */
  readonly redraw?: ((previous: number, lines: ReadonlyArray<string>) => Effect.Effect<void>) | undefined
}

/** `1 tool call`, `2 tool calls`. */
export const count = (n: number, noun: string): string => `${n} ${noun}${n === 1 ? "" : "s"}`

export const console = (tty: boolean): Output => ({
  line: (text) => Console.log(text),
  redraw: tty
    ? (previous, lines) =>
      Effect.sync(() => {
        const up = previous > 0 ? `\x1b[${previous}A\x1b[J` : ""
        process.stdout.write(`${up}${lines.join("\n")}\n`)
      })
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
    tokens: event.agent.usage
  })

/** Folds events into a tree and shows them the way `output` can. */
export const follower = (output: Output, json: boolean) => {
  const view = TreeView.empty()
  let drawn = 0
  const show = (event: AgentEvent): Effect.Effect<void> => {
    TreeView.apply(view, event)
    if (json) return output.line(eventJson(event))
    if (output.redraw !== undefined) {
      const lines = TreeView.render(view)
      const previous = drawn
      drawn = lines.length
      return output.redraw(previous, lines)
    }
    const line = TreeView.progressLine(view, event)
    return line === undefined ? Effect.void : output.line(line)
  }
  return { view, show }
}
