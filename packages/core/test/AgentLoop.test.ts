import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Effect } from "effect"
import { Prompt } from "effect/ai"
import * as AgentLoop from "../src/AgentLoop.ts"
import * as AgentSteps from "../src/AgentSteps.ts"
import { Models } from "../src/Models.ts"
import * as Permission from "../src/Permission.ts"
import * as Roles from "../src/Roles.ts"
import * as Session from "../src/Session.ts"
import { ToolRegistry } from "../src/ToolRegistry.ts"
import { provideNode, setup } from "./support.ts"

const toolResults = (messages: ReadonlyArray<Prompt.Message>) =>
  messages.flatMap((m) => m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [p] : []) : [])

// The script of Loop.test.ts's first test: the same answers through AgentSteps + AgentLoop.
const script: ScriptedModel.ScriptInput = {
  rules: [{
    turns: [
      { tool_calls: [{ name: "read_file", args: "{not json" }] },
      { tool_calls: [{ name: "read_file", args: { path: 42 } }] },
      { tool_calls: [{ name: "read_file", args: { path: "a.txt", bogus: true } }] },
      { tool_calls: [{ name: "no_such_tool", args: {} }] },
      { tool_calls: [{ name: "read_file", args: { path: "a.txt" } }, { name: "list_dir", args: {} }] },
      { text: "read it" }
    ]
  }]
}

const wire = Effect.gen(function*() {
  const { get, fs, path, root } = yield* setup(script)
  yield* fs.writeFileString(path.join(root, "a.txt"), "hello")
  const steps = yield* AgentSteps.make(Session.defaults).pipe(
    Effect.provideService(Models, get(Models)),
    Effect.provideService(ToolRegistry, get(ToolRegistry)),
    Effect.provideService(Permission.Permission, get(Permission.Permission))
  )
  const role = Roles.roles.explore
  const rules = Permission.effective(get(Permission.Permission).root, Session.grantFor(0, 1, role))
  const system = Prompt.makeMessage("system", { content: Roles.systemPrompt(role, 0, root) })
  return { steps, rules, system, role }
})

describe("AgentLoop over AgentSteps (run directly)", () => {
  it.effect("plays the embedded loop's script: failures are tool results, the answer and step count match", () =>
    Effect.gen(function*() {
      const { role, rules, steps, system } = yield* wire
      const systemMessage = system
      const input = { agentId: "a1", messages: [AgentSteps.userMessage("read a.txt")], maxSteps: 10 }
      const result = yield* AgentLoop.run(input, {
        model: (step, messages) =>
          steps.model({ agentId: "a1", step, model: "default", system: systemMessage, messages, rules }),
        tool: (step, call) => steps.tool({ agentId: "a1", step, role: role.name, depth: 0, rules, call })
      })
      assert.strictEqual(result.text, "read it")
      assert.strictEqual(result.steps, 6)
      assert.strictEqual(result.toolCalls, 6)
      const parts = toolResults(result.messages)
      assert.deepStrictEqual(parts.map((p) => p.isFailure), [true, true, true, true, false, false])
      assert.strictEqual((parts[0]!.result as { error: string }).error, "InvalidArguments")
      assert.strictEqual((parts[3]!.result as { error: string }).error, "UnknownTool")
      assert.include(String(parts[4]!.result), "hello")
    }).pipe(provideNode))

  it.effect("is deterministic: replaying the journaled step results rebuilds the same conversation, running no step", () =>
    Effect.gen(function*() {
      const { role, rules, steps, system } = yield* wire
      const systemMessage = system
      const input = { agentId: "a1", messages: [AgentSteps.userMessage("read a.txt")], maxSteps: 10 }
      const journal = new Map<string, unknown>()
      const first = yield* AgentLoop.run(input, {
        model: (step, messages) =>
          Effect.tap(
            steps.model({ agentId: "a1", step, model: "default", system: systemMessage, messages, rules }),
            (r) => Effect.sync(() => journal.set(`model/${step}`, r))
          ),
        tool: (step, call) =>
          Effect.tap(
            steps.tool({ agentId: "a1", step, role: role.name, depth: 0, rules, call }),
            (r) => Effect.sync(() => journal.set(`tool/${step}/${call.id}`, r))
          )
      })
      const replay = yield* AgentLoop.run(input, {
        model: (step) => Effect.succeed(journal.get(`model/${step}`) as AgentSteps.ModelStep),
        tool: (step, call) => Effect.succeed(journal.get(`tool/${step}/${call.id}`) as AgentSteps.ToolStep)
      })
      assert.strictEqual(journal.size, 12)
      assert.deepStrictEqual(replay.messages, first.messages)
      assert.strictEqual(replay.text, first.text)
    }).pipe(provideNode))
})
