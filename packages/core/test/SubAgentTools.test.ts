import { assert, describe, it } from "@effect/vitest"
import { ScriptedModel } from "@fibril/testkit"
import { Context, Effect, Fiber, FileSystem, Layer, Path } from "effect"
import type { Prompt } from "effect/ai"
import { TestClock } from "effect/testing"
import * as Fibril from "../src/Fibril.ts"
import * as Models from "../src/Models.ts"
import { Session } from "../src/Session.ts"
import * as SubAgentManager from "../src/SubAgentManager.ts"
import { provideNode, report, setup } from "./support.ts"

const toolResults = (messages: ReadonlyArray<Prompt.Message>) =>
  messages.flatMap((m) => m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [p] : []) : [])

const resultOf = <A>(part: { readonly result: unknown }) => part.result as A

describe("the agent_* tools", () => {
  it.effect("spawn, wait (any/all, timeout), result, list and cancel through the model, with parameter aliases", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({
        rules: [
          { match: { prompt: "quick" }, turns: [{ text: report("quick done") }] },
          { match: { prompt: "slow" }, turns: [{ delay_ms: 60_000, text: report("slow done") }] },
          {
            match: { depth: 0 },
            respond: (c) => {
              const ids = c.toolResults
                .filter((r) => r.name === "agent_spawn" || r.name === "agent_open")
                .map((r) => (r.result as { agent_id: string }).agent_id)
              switch (c.turn) {
                case 0:
                  return {
                    tool_calls: [
                      { name: "agent_spawn", args: { message: "quick", type: "explorer", description: "q" } },
                      { name: "agent_open", args: { input: "slow", agent_type: "worker", inherit_context: false } }
                    ]
                  }
                case 1:
                  return { tool_calls: [{ name: "agent_wait", args: { ids, wait_mode: "any" } }] }
                case 2:
                  return { tool_calls: [{ name: "agent_wait", args: { id: ids[1]!, timeout_ms: 1000 } }] }
                case 3:
                  return {
                    tool_calls: [
                      { name: "agent_result", args: { id: ids[0]! } },
                      { name: "agent_list", args: {} },
                      { name: "agent_close", args: { agent_id: ids[1]!, reason: "no longer needed" } }
                    ]
                  }
                default:
                  return { text: "done" }
              }
            }
          }
        ]
      })
      const session = get(Session)
      const root = yield* session.create()
      const fiber = yield* Effect.forkChild(session.prompt(root.id, "go"))
      for (let i = 0; i < 120 && fiber.pollUnsafe() === undefined; i++) yield* TestClock.adjust("1 second")
      assert.strictEqual((yield* Fiber.join(fiber)).text, "done")
      const results = toolResults(yield* session.transcript(root.id))
      assert.isTrue(results.every((r) => !r.isFailure), JSON.stringify(results.filter((r) => r.isFailure)))
      const [spawnedQuick, spawnedSlow, waitedAny, waitedTimeout, result, list, closed] = results
      assert.strictEqual(resultOf<{ role: string }>(spawnedQuick!).role, "explore")
      assert.strictEqual(resultOf<{ role: string }>(spawnedSlow!).role, "general")
      const any = resultOf<{ completed: Array<{ summary: string }>; still_running: Array<string>; timed_out: boolean }>(
        waitedAny!
      )
      assert.deepStrictEqual(any.completed.map((c) => c.summary), ["quick done"])
      assert.strictEqual(any.still_running.length, 1)
      assert.isTrue(resultOf<{ timed_out: boolean }>(waitedTimeout!).timed_out)
      assert.strictEqual(resultOf<{ status: string }>(result!).status, "completed")
      assert.strictEqual(resultOf<{ agents: Array<unknown> }>(list!).agents.length, 2)
      const close = resultOf<{ status: string; reason: string }>(closed!)
      assert.strictEqual(close.status, "cancelled")
      assert.strictEqual(close.reason, "no longer needed")
    }).pipe(provideNode))

  it.effect("missing ids and unknown agents are tool errors the model can read", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({
        rules: [{
          turns: [
            { tool_calls: [{ name: "agent_result", args: {} }, { name: "agent_cancel", args: { id: "agent_nope" } }] },
            { text: "ok" }
          ]
        }]
      })
      const session = get(Session)
      const root = yield* session.create()
      yield* session.prompt(root.id, "go")
      const [missing, unknown] = toolResults(yield* session.transcript(root.id))
      assert.include(resultOf<{ message: string }>(missing!).message, "\"agent_id\" is required (also accepted as id)")
      assert.strictEqual(resultOf<{ error: string }>(unknown!).error, "AgentNotFound")
    }).pipe(provideNode))

  it.effect("spawning tools are denied at max_depth: a child cannot spawn with the default depth of 1", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({
        rules: [
          {
            match: { depth: 1 },
            turns: [{ tool_calls: [{ name: "agent_spawn", args: { prompt: "grandchild" } }] }, {
              text: report("tried")
            }]
          },
          {
            match: { depth: 0 },
            turns: [{ tool_calls: [{ name: "task", args: { description: "d", prompt: "child" } }] }, { text: "done" }]
          }
        ]
      })
      const session = get(Session)
      const root = yield* session.create()
      yield* session.prompt(root.id, "go")
      const task = toolResults(yield* session.transcript(root.id))[0]!.result as { agent_id: string }
      const denied = toolResults(yield* session.transcript(task.agent_id))[0]!
      assert.isTrue(denied.isFailure)
      assert.include(resultOf<{ message: string }>(denied).message, "may not use spawn tools")
      assert.strictEqual((yield* get(SubAgentManager.SubAgentManager).list({ includeArchived: true })).length, 1)
    }).pipe(provideNode))
})

