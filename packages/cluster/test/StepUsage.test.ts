// A provider that reports no usage, in cluster mode: the workflow's model step records the
// estimate core's model step makes (the embedded runtime's), not 0 tokens.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { AgentSteps, Fibril, Session } from "@fibril/core"
import { Effect, FileSystem, Layer } from "effect"
import { LanguageModel, type Response } from "effect/ai"
import { ClusterWorkflowEngine } from "effect/cluster"
import * as AgentWorkflow from "../src/AgentWorkflow.ts"
import * as ClusterClient from "../src/ClusterClient.ts"
import * as ClusterStore from "../src/ClusterStore.ts"

/** A provider whose finish part has no token counts (ScriptedModel always reports them). */
const unreporting = Layer.effect(
  LanguageModel.LanguageModel,
  LanguageModel.make({
    generateText: () =>
      Effect.succeed<Array<Response.PartEncoded>>([
        { type: "text", text: "an answer of some length, to be counted" },
        { type: "finish", reason: "stop", usage: { inputTokens: {}, outputTokens: {} } } as Response.PartEncoded
      ]),
    streamText: () => Effect.die("not used") as never
  })
)

describe("cluster mode: usage a provider does not report", () => {
  it.live("is estimated, as the embedded runtime does, not recorded as 0 tokens", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      const store = yield* ClusterStore.makeMemory
      const core = Fibril.layer({ cwd: root }).pipe(Layer.provide(unreporting))
      const live = AgentWorkflow.layer({}).pipe(
        Layer.provideMerge(ClusterWorkflowEngine.layer),
        Layer.provideMerge(AgentWorkflow.memoryRunner),
        Layer.provide(AgentSteps.layer(Session.defaults)),
        Layer.provideMerge(Layer.succeed(ClusterStore.ClusterStore, store)),
        Layer.provideMerge(core)
      )
      const outcome = yield* ClusterClient.run({ prompt: "a short task", workspace: root }).pipe(
        Effect.provide(yield* Layer.build(live))
      )
      assert.strictEqual(outcome.text, "an answer of some length, to be counted")
      const [row] = yield* store.list
      const tokens = ClusterStore.tokensOf(row!)
      assert.isAbove(tokens.input, 0)
      assert.isAbove(tokens.output, 0)
      assert.strictEqual(row!.tokens, tokens.input + tokens.output)
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
})
