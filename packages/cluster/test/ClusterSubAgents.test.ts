// The sub-agent contract in cluster mode, through the model-facing path (core's tool
// definitions in the workflow body, ClusterSubAgents as the SubAgentManager): refusals are
// core's tagged errors, malformed JSON arguments are an InvalidArguments result (never `{}`),
// `task` gives core's TaskResult shape, agent_eval gives the run receipt, a role cannot be
// reassigned (refused, saying why), and usage a provider does not report is estimated.
import { assert, describe, it } from "@effect/vitest"
import * as AgentResult from "@fibril/core/AgentResult"
import * as SpawnCheck from "@fibril/core/SpawnCheck"
import { Effect, Layer, Stream } from "effect"
import type { Prompt, Response } from "effect/ai"
import * as LanguageModel from "effect/ai/LanguageModel"
import * as ClusterClient from "../src/ClusterClient.ts"
import { provideNode, setup } from "./support.ts"

const toolResults = (messages: ReadonlyArray<Prompt.Message>) =>
  messages.flatMap((m) => m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [p] : []) : [])

const report = "SUMMARY:\nlooked around\n\nCHANGES:\nnone\n\nEVIDENCE:\nls\n\nRISKS:\nlow\n\nBLOCKERS:\nnone"

describe("ClusterSubAgents through the model-facing path", () => {
  it.live("refusals are core's tagged errors; malformed JSON arguments are InvalidArguments, not {}; nothing is spawned", () =>
    Effect.gen(function*() {
      const built = yield* setup({
        rules: [{
          match: { depth: 0 },
          turns: [
            {
              tool_calls: [
                { name: "agent_spawn", args: { prompt: "x", subagent_type: "wizard" } },
                { name: "agent_result", args: { agent_id: "ag_nope" } },
                { name: "agent_spawn", args: "{\"prompt\": \"half" as never },
                { name: "task", args: { description: "big", prompt: "x".repeat(SpawnCheck.maxPromptChars + 1) } },
                { name: "agent_resume", args: { agent_id: "ag_nope", message: "again" } }
              ]
            },
            { text: "done" }
          ]
        }]
      })
      const outcome = yield* built.provide(ClusterClient.run({ prompt: "refuse", workspace: built.root }))
      assert.strictEqual(outcome.text, "done")
      const results = toolResults(yield* built.store.transcript(outcome.agentId))
      assert.deepStrictEqual(results.map((p) => p.isFailure), [true, true, true, true, true])
      const failures = results.map((p) => p.result as { error: string; message: string })
      assert.deepStrictEqual(failures.map((f) => Object.keys(f).toSorted()), results.map(() => ["error", "message"]))
      assert.deepStrictEqual(failures.map((f) => f.error), [
        "UnknownRole",
        "AgentNotFound",
        "InvalidArguments",
        "SpawnTextTooLong",
        "AgentNotFound"
      ])
      assert.include(failures[0]!.message, "unknown sub-agent type \"wizard\"")
      assert.include(failures[1]!.message, "no sub-agent with id \"ag_nope\"")
      assert.include(failures[2]!.message, "arguments are not valid JSON")
      assert.include(failures[3]!.message, "nothing was spawned")
      // Only the root exists: no refused request made an agent.
      assert.strictEqual((yield* built.store.list).length, 1)
    }).pipe(Effect.scoped, provideNode))

  it.live("task's result has core's TaskResult shape: sections, contract violations, tokens, duration, transcript handle", () =>
    Effect.gen(function*() {
      const built = yield* setup({
        rules: [
          {
            match: { depth: 1 },
            turns: [
              { tool_calls: [{ name: "list_dir", args: {} }], usage: { input: 50, output: 5, cached: 10 } },
              { text: report, usage: { input: 70, output: 20, cached: 0 } }
            ]
          },
          {
            match: { depth: 0 },
            respond: (c) => {
              const handle = (c.toolResults[0]?.result as { transcript_handle?: string } | undefined)?.transcript_handle
              return c.turn === 0
                ? { tool_calls: [{ name: "task", args: { description: "look", prompt: "look around" } }] }
                : c.turn === 1
                ? { tool_calls: [{ name: "handle_read", args: { handle: handle ?? "" } }] }
                : { text: "root done" }
            }
          }
        ]
      })
      const outcome = yield* built.provide(ClusterClient.run({ prompt: "delegate", workspace: built.root }))
      assert.strictEqual(outcome.text, "root done")
      const [task, page] = toolResults(yield* built.store.transcript(outcome.agentId))
      assert.isFalse(task!.isFailure)
      const result = task!.result as typeof AgentResult.TaskResult.Type
      // `worktree` is there for an isolated child only, `output` for a typed one (docs/subagents.md).
      const keys = Object.keys(AgentResult.TaskResult.fields).filter((key) => key !== "worktree" && key !== "output")
      assert.deepStrictEqual(Object.keys(result).toSorted(), keys.toSorted())
      assert.strictEqual(result.status, "completed")
      assert.strictEqual(result.summary, "looked around")
      assert.deepStrictEqual(result.sections, { changes: "none", evidence: "ls", risks: "low", blockers: "none" })
      assert.deepStrictEqual(result.contract_violations, [])
      assert.deepStrictEqual(result.tokens, { input: 120, output: 25, cached: 10 })
      assert.deepStrictEqual([result.steps, result.tool_calls], [2, 1])
      assert.isAtLeast(result.duration_ms, 0)
      assert.strictEqual(result.transcript_handle, result.agent_id)
      // The handle reads the child's transcript (handle_read runs over the cluster's store).
      assert.isFalse(page!.isFailure)
      const read = page!.result as { agent_id: string; messages: ReadonlyArray<{ role: string }> }
      assert.strictEqual(read.agent_id, result.agent_id)
      // Its system prompt first, as an embedded transcript (offset 0 is the system prompt).
      assert.deepStrictEqual(read.messages.map((m) => m.role).slice(0, 5), [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant"
      ])
    }).pipe(Effect.scoped, provideNode))

  it.live("agent_eval gives the run receipt in cluster mode; agent_assign refuses a new role, saying why", () =>
    Effect.gen(function*() {
      const built = yield* setup({
        rules: [
          { match: { depth: 1 }, turns: [{ text: report }] },
          {
            match: { depth: 0 },
            respond: (c) => {
              const id = (c.toolResults[0]?.result as { agent_id?: string } | undefined)?.agent_id ?? ""
              switch (c.turn) {
                case 0:
                  return { tool_calls: [{ name: "agent_spawn", args: { prompt: "look", description: "looker" } }] }
                case 1:
                  return {
                    tool_calls: [
                      { name: "agent_eval", args: { agent_id: id, block: true } },
                      { name: "agent_assign", args: { agent_id: id, role: "explore" } }
                    ]
                  }
                default:
                  return { text: "root done" }
              }
            }
          }
        ]
      })
      const outcome = yield* built.provide(ClusterClient.run({ prompt: "evaluate", workspace: built.root }))
      assert.strictEqual(outcome.text, "root done")
      const [spawned, evaluated, assigned] = toolResults(yield* built.store.transcript(outcome.agentId))
      const childId = (spawned!.result as { agent_id: string }).agent_id
      assert.isFalse(evaluated!.isFailure, JSON.stringify(evaluated!.result))
      const receipt = evaluated!.result as {
        agent_id: string
        status: string
        summary: string
        follow_up: { tool: string }
        takeover: { available: boolean }
        worker_record: { agent_id: string; status: string }
        runs: ReadonlyArray<{ run_id: string }>
      }
      assert.strictEqual(receipt.agent_id, childId)
      assert.strictEqual(receipt.status, "completed")
      assert.strictEqual(receipt.summary, "looked around")
      assert.strictEqual(receipt.follow_up.tool, "agent_resume")
      assert.isFalse(receipt.takeover.available)
      assert.deepStrictEqual(receipt.worker_record.agent_id, childId)
      assert.deepStrictEqual(receipt.runs.map((r) => r.run_id), [`${childId}-r1`])
      assert.isTrue(assigned!.isFailure)
      const refusal = assigned!.result as { error: string; message: string }
      assert.strictEqual(refusal.error, "InvalidRoleRequest")
      assert.include(refusal.message, "cluster mode cannot change a running agent's role")
    }).pipe(Effect.scoped, provideNode))

  it.live("a provider that reports no usage is estimated (characters / 4), as embedded, not recorded as 0 tokens", () =>
    Effect.gen(function*() {
      const parts: Array<Response.PartEncoded> = [
        { type: "text", text: "an answer without usage" },
        {
          type: "finish",
          reason: "stop",
          usage: {
            inputTokens: { uncached: undefined, total: undefined, cacheRead: undefined, cacheWrite: undefined },
            outputTokens: { total: undefined, text: undefined, reasoning: undefined }
          }
        }
      ]
      const silent = Layer.effect(
        LanguageModel.LanguageModel,
        LanguageModel.make({
          generateText: () => Effect.succeed(parts),
          streamText: () => Stream.fromIterable(parts as Array<Response.StreamPartEncoded>)
        })
      )
      const built = yield* setup({ rules: [] }, {}, {}, undefined, (store) => store, silent)
      const outcome = yield* built.provide(ClusterClient.run({ prompt: "count me", workspace: built.root }))
      const row = (yield* built.store.get(outcome.agentId))!
      assert.isAbove(row.usage?.input ?? 0, 0)
      assert.isAbove(row.usage?.output ?? 0, 0)
      assert.strictEqual(row.tokens, (row.usage?.input ?? 0) + (row.usage?.output ?? 0))
    }).pipe(Effect.scoped, provideNode))
})
