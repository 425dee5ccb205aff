import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Effect } from "effect"
import { Prompt } from "effect/ai"
import { chatBodies, generate, serve, stream, type StreamPart } from "./support.ts"

const textOf = (parts: ReadonlyArray<StreamPart>) =>
  parts.flatMap((p) => p.type === "text-delta" ? [p.delta] : []).join("")

const long = "The configuration is loaded in src/config.ts by loadConfig(), which reads .fibril/config.toml."

describe("OpenAiModel against the fake server (real SDK, real HTTP)", () => {
  it.live("non-streaming: text, metadata, finish reason and usage", () =>
    Effect.gen(function*() {
      const { server, model } = yield* serve({ script: { rules: [{ turns: [{ text: long }] }] } })
      const answer = yield* generate(yield* model(), "Where is the config loaded?")
      assert.strictEqual(answer.text, long)
      assert.strictEqual(answer.finishReason, "stop")
      assert.deepStrictEqual(answer.toolCalls, [])
      assert.isAbove(answer.usage.inputTokens.total ?? 0, 0)
      assert.strictEqual(answer.usage.outputTokens.total, Math.ceil(long.length / 4))
      const metadata = answer.content.find((p) => p.type === "response-metadata")
      assert.strictEqual(metadata?.id, "chatcmpl-fake-1")
      assert.strictEqual(metadata?.modelId, "scripted")
      const [body] = chatBodies(server)
      assert.deepInclude(body, {
        model: "scripted",
        messages: [{ role: "user", content: "Where is the config loaded?" }]
      })
      assert.notProperty(body, "stream") // non-streaming is the API's default
    }))

  it.live("streaming: SSE text deltas become text-start/delta/end and the finish carries usage", () =>
    Effect.gen(function*() {
      const { server, model } = yield* serve({ script: { rules: [{ turns: [{ text: long }] }] }, textChunkChars: 7 })
      const parts = yield* stream(yield* model(), "Where is the config loaded?")
      const types = parts.map((p) => p.type)
      assert.strictEqual(types[0], "response-metadata")
      assert.strictEqual(types[1], "text-start")
      assert.strictEqual(types.at(-2), "text-end")
      assert.strictEqual(types.at(-1), "finish")
      assert.strictEqual(types.filter((t) => t === "text-delta").length, Math.ceil(long.length / 7))
      assert.strictEqual(textOf(parts), long)
      const finish = parts.at(-1)
      assert.isTrue(finish?.type === "finish" && finish.reason === "stop")
      assert.isTrue(finish?.type === "finish" && (finish.usage.inputTokens.total ?? 0) > 0)
      assert.deepInclude(chatBodies(server)[0], { stream: true, stream_options: { include_usage: true } })
    }))

  it.live("parallel tool calls, with the tools advertised as JSON Schema", () =>
    Effect.gen(function*() {
      const calls: ScriptedModel.Turn = {
        tool_calls: [
          { name: "read_file", args: { path: "a.ts" } },
          { name: "grep", args: { pattern: "loadConfig" } },
          { name: "read_file", args: { path: "b.ts" }, id: "read-b" }
        ]
      }
      const { server, model } = yield* serve({ script: { rules: [{ turns: [calls], repeat_last: true }] } })
      const lm = yield* model()
      const expected = [
        { id: "call_0_0", name: "read_file", params: { path: "a.ts" } },
        { id: "call_0_1", name: "grep", params: { pattern: "loadConfig" } },
        { id: "read-b", name: "read_file", params: { path: "b.ts" } }
      ]
      const answer = yield* generate(lm, "look")
      assert.strictEqual(answer.finishReason, "tool-calls")
      assert.deepStrictEqual(answer.toolCalls.map(({ id, name, params }) => ({ id, name, params })), expected)
      const streamed = yield* stream(lm, "look")
      assert.deepStrictEqual(
        streamed.flatMap((p) => p.type === "tool-call" ? [{ id: p.id, name: p.name, params: p.params }] : []),
        expected
      )
      const body = chatBodies(server)[0]
      assert.deepStrictEqual(body && typeof body === "object" && "tools" in body ? body.tools : undefined, [
        {
          type: "function",
          function: {
            name: "read_file",
            description: "Read a UTF-8 file",
            parameters: {
              type: "object",
              properties: { path: { type: "string" } },
              required: ["path"],
              additionalProperties: true
            }
          }
        },
        {
          type: "function",
          function: {
            name: "grep",
            description: "Search files",
            parameters: {
              type: "object",
              properties: { pattern: { type: "string" } },
              required: ["pattern"],
              additionalProperties: true
            }
          }
        }
      ])
      assert.deepInclude(body, { tool_choice: "auto" })
    }))

  it.live("tool-call arguments split across many SSE chunks (interleaved calls) are assembled per index", () =>
    Effect.gen(function*() {
      const readArgs = { path: "src/very/deeply/nested/module/with/a/long/name.ts" }
      const grepArgs = { pattern: "function\\s+loadConfig\\(.*\\)" }
      const { model } = yield* serve({
        script: {
          rules: [{
            turns: [{
              text: "Looking.",
              tool_calls: [{ name: "read_file", args: readArgs }, { name: "grep", args: grepArgs }]
            }]
          }]
        },
        argumentChunkChars: 3,
        interleaveToolCalls: true
      })
      const parts = yield* stream(yield* model(), "find it")
      const deltas = (id: string) => parts.filter((p) => p.type === "tool-params-delta" && p.id === id)
      assert.isAbove(deltas("call_0_0").length, 10)
      assert.isAbove(deltas("call_0_1").length, 10)
      // Interleaved: the two calls' pieces alternate on the wire.
      const order = parts.flatMap((p) => p.type === "tool-params-delta" ? [p.id] : [])
      assert.strictEqual(order[0], "call_0_0")
      assert.strictEqual(order[1], "call_0_1")
      assert.strictEqual(
        deltas("call_0_0").map((p) => p.type === "tool-params-delta" ? p.delta : "").join(""),
        JSON.stringify(readArgs)
      )
      assert.deepStrictEqual(
        parts.flatMap((p) => p.type === "tool-call" ? [p.params] : []),
        [readArgs, grepArgs]
      )
      assert.deepStrictEqual(
        parts.flatMap((p) => p.type === "tool-params-start" ? [[p.id, p.name]] : []),
        [["call_0_0", "read_file"], ["call_0_1", "grep"]]
      )
      assert.strictEqual(parts.filter((p) => p.type === "tool-params-end").length, 2)
      assert.strictEqual(textOf(parts), "Looking.")
      const finish = parts.at(-1)
      assert.isTrue(finish?.type === "finish" && finish.reason === "tool-calls")
    }))

  it.live("the prompt maps to messages: system, user, assistant tool_calls (raw string kept), tool results", () =>
    Effect.gen(function*() {
      const { server, model } = yield* serve({ script: { rules: [{ turns: [{ text: "ok" }], repeat_last: true }] } })
      const prompt = Prompt.fromMessages([
        Prompt.makeMessage("system", { content: "You are careful." }),
        Prompt.makeMessage("user", { content: [Prompt.makePart("text", { text: "Read two files" })] }),
        Prompt.makeMessage("assistant", {
          content: [
            Prompt.makePart("text", { text: "Reading." }),
            Prompt.makePart("tool-call", {
              id: "c1",
              name: "read_file",
              params: { path: "a.ts" },
              providerExecuted: false
            }),
            Prompt.makePart("tool-call", {
              id: "c2",
              name: "read_file",
              params: "{\"path\": ",
              providerExecuted: false
            })
          ]
        }),
        Prompt.makeMessage("tool", {
          content: [
            Prompt.makePart("tool-result", {
              id: "c1",
              name: "read_file",
              isFailure: false,
              result: "export const a = 1",
              providerExecuted: false
            }),
            Prompt.makePart("tool-result", {
              id: "c2",
              name: "read_file",
              isFailure: true,
              result: { error: "InvalidArguments", message: "arguments are not valid JSON" },
              providerExecuted: false
            })
          ]
        })
      ])
      const answer = yield* generate(yield* model(), prompt)
      assert.strictEqual(answer.text, "ok")
      assert.deepInclude(chatBodies(server)[0], {
        messages: [
          { role: "system", content: "You are careful." },
          { role: "user", content: "Read two files" },
          {
            role: "assistant",
            content: "Reading.",
            tool_calls: [
              { id: "c1", type: "function", function: { name: "read_file", arguments: "{\"path\":\"a.ts\"}" } },
              { id: "c2", type: "function", function: { name: "read_file", arguments: "{\"path\": " } }
            ]
          },
          { role: "tool", tool_call_id: "c1", content: "export const a = 1" },
          {
            role: "tool",
            tool_call_id: "c2",
            content: "{\"error\":\"InvalidArguments\",\"message\":\"arguments are not valid JSON\"}"
          }
        ]
      })
    }))

  it.live("cached tokens: a second request sharing a prefix reports them (JSON and SSE)", () =>
    Effect.gen(function*() {
      const { model } = yield* serve({
        script: {
          rules: [{
            turns: [{ tool_calls: [{ name: "read_file", args: { path: "README.md" } }] }, { text: "done" }],
            repeat_last: true
          }]
        }
      })
      const lm = yield* model()
      const system = Prompt.makeMessage("system", { content: "You are a coding agent. ".repeat(40) })
      const user = Prompt.makeMessage("user", { content: [Prompt.makePart("text", { text: "Summarise README.md" })] })
      const first = yield* generate(lm, Prompt.fromMessages([system, user]))
      assert.strictEqual(first.usage.inputTokens.cacheRead, 0)
      const assistant = Prompt.makeMessage("assistant", {
        content: first.toolCalls.map((c) =>
          Prompt.makePart("tool-call", { id: c.id, name: c.name, params: c.params, providerExecuted: false })
        )
      })
      const tool = Prompt.makeMessage("tool", {
        content: [Prompt.makePart("tool-result", {
          id: "call_0_0",
          name: "read_file",
          isFailure: false,
          result: "# Fibril",
          providerExecuted: false
        })]
      })
      const second = yield* generate(lm, Prompt.fromMessages([system, user, assistant, tool]))
      const input = second.usage.inputTokens
      assert.isAbove(input.cacheRead ?? 0, 0)
      assert.isBelow(input.cacheRead ?? 0, input.total ?? 0)
      assert.strictEqual(input.uncached, (input.total ?? 0) - (input.cacheRead ?? 0))
      // The same prompt again, streamed: the whole prompt is a seen prefix now.
      const streamed = yield* stream(lm, Prompt.fromMessages([system, user, assistant, tool]))
      const finish = streamed.at(-1)
      assert.isTrue(finish?.type === "finish" && finish.usage.inputTokens.cacheRead === finish.usage.inputTokens.total)
    }))

  it.live("DeepSeek: reasoning_content is reasoning (not text) and goes back with its turn; prompt_cache_hit_tokens is cacheRead", () =>
    Effect.gen(function*() {
      const { server, model } = yield* serve({
        script: {
          rules: [{
            turns: [{ text: "The answer.", tool_calls: [{ name: "grep", args: { pattern: "x" } }] }],
            repeat_last: true
          }]
        },
        dialect: "deepseek",
        faults: [{ on: () => true, fault: { reasoningContent: "Let me think about where to look first." } }]
      })
      const lm = yield* model("scripted")
      const answer = yield* generate(lm, "q")
      assert.strictEqual(answer.text, "The answer.")
      assert.strictEqual(answer.reasoningText, "Let me think about where to look first.")
      const streamed = yield* stream(lm, "q")
      assert.strictEqual(
        streamed.flatMap((p) => p.type === "reasoning-delta" ? [p.delta] : []).join(""),
        "Let me think about where to look first."
      )
      assert.strictEqual(textOf(streamed), "The answer.")
      const finish = streamed.at(-1)
      // The second request repeats the first one's prompt: a cache hit, DeepSeek-style.
      assert.isTrue(finish?.type === "finish" && (finish.usage.inputTokens.cacheRead ?? 0) > 0)
      // History: the reasoning of a tool-call turn is sent back as reasoning_content.
      yield* generate(
        lm,
        Prompt.fromMessages([
          Prompt.makeMessage("user", { content: [Prompt.makePart("text", { text: "q" })] }),
          Prompt.makeMessage("assistant", {
            content: [
              Prompt.makePart("reasoning", { text: "thinking" }),
              Prompt.makePart("tool-call", {
                id: "g1",
                name: "grep",
                params: { pattern: "x" },
                providerExecuted: false
              })
            ]
          }),
          Prompt.makeMessage("tool", {
            content: [Prompt.makePart("tool-result", {
              id: "g1",
              name: "grep",
              isFailure: false,
              result: "none",
              providerExecuted: false
            })]
          })
        ])
      )
      const body = chatBodies(server)[2]
      const messages = body && typeof body === "object" && "messages" in body && Array.isArray(body.messages)
        ? body.messages
        : []
      assert.deepStrictEqual(messages[1], {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "g1", type: "function", function: { name: "grep", arguments: "{\"pattern\":\"x\"}" } }],
        reasoning_content: "thinking"
      })
    }))

  it.live("tool-call arguments that are not JSON are passed through as the raw string (JSON and SSE)", () =>
    Effect.gen(function*() {
      const { model } = yield* serve({
        script: {
          rules: [{ turns: [{ tool_calls: [{ name: "read_file", args: { path: "a.ts" } }] }], repeat_last: true }]
        },
        faults: [{ on: () => true, fault: { badToolArguments: true } }]
      })
      const lm = yield* model()
      const answer = yield* generate(lm, "read")
      assert.deepStrictEqual(answer.toolCalls.map((c) => c.params), ["{\"path\":\"a.ts\""])
      const streamed = yield* stream(lm, "read")
      assert.deepStrictEqual(streamed.flatMap((p) => p.type === "tool-call" ? [p.params] : []), ["{\"path\":\"a.ts\""])
    }))

  it.live("a script's raw-string arguments arrive as the same raw string", () =>
    Effect.gen(function*() {
      const { model } = yield* serve({
        script: { rules: [{ turns: [{ tool_calls: [{ name: "read_file", args: "{\"path\": \"src/main.ts\"" }] }] }] }
      })
      const answer = yield* generate(yield* model(), "read")
      assert.deepStrictEqual(answer.toolCalls.map((c) => c.params), ["{\"path\": \"src/main.ts\""])
    }))
})
