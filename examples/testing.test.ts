// The example from docs/testing.md, run by the test suite.
import { NodeServices } from "@effect/platform-node"
import { assert, it } from "@effect/vitest"
import { Fibril, Session } from "@fibril/core"
import { ScriptedModel } from "@fibril/testkit"
import { Effect, FileSystem, Layer } from "effect"

const script: ScriptedModel.ScriptInput = {
  rules: [
    { match: { role: "explore" }, turns: [{ text: "SUMMARY:\nfound it" }] },
    {
      match: { depth: 0 },
      turns: [
        { tool_calls: [{ name: "task", args: { description: "look", prompt: "find x", subagent_type: "explore" } }] },
        { text: "done" }
      ]
    }
  ]
}

it.effect("a parent delegates to an explorer", () =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const root = yield* fs.makeTempDirectoryScoped()
    const answer = yield* Effect.gen(function*() {
      const sessions = yield* Session.Session
      const parent = yield* sessions.create()
      return yield* sessions.prompt(parent.id, "go")
    }).pipe(Effect.provide(Fibril.layer({ cwd: root }).pipe(Layer.provide(ScriptedModel.layer(script)))))
    assert.strictEqual(answer.text, "done")
  }).pipe(Effect.provide(NodeServices.layer)))
