// The fan-out question's estimate is what the token budgets would let the batch charge: each
// agent's `max_tokens` (not more: the budget stops it there), at most what is left of
// `tree_max_tokens` after what the tree has charged so far, counted as the budgets count
// (input + output). Through the real services: a scripted parent asks for 12 children.
import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Effect, Stream } from "effect"
import type { AgentEvent } from "../src/AgentEvents.ts"
import { AgentEvents } from "../src/AgentEvents.ts"
import * as Approvals from "../src/Approvals.ts"
import * as FanOut from "../src/loop/FanOut.ts"
import { SubAgentManager } from "../src/SubAgentManager.ts"
import * as Usage from "../src/Usage.ts"
import { provideNode, report, setup } from "./support.ts"

const spawnCall = (i: number) => ({
  name: "agent_spawn",
  args: { prompt: `explore part ${i}`, subagent_type: "explore" }
})

const calls = Array.from({ length: 12 }, (_, i) => ({ id: `c${i}`, ...spawnCall(i), params: spawnCall(i).args }))

describe("the fan-out estimate", () => {
  it("per agent: its max_tokens budget, else 15k and its prompt as the budget counts text", () => {
    const budgeted = FanOut.estimate(calls, "scripted", { tokensPerAgent: 10_000, usdPerMtok: { scripted: 3 } })
    assert.strictEqual(budgeted.tokens, 120_000)
    assert.closeTo(budgeted.usd!, 0.36, 1e-9)
    assert.isFalse(budgeted.treeCapped)
    const open = FanOut.estimate(calls, "scripted", {})
    const prompts = calls.reduce((n, call) => n + Usage.tokensOfChars(call.args.prompt.length), 0)
    assert.strictEqual(open.tokens, 12 * FanOut.defaultTokensPerAgent + prompts)
    // What is left of the tree budget caps it, and the dollars with it.
    const capped = FanOut.estimate(calls, "scripted", {
      tokensPerAgent: 10_000,
      treeMaxTokens: 50_000,
      usdPerMtok: { scripted: 3 }
    }, 20_000)
    assert.deepStrictEqual([capped.tokens, capped.treeCapped], [30_000, true])
    assert.closeTo(capped.usd!, 0.09, 1e-9)
  })

  it.effect("12 children over the limit: one question with the count and what the budgets would let them charge", () =>
    Effect.gen(function*() {
      const approvals = yield* Approvals.make({
        timeout: "10 minutes",
        fanOut: { maxAgents: 8, tokensPerAgent: 10_000, treeMaxTokens: 100_000, usdPerMtok: { scripted: 3 } }
      })
      yield* Effect.gen(function*() {
        const script: ScriptedModel.ScriptInput = {
          rules: [{
            match: { prompt: "coordinate" },
            respond: (c) =>
              c.turn === 0
                ? { tool_calls: [spawnCall(0), ...Array.from({ length: 11 }, (_, i) => spawnCall(i + 1))] }
                : { text: report(`spawn said: ${JSON.stringify(c.lastToolResults[0]?.result)}`) }
          }, { turns: [{ text: report("explored") }], repeat_last: true }]
        }
        const { get } = yield* setup(script, { maxDepth: 2 })
        const asked: Array<AgentEvent> = []
        yield* Effect.forkScoped(
          Stream.runForEach(get(AgentEvents).stream, (event) =>
            Effect.sync(() => {
              if (event.type === "question") asked.push(event)
            }))
        )
        yield* Effect.yieldNow
        const manager = get(SubAgentManager)
        const parent = yield* manager.spawn(undefined, { prompt: "coordinate", role: "general" })
        const question = yield* Stream.runHead(approvals.questions).pipe(
          Effect.map((found) => found._tag === "Some" ? found.value : undefined)
        )
        assert.isDefined(question)
        assert.strictEqual(question!.kind, "fan_out")
        // The tree had charged its first model step: the batch can charge what is left.
        assert.strictEqual(asked.length, 1)
        const spent = Usage.total(asked[0]!.agent.usage)
        assert.isAbove(spent, 0)
        const left = 100_000 - spent
        assert.strictEqual(
          question!.reason,
          `start 12 agents (12 explore), est. ${Math.round(left / 1000)}k tokens (what is left of tree_max_tokens) ≈ $${
            (left * 3 / 1_000_000).toFixed(2)
          }: more than fan_out_max_agents = 8`
        )
        yield* approvals.decide(question!.id, { decision: "deny", reason: "too many", by: "terminal" })
        const done = yield* manager.result(parent.agent_id, { block: true })
        assert.include(done.outcome?.summary ?? "", "none of the 12 agents was started")
      }).pipe(Effect.provideService(Approvals.Approvals, approvals))
    }).pipe(Effect.scoped, provideNode))
})
