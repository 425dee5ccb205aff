/**
 * `fibril run "<prompt>"`: one root agent on the workspace, its tree drawn as it works.
 *
 * On a terminal the tree is redrawn in place; with `--json` or without a terminal each event
 * is one line. The answer and the totals close the run. Exit code 0 when the root agent
 * completed, 1 when it failed or was cancelled. Ctrl-C interrupts the root: its whole tree is
 * cancelled (background agents, tool calls, shell process groups) before the summary of
 * what was cancelled is printed.
 */
import { type AgentEvent, AgentEvents, isTerminal } from "@fibril/core/AgentEvents"
import * as Session from "@fibril/core/Session"
import { Cause, Clock, Effect, Exit, Fiber, PubSub } from "effect"
import * as Output from "./Output.ts"
import * as TreeView from "./TreeView.ts"

export interface Options {
  readonly prompt: string
  readonly role: string | undefined
  readonly json: boolean
}

export const run = Effect.fn("fibril.run")(function*(options: Options, output: Output.Output) {
  const session = yield* Session.Session
  const events = yield* AgentEvents
  const subscription = yield* events.subscribe
  const follow = Output.follower(output, options.json)
  const root = yield* session.create({ role: options.role })
  const started = yield* Clock.currentTimeMillis
  const fiber = yield* Effect.forkChild(session.prompt(root.id, options.prompt), { startImmediately: true })

  const drain = Effect.flatMap(
    PubSub.takeUpTo(subscription, Number.MAX_SAFE_INTEGER),
    (pending) => Effect.forEach(pending, follow.show, { discard: true })
  )

  const summarise = (exit: Exit.Exit<Session.PromptResult, Session.PromptError>) =>
    Effect.gen(function*() {
      const finished = yield* Clock.currentTimeMillis
      const info = yield* Effect.orDie(session.info(root.id))
      const nodes = [...follow.view.nodes.values()]
      const toolCalls = nodes.reduce((n, node) => n + node.toolCalls, 0)
      const totals = {
        agents: nodes.length,
        tool_calls: toolCalls,
        tokens: info.treeUsage,
        duration_ms: finished - started,
        model: info.model
      }
      const status = Exit.isSuccess(exit)
        ? "completed"
        : Cause.hasInterruptsOnly(exit.cause)
        ? "cancelled"
        : "failed"
      const text = Exit.isSuccess(exit) ? exit.value.text : Session.describeFailure(exit.cause)
      if (options.json) {
        yield* output.line(JSON.stringify({ type: "final", agent_id: root.id, status, text, totals }))
      } else {
        if (status === "cancelled") {
          const cancelled = nodes.filter((node) => node.status === "cancelled" || node.status === "interrupted")
          yield* output.line("")
          yield* output.line(`Cancelled ${cancelled.length} agent(s):`)
          for (const node of cancelled) yield* output.line(`  ${node.role} [${node.id}] ${node.description ?? ""}`.trimEnd())
        }
        yield* output.line("")
        yield* output.line(status === "completed" ? "Answer" : `The root agent ${status}:`)
        for (const line of text.split("\n")) yield* output.line(`  ${line}`)
        yield* output.line("")
        yield* output.line(
          `Totals: ${Output.count(totals.agents, "agent")}, ${Output.count(toolCalls, "tool call")}, ${info.treeUsage.input} input + ${info.treeUsage.output} output tokens (${info.treeUsage.cached} cached), ${totals.duration_ms} ms, model ${info.model}.`
        )
      }
      return status === "completed" ? 0 : 1
    })

  return yield* Effect.gen(function*() {
    while (true) {
      const event: AgentEvent = yield* PubSub.take(subscription)
      yield* follow.show(event)
      if (event.agent.agentId === root.id && isTerminal(event.type)) break
    }
    return yield* summarise(yield* Fiber.await(fiber))
  }).pipe(
    // Ctrl-C: stop the tree first (its finalizers kill processes), then say what stopped.
    Effect.onInterrupt(() =>
      Effect.gen(function*() {
        const exit = yield* Fiber.interrupt(fiber).pipe(Effect.andThen(Fiber.await(fiber)))
        yield* drain
        yield* summarise(exit)
      })
    )
  )
})

export { TreeView }
