/**
 * `fibril demo`: a scripted scenario with real tools on the real workspace.
 *
 * A root `general` agent sends three `explore` tasks in parallel (they really run list_dir,
 * glob and read_file in the workspace), then a `review` task (grep), then answers. The tree
 * of agents is drawn as it grows (on a terminal the model's turns are paced like a real
 * model's, about 6 s in all), then the final tree, the parsed results and the totals. The
 * model is the ScriptedModel, and the output says so.
 */
import { AgentEvents, isTerminal } from "@fibril/core/AgentEvents"
import * as Session from "@fibril/core/Session"
import type { TaskResult } from "@fibril/core/tools/Task"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as PubSub from "effect/PubSub"
import * as DemoScript from "./DemoScript.ts"
import * as Output from "./Output.ts"
import * as TreeView from "./TreeView.ts"

const taskResults = (messages: ReadonlyArray<Session.TranscriptMessage>): Array<TaskResult> =>
  messages.flatMap((message) =>
    message.role === "tool"
      ? message.content.flatMap((part) =>
        part.type === "tool-result" && part.name === "task" && !part.isFailure ? [part.result as TaskResult] : []
      )
      : []
  )

export const run = Effect.fn("fibril.demo")(function*(output: Output.Output, cwd: string) {
  const session = yield* Session.Session
  const events = yield* AgentEvents
  const follow = Output.follower(output, false)
  const { view, show } = follow
  const subscription = yield* events.subscribe

  yield* output.line("Fibril demo: the model is SCRIPTED (the ScriptedModel), not an LLM.")
  yield* output.line(`The tools are real: they run on ${cwd}.`)
  yield* output.line("")

  const started = yield* Clock.currentTimeMillis
  const root = yield* session.create({ role: "general" })
  const fiber = yield* Effect.forkChild(session.prompt(root.id, DemoScript.rootPrompt))
  const ticking = output.terminal === undefined ? undefined : yield* Effect.forkChild(Output.ticker(follow))

  while (true) {
    const event = yield* PubSub.take(subscription)
    yield* show(event)
    if (event.agent.agentId === root.id && isTerminal(event.type)) break
  }
  const answer = yield* Fiber.join(fiber)
  const finished = yield* Clock.currentTimeMillis
  if (ticking !== undefined) yield* Fiber.interrupt(ticking)
  yield* follow.finish("Agents")

  yield* output.line("")
  yield* output.line("Results (what the parent received: parsed sections, never the child transcripts)")
  for (const result of taskResults(yield* session.transcript(root.id))) {
    yield* output.line(
      `  ${result.agent_id} "${result.description}" — ${result.status}, ${Output.count(result.steps, "step")}, ${
        Output.count(result.tool_calls, "tool call")
      }, ${result.tokens.input + result.tokens.output} tokens, ${result.duration_ms} ms`
    )
    yield* output.line(`    summary:  ${result.summary ?? ""}`)
    for (const line of (result.sections?.evidence ?? "").split("\n").slice(0, 4)) {
      yield* output.line(`    evidence: ${line}`)
    }
    if (result.contract_violations !== undefined && result.contract_violations.length > 0) {
      yield* output.line(`    contract: ${result.contract_violations.join("; ")}`)
    }
  }

  yield* output.line("")
  yield* output.line("Final answer")
  for (const line of answer.text.split("\n")) yield* output.line(`  ${line}`)

  const info = yield* session.info(root.id)
  const toolCalls = TreeView.agents(view).reduce((n, node) => n + node.toolCalls, 0)
  yield* output.line("")
  yield* output.line(
    `Totals: ${Output.count(TreeView.agents(view).length, "agent")}, ${
      Output.count(toolCalls, "tool call")
    }, ${info.treeUsage.input} input + ${info.treeUsage.output} output tokens (${info.treeUsage.cached} cached), ${
      finished - started
    } ms. Model: scripted.`
  )
  return { answer, agents: TreeView.agents(view).length, toolCalls }
})
