// The bounds of a spawn request, through the model's own tool calls on the real core layers:
// an over-long description or prompt and a model that is not configured are tool errors that
// name what is accepted, and nothing is spawned.
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import type { Prompt } from "effect/ai"
import { Session } from "../src/Session.ts"
import * as SpawnCheck from "../src/SpawnCheck.ts"
import * as SubAgentManager from "../src/SubAgentManager.ts"
import { provideNode, report, setup } from "./support.ts"

const toolResults = (messages: ReadonlyArray<Prompt.Message>) =>
  messages.flatMap((m) => m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [p] : []) : [])

type Refusal = { readonly error: string; readonly message: string }

describe("spawn requests are bounded and their model checked", () => {
  it.effect("too long a description or prompt, an unconfigured model: typed tool errors, nothing spawned", () =>
    Effect.gen(function*() {
      const long = "d".repeat(SpawnCheck.maxDescriptionChars + 1)
      const huge = "p".repeat(SpawnCheck.maxPromptChars + 1)
      const { get } = yield* setup({
        rules: [
          { match: { depth: 1 }, turns: [{ text: report("child ran") }] },
          {
            match: { depth: 0 },
            turns: [
              {
                tool_calls: [
                  { name: "agent_spawn", args: { prompt: "look", description: long } },
                  { name: "task", args: { prompt: huge, description: "big" } },
                  { name: "agent_spawn", args: { prompt: "look", description: "m", model: "scripted:/etc/passwd" } }
                ]
              },
              { text: "done" }
            ]
          }
        ]
      })
      const session = get(Session)
      const root = yield* session.create()
      yield* session.prompt(root.id, "go")
      const [description, prompt, model] = toolResults(yield* session.transcript(root.id))
      for (const part of [description, prompt, model]) assert.isTrue(part!.isFailure, JSON.stringify(part))
      const refusals = [description, prompt, model].map((part) => part!.result as Refusal)
      assert.strictEqual(refusals[0]!.error, "SpawnTextTooLong")
      assert.include(refusals[0]!.message, `description is ${long.length} characters; the limit is 200`)
      assert.strictEqual(refusals[1]!.error, "SpawnTextTooLong")
      assert.include(refusals[1]!.message, "the limit is 262144")
      assert.strictEqual(refusals[2]!.error, "UnknownModel")
      assert.include(refusals[2]!.message, `unknown model "scripted:/etc/passwd"; accepted: `)
      const agents = yield* get(SubAgentManager.SubAgentManager).list({ includeArchived: true })
      assert.deepStrictEqual(agents.filter((agent) => agent.depth > 0), [])
    }).pipe(provideNode))

  it.effect("a configured model and bounded texts spawn as before", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({
        rules: [
          { match: { depth: 1 }, turns: [{ text: report("child ran") }] },
          {
            match: { depth: 0 },
            turns: [
              {
                tool_calls: [{
                  name: "task",
                  args: { prompt: "p".repeat(SpawnCheck.maxPromptChars), description: "d".repeat(200) }
                }]
              },
              { text: "done" }
            ]
          }
        ]
      })
      const session = get(Session)
      const root = yield* session.create()
      yield* session.prompt(root.id, "go")
      const [task] = toolResults(yield* session.transcript(root.id))
      assert.isFalse(task!.isFailure, JSON.stringify(task))
      const manager = get(SubAgentManager.SubAgentManager)
      const spawned = yield* manager.spawn(root.id, {
        prompt: "again",
        model: (yield* manager.list({ includeArchived: true }))[0]!.model
      })
      assert.strictEqual(
        spawned.status === "pending" || spawned.status === "running" || spawned.status === "completed",
        true
      )
    }).pipe(provideNode))

  it.effect("a message, objective or resume message over the bound is refused before it reaches the agent's record", () =>
    Effect.gen(function*() {
      const huge = "m".repeat(SpawnCheck.maxPromptChars + 1)
      const { get } = yield* setup({
        rules: [
          { match: { depth: 1 }, turns: [{ text: report("child ran") }] },
          {
            match: { depth: 0 },
            turns: [{ tool_calls: [{ name: "task", args: { prompt: "p", description: "d" } }] }, { text: "done" }]
          }
        ]
      })
      const session = get(Session)
      const root = yield* session.create()
      yield* session.prompt(root.id, "go")
      const manager = get(SubAgentManager.SubAgentManager)
      const child = (yield* manager.list({ includeArchived: true })).find((agent) => agent.depth === 1)!
      const refusals = [
        yield* Effect.flip(manager.sendInput(child.agent_id, huge, false)),
        yield* Effect.flip(manager.assign(child.agent_id, { objective: huge })),
        yield* Effect.flip(manager.assign(child.agent_id, { message: huge })),
        yield* Effect.flip(manager.resume(root.id, child.agent_id, huge))
      ]
      assert.deepStrictEqual(
        refusals.map((error) => [error._tag, "field" in error ? error.field : undefined]),
        [
          ["SpawnTextTooLong", "message"],
          ["SpawnTextTooLong", "objective"],
          ["SpawnTextTooLong", "message"],
          ["SpawnTextTooLong", "message"]
        ]
      )
      assert.include(refusals[0]!.message, "the limit is 262144: nothing was sent")
      const after = (yield* manager.list({ includeArchived: true })).find((agent) => agent.agent_id === child.agent_id)!
      assert.deepStrictEqual(after, child)
      // Within the bound, the same calls go through (the agent has finished: recorded, not delivered).
      const sent = yield* manager.sendInput(child.agent_id, "m".repeat(SpawnCheck.maxPromptChars), false)
      assert.isFalse(sent.delivered)
    }).pipe(provideNode))
})
