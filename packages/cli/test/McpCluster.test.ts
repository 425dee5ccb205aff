// `fibril mcp --cluster`'s handlers on TestRunner (the cluster in memory, the ScriptedModel):
// `allowed_tools` narrows the agent (and, through it, its children) as in embedded mode; tokens
// are reported by kind and `duration_ms` from the run's start and end, with the same shape and
// the same figures as the embedded server's for the same script.
import { assert, describe, it } from "@effect/vitest"
import * as ClusterSubAgents from "@fibril/cluster/ClusterSubAgents"
import * as TaskToolkit from "@fibril/core/TaskToolkit"
import type { ScriptedModel } from "@fibril/testkit"
import { Effect, Layer, Stream } from "effect"
import * as McpServer from "effect/ai/McpServer"
import { provideNode, setup } from "../../cluster/test/support.ts"
import { setup as setupEmbedded } from "../../core/test/support.ts"
import * as McpCluster from "../src/McpCluster.ts"
import * as McpTasks from "../src/McpTasks.ts"

/** The cluster server's toolkit over a TestRunner cluster running `script`. */
const clusterToolkit = (script: ScriptedModel.ScriptInput) =>
  Effect.gen(function*() {
    const built = yield* setup(script, { maxDepth: 1 })
    // The handlers use the server only to send progress, which a call without a progress token
    // (as here) does not ask for.
    const server = Layer.succeed(McpServer.McpServer, {} as McpServer.McpServer["Service"])
    const handlers = yield* Layer.build(
      McpCluster.handlers({ version: "test", workspace: built.root, pollMs: 20 }).pipe(
        Layer.provide(Layer.merge(Layer.succeedContext(built.context), server))
      )
    )
    const toolkit = yield* TaskToolkit.mcpToolkit.pipe(Effect.provideContext(handlers))
    return { built, toolkit }
  })

const embeddedToolkit = (script: ScriptedModel.ScriptInput) =>
  Effect.gen(function*() {
    const { context } = yield* setupEmbedded(script)
    const handlers = yield* Layer.build(TaskToolkit.layerWith({}).pipe(Layer.provide(Layer.succeedContext(context))))
    return yield* TaskToolkit.toolkit.pipe(Effect.provideContext(handlers))
  })

const report = "SUMMARY:\nlooked\n\nCHANGES:\nnone\n\nEVIDENCE:\nnone\n\nRISKS:\nnone\n\nBLOCKERS:\nnone"

