/**
 * `fibril run "<prompt>"`: one root agent on the workspace, its tree drawn as it works.
 *
 * On a terminal the tree is redrawn in place; with `--json` or without a terminal each event
 * is one line. The final tree, the answer and the totals close the run. Exit code 0 when the
 * root agent completed, 1 when it failed. Ctrl-C (or SIGTERM, SIGHUP) interrupts the run: the
 * root is cancelled with the reason (`cancelled by Ctrl-C`), and with it its whole tree
 * (background agents, tool calls, shell process groups), before the summary of what was
 * cancelled is printed; the process then exits 128 + the signal's number (bin.ts).
 */
import { type AgentEvent, AgentEvents, isTerminal } from "@fibril/core/AgentEvents"
import * as AllowAlways from "@fibril/core/AllowAlways"
import * as Approvals from "@fibril/core/Approvals"
import * as Session from "@fibril/core/Session"
import { Embedded, type RunError, SubAgentManager } from "@fibril/core/SubAgentManager"
import * as SubAgentRecord from "@fibril/core/SubAgentRecord"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FileSystem from "effect/FileSystem"
import * as PubSub from "effect/PubSub"
import * as Output from "./Output.ts"
import * as TerminalApprovals from "./TerminalApprovals.ts"
import * as TreeView from "./TreeView.ts"

export interface Options {
  readonly prompt: string
  readonly role: string | undefined
  readonly json: boolean
  /** Wait for detached agents still running when the root finishes, instead of stopping them. */
  readonly waitDetached: boolean
  /** What interrupted the run, when it is interrupted (`Ctrl-C`, `SIGTERM`, …). */
  readonly interruptedBy?: (() => string | undefined) | undefined
  /**
   * The person at this terminal answers questions (TerminalApprovals.ts); `s` saves to the
   * user config under `home`.
   */
  readonly answerHere?: { readonly home: string } | undefined
}

/** The reason a detached agent gets when `fibril run` ends before it does. */
export const stoppedReason = (id: string) =>
  `Stopped because fibril run ended while this detached agent ran; resume it with: fibril agents resume ${id}`

