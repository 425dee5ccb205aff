// The Toolkit path's `ask`: an embedder's own `LanguageModel.generateText` loop (over the
// ScriptedModel) sees a `task` call that `[permissions] ask` holds as a standard
// tool-approval-request; nothing starts until its tool-approval-response approves it.
import { assert, describe, it } from "@effect/vitest"
import { ScriptedModel } from "@fibril/testkit"
import { Context, Effect, Layer } from "effect"
import { LanguageModel, Prompt } from "effect/ai"
import * as Permission from "../src/Permission.ts"
import { SubAgentManager } from "../src/SubAgentManager.ts"
import * as TaskToolkit from "../src/TaskToolkit.ts"
import * as TaskToolkitApprovals from "../src/TaskToolkitApprovals.ts"
import { provideNode, report, setup } from "./support.ts"

describe("TaskToolkit approvals", () => {
  it.effect("a task call the rules ask for is an approval request; approved, it runs once; denied, nothing starts", () =>
    Effect.gen(function*() {
      const { context } = yield* setup({ rules: [{ turns: [{ text: report("looked") }], repeat_last: true }] }, {}, {
        ask: ["spawn"]
      })
      const manager = Context.get(context, SubAgentManager)
      const toolkit = TaskToolkitApprovals.asking(Context.get(context, Permission.Permission).root)
      // The same tools whose calls ask in Fibril's own loop (every sub-agent tool has the spawn posture).
      assert.includeMembers(
        [...TaskToolkitApprovals.askingTools(Context.get(context, Permission.Permission).root)],
        ["task", "agent_spawn"]
      )
      assert.deepStrictEqual(TaskToolkitApprovals.askingTools(Permission.allowAll), [])
      const handlers = yield* Layer.build(TaskToolkit.layer.pipe(Layer.provide(Layer.succeedContext(context))))
      // The embedder's model: it calls task, then reads the result.
      const model = yield* Layer.build(ScriptedModel.layer({
        rules: [{
          match: { prompt: "delegate" },
          turns: [
            { tool_calls: [{ name: "task", args: { description: "look", prompt: "look around" } }] },
            { text: "embedder done" }
          ]
        }]
      }))
      const loop = (prompt: Prompt.RawInput) =>
        LanguageModel.generateText({ prompt, toolkit }).pipe(Effect.provideContext(Context.merge(handlers, model)))
      const first = yield* loop("delegate")
      const request = first.content.find((part) => part.type === "tool-approval-request")
      assert.isDefined(request)
      assert.deepStrictEqual(yield* manager.list({ includeArchived: true }), [])
      if (request?.type !== "tool-approval-request") return
      const answer = (approved: boolean) =>
        Prompt.concat(
          Prompt.concat(Prompt.make("delegate"), Prompt.fromResponseParts(first.content)),
          Prompt.make([{
            role: "tool",
            content: [{ type: "tool-approval-response", approvalId: request.approvalId, approved }]
          }])
        )
      const denied = yield* loop(answer(false))
      assert.deepStrictEqual(yield* manager.list({ includeArchived: true }), [])
      assert.notInclude(JSON.stringify(denied.content), "looked")
      const approved = yield* loop(answer(true))
      assert.include(JSON.stringify(approved.content), "looked")
      assert.strictEqual((yield* manager.list({ includeArchived: true })).length, 1)
    }).pipe(Effect.scoped, provideNode))
})
