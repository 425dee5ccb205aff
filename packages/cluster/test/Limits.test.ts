// Limits in cluster mode, on TestRunner: a sub-agent's wall-clock budget (max_wall_secs, from
// the run's journaled start on the store's clock), a tree's token budget (tree_max_tokens, the
// tree's agents summed in the store) and the heartbeat (a running sub-agent without progress
// and without a running child is cancelled). The store's clock is moved by the test (or by a
// tool the script calls): no test waits for the times it checks.
import { assert, describe, it } from "@effect/vitest"
import { ToolRegistry } from "@fibril/core"
import { Clock, Deferred, Effect, Schema } from "effect"
import type { Prompt } from "effect/ai"
import * as AgentWorkflow from "../src/AgentWorkflow.ts"
import * as ClusterClient from "../src/ClusterClient.ts"
import { type Built, get, provideNode, setup } from "./support.ts"

const toolResults = (messages: ReadonlyArray<Prompt.Message>) =>
  messages.flatMap((m) => m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [p] : []) : [])

/** The store's clock: Effect's, plus what the test or the `advance` tool adds. */
const movableClock = () => {
  const offset = { ms: 0 }
  return { offset, clock: Effect.map(Clock.currentTimeMillis, (now) => now + offset.ms) }
}

/** `advance`: a tool that moves the store's clock by `seconds`. */
const addAdvance = (built: Built, offset: { ms: number }) =>
  get(built, ToolRegistry.ToolRegistry).register(ToolRegistry.define({
    name: "advance",
    description: "moves the store's clock",
    parameters: Schema.Struct({ seconds: Schema.Number }),
    posture: "read",
    handler: ({ seconds }) => Effect.sync(() => (offset.ms += seconds * 1000, "later"))
  }))

const until = <E, R>(check: Effect.Effect<boolean, E, R>, what: string) =>
  Effect.gen(function*() {
    for (let i = 0; i < 500; i++) {
      if (yield* check) return
      yield* Effect.sleep(10)
    }
    return yield* Effect.die(`timed out waiting until ${what}`)
  })

