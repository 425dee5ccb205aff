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
      // The input comes first, copied: the caller's array is not the run's.
      assert.strictEqual(result.messages[0], input.messages[0])
      assert.notStrictEqual(result.messages, input.messages)
      assert.strictEqual(input.messages.length, 1)
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

  it.effect("the session's hooks: a cut step is not counted, queued input steps again, the usage hook runs before the token budget", () =>
    Effect.gen(function*() {
      const turn = (text: string, calls: ReadonlyArray<AgentSteps.StepToolCall> = []): AgentSteps.ModelStep => ({
        delivered: [],
        text,
        toolCalls: calls,
        usage: { input: 10, output: 5, cached: 0 },
        usageReported: true,
        assistant: Prompt.makeMessage("assistant", { content: [Prompt.makePart("text", { text })] })
      })
      // Model calls in order: cut, a tool call, an answer (then input was queued), the final answer.
      const answers: Array<AgentSteps.ModelStep | undefined> = [
        undefined,
        turn("looking", [{ id: "c1", name: "lookup", params: {} }]),
        turn("first answer"),
        turn("final answer")
      ]
      const seenSteps: Array<number> = []
      const appended: Array<string> = []
      const afterModel: Array<number> = []
      const history: Array<Prompt.Message> = [AgentSteps.userMessage("go")]
      let queued = 1
      const result = yield* AgentLoop.run({ agentId: "a1", messages: history, history, maxSteps: 3 }, {
        model: (step) =>
          Effect.sync(() => {
            seenSteps.push(step)
            return answers.shift()
          }),
        tools: (step, calls) =>
          Effect.succeed(AgentSteps.toolMessage(calls.map((call) => ({
            id: call.id,
            name: call.name,
            isFailure: false,
            result: `result of step ${step}`
          }))))
      }, {
        onMessage: (message) => Effect.sync(() => void appended.push(message.role)),
        afterModel: (_, usage) => Effect.sync(() => void afterModel.push(usage.input)),
        beforeFinish: () => Effect.succeed(queued-- > 0 ? [AgentSteps.userMessage("one more thing")] : undefined)
      })
      assert.strictEqual(result.text, "final answer")
      // The cut call took step 0 again; three counted steps, within maxSteps = 3.
      assert.deepStrictEqual(seenSteps, [0, 0, 1, 2])
      assert.strictEqual(result.steps, 3)
      assert.strictEqual(result.toolCalls, 1)
      assert.deepStrictEqual(result.usage, { input: 30, output: 15, cached: 0 })
      // In place: the caller's array is the run's conversation.
      assert.strictEqual(result.messages, history)
      assert.deepStrictEqual(history.map((m) => m.role), [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant"
      ])
      // onMessage sees the turns and the input, not the tool message (the tool step hands its results over).
      assert.deepStrictEqual(appended, ["assistant", "assistant", "user", "assistant"])
      assert.deepStrictEqual(afterModel, [10, 20, 30])
      // The run's own token budget is checked after the hook saw the step.
      const seen: Array<number> = []
      const over = yield* Effect.flip(AgentLoop.run({ agentId: "a2", messages: [], maxSteps: 5, maxTokens: 20 }, {
        model: () => Effect.succeed(turn("again", [{ id: "c", name: "lookup", params: {} }])),
        tool: (_, call) => Effect.succeed({ id: call.id, name: call.name, isFailure: false, result: "ok" })
      }, { afterModel: (_, usage) => Effect.sync(() => void seen.push(usage.output)) }))
      assert.strictEqual(over._tag, "BudgetExceeded")
      assert.isTrue(over._tag === "BudgetExceeded" && over.budget === "max_tokens")
      assert.deepStrictEqual(seen, [5, 10])
      // A run that spends exactly its token budget is within it.
      const exact = yield* AgentLoop.run({ agentId: "a4", messages: [], maxSteps: 5, maxTokens: 15 }, {
        model: () => Effect.succeed(turn("done")),
        tool: () => Effect.die("no tool call here")
      })
      assert.strictEqual(exact.text, "done")
      // And max_steps counts only real steps: two model steps run, the third is refused.
      let modelCalls = 0
      const capped = yield* Effect.flip(AgentLoop.run({ agentId: "a3", messages: [], maxSteps: 2 }, {
        model: () =>
          Effect.sync(() => {
            modelCalls++
            return turn("again", [{ id: "c", name: "lookup", params: {} }])
          }),
        tool: (_, call) => Effect.succeed({ id: call.id, name: call.name, isFailure: false, result: "ok" })
      }))
      assert.isTrue(capped._tag === "BudgetExceeded" && capped.budget === "max_steps" && capped.limit === 2)
      assert.strictEqual(modelCalls, 2)
    }))

  it.effect("a turn's tool calls run concurrently, and their results keep the calls' order", () =>
    Effect.gen(function*() {
      const calls = [{ id: "c1", name: "slow", params: {} }, { id: "c2", name: "fast", params: {} }]
      const answers: Array<AgentSteps.ModelStep> = [
        {
          delivered: [],
          text: "",
          toolCalls: calls,
          usage: { input: 1, output: 1, cached: 0 },
          usageReported: true,
          assistant: Prompt.makeMessage("assistant", { content: [] })
        },
        {
          delivered: [],
          text: "both done",
          toolCalls: [],
          usage: { input: 1, output: 1, cached: 0 },
          usageReported: true,
          assistant: Prompt.makeMessage("assistant", { content: [Prompt.makePart("text", { text: "both done" })] })
        }
      ]
      let inFlight = 0
      let most = 0
      const result = yield* AgentLoop.run({ agentId: "a5", messages: [], maxSteps: 5 }, {
        model: () => Effect.succeed(answers.shift()!),
        tool: (_, call) =>
          Effect.gen(function*() {
            most = Math.max(most, ++inFlight)
            // The first call yields more, so it ends last.
            for (let i = 0; i < (call.id === "c1" ? 3 : 1); i++) yield* Effect.yieldNow
            inFlight--
            return { id: call.id, name: call.name, isFailure: false, result: call.id }
          })
      })
      assert.strictEqual(result.text, "both done")
      assert.strictEqual(most, 2)
      assert.deepStrictEqual(toolResults(result.messages).map((p) => p.id), ["c1", "c2"])
    }))
})
