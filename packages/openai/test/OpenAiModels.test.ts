import { assert, describe, it } from "@effect/vitest"
import * as Models from "@fibril/core/Models"
import { FakeOpenAiServer } from "@fibril/testkit"
import { Effect, Layer, Logger, Redacted } from "effect"
import * as OpenAiClient from "../src/OpenAiClient.ts"
import * as OpenAiModels from "../src/OpenAiModels.ts"
import { chatBodies, generate } from "./support.ts"

const script = { rules: [{ turns: [{ text: "hi" }], repeat_last: true }] }

const catalog = (server: FakeOpenAiServer.FakeOpenAiServer, defaultModel: string) =>
  Effect.gen(function*() {
    return yield* Models.Models
  }).pipe(
    Effect.provide(
      OpenAiModels.layer({ defaultModel }).pipe(
        Layer.provide(OpenAiClient.layer({ apiKey: Redacted.make("sk-test"), baseURL: server.url }))
      )
    )
  )

const modelListings = (server: FakeOpenAiServer.FakeOpenAiServer) =>
  server.requests.filter((r) => r.method === "GET" && r.path === "/v1/models").length

describe("OpenAiModels: the catalog behind GET /v1/models", () => {
  it.live("lists the server's models once, resolves listed ids (one model per id) and refuses others with UnknownModel", () =>
    Effect.gen(function*() {
      const server = yield* FakeOpenAiServer.start({ script, models: ["gpt-small", "gpt-large"] })
      const models = yield* catalog(server, "gpt-small")
      assert.strictEqual(models.defaultModel, "gpt-small")
      assert.isUndefined(models.available) // nothing asked yet: no request at construction
      assert.strictEqual(modelListings(server), 0)

      const small = yield* models.resolve("gpt-small")
      assert.deepStrictEqual(models.available, ["gpt-small", "gpt-large"])
      const large = yield* models.resolve("gpt-large")
      assert.strictEqual(yield* models.resolve("gpt-small"), small)
      const unknown = yield* Effect.flip(models.resolve("gpt-huge"))
      assert.strictEqual(unknown._tag, "UnknownModel")
      assert.strictEqual(unknown.model, "gpt-huge")
      assert.deepStrictEqual(unknown.accepted, ["gpt-small", "gpt-large"])
      assert.include(unknown.message, "accepted: gpt-small, gpt-large")
      assert.strictEqual(modelListings(server), 1) // cached after the first successful listing

      // Each resolved model sends its own id.
      yield* generate(small, "a")
      yield* generate(large, "b")
      assert.deepStrictEqual(
        chatBodies(server).map((b) => b && typeof b === "object" && "model" in b ? b.model : undefined),
        ["gpt-small", "gpt-large"]
      )
    }))

  it.live("when the server cannot list its models, any id is accepted (and listing is tried again later)", () =>
    Effect.gen(function*() {
      const server = yield* FakeOpenAiServer.start({ script, models: { status: 404 } })
      const warnings: Array<unknown> = []
      const collect = Logger.layer([
        Logger.make((options) => {
          if (options.logLevel === "Warn") warnings.push(options.message)
        })
      ])
      yield* Effect.gen(function*() {
        const models = yield* catalog(server, "whatever-model")
        const model = yield* models.resolve("whatever-model")
        assert.isUndefined(models.available)
        assert.strictEqual((yield* generate(model, "hi")).text, "hi")
        yield* models.resolve("another-model")
        yield* models.resolve("whatever-model")
      }).pipe(Effect.provide(collect))
      assert.strictEqual(modelListings(server), 3)
      // Said once, not at every resolve that tried again.
      assert.strictEqual(warnings.length, 1)
      assert.include(String(warnings[0]), "cannot list the models of")
    }))
})
