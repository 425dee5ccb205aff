/**
 * Adding your own tool: a definition (data) plus a handler (an Effect), registered into the
 * registry that `Fibril.layer` provides. Run with the repository's Node:
 * `npm exec -- node examples/custom-tool.ts`.
 */
import { NodeServices } from "@effect/platform-node"
import { Fibril, Session, ToolRegistry } from "@fibril/core"
import { ScriptedModel } from "@fibril/testkit"
import { Console, Effect, Layer, Schema } from "effect"

export const Now = ToolRegistry.define({
  name: "now",
  description: "The current time as an ISO string.",
  parameters: Schema.Struct({ timezone: Schema.optionalKey(Schema.String) }),
  posture: "read",
  handler: () => Effect.sync(() => new Date().toISOString())
})

/** Registers `now`; a handler's own requirements would be captured from this layer's context. */
export const NowTool = Layer.effectDiscard(ToolRegistry.ToolRegistry.use((registry) => registry.register(Now)))

const script: ScriptedModel.ScriptInput = {
  rules: [{
    turns: [
      { tool_calls: [{ name: "now", args: {} }] },
      { text: "I asked the clock." }
    ]
  }]
}

export const main = Effect.gen(function*() {
  const sessions = yield* Session.Session
  const agent = yield* sessions.create()
  const answer = yield* sessions.prompt(agent.id, "What time is it?")
  const transcript = yield* sessions.transcript(agent.id)
  yield* Console.log(answer.text)
  return { answer, transcript }
}).pipe(
  Effect.provide(
    NowTool.pipe(Layer.provideMerge(Fibril.layer({ cwd: process.cwd() })), Layer.provide(ScriptedModel.layer(script)))
  ),
  Effect.provide(NodeServices.layer)
)

if (import.meta.main) Effect.runPromise(main)
