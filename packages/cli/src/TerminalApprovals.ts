/**
 * TerminalApprovals — `fibril run` on a terminal answers the questions `ask` rules raise.
 *
 * While the tree runs, the oldest pending question (Approvals.pending: several queue, a count
 * is shown) is drawn under the live tree with its agent's path, role, tool, bounded arguments
 * and why it asks, and a prompt line: `a` allows once, `A` allows the tool for the rest of the
 * run (a standing answer for the whole tree), `s` also saves it to the user's config
 * (`[permissions] allow`, UserConfigAllow.ts: it answers later asks, never a denial), `d`
 * denies with a reason typed next (Enter sends it; the model reads it). Every answer goes
 * through `Approvals.decide` with who = "terminal", so the receipt and `--json` record it.
 *
 * Keys are read in raw mode, where the terminal no longer turns Ctrl-C into SIGINT: Ctrl-C is
 * sent on as SIGINT, so it still cancels the tree (bin.ts), which withdraws its questions.
 */
import * as Approvals from "@fibril/core/Approvals"
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import type * as Output from "./Output.ts"
import * as TreeView from "./TreeView.ts"

/** What the prompt reads keys from and does with what only the process can do. */
export interface Keyboard {
  /** Raw input as it arrives (a chunk may hold several keys, or an escape sequence). */
  readonly keys: Queue.Dequeue<string>
  /** Ctrl-C: what the terminal would have done without raw mode. */
  readonly interrupt: () => void
}

/** Saves "always allow `tool`" to the user's config; succeeds with where it was written. */
export type SaveAlways = (tool: string) => Effect.Effect<string, { readonly message: string }>

export const promptLine =
  "[a]llow once, allow [A]lways for this run, [s]ave always to the user config, [d]eny (then type a reason the model sees)"

const by = "terminal"

/** The agents of a question's path as the tree knows them: `general › general › explore [agent_…]`. */
const pathText = (view: TreeView.View, question: Approvals.Question): string =>
  `${question.path.map((id) => view.nodes.get(id)?.role ?? id).join(" › ")} [${question.agentId}]`

/** The lines under the tree for `queue` (oldest first), in `typing` a deny's reason, `notice` the last outcome. */
export const footerLines = (
  view: TreeView.View,
  queue: ReadonlyArray<Approvals.Question>,
  typing: string | undefined,
  notice: string | undefined
): ReadonlyArray<string> => {
  const question = queue[0]
  const lines: Array<string> = notice === undefined ? [] : [TreeView.oneLine(notice)]
  if (question === undefined) return lines
  const count = queue.length === 1 ? "" : ` (1 of ${queue.length}, oldest first)`
  lines.push(
    `? Approval needed${count}: ${pathText(view, question)} (${question.role}) wants ${question.tool}${
      question.kind === "fan_out" ? " (a fan-out)" : ""
    }`,
    `  arguments: ${TreeView.oneLine(question.arguments)}`,
    `  why: ${TreeView.oneLine(question.reason)}`,
    typing === undefined
      ? promptLine
      : `Deny: type the reason the model sees, Enter to send, Esc to go back: ${TreeView.oneLine(typing)}`
  )
  return lines
}

/**
 * Answers the questions of `approvals` at the terminal `follow` draws on, until interrupted.
 * `saveAlways` writes a tool to the user config (`s`).
 */
export const run = (
  follow: Output.Follower,
  approvals: Approvals.Service,
  keyboard: Keyboard,
  saveAlways: SaveAlways
): Effect.Effect<never, never, Scope.Scope> =>
  Effect.gen(function*() {
    let queue: ReadonlyArray<Approvals.Question> = []
    let typing: string | undefined
    let notice: string | undefined
    follow.view.answerHere = true
    follow.setFooter(() => footerLines(follow.view, queue, typing, notice))

    const refresh = Effect.gen(function*() {
      const now = yield* approvals.pending
      const changed = now.length !== queue.length || now.some((question, i) => question.id !== queue[i]?.id)
      queue = now
      // The question answered elsewhere (timeout, `fibril agents answer`): its reason was for it.
      if (changed) typing = undefined
      return changed
    })

    const decide = (question: Approvals.Question, answer: Approvals.Answer, done: string) =>
      approvals.decide(question.id, answer).pipe(
        Effect.map(() => done),
        Effect.catchTag("UnknownQuestion", () => Effect.succeed(`${question.tool}: the question had already ended`))
      )

    /** One chunk of input, in the current state. */
    const onKeys = (chunk: string) =>
      Effect.gen(function*() {
        yield* refresh
        for (const key of chunk) {
          if (key === "\u0003") {
            keyboard.interrupt()
            return
          }
          const question = queue[0]
          if (question === undefined) continue
          if (typing !== undefined) {
            if (key === "\r" || key === "\n") {
              const reason = typing.trim() === "" ? "denied at the terminal" : typing.trim()
              typing = undefined
              notice = yield* decide(
                question,
                { decision: "deny", reason, by },
                `✗ denied ${question.tool}: ${reason}`
              )
            } else if (key === "\u001b") typing = undefined
            else if (key === "\u007f" || key === "\b") typing = typing.slice(0, -1)
            else if (key >= " ") typing += key
            continue
          }
          switch (key) {
            case "a":
              notice = yield* decide(question, { decision: "allow", by }, `✓ allowed ${question.tool} once`)
              break
            case "A":
              notice = yield* decide(
                question,
                { decision: "allow", always: true, by },
                `✓ allowed ${question.tool} for the rest of this run`
              )
              break
            case "s": {
              if (question.kind === "fan_out") {
                notice = "a fan-out is asked about each time; [s] saves a tool: answer a, A or d"
                break
              }
              const saved = yield* Effect.result(saveAlways(question.tool))
              notice = saved._tag === "Failure"
                ? `not saved: ${saved.failure.message}`
                : yield* decide(
                  question,
                  { decision: "allow", always: true, by },
                  `✓ allowed ${question.tool}; saved to ${saved.success} ([permissions] allow)`
                )
              break
            }
            case "d":
              typing = ""
              break
            default:
              break
          }
          yield* refresh
        }
      })

    // New questions (and ones that ended elsewhere) show within 100 ms; keys at once.
    yield* Effect.forkScoped(Effect.forever(
      refresh.pipe(
        Effect.flatMap((changed) => changed ? follow.redraw : Effect.void),
        Effect.andThen(Effect.sleep("100 millis"))
      )
    ))
    return yield* Effect.forever(
      Queue.take(keyboard.keys).pipe(
        Effect.flatMap(onKeys),
        Effect.andThen(follow.redraw)
      )
    )
  })

/**
 * The process's stdin as a `Keyboard`, in raw mode for the scope (restored when it closes);
 * Ctrl-C sends this process SIGINT.
 */
export const stdinKeyboard: Effect.Effect<Keyboard, never, Scope.Scope> = Effect.gen(function*() {
  const keys = yield* Queue.unbounded<string>()
  const onData = (data: Buffer | string) => {
    Queue.offerUnsafe(keys, typeof data === "string" ? data : data.toString("utf8"))
  }
  yield* Effect.acquireRelease(
    Effect.sync(() => {
      process.stdin.setRawMode(true)
      process.stdin.on("data", onData)
      process.stdin.resume()
    }),
    () =>
      Effect.sync(() => {
        process.stdin.off("data", onData)
        process.stdin.setRawMode(false)
        process.stdin.pause()
      })
  )
  return { keys, interrupt: () => void process.kill(process.pid, "SIGINT") }
})