describe("fibril mcp --cluster: the handlers on TestRunner", () => {
  it.live(
    "task's allowed_tools narrows the agent exactly: it sees only those tools, a call outside them fails, and its child gets no more",
    () =>
      Effect.gen(function*() {
        const seen: Array<{ readonly depth: number | undefined; readonly tools: ReadonlyArray<string> }> = []
        const script: ScriptedModel.ScriptInput = {
          rules: [
            {
              match: { prompt: "child look" },
              respond: (c) => {
                seen.push({ depth: c.depth, tools: c.tools })
                return c.turn === 0 ? { tool_calls: [{ name: "list_dir", args: {} }] } : { text: "child done" }
              }
            },
            {
              match: { prompt: "narrow" },
              respond: (c) => {
                seen.push({ depth: c.depth, tools: c.tools })
                return c.turn === 0
                  ? {
                    tool_calls: [
                      { name: "read_file", args: { path: "missing.txt" } },
                      { name: "shell", args: { command: "echo no >> shell.txt" } },
                      { name: "task", args: { prompt: "child look", description: "child" } }
                    ]
                  }
                  : { text: report }
              }
            }
          ]
        }
        const { built, toolkit } = yield* clusterToolkit(script)
        const [out] = yield* Stream.runCollect(
          yield* toolkit.handle("task", {
            description: "narrow",
            prompt: "narrow",
            allowed_tools: ["read_file", "task"]
          })
        )
        assert.isFalse(out?.isFailure, JSON.stringify(out?.encodedResult))
        const result = out?.encodedResult as { status: string; agent_id: string }
        assert.strictEqual(result.status, "completed")
        // The root saw the two tools it was allowed; its child, under it, only read_file (a
        // child never gets task) — not the general role's list_dir, shell, grep...
        assert.deepStrictEqual(seen.find((s) => s.depth === 0)?.tools.toSorted(), ["read_file", "task"])
        assert.deepStrictEqual(seen.find((s) => s.depth === 1)?.tools, ["read_file"])
        const transcript = yield* built.store.transcript(result.agent_id)
        const results = transcript.flatMap((m) =>
          m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [p] : []) : []
        )
        const shell = results.find((p) => p.name === "shell")
        assert.isTrue(shell?.isFailure)
        const child = (yield* built.store.list).find((r) => r.depth === 1)!
        const childResults = (yield* built.store.transcript(child.agentId)).flatMap((m) =>
          m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [p] : []) : []
        )
        assert.deepStrictEqual(childResults.map((p) => [p.name, p.isFailure]), [["list_dir", true]])
        assert.deepStrictEqual(child.grants?.map((g) => g.allowedTools), [["read_file", "task"], undefined])
      }).pipe(Effect.scoped, provideNode)
  )

  it.live("a bad allowed_tools is refused as embedded: custom without a list is an error; an unknown tool fails the agent naming it", () =>
    Effect.gen(function*() {
      const { toolkit } = yield* clusterToolkit({ rules: [{ turns: [{ text: "never" }] }] })
      const custom = yield* Effect.flip(
        Effect.flatMap(
          toolkit.handle("task", { description: "d", prompt: "go", subagent_type: "custom" }),
          Stream.runCollect
        )
      )
      assert.deepInclude(custom as object, { tool: "task", kind: "InvalidRoleRequest" })
      const [unknown] = yield* Stream.runCollect(
        yield* toolkit.handle("task", { description: "d", prompt: "go", allowed_tools: ["read_fil"] })
      )
      const failed = unknown?.encodedResult as { status: string; summary: string }
      assert.strictEqual(failed.status, "failed")
      assert.include(failed.summary, "allowed_tools names a tool that does not exist: \"read_fil\"")
    }).pipe(Effect.scoped, provideNode))

  it.live(
    "task and agent_result report tokens by kind and the run's duration, in the embedded server's shape and figures",
    () =>
      Effect.gen(function*() {
        const script: ScriptedModel.ScriptInput = {
          rules: [{
            match: { prompt: "count" },
            turns: [
              {
                tool_calls: [{ name: "list_dir", args: {} }],
                usage: { input: 100, output: 7, cached: 30 },
                delay_ms: 150
              },
              { text: report, usage: { input: 200, output: 3, cached: 0 }, delay_ms: 150 }
            ]
          }]
        }
        const { toolkit } = yield* clusterToolkit(script)
        const [out] = yield* Stream.runCollect(yield* toolkit.handle("task", { description: "d", prompt: "count" }))
        const cluster = out?.encodedResult as {
          agent_id: string
          tokens: unknown
          duration_ms: number
          steps: number
          tool_calls: number
        }
        const embeddedKit = yield* embeddedToolkit(script)
        const [theirs] = yield* Stream.runCollect(
          yield* embeddedKit.handle("task", { description: "d", prompt: "count" })
        )
        const embedded = theirs?.encodedResult as typeof cluster
        assert.deepStrictEqual(cluster.tokens, { input: 300, output: 10, cached: 30 })
        assert.deepStrictEqual(cluster.tokens, embedded.tokens)
        assert.deepStrictEqual(Object.keys(cluster).toSorted(), Object.keys(embedded).toSorted())
        assert.deepStrictEqual([cluster.steps, cluster.tool_calls], [embedded.steps, embedded.tool_calls])
        // Two model calls of 150 ms each: the run took at least 300 ms (and not minutes).
        assert.isAtLeast(cluster.duration_ms, 300)
        assert.isBelow(cluster.duration_ms, 30_000)
        assert.isAtLeast(embedded.duration_ms, 300)
        const [row] = yield* Stream.runCollect(yield* toolkit.handle("agent_result", { agent_id: cluster.agent_id }))
        const result = row?.encodedResult as Record<string, unknown>
        assert.deepStrictEqual(result["tokens"], cluster.tokens)
        assert.strictEqual(result["duration_ms"], cluster.duration_ms)
        const [theirRow] = yield* Stream.runCollect(
          yield* embeddedKit.handle("agent_result", { agent_id: embedded.agent_id })
        )
        const theirResult = theirRow?.encodedResult as Record<string, unknown>
        assert.deepStrictEqual(Object.keys(result).toSorted(), Object.keys(theirResult).toSorted())
        assert.deepStrictEqual(result["sections"], theirResult["sections"])
        assert.deepStrictEqual(result["tokens"], theirResult["tokens"])
      }).pipe(Effect.scoped, provideNode)
  )

  it.live("task calls as MCP tasks over the cluster: a task at once, polled by a new server's client, completed with the plain result; a cancel", () =>
    Effect.gen(function*() {
      const script: ScriptedModel.ScriptInput = {
        rules: [
          { match: { prompt: "slow" }, turns: [{ text: report, delay_ms: 300 }] },
          { match: { prompt: "stuck" }, turns: [{ hang: true }] }
        ]
      }
      const built = yield* setup(script, { maxDepth: 1 })
      // Each "server" is a cluster client over the same store and engine (as each `fibril mcp
      // --cluster` process makes one): the task is created through the first, polled through the second.
      const client = () =>
        ClusterSubAgents.client({ workspace: built.root, pollMs: 20 }).pipe(Effect.provideContext(built.context))
      const meta = {
        "io.modelcontextprotocol/clientCapabilities": { extensions: { [McpTasks.extension]: {} } }
      }
      const request = (id: number, method: string, params: Record<string, unknown>) =>
        McpTasks.claim(JSON.stringify({ jsonrpc: "2.0", id, method, params: { ...params, _meta: meta } }))!
      const first = yield* client()
      const created = JSON.parse(
        yield* McpTasks.answer(
          first,
          request(1, "tools/call", { name: "task", arguments: { description: "d", prompt: "slow" } })
        )
      )
      assert.strictEqual(created.result.resultType, "task", JSON.stringify(created))
      assert.strictEqual(created.result.status, "working")
      const second = yield* client()
      const poll = (id: string) =>
        Effect.gen(function*() {
          for (let i = 0; i < 500; i++) {
            const got = JSON.parse(yield* McpTasks.answer(second, request(2, "tasks/get", { taskId: id })))
            if (got.result.status !== "working") return got.result
            yield* Effect.sleep("20 millis")
          }
          return assert.fail(`task ${id} still working`)
        })
      const done = yield* poll(created.result.taskId)
      assert.strictEqual(done.status, "completed")
      // The plain call's result, through the cluster server's own handlers.
      const { toolkit } = yield* clusterToolkit(script)
      const [plain] = yield* Stream.runCollect(yield* toolkit.handle("task", { description: "d", prompt: "slow" }))
      const encoded = plain?.encodedResult as Record<string, unknown>
      assert.deepStrictEqual(Object.keys(done.result.structuredContent).toSorted(), Object.keys(encoded).toSorted())
      assert.deepStrictEqual(done.result.structuredContent.sections, encoded["sections"])

      const stuck = JSON.parse(
        yield* McpTasks.answer(
          first,
          request(3, "tools/call", { name: "task", arguments: { description: "d", prompt: "stuck" } })
        )
      )
      const ack = JSON.parse(
        yield* McpTasks.answer(second, request(4, "tasks/cancel", { taskId: stuck.result.taskId }))
      )
      assert.deepStrictEqual(ack.result, { resultType: "complete" })
      assert.strictEqual((yield* poll(stuck.result.taskId)).status, "cancelled")
    }).pipe(Effect.scoped, provideNode))
})
