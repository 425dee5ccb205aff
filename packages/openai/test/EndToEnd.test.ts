// The Fibril core agent loop on this provider, through the real SDK and real HTTP: a parent
// fans out two `task` calls in parallel; each child reads a file and reports; a rate limit
// and a 500 on the way are retried by the loop.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Fibril, Session } from "@fibril/core"
import { AgentEvents } from "@fibril/core/AgentEvents"
import type { TaskResult } from "@fibril/core/tools/Task"
import { FakeOpenAiServer, type ScriptedModel } from "@fibril/testkit"
import { Deferred, Effect, FileSystem, Layer, Path, PubSub, Redacted, Ref } from "effect"
import type { Prompt } from "effect/ai"
import * as OpenAiClient from "../src/OpenAiClient.ts"
import * as OpenAiModels from "../src/OpenAiModels.ts"

const report = (summary: string, evidence: string) =>
  `SUMMARY:\n${summary}\n\nCHANGES:\nnone\n\nEVIDENCE:\n${evidence}\n\nRISKS:\nnone\n\nBLOCKERS:\nnone`

const summaryOf = (result: unknown): string => {
  if (typeof result !== "object" || result === null || !("summary" in result)) return "?"
  return typeof result.summary === "string" ? result.summary : "?"
}

const toolResults = (messages: ReadonlyArray<Prompt.Message>) =>
  messages.flatMap((m) => m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [p] : []) : [])

const bodyText = (body: unknown) => JSON.stringify(body ?? null)