describe("budgets", () => {
  it.effect("max_tokens, max_wall_secs and the tree budget end an agent with a clear reason", () =>
    Effect.gen(function*() {
      const { get } = yield* setup(
        {
          rules: [
            {
              match: { prompt: "chatty" },
              turns: [{ tool_calls: [{ name: "list_dir", args: {} }], usage: { input: 600, output: 10 } }],
              repeat_last: true
            },
            { match: { prompt: "slow" }, turns: [{ delay_ms: 120_000, text: "late" }] }
          ]
        },
        { apiTimeoutSecs: 600 },
        { subagents: { budgets: { maxTokens: 1000, maxWallSecs: 60 } } }
      )
      const manager = get(SubAgentManager.SubAgentManager)
      const chatty = yield* manager.spawn(undefined, { prompt: "chatty" })
      const slow = yield* manager.spawn(undefined, { prompt: "slow" })
      const tokens = yield* manager.result(chatty.agent_id, { block: true })
      assert.strictEqual(tokens.status, "failed")
      assert.include(tokens.reason!, "max_tokens=1000")
      yield* TestClock.adjust("61 seconds")
      const wall = yield* manager.result(slow.agent_id, { block: true })
      assert.strictEqual(wall.status, "failed")
      assert.include(wall.reason!, "max_wall_secs=60")
    }).pipe(provideNode))

  it.effect("a tree budget is shared: the second child stops when the tree has spent it", () =>
    Effect.gen(function*() {
      const { get } = yield* setup(
        {
          rules: [
            {
              match: { prompt: "spend" },
              turns: [{ tool_calls: [{ name: "list_dir", args: {} }], usage: { input: 400, output: 0 } }],
              repeat_last: true
            },
            {
              match: { depth: 0 },
              turns: [
                {
                  tool_calls: [{ name: "task", args: { description: "a", prompt: "spend a" } }],
                  usage: { input: 100, output: 0 }
                },
                { text: "done", usage: { input: 1, output: 1 } }
              ]
            }
          ]
        },
        {},
        { subagents: { budgets: { treeMaxTokens: 1000 } } }
      )
      const session = get(Session)
      const root = yield* session.create()
      yield* session.prompt(root.id, "go")
      const task = toolResults(yield* session.transcript(root.id))[0]!.result as {
        status: string
        summary: string
        tokens: { input: number }
      }
      assert.strictEqual(task.status, "failed")
      assert.include(task.summary, "tree_max_tokens=1000")
      assert.strictEqual(task.tokens.input, 1200)
    }).pipe(provideNode))

  it.effect("a tree budget counts the root's and the siblings' spend: the second child alone is under it, the tree is not", () =>
    Effect.gen(function*() {
      // root 400 + first child 400 = 800 (under 1000); the second child's 300 makes 1100. Its own
      // subtree (300), or its own plus the root's (700), or its plus its sibling's (700) would not.
      const child = (prompt: string, input: number): ScriptedModel.Rule => ({
        match: { prompt },
        turns: [
          { tool_calls: [{ name: "list_dir", args: {} }], usage: { input, output: 0 } },
          { text: report(`${prompt} finished`), usage: { input: 0, output: 0 } }
        ]
      })
      const { get } = yield* setup(
        {
          rules: [
            child("first", 400),
            child("second", 300),
            {
              match: { depth: 0 },
              turns: [
                {
                  tool_calls: [{ name: "task", args: { description: "a", prompt: "first" } }],
                  usage: { input: 400, output: 0 }
                },
                { tool_calls: [{ name: "task", args: { description: "b", prompt: "second" } }] },
                { text: "done" }
              ]
            }
          ]
        },
        {},
        { subagents: { budgets: { treeMaxTokens: 1000 } } }
      )
      const session = get(Session)
      const root = yield* session.create()
      yield* session.prompt(root.id, "go")
      const [first, second] = toolResults(yield* session.transcript(root.id)).map((part) =>
        part.result as { status: string; summary: string }
      )
      assert.strictEqual(first!.status, "completed")
      assert.strictEqual(first!.summary, "first finished")
      assert.strictEqual(second!.status, "failed")
      assert.include(second!.summary, "tree_max_tokens=1000")
    }).pipe(provideNode))
})

