// The live view's columns under the TestClock: elapsed time per agent, a spinner while an
// agent waits on its model, the tool it runs, the sub-agents it waits for, tokens labelled own
// and tree; rows cut to the width; the frame within the screen's rows; the redraw escape
// sequence by screen rows; the ticker; and one line per event (and per log event) otherwise.
import { assert, describe, it } from "@effect/vitest"
import type { AgentEvent, EventType } from "@fibril/core/AgentEvents"
import { Cause, Effect, Fiber, LogLevel } from "effect"
import { TestClock } from "effect/testing"
import * as Log from "../src/Log.ts"
import * as Mcp from "../src/Mcp.ts"
import * as Output from "../src/Output.ts"
import * as TreeView from "../src/TreeView.ts"

const event = (
  type: EventType,
  at: number,
  agent: {
    id: string
    parent?: string
    role?: string
    description?: string
    step?: number
    tools?: number
    tokens?: number
  },
  extra: Partial<AgentEvent> = {}
): AgentEvent => ({
  type,
  at,
  agent: {
    agentId: agent.id,
    parentId: agent.parent,
    depth: agent.parent === undefined ? 0 : 1,
    role: agent.role ?? (agent.parent === undefined ? "general" : "explore"),
    model: "m",
    description: agent.description,
    step: agent.step ?? 0,
    toolCalls: agent.tools ?? 0,
    lastTool: extra.tool,
    usage: { input: agent.tokens ?? 0, output: 0, cached: 0 }
  },
  ...extra
})

const root = { id: "agent_r" }
const child = { id: "agent_c", parent: "agent_r", description: "Map the repository layout" }

