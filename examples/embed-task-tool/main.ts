/**
 * Fibril's sub-agents inside your own effect/ai loop: hand `TaskToolkit` to your model and
 * its `task` calls run Fibril sub-agents (roles, the cap, records, cancellation) and come
 * back as structured results. Here the model is a ScriptedModel, so it runs offline:
 * `npm exec -- node examples/embed-task-tool/main.ts`.
 */
import { NodeServices } from "@effect/platform-node"
import { Fibril, TaskToolkit } from "@fibril/core"
import { ScriptedModel } from "@fibril/testkit"
import { Console, Effect, Layer } from "effect"
import { AiError, Chat } from "effect/ai"

// One scripted model serves both your loop and Fibril's sub-agents. A sub-agent's system
// prompt starts with a "Fibril agent: role=… depth=…" header; your conversation has none.
const script: ScriptedModel.ScriptInput = {
  rules: [
    {
      match: { role: "explore" },
      turns: [
        { tool_calls: [{ name: "list_dir", args: {} }] },
        {
          text:
            "SUMMARY:\nThe workspace has a README.\n\nCHANGES:\nnone\n\nEVIDENCE:\nlist_dir\n\nRISKS:\nnone\n\nBLOCKERS:\nnone"
        }
      ]
    },
    {
      respond: (c) =>
        c.turn === 0
          ? {
            tool_calls: [{
              name: "task",
              args: { description: "survey", prompt: "What is here?", subagent_type: "explore" }
            }]
          }
          : { text: `My explorer reports: ${JSON.stringify(c.lastToolResults[0]?.result)}` }
    }
  ]
}

/** Your agent loop: call the model with the toolkit until it answers without tool calls. */
export const ask = (question: string, maxSteps = 5) =>
  Effect.gen(function*() {
    const toolkit = yield* TaskToolkit.toolkit
    const chat = yield* Chat.fromPrompt([
      { role: "system", content: "You are my app's assistant. Delegate exploration with `task`." },
      { role: "user", content: question }
    ])
    for (let step = 1; step <= maxSteps; step++) {
      const response = yield* chat.generateText({ prompt: [], toolkit })
      if (response.toolCalls.length === 0) return { text: response.text, steps: step }
    }
    return yield* AiError.make({
      module: "embed-task-tool",
      method: "ask",
      reason: new AiError.UnknownError({ description: `no answer after ${maxSteps} steps` })
    })
  })

/** The wiring: TaskToolkit's handlers over Fibril's SubAgentManager, over the model. */
export const layer = (cwd: string) =>
  TaskToolkit.layer.pipe(
    Layer.provideMerge(Fibril.layer({ cwd })),
    Layer.provideMerge(ScriptedModel.layer(script)),
    Layer.provide(NodeServices.layer)
  )

export const main = ask("What is in this directory?").pipe(
  Effect.tap((answer) => Console.log(answer.text)),
  Effect.provide(layer(process.cwd()))
)

if (import.meta.main) Effect.runPromise(main)
