import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Fiber, Layer, Stream } from "effect"
import { Tool } from "effect/ai"
import { type AgentView, SubAgentManager } from "../src/SubAgentManager.ts"
import * as TaskToolkit from "../src/TaskToolkit.ts"
import * as AgentTools from "../src/tools/Agents.ts"
import { provideNode, report, setup } from "./support.ts"

const script = {
  rules: [
    { match: { prompt: "hang" }, turns: [{ hang: true as const }] },
    { turns: [{ text: report("done") }], repeat_last: true }
  ]
}

/** The toolkit's handlers over a fresh core; returns the built toolkit and the manager. */
const withToolkit = (options: TaskToolkit.Options = {}) =>
  Effect.gen(function*() {
    const { context } = yield* setup(script)
    const handlers = yield* Layer.build(
      TaskToolkit.layerWith(options).pipe(Layer.provide(Layer.succeedContext(context)))
    )
    const toolkit = yield* TaskToolkit.toolkit.pipe(Effect.provideContext(handlers))
    return { toolkit, manager: Context.get(context, SubAgentManager) }
  })

describe("TaskToolkit", () => {
  it("declares fourteen tools (agent_assign and agent_merge among them) with object output schemas and explicit MCP hints", () => {
    assert.sameMembers([...TaskToolkit.names], [
      "task",
      "agent_spawn",
      "agent_open",
      "agent_wait",
      "agent_result",
      "agent_cancel",
      "agent_close",
      "agent_eval",
      "agent_assign",
      "handle_read",
      "agent_list",
      "agent_send_input",
      "agent_resume",
      "agent_merge"
    ])
    const tools = TaskToolkit.toolkit.tools
    assert.strictEqual(tools.task.failureMode, "return")
    assert.strictEqual(TaskToolkit.mcpToolkit.tools.task.failureMode, "error")
    assert.isFalse(Context.get(tools.task.annotations, Tool.Readonly))
    assert.isTrue(Context.get(tools.agent_list.annotations, Tool.Readonly))
    assert.isFalse(Context.get(tools.agent_result.annotations, Tool.Destructive))
    assert.deepStrictEqual(Tool.getJsonSchema(tools.task).required, ["description", "prompt"])
  })

  it("serves the loop's own definitions: same names, descriptions and parameter schemas", () => {
    assert.deepStrictEqual(Object.keys(TaskToolkit.toolkit.tools), AgentTools.definitions.map((d) => d.name))
    for (const definition of AgentTools.definitions) {
      const tool = (TaskToolkit.toolkit.tools as Record<string, Tool.Any>)[definition.name]!
      assert.strictEqual(tool.description, definition.description, definition.name)
      assert.strictEqual(tool.parametersSchema, definition.parameters, definition.name)
    }
  })

  it.live("agent_assign narrows a running agent's role through the toolkit, as in the loop", () =>
    Effect.gen(function*() {
      const { toolkit, manager } = yield* withToolkit()
      const [spawned] = yield* Stream.runCollect(yield* toolkit.handle("agent_spawn", { prompt: "hang" }))
      const id = (spawned?.encodedResult as { agent_id: string }).agent_id
      const [assigned] = yield* Stream.runCollect(
        yield* toolkit.handle("agent_assign", { agent_id: id, role: "explore", objective: "only look" })
      )
      assert.isFalse(assigned?.isFailure)
      assert.deepInclude((assigned?.encodedResult as { agent: object }).agent, { agent_id: id, role: "explore" })
      const [widened] = yield* Stream.runCollect(
        yield* toolkit.handle("agent_assign", { agent_id: id, role: "general" })
      )
      assert.deepInclude(widened?.encodedResult as object, { kind: "PermissionWidening" })
      yield* manager.cancel(id, "test over")
    }).pipe(provideNode))

  it.live("task runs a sub-agent to its structured result", () =>
    Effect.gen(function*() {
      const { toolkit, manager } = yield* withToolkit()
      const [out] = yield* Stream.runCollect(yield* toolkit.handle("task", { description: "d", prompt: "go" }))
      assert.isFalse(out?.isFailure)
      assert.deepInclude(out?.encodedResult as object, { status: "completed", summary: "done" })
      const agents = yield* manager.list({ includeArchived: false })
      assert.deepStrictEqual(agents.map((a) => [a.depth, a.status, a.parent_id]), [[1, "completed", undefined]])
    }).pipe(provideNode))

  it.live("failures are returned to the model as TaskToolError with the readable message", () =>
    Effect.gen(function*() {
      const { toolkit } = yield* withToolkit()
      const [role] = yield* Stream.runCollect(
        yield* toolkit.handle("task", { description: "d", prompt: "go", subagent_type: "wizard" })
      )
      assert.isTrue(role?.isFailure)
      assert.deepInclude(role?.encodedResult as object, { _tag: "TaskToolError", tool: "task", kind: "UnknownRole" })
      assert.include(String((role?.encodedResult as { message: string }).message), "Accepted (case-insensitive)")
      const [missing] = yield* Stream.runCollect(yield* toolkit.handle("agent_result", { id: "agent_nope" }))
      assert.deepInclude(missing?.encodedResult as object, { kind: "AgentNotFound" })
    }).pipe(provideNode))

  it.live("an interrupted task call cancels its agent (reason recorded); the hook sees the agent", () =>
    Effect.gen(function*() {
      const seen: Array<string> = []
      const { toolkit, manager } = yield* withToolkit({
        cancelReason: "stopped by the host",
        whileTaskRuns: Effect.succeed((agent: AgentView) => Effect.sync(() => void seen.push(agent.agent_id)))
      })
      const call = yield* Effect.forkChild(
        Effect.flatMap(toolkit.handle("task", { description: "long", prompt: "hang" }), Stream.runCollect)
      )
      while ((yield* manager.list({ includeArchived: false })).length === 0) yield* Effect.sleep("5 millis")
      yield* Fiber.interrupt(call)
      const [agent] = yield* manager.list({ includeArchived: false })
      assert.strictEqual(agent?.status, "cancelled")
      assert.strictEqual(agent?.reason, "stopped by the host")
      assert.deepStrictEqual(seen, [agent?.agent_id])
    }).pipe(provideNode))

  it.effect("agent_wait without ids hands over each agent started here once, also one that finished before it asked", () =>
    Effect.gen(function*() {
      const { toolkit, manager } = yield* withToolkit()
      const call = (name: string, params: object) =>
        Effect.map(
          Effect.flatMap(toolkit.handle(name as "agent_wait", params as never), Stream.runCollect),
          ([out]) => out?.encodedResult as { completed: ReadonlyArray<{ agent_id: string }>; still_running: unknown }
        )
      const first = (yield* call("agent_spawn", { description: "a", prompt: "go" })) as unknown as { agent_id: string }
      yield* manager.wait([first.agent_id], { mode: "all" })
      const hanging = (yield* call("agent_spawn", { description: "h", prompt: "hang" })) as unknown as {
        agent_id: string
      }
      // The first finished before this wait: it is handed over now, with the hanging one still running.
      const wait1 = yield* call("agent_wait", {})
      assert.deepStrictEqual(wait1.completed.map((a) => a.agent_id), [first.agent_id])
      assert.deepStrictEqual(wait1.still_running, [hanging.agent_id])
      // Once handed over, not again; a result read by id counts as handed over too.
      yield* manager.cancel(hanging.agent_id, "enough")
      yield* call("agent_result", { id: hanging.agent_id })
      const wait2 = yield* call("agent_wait", {})
      assert.deepStrictEqual([wait2.completed, wait2.still_running], [[], []])
    }).pipe(provideNode))
})
