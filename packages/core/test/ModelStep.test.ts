/**
 * loop/ModelStep: one model step for both runtimes. A provider that reports no usage gets the
 * same estimate through the cluster's `AgentSteps.model` as through the embedded Session (the
 * cluster used to record 0 tokens), and the step's result still fits its journaled Schema.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, FileSystem, Layer, Schema } from "effect"
import { LanguageModel, Prompt, type Response } from "effect/ai"
import * as AgentSteps from "../src/AgentSteps.ts"
import * as Fibril from "../src/Fibril.ts"
import { Models } from "../src/Models.ts"
import * as Permission from "../src/Permission.ts"
import * as Roles from "../src/Roles.ts"
import * as Session from "../src/Session.ts"
import { ToolRegistry } from "../src/ToolRegistry.ts"
import * as Usage from "../src/Usage.ts"

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

const wire = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
  const context = yield* Layer.build(Fibril.layer({ cwd: root }).pipe(Layer.provide(unreporting)))
  const steps = yield* AgentSteps.make(Session.defaults).pipe(
    Effect.provideService(Models, Context.get(context, Models)),
    Effect.provideService(ToolRegistry, Context.get(context, ToolRegistry)),
    Effect.provideService(Permission.Permission, Context.get(context, Permission.Permission))
  )
  return {
    session: Context.get(context, Session.Session),
    permission: Context.get(context, Permission.Permission),
    steps
  }
})

describe("loop/ModelStep: usage a provider does not report", () => {
  it.effect("AgentSteps.model records the Session's estimate, not 0, and says it is one", () =>
    Effect.gen(function*() {
      const { permission, session, steps } = yield* wire
      const agent = yield* session.create({ role: "explore" })
      const embedded = yield* session.prompt(agent.id, "a short task")
      const [system, task] = yield* session.transcript(agent.id)
      assert.strictEqual(system!.role, "system")
      const rules = Permission.effective(permission.root, Session.grantFor(0, 1, Roles.roles.explore))
      const request = {
        agentId: "a1",
        step: 0,
        model: "default",
        system: system as Prompt.SystemMessage,
        messages: [task!],
        rules
      }
      const step = yield* steps.model(request)
      assert.isFalse(step.usageReported)
      assert.isAbove(step.usage.input, 0)
      assert.isAbove(step.usage.output, 0)
      // The same request and answer: the same estimate in both runtimes.
      assert.deepStrictEqual(step.usage, Usage.snapshot(embedded.usage))
      assert.deepStrictEqual(Schema.decodeUnknownSync(AgentSteps.ModelStep)(step).usage, step.usage)

      // Queued input delivered by the step is part of the request, so it is counted too.
      const delivered = yield* steps.model({ ...request, takeInbox: Effect.succeed(["and one more thing to read"]) })
      assert.deepStrictEqual(delivered.delivered, ["and one more thing to read"])
      assert.isAbove(delivered.usage.input, step.usage.input)
      assert.strictEqual(delivered.usage.output, step.usage.output)
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
})
