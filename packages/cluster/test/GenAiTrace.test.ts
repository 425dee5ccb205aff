// The cluster engine's spans follow the OpenTelemetry GenAI conventions as the embedded
// engine's do (core's GenAiTrace.test.ts): a depth-2 tree run by the workflows, exported with
// Effect's OTLP exporter to a real HTTP receiver (testkit's OtlpReceiver). Each run's
// `invoke_agent` span hangs under the span that started it, carried in its workflow payload, so
// the tree is one trace wherever its runs execute (a run suspended in a durable wait and resumed
// shows one `invoke_agent` span per stretch, each under the same parent).
import { assert, describe, it } from "@effect/vitest"
import { OtlpReceiver, type ScriptedModel } from "@fibril/testkit"
import { Effect, Layer } from "effect"
import * as FetchHttpClient from "effect/http/FetchHttpClient"
import * as OtlpSerialization from "effect/observability/OtlpSerialization"
import * as OtlpTracer from "effect/observability/OtlpTracer"
import * as ClusterClient from "../src/ClusterClient.ts"
import { provideNode, setup } from "./support.ts"

const report = (summary: string) =>
  `SUMMARY:\n${summary}\n\nCHANGES:\nnone\n\nEVIDENCE:\nnone\n\nRISKS:\nnone\n\nBLOCKERS:\nnone`

const otlp = (url: string) =>
  OtlpTracer.layer({ url, resource: { serviceName: "fibril-test" } }).pipe(
    Layer.provide(OtlpSerialization.layerJson),
    Layer.provide(FetchHttpClient.layer)
  )

// Root (depth 0) -> a general child (depth 1) -> an explore grandchild (depth 2) that lists a directory.
const script: ScriptedModel.ScriptInput = {
  rules: [
    {
      match: { depth: 2 },
      turns: [
        { tool_calls: [{ name: "list_dir", args: {} }], usage: { input: 11, output: 7 } },
        { text: report("listed"), usage: { input: 13, output: 5 } }
      ]
    },
    {
      match: { depth: 1 },
      respond: (c) =>
        c.turn === 0
          ? {
            tool_calls: [{
              name: "agent_spawn",
              args: { description: "look", prompt: "look", subagent_type: "explore" }
            }]
          }
          : c.turn === 1
          ? {
            tool_calls: [{
              name: "agent_wait",
              args: { ids: [(c.lastToolResults[0]?.result as { agent_id: string }).agent_id], wait_mode: "all" }
            }]
          }
          : { text: report("looked") }
    },
    {
      match: { depth: 0 },
      turns: [
        { tool_calls: [{ name: "task", args: { description: "plan", prompt: "plan", subagent_type: "general" } }] },
        { text: "done" }
      ]
    }
  ]
}

describe("GenAI traces (cluster engine)", () => {
  it.live(
    "a depth-2 tree run by the workflows: GenAI spans, each run under the span that started it, one trace",
    () =>
      Effect.gen(function*() {
        const receiver = yield* OtlpReceiver.make
        yield* Effect.gen(function*() {
          const tracer = yield* Layer.build(otlp(receiver.url))
          yield* Effect.gen(function*() {
            const built = yield* setup(script, { maxDepth: 2, waitFallbackMs: 1000 })
            const rootId = yield* built.provide(
              ClusterClient.start({ prompt: "go", workspace: built.root }).pipe(Effect.withSpan("caller"))
            )
            const outcome = yield* built.provide(ClusterClient.await_(rootId))
            assert.strictEqual(outcome.text, "done")
          }).pipe(Effect.provide(tracer))
        }).pipe(Effect.scoped)
        // The workers and then the exporter are closed: everything is flushed.
        const spans = receiver.spans()
        const names = spans.map((s) => s.name).join(", ")
        const byId = new Map(spans.map((s) => [s.spanId, s]))
        const ancestor = (span: OtlpReceiver.ReceivedSpan, prefix: string) => {
          let at = span.parentSpanId === undefined ? undefined : byId.get(span.parentSpanId)
          while (at !== undefined && !at.name.startsWith(prefix)) {
            at = at.parentSpanId === undefined ? undefined : byId.get(at.parentSpanId)
          }
          return at
        }
        const caller = spans.find((s) => s.name === "caller")!
        assert.isDefined(caller, names)
        const tree = spans.filter((s) => String(s.attributes["gen_ai.operation.name"] ?? "") !== "")
        assert.deepStrictEqual([...new Set(tree.map((s) => s.traceId))], [caller.traceId], "one trace")

        const agents = tree.filter((s) => s.attributes["gen_ai.operation.name"] === "invoke_agent")
        const atDepth = (depth: number) => agents.filter((s) => s.attributes["fibril.agent.depth"] === depth)
        assert.deepStrictEqual([0, 1, 2].map((d) => atDepth(d).length > 0), [true, true, true], names)
        for (const agent of agents) {
          assert.strictEqual(agent.name, `invoke_agent ${agent.attributes["gen_ai.agent.name"]}`)
        }
        assert.deepStrictEqual(
          [0, 1, 2].map((d) => [...new Set(atDepth(d).map((s) => s.attributes["gen_ai.agent.name"]))]),
          [["general"], ["general"], ["explore"]]
        )
        // The root under the client's span; the child under the root's `task` call; the grandchild
        // under the child's `agent_spawn` call: each stretch of each run.
        for (const root of atDepth(0)) assert.strictEqual(root.parentSpanId, caller.spanId)
        for (const child of atDepth(1)) {
          const call = ancestor(child, "execute_tool ")
          assert.strictEqual(call?.name, "execute_tool task")
          assert.strictEqual(ancestor(call!, "invoke_agent ")?.attributes["fibril.agent.depth"], 0)
        }
        for (const grandchild of atDepth(2)) {
          const call = ancestor(grandchild, "execute_tool ")
          assert.strictEqual(call?.name, "execute_tool agent_spawn")
          assert.strictEqual(ancestor(call!, "invoke_agent ")?.attributes["fibril.agent.depth"], 1)
        }
        const listDir = tree.find((s) => s.name === "execute_tool list_dir")!
        assert.isDefined(listDir, names)
        assert.match(String(listDir.attributes["gen_ai.tool.call.id"]), /.+/)
        assert.strictEqual(ancestor(listDir, "invoke_agent ")?.attributes["fibril.agent.depth"], 2)

        // Model calls: chat spans with the request model and usage, under their agent.
        const chats = tree.filter((s) => s.attributes["gen_ai.operation.name"] === "chat")
        for (const chat of chats) {
          assert.strictEqual(chat.name, `chat ${chat.attributes["gen_ai.request.model"]}`)
          assert.isNumber(chat.attributes["gen_ai.usage.input_tokens"])
        }
        const grandchildChats = chats.filter((s) =>
          ancestor(s, "invoke_agent ")?.attributes["fibril.agent.depth"] === 2
        )
        assert.deepStrictEqual(
          grandchildChats.map((
            s
          ) => [s.attributes["gen_ai.usage.input_tokens"], s.attributes["gen_ai.usage.output_tokens"]])
            .sort(),
          [[11, 7], [13, 5]]
        )
        assert.isAtLeast(
          chats.filter((s) => ancestor(s, "invoke_agent ")?.attributes["fibril.agent.depth"] === 0).length,
          2
        )
      }).pipe(provideNode),
    60_000
  )
})
