// The spans a tree of agents exports follow the OpenTelemetry GenAI conventions: Effect's own
// OTLP exporter posts them to a real HTTP receiver (testkit's OtlpReceiver), and the test reads
// what arrived: `invoke_agent` per agent, `chat` per model call, `execute_tool` per tool call,
// with their `gen_ai.*` attributes, parented as the tree is (root > child > grandchild), in one
// trace; content only when `CaptureContent` is on.
import { assert, describe, it } from "@effect/vitest"
import { OtlpReceiver, ScriptedModel } from "@fibril/testkit"
import { Effect, Layer } from "effect"
import * as FetchHttpClient from "effect/http/FetchHttpClient"
import * as OtlpSerialization from "effect/observability/OtlpSerialization"
import * as OtlpTracer from "effect/observability/OtlpTracer"
import * as GenAiTrace from "../src/GenAiTrace.ts"
import { Session } from "../src/Session.ts"
import { provideNode, report, setup } from "./support.ts"

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
      // A sub-agent delegates with agent_spawn and agent_wait (`task` is the root's).
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

/** Runs the tree with the OTLP exporter installed; the spans received once it has flushed. */
const runTree = (capture: boolean) =>
  Effect.gen(function*() {
    const receiver = yield* OtlpReceiver.make
    const { get } = yield* setup(script, { maxDepth: 2 })
    const session = get(Session)
    const answer = yield* Effect.gen(function*() {
      const root = yield* session.create()
      return yield* session.prompt(root.id, "the secret prompt")
    }).pipe(
      Effect.withSpan("caller"),
      Effect.provideService(GenAiTrace.CaptureContent, capture),
      Effect.provide(otlp(receiver.url))
    )
    assert.strictEqual(answer.text, "done")
    // The exporter's layer is closed: everything it had is flushed.
    return receiver.spans()
  })