describe("TreeView", () => {
  it("elapsed time per agent, a spinner while it waits on its model, the tool it runs, its end", () => {
    const view = TreeView.empty()
    TreeView.apply(view, event("spawned", 0, child))
    TreeView.apply(view, event("started", 0, child))
    const at = (now: number) => TreeView.render(view, { now, columns: 200 })[0]!
    // A spinner frame per 100 ms of the clock, and the time since it was spawned.
    assert.strictEqual(
      at(1500),
      `⠴ explore "Map the repository layout" running 1.5s  waiting on model  steps 0  tools 0  tokens 0  [agent_c]`
    )
    assert.strictEqual(at(1600).slice(0, 1), "⠦")
    assert.match(at(12_000), /running 12s {2}waiting on model/)
    assert.match(at(185_000), /running 3m05s {2}waiting on model/)
    TreeView.apply(view, event("step", 2000, { ...child, step: 1, tokens: 900 }))
    TreeView.apply(view, event("tool_call", 2000, { ...child, step: 1, tools: 1, tokens: 900 }, { tool: "grep" }))
    assert.strictEqual(
      at(2500),
      `● explore "Map the repository layout" running 2.5s  (grep)  steps 1  tools 1  tokens 900  [agent_c]`
    )
    TreeView.apply(view, event("tool_result", 2600, { ...child, step: 1, tools: 1, tokens: 900 }, { tool: "grep" }))
    assert.match(at(2700), /^⠧ explore .* running 2\.7s {2}waiting on model/)
    TreeView.apply(view, event("completed", 4000, { ...child, step: 2, tools: 1, tokens: 1500 }))
    assert.strictEqual(
      at(99_000),
      `✓ explore "Map the repository layout" completed 4.0s  steps 2  tools 1  tokens 1.5k  [agent_c]`
    )
  })

  it("a call's latest progress shows after its tool on the row and in --json, until its result", () => {
    const view = TreeView.empty()
    const tool = "mcp__everything__trigger-long-running-operation"
    TreeView.apply(view, event("spawned", 0, child))
    TreeView.apply(view, event("started", 0, child))
    TreeView.apply(view, event("tool_call", 100, { ...child, step: 1, tools: 1 }, { tool }))
    const row = () => TreeView.render(view, { now: 1000, columns: 200 })[0]!
    const progress = (at: number, update: NonNullable<AgentEvent["progress"]>) => {
      const update_ = event("tool_progress", at, { ...child, step: 1, tools: 1 }, { tool, progress: update })
      TreeView.apply(view, update_)
      return update_
    }
    progress(200, { progress: 1, total: 10 })
    const latest = progress(300, { progress: 3, total: 10, message: "indexing\nfiles" })
    assert.include(row(), `(${tool} 3/10 indexing ⏎ files)`)
    assert.deepStrictEqual(JSON.parse(Output.eventJson(latest)).progress, {
      progress: 3,
      total: 10,
      message: "indexing\nfiles"
    })
    // Not a line of its own where the output is no terminal; a line of `fibril mcp`'s progress.
    assert.isUndefined(TreeView.progressLine(view, latest))
    assert.strictEqual(
      Mcp.describe(latest),
      `explore "Map the repository layout" [agent_c] … ${tool} 3/10 indexing\nfiles`
    )
    TreeView.apply(view, event("tool_result", 400, { ...child, step: 1, tools: 1 }, { tool }))
    TreeView.apply(view, event("tool_call", 500, { ...child, step: 1, tools: 2 }, { tool }))
    assert.include(row(), `(${tool})`)
  })

  it("a pending question shows on the agent's row until it is answered; progress lines say both", () => {
    const view = TreeView.empty()
    TreeView.apply(view, event("spawned", 0, child))
    TreeView.apply(view, event("started", 0, child))
    const question = {
      id: "q_1",
      kind: "tool" as const,
      agentId: "agent_c",
      path: ["agent_c"],
      role: "explore",
      depth: 1,
      tool: "shell",
      posture: "shell",
      arguments: "{}",
      reason: "\"shell\" is an ask tool",
      askedAt: 0
    }
    const asked = event("question", 10, child, { tool: "shell", question })
    TreeView.apply(view, asked)
    assert.match(
      TreeView.render(view, { now: 20, columns: 200 })[0]!,
      /waiting for approval \(1\): fibril agents questions/
    )
    assert.include(
      TreeView.progressLine(view, asked)!,
      "shell waits for approval (\"shell\" is an ask tool): fibril agents answer q_1"
    )
    const answered = event("answered", 30, child, {
      tool: "shell",
      question,
      answer: { decision: "deny", by: "terminal", reason: "no" }
    })
    TreeView.apply(view, answered)
    assert.notMatch(TreeView.render(view, { now: 40, columns: 200 })[0]!, /approval/)
    assert.include(TreeView.progressLine(view, answered)!, "✗ explore [agent_c] shell denied by terminal: no")
  })

  it("tokens: a parent's own and its tree's; it waits on its sub-agents", () => {
    const view = TreeView.empty()
    TreeView.apply(view, event("started", 0, { ...root, tokens: 0 }))
    TreeView.apply(view, event("step", 100, { ...root, step: 1, tokens: 1000 }))
    TreeView.apply(view, event("tool_call", 100, { ...root, step: 1, tools: 1, tokens: 1000 }, { tool: "task" }))
    TreeView.apply(view, event("spawned", 100, child))
    TreeView.apply(view, event("step", 900, { ...child, step: 1, tokens: 600 }))
    const rows = TreeView.render(view, { now: 1000, columns: 200 })
    // The root's tree counts the child's tokens as soon as the child reports them.
    assert.strictEqual(
      rows[0],
      "● general running 1.0s  (task) waiting on 1 sub-agent  steps 1  tools 1  tokens 1.0k own, 1.6k tree  [agent_r]"
    )
    assert.match(
      rows[1]!,
      /^└─ ● explore "Map the repository layout" running 0\.9s {2}steps 1 {2}tools 0 {2}tokens 600/
    )
    // The root's next event reports its tree (its own 1000 + the child's 600 + 400 more of its own).
    TreeView.apply(view, event("step", 1200, { ...root, step: 2, tools: 1, tokens: 2000 }))
    assert.match(TreeView.render(view, { now: 1200 })[0]!, /tokens 1\.4k own, 2\.0k tree/)
  })

  it("rows are cut to the width: the id, then the description's end, then the counts give way", () => {
    const view = TreeView.empty()
    const long = {
      ...child,
      description: "Survey every module under src/ and explain how the configuration loader works"
    }
    TreeView.apply(view, event("spawned", 0, root))
    TreeView.apply(view, event("started", 0, root))
    TreeView.apply(view, event("spawned", 0, long))
    TreeView.apply(view, event("failed", 500, long, { reason: "model call failed:\nNetworkError\n\ncheck the URL" }))
    for (const columns of [200, 120, 79, 60, 40, 20]) {
      for (const row of TreeView.render(view, { now: 1000, columns })) {
        assert.isAtMost(TreeView.width(row), columns, `${columns}: ${row}`)
      }
    }
    const [, wide] = TreeView.render(view, { now: 1000, columns: 300 })
    assert.include(wide, "— model call failed: ⏎ NetworkError ⏎ check the URL")
    const [, narrow] = TreeView.render(view, { now: 1000, columns: 79 })
    assert.strictEqual(narrow, `└─ ✗ explore "Survey every module und…" failed 0.5s  steps 0  tools 0  tokens 0`)
    assert.strictEqual(TreeView.render(view, { now: 1000, columns: 40 })[1], `└─ ✗ explore "Survey every…" failed 0.5s`)
    // Wide characters count two columns.
    assert.strictEqual(TreeView.cut("日本語のテキスト", 7), "日本語…")
    assert.strictEqual(TreeView.width("日本語"), 6)
  })

  it("the live frame fits the screen's rows; the rest is summed up", () => {
    const view = TreeView.empty()
    TreeView.apply(view, event("started", 0, root))
    for (let i = 0; i < 30; i++) {
      TreeView.apply(view, event("started", 0, { id: `agent_${i}`, parent: "agent_r", description: `part ${i}` }))
    }
    // Two of the hidden ones have ended: the count is of the hidden agents only.
    TreeView.apply(view, event("completed", 5, { id: "agent_28", parent: "agent_r" }))
    TreeView.apply(view, event("failed", 5, { id: "agent_29", parent: "agent_r" }))
    TreeView.apply(view, event("completed", 5, { id: "agent_0", parent: "agent_r" }))
    const frame = TreeView.frame(view, { now: 0, columns: 79, rows: 23 })
    assert.strictEqual(frame.length, 23)
    assert.strictEqual(frame.at(-1), "… 9 more agents (7 running)")
  })

  it("a streaming answer: the live row ends with the last line streamed, its end when cut; a retry or the step clears it", () => {
    const view = TreeView.empty()
    TreeView.apply(view, event("started", 0, child))
    const live = (columns = 200) => TreeView.render(view, { now: 0, columns })[0]!
    TreeView.apply(view, event("text", 10, child, { text: "Looking at the layout.\nThe src/ tree has " }))
    assert.strictEqual(
      live(),
      `⠋ explore "Map the repository layout" running 0.0s  streaming  steps 0  tools 0  tokens 0  [agent_c]  › The src/ tree has`
    )
    TreeView.apply(view, event("text", 20, child, { text: "three packages: core, cli and openai.\n\n" }))
    assert.match(live(), /› The src\/ tree has three packages: core, cli and openai\.$/)
    // Cut to 80 columns, the row keeps its end: the words just written.
    assert.isAtMost(TreeView.width(live(80)), 80)
    assert.match(live(80), /^⠋ explore "Map the.*" running 0\.0s {2}streaming {2}› …[^›]*and openai\.$/)
    // The final (not live) tree never shows it.
    assert.notInclude(TreeView.render(view, { now: 0 })[0], "›")
    TreeView.apply(view, event("retry", 30, child, { reason: "attempt 1 failed" }))
    assert.notInclude(live(), "›")
    assert.include(live(), "waiting on model")
    TreeView.apply(view, event("text", 40, child, { text: "Again" }))
    TreeView.apply(view, event("step", 50, { ...child, step: 1 }))
    assert.notInclude(live(), "›")
  })

  it("a spawn refused at the cap is a row under its parent, marked refused, and is not counted as an agent", () => {
    const view = TreeView.empty()
    TreeView.apply(view, event("started", 0, root))
    TreeView.apply(view, event("spawned", 1, child))
    TreeView.apply(view, event("tool_call", 2, { ...root, tools: 2 }, { tool: "agent_spawn" }))
    const refused =
      "sub-agent cap reached (max 1, running 1): nothing was spawned. Wait for a running agent to finish" +
      " (agent_wait) or cancel one (agent_cancel), then try again."
    TreeView.apply(
      view,
      event("tool_result", 3, { ...root, tools: 2 }, { tool: "agent_spawn", isFailure: true, reason: refused })
    )
    // Another tool's failure is no refused spawn.
    TreeView.apply(
      view,
      event("tool_result", 4, { ...root, tools: 2 }, { tool: "read_file", isFailure: true, reason: "file not found" })
    )
    const rows = TreeView.render(view, { now: 10 })
    assert.strictEqual(rows.length, 3, rows.join("\n"))
    assert.strictEqual(rows[2], "└─ ⊗ agent_spawn refused 0.0s  — sub-agent cap reached (max 1, running 1)")
    assert.deepStrictEqual(TreeView.agents(view).map((node) => node.id), ["agent_r", "agent_c"])
    const totals = Output.totalsOf(view, { tokens: { input: 0, output: 0, cached: 0 }, durationMs: 1, model: "m" })
    assert.strictEqual(totals.agents, 2)
  })

  it("a child whose answer makes claims its record does not back is marked, here and without a terminal", () => {
    const view = TreeView.empty()
    const other = { id: "agent_d", parent: "agent_r", description: "Honest" }
    TreeView.apply(view, event("started", 0, root))
    TreeView.apply(view, event("started", 1, child))
    TreeView.apply(view, event("started", 1, other))
    const marked = event("completed", 1001, child, { unverified: 2 })
    TreeView.apply(view, marked)
    TreeView.apply(view, event("completed", 1001, other))
    const rows = TreeView.render(view, { now: 2000 })
    assert.include(rows[1], "✓ explore \"Map the repository layout\" completed 1.0s ! 2 unverified claims", rows[1])
    assert.notInclude(rows[2], "unverified", rows[2])
    assert.include(TreeView.progressLine(view, marked), "completed 1.0s ! 2 unverified claims")
    // Resumed and completed again with every claim backed: the mark goes.
    TreeView.apply(view, event("started", 3000, child))
    TreeView.apply(view, event("completed", 4000, child))
    assert.notInclude(TreeView.render(view, { now: 5000 })[1], "unverified")
  })

  it("without a terminal: one line per event, a multi-line reason on one line", () => {
    const view = TreeView.empty()
    const failed = event("retry", 10, child, {
      reason: "attempt 1 failed (NetworkError: fetch failed\n\nCheck your network)"
    })
    TreeView.apply(view, event("started", 0, child))
    TreeView.apply(view, failed)
    assert.strictEqual(
      TreeView.progressLine(view, failed),
      "    ↻ explore [agent_c] attempt 1 failed (NetworkError: fetch failed ⏎ Check your network)"
    )
  })
})

