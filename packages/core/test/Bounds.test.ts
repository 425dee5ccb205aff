// What a parent receives of a child, and what a record keeps, is bounded; the whole answer
// stays in the child's transcript, once.
import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Effect } from "effect"
import type { Prompt } from "effect/ai"
import { bound } from "../src/AgentResult.ts"
import { Session } from "../src/Session.ts"
import { defaultMaxResultChars, SubAgentManager } from "../src/SubAgentManager.ts"
import { SubAgentStore } from "../src/SubAgentStore.ts"
import { provideNode, report, setup } from "./support.ts"

const huge = (letter: string, n: number) => `${letter}${"·".repeat(n - 2)}${letter}`

describe("bounds", () => {
  it("bound cuts at the limit, marks the cut, never splits a surrogate pair", () => {
    assert.strictEqual(bound("short", 10), "short")
    const cut = bound("a".repeat(100), 10)
    assert.isTrue(cut.startsWith("a".repeat(10) + "\n[... cut: 90 more characters"))
    const emoji = "😀".repeat(10) // 20 code units
    assert.isTrue(bound(emoji, 5).startsWith("😀😀\n"))
  })

  it.effect("a 300,000-character answer: the parent receives each part once and bounded; the transcript keeps it whole", () =>
    Effect.gen(function*() {
      const summary = huge("S", 300_000)
      const evidence = huge("E", 100_000)
      let parentFollowUp: ReadonlyArray<Prompt.Message> = []
      const script: ScriptedModel.ScriptInput = {
        rules: [
          { match: { role: "explore" }, turns: [{ text: report(summary, evidence) }] },
          {
            match: { depth: 0 },
            respond: (c) => {
              if (c.toolResults.length === 0) {
                return {
                  tool_calls: [{
                    name: "task",
                    args: { description: "big", prompt: "answer at length", subagent_type: "explore" }
                  }]
                }
              }
              parentFollowUp = c.messages
              return { text: "received" }
            }
          }
        ]
      }
      const { get } = yield* setup(script, {}, { store: "file" })
      const session = get(Session)
      const root = yield* session.create()
      yield* session.prompt(root.id, "delegate")

      // The parent's next request holds the summary once, cut to the bound.
      const request = JSON.stringify(parentFollowUp)
      assert.isBelow(request.length, 3 * defaultMaxResultChars)
      assert.strictEqual(request.split("S··").length - 1, 1, "the summary reaches the parent once")
      assert.include(request, "more characters; the whole answer is in the agent's transcript")

      // The record keeps bounded parts; the transcript keeps the whole answer.
      const [child] = yield* get(SubAgentManager).list({ includeArchived: true, parentId: root.id })
      const outcome = child!.outcome!
      for (const part of [outcome.text, outcome.summary, outcome.sections.summary, outcome.sections.evidence]) {
        assert.isAtMost(part.length, defaultMaxResultChars + 120)
      }
      const transcript = JSON.stringify(yield* get(SubAgentStore).readTranscript(child!.transcript_handle))
      assert.include(transcript, summary)
      assert.include(transcript, evidence)
    }).pipe(provideNode))

  it.effect("a failure reason is bounded too, with max_result_chars from the options", () =>
    Effect.gen(function*() {
      const script: ScriptedModel.ScriptInput = {
        rules: [{ turns: [{ error: { kind: "fatal", message: huge("F", 50_000) } }] }]
      }
      const { get } = yield* setup(script, {}, { subagents: { maxResultChars: 1000 } })
      const manager = get(SubAgentManager)
      const agent = yield* manager.spawn(undefined, { prompt: "fail loudly" })
      const failed = yield* manager.result(agent.agent_id, { block: true })
      assert.strictEqual(failed.status, "failed")
      assert.isAtMost(failed.reason!.length, 1000 + 120)
      assert.include(failed.reason, "more characters")
    }).pipe(provideNode))
})
