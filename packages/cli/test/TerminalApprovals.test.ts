// The terminal's approval prompt in-process: keys in, `Approvals.decide` out (a real
// in-memory approver, a follower drawing on a recorded terminal). Questions queue oldest
// first; `s` saves then allows for the run, `A` allows for the run, `d` takes a reason (Esc
// goes back, Backspace edits, Enter sends), a fan-out cannot be saved, Ctrl-C interrupts.
import { assert, describe, it } from "@effect/vitest"
import * as Approvals from "@fibril/core/Approvals"
import { Effect, Fiber, Queue } from "effect"
import * as Output from "../src/Output.ts"
import * as TerminalApprovals from "../src/TerminalApprovals.ts"

const ask = (approvals: Approvals.Service, tool: string, kind: "tool" | "fan_out" = "tool") =>
  Effect.forkChild(approvals.ask({
    kind,
    agentId: "b",
    path: ["root", "a", "b"],
    role: "explore",
    depth: 2,
    tool,
    posture: kind === "fan_out" ? "spawn" : "write",
    arguments: `{"tool":"${tool}"}`,
    reason: `"${tool}" is an ask tool`
  }))

/** Lets the forked fibers run until `approvals` has `count` questions waiting. */
const pendingCount = (approvals: Approvals.Service, count: number) =>
  Effect.gen(function*() {
    for (let i = 0; i < 100; i++) {
      if ((yield* approvals.pending).length === count) return
      yield* Effect.yieldNow
    }
    assert.fail(`never ${count} questions pending`)
  })

describe("TerminalApprovals", () => {
  it.effect("answers the oldest question first by key, through Approvals.decide as \"terminal\"", () =>
    Effect.gen(function*() {
      const approvals = yield* Approvals.make({ timeout: "1 hour" })
      const written: Array<string> = []
      const follow = Output.follower({
        line: () => Effect.void,
        terminal: { columns: () => 200, rows: () => 40, write: (text) => Effect.sync(() => void written.push(text)) }
      }, false)
      const keys = yield* Queue.unbounded<string>()
      let interrupted = 0
      const saved: Array<string> = []
      const keyboard: TerminalApprovals.Keyboard = { keys, interrupt: () => void interrupted++ }
      yield* Effect.forkScoped(TerminalApprovals.run(follow, approvals, keyboard, (tool) =>
        tool === "shell"
          ? Effect.fail({ message: "the file is not writable" })
          : Effect.sync(() => {
            saved.push(tool)
            return "/home/me/.fibril/config.toml"
          })))
      const first = yield* ask(approvals, "write_file")
      yield* pendingCount(approvals, 1)
      const second = yield* ask(approvals, "shell")
      yield* pendingCount(approvals, 2)
      // A key, then the prompt's fiber handles it and redraws.
      const key = (text: string, left: number) =>
        Queue.offer(keys, text).pipe(
          Effect.andThen(Effect.repeat(Effect.yieldNow, { times: 20 })),
          Effect.andThen(pendingCount(approvals, left))
        )

      // Both queued: the prompt shows the oldest, with the count.
      yield* key("x", 2)
      const screen = written.at(-1) ?? ""
      assert.include(screen, "? Approval needed (1 of 2, oldest first): root › a › b [b] (explore) wants write_file")
      assert.include(screen, TerminalApprovals.promptLine)
      // `s` on the oldest: saved, then allowed for the rest of the run.
      yield* key("s", 1)
      assert.deepStrictEqual(saved, ["write_file"])
      assert.deepStrictEqual((yield* Fiber.join(first)).answer, { decision: "allow", always: true, by: "terminal" })
      // A save that fails answers nothing; `d`, then Esc goes back; `d`, a reason edited, Enter denies.
      yield* key("s", 1)
      assert.include(written.at(-1) ?? "", "not saved: the file is not writable")
      yield* key("dx\u001b", 1)
      assert.include(written.at(-1) ?? "", TerminalApprovals.promptLine)
      yield* key("dnot noq\u007fw\r", 0)
      assert.deepStrictEqual((yield* Fiber.join(second)).answer, {
        decision: "deny",
        reason: "not now",
        by: "terminal"
      })
      // A fan-out is not saved as a tool: `s` says so; `A` allows it for the run.
      const fanOut = yield* ask(approvals, "task", "fan_out")
      yield* pendingCount(approvals, 1)
      yield* key("s", 1)
      assert.deepStrictEqual(saved, ["write_file"])
      assert.include(written.at(-1) ?? "", "a fan-out is asked about each time")
      yield* key("A", 0)
      assert.deepStrictEqual((yield* Fiber.join(fanOut)).answer, { decision: "allow", always: true, by: "terminal" })
      // `a` answers once; the standing answers above covered write_file already (never asked again).
      const once = yield* ask(approvals, "edit_file")
      yield* pendingCount(approvals, 1)
      yield* key("a", 0)
      assert.deepStrictEqual((yield* Fiber.join(once)).answer, { decision: "allow", by: "terminal" })
      const again = yield* Fiber.join(yield* ask(approvals, "write_file"))
      assert.strictEqual(again.answer.by, "standing answer")
      // Ctrl-C: what the terminal would have done.
      yield* Queue.offer(keys, "\u0003")
      yield* Effect.repeat(Effect.yieldNow, { times: 20 })
      assert.strictEqual(interrupted, 1)
    }))
})
