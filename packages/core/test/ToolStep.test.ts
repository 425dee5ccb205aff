/**
 * loop/ToolStep: one tool-call pipeline for both runtimes. The same turns give the same results
 * and refusals through the embedded Session and through `AgentSteps.tool` (the cluster's
 * step); and `runCall` runs one definition whose handler needs a service of its own (how the
 * cluster runs the sub-agent tools) through the same checks.
 */
import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Context, Effect, Schema } from "effect"
import type { Prompt } from "effect/ai"
import * as AgentLoop from "../src/AgentLoop.ts"
import * as AgentSteps from "../src/AgentSteps.ts"
import { runCall } from "../src/loop/ToolStep.ts"
import { Models } from "../src/Models.ts"
import * as Permission from "../src/Permission.ts"
import * as Roles from "../src/Roles.ts"
import * as Session from "../src/Session.ts"
import * as ToolRegistry from "../src/ToolRegistry.ts"
import { provideNode, setup } from "./support.ts"

const toolResults = (messages: ReadonlyArray<Prompt.Message>) =>
  messages.flatMap((m) =>
    m.role === "tool"
      ? m.content.flatMap((p) =>
        p.type === "tool-result" ? [{ id: p.id, name: p.name, isFailure: p.isFailure, result: p.result }] : []
      )
      : []
  )

// An explore agent (read-only): every kind of refusal, then calls that run.
const script: ScriptedModel.ScriptInput = {
  rules: [{
    turns: [
      { tool_calls: [{ name: "no_such_tool", args: {} }] },
      { tool_calls: [{ name: "write_file", args: { path: "b.txt", content: "x" } }] },
      { tool_calls: [{ name: "read_file", args: "{not json" }] },
      { tool_calls: [{ name: "read_file", args: { path: "a.txt", bogus: true } }] },
      { tool_calls: [{ name: "read_file", args: { path: "missing.txt" } }] },
      { tool_calls: [{ name: "read_file", args: { path: "a.txt" } }, { name: "list_dir", args: {} }] },
      { text: "done" }
    ]
  }]
}

describe("loop/ToolStep: one pipeline, two runtimes", () => {
  it.effect("unknown, denied, malformed and failing calls give the same results through Session and AgentSteps", () =>
    Effect.gen(function*() {
      const { fs, get, path, root } = yield* setup(script)
      yield* fs.writeFileString(path.join(root, "a.txt"), "hello")
      const session = get(Session.Session)
      const agent = yield* session.create({ role: "explore" })
      const embedded = yield* session.prompt(agent.id, "read a.txt")
      const transcript = yield* session.transcript(agent.id)

      const steps = yield* AgentSteps.make(Session.defaults).pipe(
        Effect.provideService(Models, get(Models)),
        Effect.provideService(ToolRegistry.ToolRegistry, get(ToolRegistry.ToolRegistry)),
        Effect.provideService(Permission.Permission, get(Permission.Permission))
      )
      const role = Roles.roles.explore
      const rules = Permission.effective(get(Permission.Permission).root, Session.grantFor(0, 1, role))
      const system = transcript[0] as Prompt.SystemMessage
      const cluster = yield* AgentLoop.run({ agentId: agent.id, messages: [transcript[1]!], maxSteps: 10 }, {
        model: (step, messages) => steps.model({ agentId: agent.id, step, model: "default", system, messages, rules }),
        tool: (step, call) => steps.tool({ agentId: agent.id, step, role: role.name, depth: 0, rules, call })
      })

      assert.strictEqual(embedded.text, "done")
      assert.strictEqual(cluster.text, "done")
      const results = toolResults(transcript)
      assert.deepStrictEqual(toolResults(cluster.messages), results)
      const errors = results.map((r) => r.isFailure ? (r.result as { error: string }).error : "ok")
      assert.deepStrictEqual(errors, [
        "UnknownTool",
        "PermissionDenied",
        "InvalidArguments",
        "InvalidArguments",
        "ToolFailure",
        "ok",
        "ok"
      ])
      // The refusals say what was wrong: a write is denied by name, not called unknown.
      const denied = results[1]!.result as { message: string }
      assert.include(denied.message, "write_file")
      assert.include((results[2]!.result as { message: string }).message, "not valid JSON")
      assert.include((results[3]!.result as { message: string }).message, "accepted: ")
    }).pipe(Effect.scoped, provideNode))

  it.effect("runCall: a definition whose handler needs a service runs through the same checks, the service provided by the caller", () =>
    Effect.gen(function*() {
      class Counter extends Context.Service<Counter, { readonly next: Effect.Effect<number> }>()("test/Counter") {}
      const { get } = yield* setup({ rules: [] })
      const permission = get(Permission.Permission)
      const bump = ToolRegistry.callable(ToolRegistry.define({
        name: "bump",
        description: "counts",
        parameters: Schema.Struct({ by: Schema.Number }),
        posture: "spawn",
        handler: (params, context) =>
          Effect.gen(function*() {
            const counter = yield* Counter
            return { by: params.by, agent: context.sessionId, count: yield* counter.next }
          })
      }))
      let count = 0
      const counter = Counter.of({ next: Effect.sync(() => ++count) })
      const caller = (rules: Permission.Rules) => ({ id: "agent-7", role: "general", depth: 0, rules })
      const run = (rules: Permission.Rules, params: unknown) =>
        runCall(permission, caller(rules), bump, { id: "c1", name: "bump", params }).pipe(
          Effect.provideService(Counter, counter)
        )
      const done = yield* run(Permission.allowAll, `{"by":2}`)
      assert.deepStrictEqual(done, {
        id: "c1",
        name: "bump",
        isFailure: false,
        result: { by: 2, agent: "agent-7", count: 1 }
      })
      const malformed = yield* run(Permission.allowAll, "{by:")
      assert.deepStrictEqual([malformed.isFailure, (malformed.result as { error: string }).error], [
        true,
        "InvalidArguments"
      ])
      const wrongType = yield* run(Permission.allowAll, { by: "two" })
      assert.strictEqual((wrongType.result as { error: string }).error, "InvalidArguments")
      const noSpawn = Permission.effective(permission.root, Session.grantFor(1, 1, Roles.roles.general))
      const denied = yield* run(noSpawn, { by: 1 })
      assert.deepStrictEqual([denied.isFailure, (denied.result as { error: string }).error], [true, "PermissionDenied"])
      // Only the call that passed every check ran the handler.
      assert.strictEqual(count, 1)
    }).pipe(Effect.scoped, provideNode))
})
