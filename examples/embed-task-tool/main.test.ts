import { assert, it } from "@effect/vitest"
import { SubAgentManager } from "@fibril/core"
import { Effect } from "effect"
import { ask, layer } from "./main.ts"

it.live("the model's task call runs a Fibril sub-agent; its structured result comes back to the loop", () =>
  Effect.gen(function*() {
    const answer = yield* ask("What is in this directory?")
    assert.strictEqual(answer.steps, 2)
    assert.include(answer.text, "My explorer reports:")
    const reported = JSON.parse(answer.text.slice(answer.text.indexOf("{"))) as Record<string, unknown>
    assert.strictEqual(reported["status"], "completed")
    assert.strictEqual(reported["summary"], "The workspace has a README.")
    assert.strictEqual(reported["tool_calls"], 1)
    // The sub-agent went through the manager: a depth-1 explore agent, recorded as completed.
    const manager = yield* SubAgentManager.SubAgentManager
    const agents = yield* manager.list({ includeArchived: false })
    assert.deepStrictEqual(agents.map((a) => [a.agent_id, a.role, a.depth, a.status]), [[
      reported["agent_id"],
      "explore",
      1,
      "completed"
    ]])
  }).pipe(Effect.provide(layer(process.cwd()))))
