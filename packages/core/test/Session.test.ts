import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, PubSub, Ref, Schema } from "effect"
import type { Prompt } from "effect/ai"
import { AgentEvents } from "../src/AgentEvents.ts"
import * as Permission from "../src/Permission.ts"
import * as Roles from "../src/Roles.ts"
import { grantFor, Session } from "../src/Session.ts"
import type { TaskResult } from "../src/tools/Task.ts"
import { Todos } from "../src/tools/Todo.ts"
import { provideNode, report, setup } from "./support.ts"

const toolResults = (messages: ReadonlyArray<Prompt.Message>) =>
  messages.flatMap((m) => m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [p] : []) : [])

describe("Session and the task tool", () => {
  it.effect("a parent runs three parallel tasks and receives three structured results, not transcripts", () =>
    Effect.gen(function*() {
      // Each explorer waits at its first model call until all three are there: if the
      // three task calls ran one after another, this would never finish.
      const arrived = yield* Ref.make(0)
      const allThere = yield* Deferred.make<void>()
      const { get, fs, path, root } = yield* setup({
        rules: [
          {
            match: { role: "explore" },
            respond: (c) =>
              c.turn === 0
                ? Effect.gen(function*() {
                  const n = yield* Ref.updateAndGet(arrived, (k) => k + 1)
                  if (n === 3) yield* Deferred.succeed(allThere, undefined)
                  yield* Deferred.await(allThere)
                  return { tool_calls: [{ name: "read_file", args: { path: `${c.prompt}.txt` } }] }
                })
                : Effect.succeed({ text: report(`found ${c.prompt}`, `read ${c.prompt}.txt`) })
          },
          {
            match: { role: "general", depth: 0 },
            turns: [
              {
                tool_calls: [
                  { name: "task", args: { description: "one", prompt: "alpha", subagent_type: "explore" } },
                  { name: "task", args: { description: "two", prompt: "beta", subagent_type: "Explorer" } },
                  { name: "task", args: { description: "three", prompt: "gamma", subagent_type: "EXPLORATION" } }
                ]
              },
              { text: "done" }
            ]
          }
        ]
      })
      for (const name of ["alpha", "beta", "gamma"]) {
        yield* fs.writeFileString(path.join(root, `${name}.txt`), `CHILD-ONLY-CONTENT-${name}`)
      }
      const session = get(Session)
      const parent = yield* session.create()
      const result = yield* session.prompt(parent.id, "explore")
      assert.strictEqual(result.text, "done")

      const transcript = yield* session.transcript(parent.id)
      const results = toolResults(transcript)
      assert.strictEqual(results.length, 3)
      const tasks = results.map((r) => r.result as TaskResult)
      assert.deepStrictEqual(tasks.map((t) => t.status), ["completed", "completed", "completed"])
      assert.deepStrictEqual(tasks.map((t) => t.summary), ["found alpha", "found beta", "found gamma"])
      assert.deepStrictEqual(tasks.map((t) => t.sections?.evidence), [
        "read alpha.txt",
        "read beta.txt",
        "read gamma.txt"
      ])
      for (const task of tasks) {
        assert.strictEqual(task.tool_calls, 1)
        // No one named the model (Fibril.layer without `model`): the results name the one its
        // provider reports in its answers (the ScriptedModel says "scripted"), not a placeholder.
        assert.strictEqual(task.model, "scripted")
        assert.match(task.agent_id, /^agent_/)
        assert.isAbove(task.tokens.input, 0)
        assert.deepStrictEqual(task.contract_violations, [])
      }
      // The children really read their files, and none of it reached the parent.
      const child = yield* session.transcript(tasks[0]!.agent_id)
      assert.include(JSON.stringify(toolResults(child)), "CHILD-ONLY-CONTENT-alpha")
      assert.notInclude(JSON.stringify(transcript), "CHILD-ONLY-CONTENT")
      // Usage rolls up: the parent's tree usage includes the children's.
      const info = yield* session.info(parent.id)
      const childTokens = tasks.reduce((n, t) => n + t.tokens.input, 0)
      assert.strictEqual(info.treeUsage.input, info.usage.input + childTokens)
    }).pipe(provideNode))

  it.effect("a child calling task or todowrite gets a denial and nothing runs; explore cannot write", () =>
    Effect.gen(function*() {
      const { get, fs, path, root } = yield* setup({
        rules: [
          {
            match: { role: "explore" },
            turns: [
              {
                tool_calls: [
                  { name: "task", args: { description: "nested", prompt: "grandchild", subagent_type: "general" } },
                  { name: "todowrite", args: { todos: [{ content: "x", status: "pending" }] } },
                  { name: "write_file", args: { path: "created.txt", content: "should not exist" } }
                ]
              },
              { text: report("tried") }
            ]
          },
          { match: { prompt: "grandchild" }, turns: [{ text: "the grandchild ran" }] },
          {
            match: { role: "general", depth: 0 },
            turns: [
              { tool_calls: [{ name: "task", args: { description: "d", prompt: "child", subagent_type: "explore" } }] },
              { text: "done" }
            ]
          }
        ]
      })
      const session = get(Session)
      const subscription = yield* get(AgentEvents).subscribe
      const parent = yield* session.create()
      yield* session.prompt(parent.id, "go")
      const task = toolResults(yield* session.transcript(parent.id))[0]!.result as TaskResult
      const childResults = toolResults(yield* session.transcript(task.agent_id))
      assert.deepStrictEqual(childResults.map((r) => r.isFailure), [true, true, true])
      const messages = childResults.map((r) => (r.result as { message: string }).message)
      assert.include(messages[0]!, "\"task\" is denied for the explore sub-agent at depth 1")
      assert.include(messages[1]!, "\"todowrite\" is denied")
      assert.include(messages[2]!, "may not use write tools")
      assert.deepStrictEqual(childResults.map((r) => (r.result as { error: string }).error), [
        "PermissionDenied",
        "PermissionDenied",
        "PermissionDenied"
      ])
      assert.isFalse(yield* fs.exists(path.join(root, "created.txt")))
      assert.deepStrictEqual(yield* get(Todos).get(task.agent_id), [])
      // No grandchild session was created.
      const seen = yield* PubSub.takeAll(subscription)
      assert.deepStrictEqual([...new Set(seen.map((e) => e.agent.depth))].sort(), [0, 1])
      assert.strictEqual(seen.filter((e) => e.type === "spawned").length, 2)
    }).pipe(provideNode))
})