describe("GenAI traces (embedded engine)", () => {
  it.live("a depth-2 tree: invoke_agent, chat and execute_tool spans with their attributes, parented as the tree, one trace", () =>
    Effect.gen(function*() {
      const spans = yield* runTree(false)
      const names = spans.map((s) => s.name)
      const byId = new Map(spans.map((s) => [s.spanId, s]))
      /** The nearest ancestor of `span` whose name starts with `prefix`. */
      const ancestor = (span: OtlpReceiver.ReceivedSpan, prefix: string) => {
        let at = span.parentSpanId === undefined ? undefined : byId.get(span.parentSpanId)
        while (at !== undefined && !at.name.startsWith(prefix)) {
          at = at.parentSpanId === undefined ? undefined : byId.get(at.parentSpanId)
        }
        return at
      }
      console.log(
        spans.map((s) =>
          `${s.traceId.slice(0, 6)} ${s.spanId.slice(0, 6)} <- ${s.parentSpanId?.slice(0, 6)} ${s.name} ${
            s.attributes["gen_ai.tool.call.result"] ?? ""
          } ${s.error ?? ""}`
        ).join("\n")
      )
      assert.strictEqual(new Set(spans.map((s) => s.traceId)).size, 1, "one trace")

      // One invoke_agent per agent, named after its role, with its id, name and depth.
      const agents = spans.filter((s) => s.attributes["gen_ai.operation.name"] === "invoke_agent")
      assert.deepStrictEqual(agents.map((s) => s.attributes["fibril.agent.depth"]).sort(), [0, 1, 2], names.join(", "))
      const [root, child, grandchild] = [0, 1, 2].map((d) =>
        agents.find((s) => s.attributes["fibril.agent.depth"] === d)!
      )
      for (const agent of agents) {
        assert.strictEqual(agent.name, `invoke_agent ${agent.attributes["gen_ai.agent.name"]}`)
        assert.match(String(agent.attributes["gen_ai.agent.id"]), /.+/)
      }
      assert.strictEqual(child!.attributes["gen_ai.agent.name"], "general")
      assert.strictEqual(grandchild!.attributes["gen_ai.agent.name"], "explore")
      assert.strictEqual(child!.attributes["fibril.agent.parent_id"], root!.attributes["gen_ai.agent.id"])
      assert.strictEqual(grandchild!.attributes["fibril.agent.parent_id"], child!.attributes["gen_ai.agent.id"])

      // The tree: caller > root > execute_tool task > child > execute_tool agent_spawn > grandchild >
      // execute_tool list_dir (the manager's and the tools' own spans in between).
      const tools = spans.filter((s) => s.attributes["gen_ai.operation.name"] === "execute_tool")
      const rootTask = tools.find((s) => ancestor(s, "invoke_agent ") === root && s.name === "execute_tool task")!
      const childTask = tools.find((s) =>
        ancestor(s, "invoke_agent ") === child && s.name === "execute_tool agent_spawn"
      )!
      const listDir = tools.find((s) => s.name === "execute_tool list_dir")!
      assert.isDefined(rootTask, names.join(", "))
      assert.isDefined(childTask, names.join(", "))
      assert.strictEqual(ancestor(child!, "execute_tool "), rootTask)
      assert.strictEqual(ancestor(grandchild!, "execute_tool "), childTask)
      assert.strictEqual(ancestor(listDir, "invoke_agent "), grandchild)
      assert.strictEqual(byId.get(root!.parentSpanId!)?.name, "caller")
      for (const tool of tools) {
        assert.strictEqual(tool.name, `execute_tool ${tool.attributes["gen_ai.tool.name"]}`)
        assert.match(String(tool.attributes["gen_ai.tool.call.id"]), /.+/)
      }

      // A chat span per model call, each under its agent (the child's three: spawn, wait, answer).
      const chats = spans.filter((s) => s.attributes["gen_ai.operation.name"] === "chat")
      assert.deepStrictEqual(
        [root, child, grandchild].map((agent) => chats.filter((s) => ancestor(s, "invoke_agent ") === agent).length),
        [2, 3, 2],
        names.join(", ")
      )
      assert.strictEqual(chats.length, 7)
      for (const chat of chats) {
        assert.strictEqual(chat.name, `chat ${chat.attributes["gen_ai.request.model"]}`)
        assert.strictEqual(chat.kind, 3, "a client span")
        assert.isNumber(chat.attributes["gen_ai.usage.input_tokens"])
        assert.isNumber(chat.attributes["gen_ai.usage.output_tokens"])
      }
      const grandchildChats = chats.filter((s) => ancestor(s, "invoke_agent ") === grandchild)
      assert.deepStrictEqual(
        grandchildChats.map((
          s
        ) => [s.attributes["gen_ai.usage.input_tokens"], s.attributes["gen_ai.usage.output_tokens"]])
          .sort(),
        [[11, 7], [13, 5]]
      )
      assert.deepStrictEqual(
        grandchildChats.map((s) => s.attributes["gen_ai.response.finish_reasons"]).sort(),
        [["stop"], ["tool_calls"]]
      )
      // No content without CaptureContent.
      const content = ["gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments"]
      for (const span of spans) {
        for (const key of content) assert.notProperty(span.attributes, key, `${span.name} has ${key}`)
      }
      assert.notInclude(JSON.stringify(spans), "the secret prompt")
    }).pipe(provideNode))

  it.live("with CaptureContent: prompts, answers, tool arguments and results are on the spans", () =>
    Effect.gen(function*() {
      const spans = yield* runTree(true)
      const root = spans.find((s) => s.attributes["fibril.agent.depth"] === 0)!
      assert.include(String(root.attributes["gen_ai.input.messages"]), "the secret prompt")
      assert.include(String(root.attributes["gen_ai.output.messages"]), "done")
      const chat = spans.find((s) =>
        s.attributes["gen_ai.operation.name"] === "chat" &&
        String(s.attributes["gen_ai.input.messages"]).includes("the secret prompt")
      )
      assert.isDefined(chat)
      assert.include(String(chat!.attributes["gen_ai.output.messages"]), "tool_call")
      const listDir = spans.find((s) => s.name === "execute_tool list_dir")!
      assert.strictEqual(listDir.attributes["gen_ai.tool.call.arguments"], "{}")
      assert.isString(listDir.attributes["gen_ai.tool.call.result"])
    }).pipe(provideNode))
})