describe("Fibril on the OpenAI provider (fake server, real SDK)", () => {
  it.live("a parent runs two parallel task calls end to end; retryable faults are retried by the loop", () =>
    Effect.gen(function*() {
      // Both children must be at their first model call before either answers: sequential
      // task calls would never get past this.
      const arrived = yield* Ref.make(0)
      const both = yield* Deferred.make<void>()
      const script: ScriptedModel.ScriptInput = {
        rules: [
          {
            match: { role: "explore" },
            respond: (c) =>
              c.turn === 0
                ? Effect.gen(function*() {
                  if ((yield* Ref.updateAndGet(arrived, (n) => n + 1)) === 2) yield* Deferred.succeed(both, undefined)
                  yield* Deferred.await(both)
                  return { tool_calls: [{ name: "read_file", args: { path: `${c.prompt}.txt` } }] }
                })
                : Effect.succeed({ text: report(`found ${c.prompt}`, JSON.stringify(c.lastToolResults[0]?.result)) })
          },
          {
            match: { role: "general", depth: 0 },
            respond: (c) =>
              c.turn === 0
                ? {
                  tool_calls: [
                    { name: "task", args: { description: "first", prompt: "alpha", subagent_type: "explore" } },
                    { name: "task", args: { description: "second", prompt: "beta", subagent_type: "explore" } }
                  ]
                }
                : { text: `done: ${c.lastToolResults.map((r) => summaryOf(r.result)).join(", ")}` }
          }
        ]
      }
      const server = yield* FakeOpenAiServer.start({
        script,
        models: ["fake-large"],
        faults: [
          // beta's first request is rate limited once, the parent's second turn fails once.
          {
            on: (r) => bodyText(r.body.messages).includes("beta") && !bodyText(r.body.tools).includes("\"task\""),
            times: 1,
            fault: { status: 429, retryAfterMs: 30 }
          },
          {
            on: (r) => r.body.messages.some((m) => m.role === "tool") && bodyText(r.body.tools).includes("\"task\""),
            times: 1,
            fault: { status: 500 }
          }
        ]
      })

      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      for (const name of ["alpha", "beta"]) {
        yield* fs.writeFileString(path.join(root, `${name}.txt`), `contents of ${name}`)
      }

      const context = yield* Layer.build(
        Fibril.layerWithModels({ cwd: root, session: { retryBaseMs: 10, retryMaxMs: 50 } }).pipe(
          Layer.provide(OpenAiModels.layer({ defaultModel: "fake-large" })),
          Layer.provide(OpenAiClient.layer({ apiKey: Redacted.make("sk-test"), baseURL: server.url }))
        )
      )
      const sessions = yield* Session.Session.pipe(Effect.provide(context))
      const parent = yield* sessions.create()
      const result = yield* sessions.prompt(parent.id, "explore both")
      assert.strictEqual(result.text, "done: found alpha, found beta")

      const tasks = toolResults(yield* sessions.transcript(parent.id)).map((r) => r.result as TaskResult)
      assert.deepStrictEqual(tasks.map((t) => t.status), ["completed", "completed"])
      assert.deepStrictEqual(tasks.map((t) => t.model), ["fake-large", "fake-large"])
      // Each child's evidence is the file it read (numbered lines), passed through the wire.
      assert.include(tasks[0]?.sections?.evidence, "contents of alpha")
      assert.include(tasks[1]?.sections?.evidence, "contents of beta")
      for (const task of tasks) assert.isAbove(task.tokens.input, 0)

      // 2 parent turns + 2 × 2 child turns, plus the two retried faults.
      const chats = server.requests.filter((r) => r.path === "/v1/chat/completions")
      assert.strictEqual(chats.length, 8)
      assert.strictEqual(server.requests.filter((r) => r.path === "/v1/models").length, 1)
      // The parent's repeated prompt prefix shows up as cached input.
      const info = yield* sessions.info(parent.id)
      assert.isAbove(info.usage.cached, 0)
      assert.isBelow(info.usage.cached, info.usage.input)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live(
    "streamed (session stream: true): text events as it arrives; a stream cut part-way and one slower than the timeout are retried as whole steps",
    () =>
      Effect.gen(function*() {
        const answer = "The first sentence of a long answer. And then the second one."
        const script: ScriptedModel.ScriptInput = { rules: [{ match: { depth: 0 }, turns: [{ text: answer }] }] }
        const server = yield* FakeOpenAiServer.start({
          script,
          models: ["fake-large"],
          textChunkChars: 8,
          faults: [
            // Request 1: cut after three chunks (the role and two deltas). Request 2: every chunk
            // on time for a reader, the whole stream (9 chunks × 250 ms) past api_timeout_secs=1.
            { on: 1, fault: { disconnectMidStream: true, afterChunks: 3 } },
            { on: 2, fault: { slowChunksMs: 250 } }
          ]
        })
        const fs = yield* FileSystem.FileSystem
        const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
        const context = yield* Layer.build(
          Fibril.layerWithModels({
            cwd: root,
            session: { stream: true, apiTimeoutSecs: 1, maxRetries: 3, retryBaseMs: 10, retryMaxMs: 50 }
          }).pipe(
            Layer.provide(OpenAiModels.layer({ defaultModel: "fake-large" })),
            Layer.provide(OpenAiClient.layer({ apiKey: Redacted.make("sk-test"), baseURL: server.url }))
          )
        )
        const events = yield* (yield* AgentEvents.pipe(Effect.provide(context))).subscribe
        const sessions = yield* Session.Session.pipe(Effect.provide(context))
        const parent = yield* sessions.create()
        const result = yield* sessions.prompt(parent.id, "answer")
        assert.strictEqual(result.text, answer)
        const chats = server.requests.filter((r) => r.path === "/v1/chat/completions")
        assert.deepStrictEqual(chats.map((r) => (r.body as { stream?: boolean }).stream), [true, true, true])
        // What each attempt streamed, split at its retry: the cut one and the slow one streamed a
        // part, the third the whole answer; each retry says why.
        const seen = yield* PubSub.takeAll(events)
        const attempts: Array<string> = [""]
        const retries: Array<string> = []
        for (const event of seen) {
          if (event.type === "text") attempts[attempts.length - 1] += event.text ?? ""
          if (event.type === "retry") {
            retries.push(event.reason ?? "")
            attempts.push("")
          }
        }
        assert.strictEqual(retries.length, 2, JSON.stringify({ attempts, retries }))
        assert.include(retries[1], "no answer within api_timeout_secs=1")
        // The cut and the slow attempt streamed at most a part of the answer (the slow one some
        // of it: text kept arriving, and the timeout still covered the whole stream).
        for (const partial of attempts.slice(0, 2)) {
          assert.isTrue(answer.startsWith(partial) && partial.length < answer.length, partial)
        }
        assert.isAbove(attempts[1]!.length, 0)
        assert.strictEqual(attempts[2], answer)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    30_000
  )
})
