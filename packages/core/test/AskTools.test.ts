// `ask_tools` on a spawn (Permission rule 5): a caller makes a child's calls ask, through the
// real tools (agent_spawn/task definitions), the embedded manager and the ScriptedModel, and a
// grandchild can never drop an ask its parent was given.
import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Effect } from "effect"
import { SubAgentManager } from "../src/SubAgentManager.ts"
import * as Task from "../src/tools/Task.ts"
import { provideNode, report, setup } from "./support.ts"

const script: ScriptedModel.ScriptInput = {
  rules: [
    {
      match: { prompt: "coordinate" },
      respond: (c) =>
        c.turn === 0
          ? { tool_calls: [{ name: "agent_spawn", args: { prompt: "asker", ask_tools: ["shell"] } }] }
          : { text: report("coordinated") }
    },
    {
      // The asker tries to drop its ask for the one it spawns: an empty ask_tools.
      match: { prompt: "asker" },
      respond: (c) =>
        c.turn === 0
          ? { tool_calls: [{ name: "agent_spawn", args: { prompt: "nested", ask_tools: [] } }] }
          : { text: report("asked") }
    },
    {
      match: { prompt: "nested" },
      respond: (c) =>
        c.turn === 0
          ? { tool_calls: [{ name: "shell", args: { command: "echo ran >> side-effect.txt" } }] }
          : { text: report(`shell said: ${JSON.stringify(c.lastToolResults[0]?.result)}`) }
    }
  ]
}

describe("ask_tools", () => {
  it.effect("a spawn's ask_tools make its subtree's calls ask; a grandchild cannot drop the ask; nothing runs", () =>
    Effect.gen(function*() {
      // Nobody answers here (the default Approvals): an asked call is denied with a reason.
      const { fs, get, path, root } = yield* setup(script, { maxDepth: 3 }, {
        sandbox: { mode: "off", network: false, writablePaths: [] }
      })
      const manager = get(SubAgentManager)
      const parent = yield* manager.spawn(undefined, { prompt: "coordinate", role: "general" })
      assert.strictEqual((yield* manager.result(parent.agent_id, { block: true })).status, "completed")
      const all = yield* manager.list({ includeArchived: true })
      const nested = all.find((agent) => agent.depth === 3)
      assert.isDefined(nested)
      const done = yield* manager.result(nested!.agent_id, { block: true })
      assert.include(done.outcome?.summary ?? "", "nobody can answer approval questions here")
      assert.include(done.outcome?.summary ?? "", "is an ask tool for the general sub-agent at depth 3")
      assert.isFalse(yield* fs.exists(path.join(root, "side-effect.txt")))
    }).pipe(Effect.scoped, provideNode))

  it.effect("a posture asks too; a name that is neither a tool nor a posture is refused with what is accepted", () =>
    Effect.gen(function*() {
      const { fs, get, path, root } = yield* setup({
        rules: [{
          match: { prompt: "write" },
          respond: (c) =>
            c.turn === 0
              ? { tool_calls: [{ name: "write_file", args: { path: "out.txt", content: "x" } }] }
              : { text: report(`write said: ${JSON.stringify(c.lastToolResults[0]?.result)}`) }
        }]
      }, { maxDepth: 2 })
      const manager = get(SubAgentManager)
      const writer = yield* manager.spawn(undefined, { prompt: "write", role: "general", askTools: ["write"] })
      const done = yield* manager.result(writer.agent_id, { block: true })
      assert.include(done.outcome?.summary ?? "", "write tools ask")
      assert.isFalse(yield* fs.exists(path.join(root, "out.txt")))
      const refused = yield* Effect.flip(manager.spawn(undefined, { prompt: "x", askTools: ["shel", "write"] }))
      assert.strictEqual(refused._tag, "InvalidRoleRequest")
      assert.include(refused.message, `ask_tools names a tool or posture that does not exist: "shel"`)
      assert.include(refused.message, "the postures read, write, shell, spawn, plan, memory")
      // `task` (the Toolkit's and MCP's tool too) carries it the same way.
      assert.deepStrictEqual(
        Task.request({ description: "d", prompt: "p", ask_tools: ["shell"] }).askTools,
        ["shell"]
      )
    }).pipe(Effect.scoped, provideNode))

  it.effect("patterns ask and deny by argument: a shell command pattern, a path pattern; other calls of the tool run", () =>
    Effect.gen(function*() {
      const { fs, get, path, root } = yield* setup(
        {
          rules: [{
            match: { prompt: "patterns" },
            respond: (c) =>
              c.turn === 0
                ? {
                  tool_calls: [
                    { name: "shell", args: { command: "git push origin main; echo pushed >> pushed.txt" } },
                    { name: "shell", args: { command: "echo fine >> fine.txt" } },
                    { name: "write_file", args: { path: "secret/key.txt", content: "x" } },
                    { name: "write_file", args: { path: "open/notes.txt", content: "x" } }
                  ]
                }
                : { text: report(JSON.stringify(c.lastToolResults.map((r) => r.result))) }
          }]
        },
        { maxDepth: 1 },
        {
          ask: ["shell(git push *)"],
          deny: ["write_file(secret/**)"],
          sandbox: { mode: "off", network: false, writablePaths: [] }
        }
      )
      const manager = get(SubAgentManager)
      const agent = yield* manager.spawn(undefined, { prompt: "patterns", role: "general" })
      const summary = (yield* manager.result(agent.agent_id, { block: true })).outcome?.summary ?? ""
      assert.include(summary, "ApprovalDenied")
      assert.include(summary, "git push *)\\\" asks for the general")
      assert.include(summary, "PermissionDenied")
      assert.include(summary, "write_file(secret/**)\\\" is denied")
      assert.isFalse(yield* fs.exists(path.join(root, "pushed.txt")))
      assert.isFalse(yield* fs.exists(path.join(root, "secret/key.txt")))
      assert.isTrue(yield* fs.exists(path.join(root, "fine.txt")))
      assert.isTrue(yield* fs.exists(path.join(root, "open/notes.txt")))
    }).pipe(Effect.scoped, provideNode))
})