describe("models per role", () => {
  it.effect("explicit > role map > default > parent's; unknown ids are refused at spawn with the accepted list", () =>
    Effect.gen(function*() {
      const script = (name: string): ScriptedModel.ScriptInput => ({
        rules: [{ turns: [{ text: report(`answered by ${name}`) }] }]
      })
      const catalog = Layer.unwrap(Effect.gen(function*() {
        const big = yield* ScriptedModel.make(script("big"))
        const small = yield* ScriptedModel.make(script("small"))
        const cheap = yield* ScriptedModel.make(script("cheap"))
        return Models.fromRecord({ big, small, cheap }, "big")
      }))
      const built = yield* Layer.build(
        Fibril.layerWithModels({
          cwd: process.cwd(),
          subagents: { roleModels: { explore: "small" }, defaultModel: "cheap" }
        }).pipe(Layer.provideMerge(catalog))
      )
      const manager = Context.get(built, SubAgentManager.SubAgentManager)
      const summaryOf = (request: SubAgentManager.SpawnRequest) =>
        Effect.map(manager.run(undefined, request), (agent) => [agent.model, agent.outcome?.summary])
      assert.deepStrictEqual(yield* summaryOf({ prompt: "x", role: "explore", model: "big" }), [
        "big",
        "answered by big"
      ])
      assert.deepStrictEqual(yield* summaryOf({ prompt: "x", role: "explore" }), ["small", "answered by small"])
      assert.deepStrictEqual(yield* summaryOf({ prompt: "x", role: "review" }), ["cheap", "answered by cheap"])
      const error = yield* Effect.flip(manager.spawn(undefined, { prompt: "x", model: "gpt-imaginary" }))
      assert.strictEqual(error._tag, "UnknownModel")
      assert.strictEqual(error.message, "unknown model \"gpt-imaginary\"; accepted: big, small, cheap")
      assert.strictEqual((yield* manager.list({ includeArchived: true })).length, 3)
    }).pipe(provideNode))

  it("role models from settings: [subagents.models] wins over the *_model keys", () => {
    const models = SubAgentManager.roleModelsFrom({
      maxConcurrent: 10,
      maxDepth: 1,
      admission: "reject",
      heartbeatTimeoutSecs: 300,
      processMemoryMb: 512,
      maxSteps: undefined,
      maxTokens: undefined,
      maxWallSecs: undefined,
      treeMaxTokens: undefined,
      maxResultChars: 16_384,
      defaultModel: "d",
      workerModel: "w",
      explorerModel: "e",
      awaiterModel: "a",
      reviewModel: "r",
      customModel: "c",
      models: { Explorer: "m-explore", verifier: "m-verify" }
    })
    assert.deepStrictEqual(models, {
      general: "w",
      implementer: "w",
      tool_agent: "w",
      explore: "m-explore",
      plan: "a",
      review: "r",
      custom: "c",
      verifier: "m-verify"
    })
  })
})