describe("cluster limits on TestRunner", () => {
  it.live("max_wall_secs: a sub-agent past its wall time fails at its next model step; the parent reads why", () =>
    Effect.gen(function*() {
      const { offset, clock } = movableClock()
      const built = yield* setup(
        {
          rules: [
            {
              match: { depth: 1 },
              turns: [{ tool_calls: [{ name: "advance", args: { seconds: 61 } }] }, { text: "too late" }]
            },
            {
              match: { depth: 0 },
              turns: [{ tool_calls: [{ name: "task", args: { description: "slow", prompt: "slow" } }] }, {
                text: "noted"
              }]
            }
          ]
        },
        { maxWallSecs: 60 },
        {},
        clock
      )
      yield* addAdvance(built, offset)
      const outcome = yield* built.provide(ClusterClient.run({ prompt: "go", workspace: built.root }))
      // The root has no wall budget (sub-agents only, as embedded): it answers after the child failed.
      assert.strictEqual(outcome.text, "noted")
      const [result] = toolResults(yield* built.store.transcript(outcome.agentId))
      // As embedded (core's taskResult): a failed child is a `failed` result the parent reads.
      assert.isFalse(result!.isFailure)
      assert.strictEqual((result!.result as { status: string }).status, "failed")
      assert.include((result!.result as { summary: string }).summary, "max_wall_secs=60")
      const child = (yield* built.store.list).find((r) => r.depth === 1)!
      assert.strictEqual(child.status, "failed")
      assert.include(child.reason ?? "", "max_wall_secs=60")
      // The child made one model step and its tool call; the third step never called the model.
      assert.deepStrictEqual((yield* built.store.transcript(child.agentId)).map((m) => m.role), [
        "user",
        "assistant",
        "tool"
      ])
    }).pipe(Effect.scoped, provideNode))

  it.live("max_wall_secs not reached: the same child completes", () =>
    Effect.gen(function*() {
      const { offset, clock } = movableClock()
      const built = yield* setup(
        {
          rules: [
            {
              match: { depth: 1 },
              turns: [{ tool_calls: [{ name: "advance", args: { seconds: 59 } }] }, { text: "in time" }]
            },
            {
              match: { depth: 0 },
              turns: [{ tool_calls: [{ name: "task", args: { description: "slow", prompt: "slow" } }] }, {
                text: "noted"
              }]
            }
          ]
        },
        { maxWallSecs: 60 },
        {},
        clock
      )
      yield* addAdvance(built, offset)
      const outcome = yield* built.provide(ClusterClient.run({ prompt: "go", workspace: built.root }))
      const [result] = toolResults(yield* built.store.transcript(outcome.agentId))
      assert.isFalse(result!.isFailure)
      assert.strictEqual((result!.result as { summary: string }).summary, "in time")
    }).pipe(Effect.scoped, provideNode))

  it.live("tree_max_tokens: the tree's tokens are summed in the store; the agent that finds it spent fails", () =>
    Effect.gen(function*() {
      const built = yield* setup({
        rules: [
          {
            match: { depth: 1 },
            turns: [{ tool_calls: [{ name: "list_dir", args: {} }], usage: { input: 300, output: 100 } }, {
              text: "never",
              usage: { input: 1, output: 1 }
            }]
          },
          {
            match: { depth: 0 },
            turns: [
              {
                tool_calls: [{ name: "task", args: { description: "a", prompt: "a" } }],
                usage: { input: 400, output: 100 }
              },
              { text: "never either", usage: { input: 1, output: 1 } }
            ]
          }
        ]
      }, { treeMaxTokens: 800 })
      const error = yield* Effect.flip(built.provide(ClusterClient.run({ prompt: "go", workspace: built.root })))
      // Root 500 + child 400 = 900 > 800: the child's second step and the root's second step fail.
      assert.strictEqual(error._tag, "AgentFailed")
      assert.include(error.message, "tree_max_tokens=800")
      const rows = yield* built.store.list
      assert.deepStrictEqual(rows.map((r) => [r.depth, r.status, r.tokens]), [[0, "failed", 500], [1, "failed", 400]])
      assert.include(rows[1]!.reason ?? "", "tree_max_tokens=800")
    }).pipe(Effect.scoped, provideNode))

  it.live("heartbeat: a running sub-agent without progress and without a running child is cancelled; its parent, waiting on it, is not", () =>
    Effect.gen(function*() {
      const { offset, clock } = movableClock()
      const built = yield* setup(
        {
          rules: [
            { match: { depth: 2 }, turns: [{ tool_calls: [{ name: "gate" }] }, { text: "grandchild done" }] },
            {
              match: { depth: 1 },
              turns: [
                { tool_calls: [{ name: "agent_spawn", args: { prompt: "deeper" } }] },
                { tool_calls: [{ name: "agent_wait", args: { wait_mode: "all" } }] },
                { text: "child done" }
              ]
            },
            {
              match: { depth: 0 },
              turns: [{ tool_calls: [{ name: "task", args: { description: "work", prompt: "work" } }] }, {
                text: "root done"
              }]
            }
          ]
        },
        { maxDepth: 2, maxConcurrent: 0, heartbeatSecs: 300, heartbeatCheckMs: 20 },
        {},
        clock
      )
      const gate = yield* Deferred.make<void>()
      const entered = { count: 0 }
      yield* get(built, ToolRegistry.ToolRegistry).register(ToolRegistry.define({
        name: "gate",
        description: "blocks until the test opens it",
        parameters: Schema.Struct({}),
        posture: "read",
        handler: () => Effect.andThen(Effect.sync(() => entered.count++), Effect.as(Deferred.await(gate), "passed"))
      }))
      const id = yield* built.provide(ClusterClient.start({ prompt: "go", workspace: built.root }))
      yield* until(Effect.sync(() => entered.count === 1), "the grandchild is in its tool")
      // 299 s: nobody is stale yet.
      offset.ms = 299_000
      yield* Effect.sleep(100)
      assert.deepStrictEqual((yield* built.store.list).map((r) => r.status), ["running", "running", "running"])
      // 301 s after their last steps: the grandchild (no running child) is cancelled; the
      // child waits on a running grandchild until then, so it is not the one cancelled.
      offset.ms = 301_000
      yield* until(
        Effect.map(built.store.list, (rows) => rows.find((r) => r.depth === 2)?.status === "cancelled"),
        "the grandchild is cancelled"
      )
      // The step in flight ends first, then the grandchild stops; its parent reads the cancel.
      yield* Deferred.succeed(gate, undefined)
      const outcome = yield* built.provide(ClusterClient.await_(id))
      assert.strictEqual(outcome.text, "root done")
      const rows = yield* built.store.list
      const grandchild = rows.find((r) => r.depth === 2)!
      assert.strictEqual(grandchild.reason, AgentWorkflow.heartbeatReason(300))
      const child = rows.find((r) => r.depth === 1)!
      assert.strictEqual(child.status, "completed")
      const [, waited] = toolResults(yield* built.store.transcript(child.agentId))
      const completed = (waited!.result as { completed: ReadonlyArray<{ status: string; reason: string }> }).completed
      assert.deepStrictEqual(completed.map((c) => [c.status, c.reason]), [[
        "cancelled",
        AgentWorkflow.heartbeatReason(300)
      ]])
    }).pipe(Effect.scoped, provideNode))
})