export const run = Effect.fn("fibril.run")(function*(options: Options, output: Output.Output) {
  const session = yield* Session.Session
  const manager = yield* SubAgentManager
  const events = yield* AgentEvents
  const subscription = yield* events.subscribe
  const follow = Output.follower(output, options.json)
  // The root is recorded like every agent (`fibril agents show <id>`), without a sub-agent permit.
  const { agent: root, fiber } = yield* (yield* Embedded).startRoot({
    prompt: options.prompt,
    role: options.role,
    description: options.prompt.split("\n")[0]!.slice(0, 60)
  })
  TreeView.label(follow.view, root.agent_id, root.description)
  const started = yield* Clock.currentTimeMillis
  if (options.json) yield* output.line(Output.rootJson(root.agent_id))
  else if (output.terminal === undefined) yield* output.line(`root agent ${root.agent_id}`)
  if (output.terminal !== undefined && !options.json) yield* Effect.forkChild(Output.ticker(follow))
  const answerHere = options.answerHere
  if (answerHere !== undefined && output.terminal !== undefined && !options.json) {
    const approvals = yield* Approvals.Approvals
    const fileSystem = yield* FileSystem.FileSystem
    const keyboard = yield* TerminalApprovals.stdinKeyboard
    yield* Effect.forkScoped(TerminalApprovals.run(
      follow,
      approvals,
      keyboard,
      (tool) => AllowAlways.save(answerHere.home, tool).pipe(Effect.provideService(FileSystem.FileSystem, fileSystem))
    ))
  }

  const drain = Effect.flatMap(
    PubSub.takeUpTo(subscription, Number.MAX_SAFE_INTEGER),
    (pending) => Effect.forEach(pending, follow.show, { discard: true })
  )

  /**
   * Detached agents this process still runs when the root is done: waited for with
   * `--wait-detached`, otherwise stopped (their records say so and how to resume them).
   * Either way the final tree shows what they really ended as.
   */
  const settleDetached = (wait: boolean) =>
    Effect.gen(function*() {
      const open = (yield* manager.list({ includeArchived: false }))
        .filter((agent) =>
          !agent.from_prior_session && !SubAgentRecord.isTerminal(agent.status) && agent.agent_id !== root.agent_id
        )
      if (open.length === 0) return []
      const ids = open.map((agent) => agent.agent_id)
      if (wait) {
        const waiting = yield* Effect.forkChild(manager.wait(ids, { mode: "all" }), { startImmediately: true })
        while (true) {
          const done = yield* Fiber.await(waiting).pipe(Effect.timeoutOption("100 millis"))
          yield* drain
          if (done._tag === "Some") break
        }
        return []
      }
      yield* Effect.forEach(ids, (id) => manager.cancel(id, stoppedReason(id)), {
        concurrency: "unbounded",
        discard: true
      })
      yield* drain
      return ids
    })

  const summarise = (
    exit: Exit.Exit<Session.PromptResult, RunError>,
    stopped: ReadonlyArray<string>,
    cancelledBy?: string
  ) =>
    Effect.gen(function*() {
      if (!options.json) yield* follow.finish("Agents")
      const finished = yield* Clock.currentTimeMillis
      const info = yield* Effect.orDie(session.info(root.agent_id))
      const nodes = [...follow.view.nodes.values()]
      const totals = Output.totalsOf(follow.view, {
        tokens: info.treeUsage,
        durationMs: finished - started,
        model: info.model
      })
      const toolCalls = totals.tool_calls
      const status = Exit.isSuccess(exit)
        ? "completed"
        : Cause.hasInterruptsOnly(exit.cause)
        ? "cancelled"
        : "failed"
      const text = Exit.isSuccess(exit)
        ? exit.value.text
        : status === "cancelled" && cancelledBy !== undefined
        ? `cancelled by ${cancelledBy}`
        : Session.describeFailure(exit.cause)
      if (options.json) {
        yield* output.line(Output.finalJson({ agentId: root.agent_id, status, text, totals, stopped }))
      } else {
        if (status === "cancelled") {
          const cancelled = nodes.filter((node) =>
            (node.status === "cancelled" || node.status === "interrupted") && !stopped.includes(node.id)
          )
          yield* output.line("")
          yield* output.line(`Cancelled ${cancelled.length} agent(s):`)
          for (const node of cancelled) {
            yield* output.line(`  ${node.role} [${node.id}] ${node.description ?? ""}`.trimEnd())
          }
        }
        if (stopped.length > 0) {
          yield* output.line("")
          yield* output.line(
            `Stopped ${stopped.length} detached agent(s) still running when the run ended; resume with:`
          )
          for (const id of stopped) yield* output.line(`  fibril agents resume ${id}`)
        }
        yield* output.line("")
        yield* output.line(status === "completed" ? "Answer" : `The root agent ${status}:`)
        for (const line of text.split("\n")) yield* output.line(`  ${line}`)
        yield* output.line("")
        const line = `Totals: ${Output.count(totals.agents, "agent")}, ${
          Output.count(toolCalls, "tool call")
        }, ${info.treeUsage.input} input + ${info.treeUsage.output} output tokens (${info.treeUsage.cached} cached), ${totals.duration_ms} ms, model ${info.model}. Root agent ${root.agent_id}.`
        // On a terminal, between words (one column spare, as the tree's rows); a log keeps one line.
        const lines = output.terminal === undefined ? [line] : Output.wrap(line, output.terminal.columns() - 1)
        for (const part of lines) yield* output.line(part)
      }
      return status === "completed" ? 0 : 1
    })

  return yield* Effect.gen(function*() {
    while (true) {
      const event: AgentEvent = yield* PubSub.take(subscription)
      yield* follow.show(event)
      if (event.agent.agentId === root.agent_id && isTerminal(event.type)) break
    }
    const exit = yield* Fiber.await(fiber)
    return yield* summarise(exit, yield* settleDetached(options.waitDetached))
  }).pipe(
    // Ctrl-C (or SIGTERM, SIGHUP): cancel the root, which stops its tree first (their
    // finalizers kill processes), then detached agents, then say what stopped.
    Effect.onInterrupt(() =>
      Effect.gen(function*() {
        const by = options.interruptedBy?.() ?? "a signal"
        yield* manager.cancel(root.agent_id, `Cancelled by ${by}`).pipe(Effect.ignore)
        const exit = yield* Fiber.interrupt(fiber).pipe(Effect.andThen(Fiber.await(fiber)))
        const stopped = yield* settleDetached(false).pipe(Effect.orElseSucceed(() => []))
        yield* drain
        yield* summarise(exit, stopped, by)
      })
    )
  )
})

export { TreeView }