describe("sibling rules", () => {
  const toolNames = ["read_file", "list_dir", "grep", "glob", "shell", "write_file", "edit_file", "remember", "task"]
  const request = Schema.Struct({
    role: Schema.Literals(["general", "explore", "implementer", "review", "verifier", "custom"]),
    allowedTools: Schema.optional(Schema.Array(Schema.Literals(toolNames)))
  })
  // Siblings with the same grant share one rules object; whatever the grants, each child's
  // rules are exactly what deriving them afresh gives (the sharing changes nothing but cost).
  it.effect.prop(
    "each child's rules equal a fresh derivation; siblings with the same grant share them",
    [Schema.Array(request)],
    ([requests]) =>
      Effect.gen(function*() {
        const { get } = yield* setup({ rules: [{ turns: [{ text: "ok" }] }] })
        const session = get(Session)
        const parent = yield* session.create()
        const seen = new Map<string, Permission.Rules>()
        for (const r of requests) {
          const allowedTools = r.role === "custom" && (r.allowedTools ?? []).length === 0
            ? ["read_file"]
            : r.allowedTools
          const role = Roles.roles[r.role]
          const child = yield* session.createChild(parent.id, { role, allowedTools })
          const fresh = Permission.effective(parent.rules, grantFor(1, 1, role, { allowedTools }))
          assert.deepStrictEqual(Permission.toJson(child.rules), Permission.toJson(fresh))
          assert.strictEqual(child.rules.label, fresh.label)
          const key = `${r.role}/${allowedTools?.join(",") ?? "*"}`
          const earlier = seen.get(key)
          if (earlier !== undefined) assert.strictEqual(child.rules, earlier, "same grant, same rules object")
          seen.set(key, child.rules)
        }
      }).pipe(Effect.scoped, provideNode),
    { arbitrary: { runs: 25 } }
  )
})
