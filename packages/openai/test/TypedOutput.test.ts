// A typed sub-agent (`output_schema`) on the OpenAI provider, through the real SDK and real
// HTTP (one fake server for the file): a model configured with structured output gets the
// schema as `response_format`; one without gets the `final_answer` tool instead.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Fibril, Session } from "@fibril/core"
import type { TaskResult } from "@fibril/core/tools/Task"
import { FakeOpenAiServer, type ScriptedModel } from "@fibril/testkit"
import { Effect, FileSystem, Layer, Redacted } from "effect"
import type { Prompt } from "effect/ai"
import * as OpenAiClient from "../src/OpenAiClient.ts"
import * as OpenAiModels from "../src/OpenAiModels.ts"

const schema = {
  type: "object",
  properties: { answer: { type: "string" }, confidence: { type: "number", minimum: 0, maximum: 1 } },
  required: ["answer", "confidence"],
  additionalProperties: false
}
const value = { answer: "42", confidence: 0.9 }

const toolResults = (messages: ReadonlyArray<Prompt.Message>) =>
  messages.flatMap((m) => m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [p] : []) : [])

type Body = {
  readonly messages?: ReadonlyArray<{ readonly content?: unknown }>
  readonly tools?: ReadonlyArray<{ readonly function: { readonly name: string; readonly parameters?: unknown } }>
  readonly response_format?: { readonly type: string; readonly json_schema?: { readonly schema?: unknown } }
}

const script: ScriptedModel.ScriptInput = {
  rules: [
    {
      // The child: a JSON answer where it was asked for one, else the final-answer tool.
      match: { depth: 1 },
      respond: (c) =>
        c.tools.includes("final_answer")
          ? c.turn === 0 ? { tool_calls: [{ name: "final_answer", args: value }] } : { text: "unexpected" }
          : { text: JSON.stringify(value) }
    },
    {
      match: { depth: 0 },
      respond: (c) =>
        c.turn === 0
          ? {
            tool_calls: [{ name: "task", args: { description: "ask", prompt: "the answer", output_schema: schema } }]
          }
          : { text: "done" }
    }
  ]
}

const childBodies = (server: FakeOpenAiServer.FakeOpenAiServer, from: number) =>
  server.requests.slice(from).flatMap((request) => {
    const body = request.body as Body | undefined
    return request.path.endsWith("/chat/completions") && body !== undefined &&
        !(body.tools ?? []).some((tool) => tool.function.name === "task")
      ? [body]
      : []
  })

const runTyped = (server: FakeOpenAiServer.FakeOpenAiServer, structuredOutput: boolean) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
    const context = yield* Layer.build(
      Fibril.layerWithModels({ cwd: root }).pipe(
        Layer.provide(OpenAiModels.layer({ defaultModel: "fake-large", structuredOutput })),
        Layer.provide(OpenAiClient.layer({ apiKey: Redacted.make("sk-test"), baseURL: server.url }))
      )
    )
    const sessions = yield* Session.Session.pipe(Effect.provide(context))
    const parent = yield* sessions.create()
    yield* sessions.prompt(parent.id, "delegate")
    const [task] = toolResults(yield* sessions.transcript(parent.id))
    return task!.result as TaskResult
  })

describe("typed results on the OpenAI provider (fake server, real SDK)", () => {
  it.live("structured output sends response_format json_schema; otherwise the final_answer tool", () =>
    Effect.gen(function*() {
      const server = yield* FakeOpenAiServer.start({ script, models: ["fake-large"] })

      const provider = yield* runTyped(server, true)
      assert.strictEqual(provider.status, "completed")
      assert.deepStrictEqual(provider.output, value)
      const [asked] = childBodies(server, 0)
      assert.strictEqual(asked?.response_format?.type, "json_schema")
      assert.deepStrictEqual(asked?.response_format?.json_schema?.schema, schema)
      // The child keeps its tools, and is not offered the final-answer tool.
      assert.isAbove(asked?.tools?.length ?? 0, 0)
      assert.isFalse((asked?.tools ?? []).some((tool) => tool.function.name === "final_answer"))
      // The parent's own requests carry no response format.
      const parentBodies = server.requests.map((r) => r.body as Body | undefined)
        .filter((body) => (body?.tools ?? []).some((tool) => tool.function.name === "task"))
      assert.isTrue(parentBodies.every((body) => body?.response_format === undefined))

      const before = server.requests.length
      const tool = yield* runTyped(server, false)
      assert.strictEqual(tool.status, "completed")
      assert.deepStrictEqual(tool.output, value)
      const [offered] = childBodies(server, before)
      assert.isUndefined(offered?.response_format)
      const finalAnswer = (offered?.tools ?? []).find((t) => t.function.name === "final_answer")
      assert.deepStrictEqual(finalAnswer?.function.parameters, schema)
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
})