describe("Output on a terminal", () => {
  const terminal = (columns: number, rows: number) => {
    const writes: Array<string> = []
    return {
      writes,
      output: {
        line: (text: string) => Effect.sync(() => void writes.push(`${text}\n`)),
        terminal: {
          columns: () => columns,
          rows: () => rows,
          write: (text: string) => Effect.sync(() => void writes.push(text))
        }
      } satisfies Output.Output
    }
  }

  it("redraws by screen rows: up as many rows as the last frame takes at the current width", () => {
    assert.strictEqual(Output.redrawSequence(0, ["a", "b"]), "\ra\x1b[K\nb\x1b[K\n")
    assert.strictEqual(Output.redrawSequence(3, ["a"]), "\r\x1b[3Aa\x1b[K\n\x1b[J")
    // A 119-column row takes two rows of a terminal narrowed to 70 columns (that reflows it).
    assert.strictEqual(Output.screenRows(["x".repeat(119), "y".repeat(40)], 70), 3)
  })

  it.effect("the ticker redraws while agents run: the spinner turns and the elapsed time grows (TestClock)", () =>
    Effect.gen(function*() {
      const { writes, output } = terminal(80, 24)
      const follow = Output.follower(output, false)
      yield* follow.show(event("spawned", 0, child))
      yield* follow.show(event("started", 0, child))
      const ticking = yield* Effect.forkChild(Output.ticker(follow))
      yield* TestClock.adjust("1200 millis")
      const frames = writes.filter((w) => w.includes("explore"))
      assert.isAtLeast(frames.length, 12)
      assert.include(frames.at(-1), `⠹ explore "Map the repository layout" running 1.2s  waiting on model`)
      // Each redraw goes up the one row the frame before took.
      assert.isTrue(frames.slice(1).every((frame) => frame.startsWith("\r\x1b[1A")))
      yield* follow.show(event("completed", 1300, { ...child, step: 1, tokens: 10 }))
      yield* TestClock.adjust("1 second")
      yield* follow.finish("Agents")
      yield* Fiber.interrupt(ticking)
      const end = writes.at(-1)!
      assert.match(
        end,
        /✓ explore "Map the repository lay…" completed 1\.3s {2}steps 1 {2}tools 0 {2}tokens 10\x1b\[K\n$/
      )
      for (const row of end.split("\n")) assert.isAtMost(TreeView.width(row.replace(/\x1b\[\d*[A-Z]/g, "")), 79)
      // Nothing is drawn once the final tree is out.
      const count = writes.length
      yield* follow.tick
      assert.strictEqual(writes.length, count)
    }))

  it.effect("a burst of events is one frame; the ticker draws what was skipped", () =>
    Effect.gen(function*() {
      const { writes, output } = terminal(80, 24)
      const follow = Output.follower(output, false)
      yield* follow.show(event("started", 0, root))
      for (let i = 0; i < 20; i++) yield* follow.show(event("spawned", 0, { id: `agent_${i}`, parent: "agent_r" }))
      assert.strictEqual(writes.length, 1)
      yield* TestClock.adjust("100 millis")
      yield* follow.tick
      assert.strictEqual(writes.length, 2)
      assert.strictEqual(writes[1]!.split("\n").length - 1, 21)
    }))
})

describe("Output without a terminal", () => {
  it.effect("the root's streamed answer is printed a line at a time as each line completes; a retry drops the partial line", () =>
    Effect.gen(function*() {
      const lines: Array<string> = []
      const follow = Output.follower({ line: (text) => Effect.sync(() => void lines.push(text)) }, false)
      yield* follow.show(event("started", 0, root))
      yield* follow.show(event("started", 0, child))
      yield* follow.show(event("text", 1, child, { text: "a child's text\n" }))
      yield* follow.show(event("text", 1, root, { text: "First li" }))
      const streamed = () => lines.filter((line) => line.startsWith(Output.streamedPrefix))
      assert.deepStrictEqual(streamed(), [])
      yield* follow.show(event("text", 2, root, { text: "ne.\nSecond" }))
      assert.deepStrictEqual(streamed(), [`${Output.streamedPrefix}First line.`])
      yield* follow.show(event("retry", 3, root, { reason: "attempt 1 failed" }))
      yield* follow.show(event("text", 4, root, { text: "First line.\nSecond line" }))
      yield* follow.show(event("step", 5, { ...root, step: 1 }))
      assert.deepStrictEqual(streamed(), [
        `${Output.streamedPrefix}First line.`,
        `${Output.streamedPrefix}First line.`,
        `${Output.streamedPrefix}Second line`
      ])
      assert.isTrue(lines.some((line) => line.includes("↻ general [agent_r] attempt 1 failed")))
    }))

  it("--json: a text event carries its delta", () => {
    const json = JSON.parse(Output.eventJson(event("text", 1, root, { text: "Hel" }))) as Record<string, unknown>
    assert.deepStrictEqual([json["type"], json["delta"]], ["text", "Hel"])
  })
})

describe("Log", () => {
  it("one line per log event, whatever it holds", () => {
    const line = Log.format({
      message: ["cannot list the models; accepting any model id", {
        reason: "NetworkError",
        message: "fetch failed (GET http://h/v1/models)\n\nCheck your network connection."
      }],
      logLevel: "Warn" as LogLevel.LogLevel,
      cause: Cause.empty,
      fiber: undefined as never,
      date: new Date(Date.UTC(2026, 0, 1, 12, 4, 31, 202))
    })
    assert.strictEqual(
      line,
      "[12:04:31.202] WARN cannot list the models; accepting any model id (reason: NetworkError, message: fetch failed (GET http://h/v1/models) ⏎ Check your network connection.)"
    )
  })
})