describe("memory", () => {
  it.effect("remember writes one bullet per call, and later agents (children too) see memory.md", () =>
    Effect.gen(function*() {
      let childSystem = ""
      const { get, fs, path, root } = yield* setup({
        rules: [
          { match: { depth: 1 }, respond: (c) => ((childSystem = c.system), { text: report("child saw memory") }) },
          {
            match: { depth: 0 },
            turns: [
              { tool_calls: [{ name: "remember", args: { note: "The tests use\nthe ScriptedModel" } }] },
              { tool_calls: [{ name: "task", args: { description: "d", prompt: "child" } }] },
              { text: "done" }
            ]
          }
        ]
      })
      const session = get(Session)
      const agent = yield* session.create()
      yield* session.prompt(agent.id, "go")
      assert.strictEqual(
        yield* fs.readFileString(path.join(root, ".fibril", "memory.md")),
        "- The tests use the ScriptedModel\n"
      )
      assert.include(childSystem, "## Memory")
      assert.include(childSystem, "- The tests use the ScriptedModel")
    }).pipe(provideNode))
})

describe("agents defined in markdown", () => {
  it.effect("a .fibril/agents and a .claude/agents definition are usable as subagent_type; bad files do not stop the rest", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      yield* fs.makeDirectory(path.join(dir, ".fibril", "agents"), { recursive: true })
      yield* fs.makeDirectory(path.join(dir, ".claude", "agents"), { recursive: true })
      yield* fs.writeFileString(
        path.join(dir, ".fibril", "agents", "scout.md"),
        "---\nname: scout\ndescription: Finds files fast\nrole: explore\ntools: [glob, read_file]\n---\nYou are Scout. Find files.\n"
      )
      yield* fs.writeFileString(
        path.join(dir, ".claude", "agents", "linter.md"),
        "---\nname: linter\ndescription: Checks style\ntools: Read, Grep\n---\nYou lint code.\n"
      )
      yield* fs.writeFileString(path.join(dir, ".claude", "agents", "broken.md"), "no frontmatter here\n")
      const seen = new Map<string, { system: string }>()
      const { get } = yield* setup(
        {
          rules: [
            {
              match: { depth: 1 },
              respond: (c) => {
                seen.set(c.role ?? "", { system: c.system })
                return c.turn === 0
                  ? { tool_calls: [{ name: "write_file", args: { path: "x.txt", content: "x" } }] }
                  : { text: report(`${c.role} done`) }
              }
            },
            {
              match: { depth: 0 },
              turns: [
                {
                  tool_calls: [
                    { name: "task", args: { description: "s", prompt: "scout it", subagent_type: "Scout" } },
                    { name: "task", args: { description: "l", prompt: "lint it", subagent_type: "linter" } },
                    { name: "task", args: { description: "w", prompt: "x", subagent_type: "wizard" } }
                  ]
                },
                { text: "done" }
              ]
            }
          ]
        },
        {},
        { root: dir }
      )
      const session = get(Session)
      const root = yield* session.create()
      yield* session.prompt(root.id, "go")
      const [scout, linter, wizard] = toolResults(yield* session.transcript(root.id))
      assert.strictEqual(resultOf<{ summary: string }>(scout!).summary, "scout done")
      assert.strictEqual(resultOf<{ summary: string }>(linter!).summary, "linter done")
      assert.include(seen.get("scout")!.system, "You are Scout. Find files.")
      assert.include(seen.get("scout")!.system, "SUMMARY:")
      assert.include(seen.get("linter")!.system, "You lint code.")
      // Their tools are restricted to what their files allow: write_file was refused to both.
      const scoutCalls = toolResults(yield* session.transcript(resultOf<{ agent_id: string }>(scout!).agent_id))
      assert.isTrue(scoutCalls[0]!.isFailure)
      assert.include(resultOf<{ message: string }>(scoutCalls[0]!).message, "not among the tools allowed")
      assert.isTrue(wizard!.isFailure)
      assert.include(
        resultOf<{ message: string }>(wizard!).message,
        "agents defined in .fibril/agents, .claude/agents or .opencode/agent: scout, linter"
      )
    }).pipe(provideNode))
})
