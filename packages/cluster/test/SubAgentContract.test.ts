// The sub-agent contract, one suite for both engines (engines.ts): the embedded engine (core
// Fibril.layer) and the cluster's (workflows on TestRunner). Every sub-agent tool is driven the
// way a model drives it (the ScriptedModel's tool calls, arguments as a model writes them) and
// the suite asserts what the ROOT model reads back: the shape of each result (its keys and
// their types), the statuses, and the `error` tag of a refusal. The shapes below are the
// contract; an engine that returns more, less or other keys fails.
import { assert, describe, it } from "@effect/vitest"
import { ToolRegistry } from "@fibril/core"
import type { ScriptedModel } from "@fibril/testkit"
import { Deferred, Effect, Schema } from "effect"
import { type Agent, type Engine, engines, type ToolResult, toolResultsOf } from "./engines.ts"

// --- Shapes ---------------------------------------------------------------------------------

/** A value's shape: its type, an object's keys with theirs, an array's distinct element shapes. */
type Shape = string | { readonly [key: string]: Shape } | ReadonlyArray<Shape>

const shapeOf = (value: unknown): Shape => {
  if (value === null) return "null"
  if (Array.isArray(value)) {
    const shapes = new Map<string, Shape>()
    for (const element of value) {
      const shape = shapeOf(element)
      shapes.set(JSON.stringify(shape), shape)
    }
    return [...shapes.values()]
  }
  if (typeof value === "object") {
    return Object.fromEntries(
      Object.keys(value).sort().map((key) => [key, shapeOf((value as Record<string, unknown>)[key])])
    )
  }
  return typeof value
}

/** `shape` with its keys sorted (as `shapeOf` gives them), for a readable diff. */
const sorted = (shape: Shape): Shape =>
  typeof shape === "string"
    ? shape
    : Array.isArray(shape)
    ? shape.map(sorted)
    : Object.fromEntries(Object.keys(shape).sort().map((key) => [key, sorted((shape as Record<string, Shape>)[key]!)]))

const assertShape = (value: unknown, expected: Shape, what: string) =>
  assert.deepStrictEqual(shapeOf(value), sorted(expected), `${what}: ${JSON.stringify(value)}`)

const tokens = { input: "number", output: "number", cached: "number" }
const sections = { changes: "string", evidence: "string", risks: "string", blockers: "string" }
/** A completed answer's checked claims (none in `report`'s answers: ClaimsContract.test.ts checks them). */
const claims = { checked: "number", verified: "number", unverified: [] }

/** `task`'s result. */
const TaskResult = {
  agent_id: "string",
  description: "string",
  status: "string",
  summary: "string",
  sections,
  contract_violations: [],
  claims,
  tool_calls: "number",
  steps: "number",
  tokens,
  duration_ms: "number",
  model: "string",
  transcript_handle: "string"
}

/** `agent_spawn` / `agent_open` / `agent_resume`. */
const Spawned = {
  agent_id: "string",
  session_name: "string",
  run_id: "string",
  status: "string",
  role: "string",
  model: "string",
  description: "string",
  detached: "boolean"
}

/** An agent as `agent_result`, `agent_wait`, `agent_cancel` show it: one that finished with an answer. */
const Finished = {
  agent_id: "string",
  session_name: "string",
  run_id: "string",
  description: "string",
  role: "string",
  status: "string",
  summary: "string",
  sections,
  contract_violations: [],
  claims,
  steps: "number",
  tool_calls: "number",
  tokens,
  duration_ms: "number",
  model: "string",
  transcript_handle: "string"
}

/** A `task` result without an answer (failed): no claims to check. */
const { claims: _claims, ...FailedTask } = TaskResult

/** One that ended without an answer (cancelled): a reason, no sections, no claims. */
const { sections: _, claims: _unchecked, ...withoutSections } = Finished
const Stopped = { ...withoutSections, reason: "string" }

/** One still running: no answer, no duration. */
const { duration_ms: __, ...Running } = withoutSections

/** An entry of `agent_list` (its answer is `{agents: [...]}`, as MCP wants an object root). */
const Listed = {
  agent_id: "string",
  session_name: "string",
  parent_id: "string",
  depth: "number",
  detached: "boolean",
  description: "string",
  role: "string",
  status: "string",
  steps: "number",
  tool_calls: "number"
}

/** A refusal: the error's tag and its message. */
const Refusal = { error: "string", message: "string" }

// --- Scripts --------------------------------------------------------------------------------

/** An answer in the five-section format. */
const report = (summary: string) =>
  `SUMMARY:\n${summary}\n\nCHANGES:\nnone\n\nEVIDENCE:\nread it\n\nRISKS:\nnone\n\nBLOCKERS:\nnone`

/** The agent id in the `index`th tool result the root has read. */
const idIn = (c: ScriptedModel.Conversation, index: number) =>
  (c.toolResults[index]?.result as { agent_id?: string } | undefined)?.agent_id ?? "missing"

/** A tool that blocks until the test (or a script's `respond`) opens its gate. */
const gate = Effect.gen(function*() {
  const opened = yield* Deferred.make<void>()
  const tool = ToolRegistry.define({
    name: "hold",
    description: "blocks until the gate opens",
    parameters: Schema.Struct({}),
    posture: "read",
    handler: () => Effect.as(Deferred.await(opened), "the gate opened")
  })
  return { tool, open: Deferred.succeed(opened, undefined) }
})

/** A child that blocks in `hold` until the gate opens, then answers. */
const held: ScriptedModel.Rule = {
  match: { depth: 1 },
  turns: [{ tool_calls: [{ name: "hold" }] }, { text: report("released") }]
}

const failed = (result: ToolResult) => (result.result as { error?: string }).error
const childrenOf = (agents: ReadonlyArray<Agent>) => agents.filter((agent) => agent.depth === 1)

// --- The suite ------------------------------------------------------------------------------

/** A tool named as an MCP server's is that server's for the rules (`mcp__<server>__<tool>`). */
const ping = (server: string) =>
  ToolRegistry.define({
    name: `mcp__${server}__ping`,
    description: `ping on ${server}`,
    parameters: Schema.Struct({}),
    posture: "read",
    handler: () => Effect.succeed(`${server} pong`)
  })

const contract = (engine: Engine) => {
  const tester = engine.live ? it.live : it.effect
  // An engine that runs a subset (process isolation: engines.ts says which and why) skips the rest.
  const test: typeof tester =
    ((title: string, body: Parameters<typeof tester>[1]) =>
      engine.runs === undefined || engine.runs(title) ? tester(title, body) : it.skip(title, () => {})) as typeof tester

  /** A root whose one `task` (its `args`) starts a child that lists the workspace: the child's summary. */
  const listingChild = (args: Record<string, unknown>, options?: Parameters<Engine["run"]>[1]) =>
    Effect.gen(function*() {
      const run = yield* engine.run({
        rules: [
          {
            match: { depth: 1 },
            respond: (c) =>
              c.turn === 0
                ? { tool_calls: [{ name: "list_dir", args: {} }] }
                : { text: report(`list_dir said: ${JSON.stringify(c.lastToolResults[0]?.result)}`) }
          },
          { match: { depth: 0 }, turns: [{ tool_calls: [{ name: "task", args }] }, { text: "root done" }] }
        ]
      }, options)
      assert.strictEqual(run.text, "root done")
      const [task] = run.toolResults
      assert.isFalse(task!.isFailure, JSON.stringify(task))
      return (task!.result as { summary: string }).summary
    })

  test("task: a completed child's result has the summary, the sections, tokens and a transcript handle", () =>
    Effect.gen(function*() {
      const run = yield* engine.run({
        rules: [
          { match: { depth: 1 }, turns: [{ text: report("found it") }] },
          {
            match: { depth: 0 },
            turns: [{ tool_calls: [{ name: "task", args: { description: "look", prompt: "look around" } }] }, {
              text: "root done"
            }]
          }
        ]
      })
      assert.strictEqual(run.text, "root done")
      const [task] = run.toolResults
      assert.isFalse(task!.isFailure, JSON.stringify(task))
      assertShape(task!.result, TaskResult, "task")
      const result = task!.result as { status: string; summary: string; sections: { evidence: string } }
      assert.strictEqual(result.status, "completed")
      assert.strictEqual(result.summary, "found it")
      assert.strictEqual(result.sections.evidence, "read it")
      assert.deepStrictEqual(childrenOf(run.agents).map((a) => a.status), ["completed"])
    }))

  test("task: a child whose model fails is a failed result the parent reads, not a failed call", () =>
    Effect.gen(function*() {
      const run = yield* engine.run({
        rules: [
          { match: { depth: 1 }, turns: [{ error: { kind: "fatal", message: "provider says no" } }] },
          {
            match: { depth: 0 },
            turns: [{ tool_calls: [{ name: "task", args: { description: "doomed", prompt: "try" } }] }, {
              text: "handled it"
            }]
          }
        ]
      })
      assert.strictEqual(run.text, "handled it")
      const [task] = run.toolResults
      assert.isFalse(task!.isFailure, JSON.stringify(task))
      assertShape(task!.result, FailedTask, "task")
      const result = task!.result as { status: string; summary: string }
      assert.strictEqual(result.status, "failed")
      assert.include(result.summary, "provider says no")
      assert.deepStrictEqual(childrenOf(run.agents).map((a) => a.status), ["failed"])
    }))

  test("allowed_tools: a child may call the tools it was given, and a call of another is denied", () =>
    Effect.gen(function*() {
      const run = yield* engine.run({
        rules: [
          {
            match: { depth: 1 },
            turns: [
              { tool_calls: [{ name: "list_dir", args: {} }, { name: "glob", args: { pattern: "*" } }] },
              { text: report("listed") }
            ]
          },
          {
            match: { depth: 0 },
            turns: [{
              tool_calls: [{
                name: "task",
                args: { description: "narrow", prompt: "list it", allowed_tools: ["list_dir"] }
              }]
            }, { text: "root done" }]
          }
        ]
      })
      assert.strictEqual(run.text, "root done")
      const [child] = childrenOf(run.agents)
      assert.strictEqual(child!.status, "completed")
      // By name: a store keeps each result as it lands, and the denial lands first.
      const results = toolResultsOf(run.transcripts[child!.agentId]!)
      const listed = results.find((r) => r.name === "list_dir")
      const globbed = results.find((r) => r.name === "glob")
      assert.isFalse(listed!.isFailure, JSON.stringify(listed))
      assert.isTrue(globbed!.isFailure, JSON.stringify(globbed))
      assert.include(JSON.stringify(globbed!.result), "not among the tools allowed")
    }))

  test("agent_spawn, agent_wait, agent_result: the same views of the child", () =>
    Effect.gen(function*() {
      const run = yield* engine.run({
        rules: [
          { match: { depth: 1 }, turns: [{ text: report("background done") }] },
          {
            match: { depth: 0 },
            respond: (c) => {
              switch (c.turn) {
                case 0:
                  return { tool_calls: [{ name: "agent_spawn", args: { description: "bg", prompt: "work" } }] }
                case 1:
                  return { tool_calls: [{ name: "agent_wait", args: { ids: [idIn(c, 0)] } }] }
                case 2:
                  return { tool_calls: [{ name: "agent_result", args: { agent_id: idIn(c, 0) } }] }
                default:
                  return { text: "root done" }
              }
            }
          }
        ]
      })
      assert.strictEqual(run.text, "root done")
      const [spawned, waited, result] = run.toolResults
      assert.isTrue(run.toolResults.every((r) => !r.isFailure), JSON.stringify(run.toolResults))
      assertShape(spawned!.result, Spawned, "agent_spawn")
      assertShape(waited!.result, { timed_out: "boolean", completed: [Finished], still_running: [] }, "agent_wait")
      assertShape(result!.result, Finished, "agent_result")
      const view = result!.result as { agent_id: string; status: string; summary: string }
      assert.strictEqual(view.agent_id, (spawned!.result as { agent_id: string }).agent_id)
      assert.strictEqual(view.status, "completed")
      assert.strictEqual(view.summary, "background done")
      assert.isFalse((waited!.result as { timed_out: boolean }).timed_out)
    }))

  test("agent_open and agent_close (the newer names), agent_cancel: a cancelled child with its reason", () =>
    Effect.gen(function*() {
      const { tool } = yield* gate
      const run = yield* engine.run({
        rules: [
          held,
          {
            match: { depth: 0 },
            respond: (c) => {
              switch (c.turn) {
                case 0:
                  return { tool_calls: [{ name: "agent_open", args: { description: "held", prompt: "wait" } }] }
                case 1:
                  return {
                    tool_calls: [{ name: "agent_close", args: { agent_id: idIn(c, 0), reason: "no longer needed" } }]
                  }
                case 2:
                  return { tool_calls: [{ name: "agent_cancel", args: { agent_id: idIn(c, 0) } }] }
                default:
                  return { text: "root done" }
              }
            }
          }
        ]
      }, { tools: [tool] })
      const [opened, closed, again] = run.toolResults
      assertShape(opened!.result, Spawned, "agent_open")
      assert.isFalse(closed!.isFailure, JSON.stringify(closed))
      // A child cancelled before its run started (the cluster starts a child's workflow a
      // moment later) has no duration: only an agent that started has one.
      const { duration_ms: ranFor, ...stopped } = closed!.result as Record<string, unknown>
      assert.include(["undefined", "number"], typeof ranFor)
      const { duration_ms: ___, ...StoppedShape } = Stopped
      assertShape(stopped, StoppedShape, "agent_close")
      const view = closed!.result as { status: string; reason: string }
      assert.deepStrictEqual([view.status, view.reason], ["cancelled", "no longer needed"])
      // Cancelling a finished agent again is its current state, not an error.
      assert.isFalse(again!.isFailure, JSON.stringify(again))
      assert.strictEqual((again!.result as { status: string }).status, "cancelled")
      assert.deepStrictEqual(childrenOf(run.agents).map((a) => [a.status, a.reason]), [[
        "cancelled",
        "no longer needed"
      ]])
    }))

  test("agent_send_input: delivered to a running child before its next step; to a finished one, not", () =>
    Effect.gen(function*() {
      const { open, tool } = yield* gate
      const run = yield* engine.run({
        rules: [
          {
            match: { depth: 1 },
            respond: (c) => {
              if (c.turn === 0) return { tool_calls: [{ name: "hold" }] }
              // Delivered before a model step of the child: which one depends on when the
              // engine started it (the cluster's child may not have reached `hold` yet).
              const told = c.messages.slice(2).flatMap((m) =>
                m.role === "user" ? m.content.flatMap((p) => p.type === "text" ? [p.text] : []) : []
              )
              return { text: report(`got: ${told.join(", ") || "nothing"}`) }
            }
          },
          {
            match: { depth: 0 },
            respond: (c) => {
              switch (c.turn) {
                case 0:
                  return { tool_calls: [{ name: "agent_spawn", args: { description: "listener", prompt: "listen" } }] }
                case 1:
                  return {
                    tool_calls: [{ name: "agent_send_input", args: { agent_id: idIn(c, 0), message: "hello" } }]
                  }
                case 2:
                  return Effect.as(open, { tool_calls: [{ name: "agent_wait", args: { ids: [idIn(c, 0)] } }] })
                case 3:
                  return {
                    tool_calls: [{ name: "agent_send_input", args: { agent_id: idIn(c, 0), message: "too late" } }]
                  }
                default:
                  return { text: "root done" }
              }
            }
          }
        ]
      }, { tools: [tool] })
      const [, sent, waited, late] = run.toolResults
      assert.isFalse(sent!.isFailure, JSON.stringify(sent))
      assertShape(sent!.result, { delivered: "boolean", agent: Running }, "agent_send_input")
      assert.isTrue((sent!.result as { delivered: boolean }).delivered)
      const completed = (waited!.result as { completed: ReadonlyArray<{ summary: string }> }).completed
      assert.deepStrictEqual(completed.map((c) => c.summary), ["got: hello"])
      assert.isFalse(late!.isFailure, JSON.stringify(late))
      assertShape(late!.result, { delivered: "boolean", reason: "string", agent: Finished }, "agent_send_input (late)")
      assert.isFalse((late!.result as { delivered: boolean }).delivered)
    }))

  test("agent_resume: a finished child runs again from its transcript; a running one is NotResumable", () =>
    Effect.gen(function*() {
      const { open, tool } = yield* gate
      const run = yield* engine.run({
        rules: [
          {
            match: { depth: 1 },
            turns: [{ tool_calls: [{ name: "hold" }] }, { text: report("first") }, { text: report("second") }]
          },
          {
            match: { depth: 0 },
            respond: (c) => {
              switch (c.turn) {
                case 0:
                  return { tool_calls: [{ name: "agent_spawn", args: { description: "twice", prompt: "work" } }] }
                case 1:
                  return { tool_calls: [{ name: "agent_resume", args: { agent_id: idIn(c, 0), message: "early" } }] }
                case 2:
                  return Effect.as(open, { tool_calls: [{ name: "agent_wait", args: { ids: [idIn(c, 0)] } }] })
                case 3:
                  return { tool_calls: [{ name: "agent_resume", args: { agent_id: idIn(c, 0), message: "again" } }] }
                case 4:
                  return { tool_calls: [{ name: "agent_wait", args: { ids: [idIn(c, 0)] } }] }
                default:
                  return { text: "root done" }
              }
            }
          }
        ]
      }, { tools: [tool] })
      const [, early, first, resumed, second] = run.toolResults
      assert.isTrue(early!.isFailure, JSON.stringify(early))
      assertShape(early!.result, Refusal, "agent_resume (running)")
      assert.strictEqual(failed(early!), "NotResumable")
      assert.deepStrictEqual(
        (first!.result as { completed: ReadonlyArray<{ summary: string }> }).completed.map((c) => c.summary),
        ["first"]
      )
      assert.isFalse(resumed!.isFailure, JSON.stringify(resumed))
      assertShape(resumed!.result, Spawned, "agent_resume")
      assert.deepStrictEqual(
        (second!.result as { completed: ReadonlyArray<{ summary: string }> }).completed.map((c) => c.summary),
        ["second"]
      )
    }))

  test("agent_assign: a new objective with a note, delivered to the running child", () =>
    Effect.gen(function*() {
      const { open, tool } = yield* gate
      const run = yield* engine.run({
        rules: [
          held,
          {
            match: { depth: 0 },
            respond: (c) => {
              switch (c.turn) {
                case 0:
                  return { tool_calls: [{ name: "agent_spawn", args: { description: "reassigned", prompt: "work" } }] }
                case 1:
                  return {
                    tool_calls: [{
                      name: "agent_assign",
                      args: { agent_id: idIn(c, 0), objective: "only look", message: "read only now" }
                    }]
                  }
                case 2:
                  return Effect.as(open, { tool_calls: [{ name: "agent_wait", args: { ids: [idIn(c, 0)] } }] })
                default:
                  return { text: "root done" }
              }
            }
          }
        ]
      }, { tools: [tool] })
      const [, assigned, waited] = run.toolResults
      assert.isFalse(assigned!.isFailure, JSON.stringify(assigned))
      assertShape(assigned!.result, { delivered: "boolean", agent: Running }, "agent_assign")
      assert.isTrue((assigned!.result as { delivered: boolean }).delivered)
      assert.deepStrictEqual(
        (waited!.result as { completed: ReadonlyArray<{ status: string }> }).completed.map((c) => c.status),
        ["completed"]
      )
    }))

  // The one difference left between the engines (docs/cluster.md): the embedded engine narrows
  // a running agent's rules at once; the cluster refuses a new role, saying why, because a run's
  // rules come from its workflow's journaled payload. Changing that needs the new grants read
  // by the agent's next model step and journaled with it.
  test("agent_assign with a narrower role: narrowed (embedded) or refused with the reason (cluster)", () =>
    Effect.gen(function*() {
      const { open, tool } = yield* gate
      const run = yield* engine.run({
        rules: [
          held,
          {
            match: { depth: 0 },
            respond: (c) => {
              switch (c.turn) {
                case 0:
                  return { tool_calls: [{ name: "agent_spawn", args: { description: "narrowed", prompt: "work" } }] }
                case 1:
                  return { tool_calls: [{ name: "agent_assign", args: { agent_id: idIn(c, 0), role: "explore" } }] }
                case 2:
                  return Effect.as(open, { tool_calls: [{ name: "agent_wait", args: { ids: [idIn(c, 0)] } }] })
                default:
                  return { text: "root done" }
              }
            }
          }
        ]
      }, { tools: [tool] })
      const [, assigned, waited] = run.toolResults
      const roles = (waited!.result as { completed: ReadonlyArray<{ role: string }> }).completed.map((c) => c.role)
      if (engine.name === "embedded") {
        assert.isFalse(assigned!.isFailure, JSON.stringify(assigned))
        assert.strictEqual((assigned!.result as { agent: { role: string } }).agent.role, "explore")
        assert.deepStrictEqual(roles, ["explore"])
      } else {
        assert.isTrue(assigned!.isFailure, JSON.stringify(assigned))
        assertShape(assigned!.result, Refusal, "agent_assign (role, cluster)")
        assert.strictEqual(failed(assigned!), "InvalidRoleRequest")
        assert.include((assigned!.result as { message: string }).message, "cannot change a running agent's role")
        assert.deepStrictEqual(roles, ["general"])
      }
    }))

  test("agent_list: the children of the run, each with its state", () =>
    Effect.gen(function*() {
      const run = yield* engine.run({
        rules: [
          { match: { depth: 1 }, turns: [{ text: report("listed") }] },
          {
            match: { depth: 0 },
            respond: (c) => {
              switch (c.turn) {
                case 0:
                  return { tool_calls: [{ name: "agent_spawn", args: { description: "one", prompt: "work" } }] }
                case 1:
                  return { tool_calls: [{ name: "agent_wait", args: { ids: [idIn(c, 0)] } }] }
                case 2:
                  return { tool_calls: [{ name: "agent_list", args: {} }] }
                default:
                  return { text: "root done" }
              }
            }
          }
        ]
      })
      const [spawned, , listed] = run.toolResults
      assert.isFalse(listed!.isFailure, JSON.stringify(listed))
      const agents = (listed!.result as { agents: ReadonlyArray<{ agent_id: string; status: string }> }).agents
      const child = agents.find((entry) => entry.agent_id === (spawned!.result as { agent_id: string }).agent_id)
      assert.isDefined(child, JSON.stringify(listed!.result))
      assertShape(child, Listed, "agent_list entry")
      assert.strictEqual(child!.status, "completed")
    }))

  test("handle_read: a child's transcript by the handle its task result gave", () =>
    Effect.gen(function*() {
      const run = yield* engine.run({
        rules: [
          { match: { depth: 1 }, turns: [{ text: report("read me") }] },
          {
            match: { depth: 0 },
            respond: (c) => {
              switch (c.turn) {
                case 0:
                  return { tool_calls: [{ name: "task", args: { description: "transcribed", prompt: "say it" } }] }
                case 1: {
                  const task = c.toolResults[0]!.result as { transcript_handle?: string; agent_id: string }
                  return {
                    tool_calls: [{ name: "handle_read", args: { handle: task.transcript_handle ?? task.agent_id } }]
                  }
                }
                default:
                  return { text: "root done" }
              }
            }
          }
        ]
      })
      const [, read] = run.toolResults
      assert.isFalse(read!.isFailure, JSON.stringify(read))
      assertShape(read!.result, {
        handle: "string",
        agent_id: "string",
        total: "number",
        offset: "number",
        messages: [{ index: "number", role: "string", text: "string" }]
      }, "handle_read")
      const page = read!.result as { messages: ReadonlyArray<{ role: string; text: string }> }
      assert.deepStrictEqual(page.messages.map((m) => m.role), ["system", "user", "assistant"])
      assert.include(page.messages[2]!.text, "read me")
    }))

  test("the cap with reject: a spawn over max_concurrent is CapReached; nothing is spawned", () =>
    Effect.gen(function*() {
      const { open, tool } = yield* gate
      const run = yield* engine.run({
        rules: [
          held,
          {
            match: { depth: 0 },
            respond: (c) => {
              switch (c.turn) {
                case 0:
                  return { tool_calls: [{ name: "agent_spawn", args: { description: "first", prompt: "one" } }] }
                case 1:
                  return { tool_calls: [{ name: "agent_spawn", args: { description: "second", prompt: "two" } }] }
                case 2:
                  return Effect.as(open, { tool_calls: [{ name: "agent_wait", args: { wait_mode: "all" } }] })
                default:
                  return { text: "root done" }
              }
            }
          }
        ]
      }, { tools: [tool], settings: { maxConcurrent: 1, admission: "reject" } })
      const [first, second] = run.toolResults
      assert.isFalse(first!.isFailure)
      assert.isTrue(second!.isFailure, JSON.stringify(second))
      assertShape(second!.result, Refusal, "agent_spawn over the cap")
      assert.strictEqual(failed(second!), "CapReached")
      assert.deepStrictEqual(childrenOf(run.agents).map((a) => a.status), ["completed"])
    }))

  test("the cap with queue: a spawn over max_concurrent waits its turn, pending, then runs", () =>
    Effect.gen(function*() {
      const { open, tool } = yield* gate
      const run = yield* engine.run({
        rules: [
          { match: { depth: 1, prompt: "two" }, turns: [{ text: report("second done") }] },
          held,
          {
            match: { depth: 0 },
            respond: (c) => {
              switch (c.turn) {
                case 0:
                  return { tool_calls: [{ name: "agent_spawn", args: { description: "first", prompt: "one" } }] }
                case 1:
                  return { tool_calls: [{ name: "agent_spawn", args: { description: "second", prompt: "two" } }] }
                case 2:
                  return { tool_calls: [{ name: "agent_result", args: { agent_id: idIn(c, 1) } }] }
                case 3:
                  return Effect.as(open, {
                    tool_calls: [{ name: "agent_wait", args: { ids: [idIn(c, 0), idIn(c, 1)], wait_mode: "all" } }]
                  })
                default:
                  return { text: "root done" }
              }
            }
          }
        ]
      }, { tools: [tool], settings: { maxConcurrent: 1, admission: "queue" } })
      const [first, second, queued, waited] = run.toolResults
      assert.isTrue([first, second].every((r) => !r!.isFailure), JSON.stringify([first, second]))
      assertShape(second!.result, Spawned, "agent_spawn (queued)")
      assert.strictEqual((second!.result as { status: string }).status, "pending", "a queued spawn says so")
      assert.strictEqual((queued!.result as { status: string }).status, "pending")
      const completed = (waited!.result as { completed: ReadonlyArray<{ status: string }> }).completed
      assert.deepStrictEqual(completed.map((c) => c.status), ["completed", "completed"])
      assert.deepStrictEqual(childrenOf(run.agents).map((a) => a.status), ["completed", "completed"])
    }))

  test("max_depth: an agent at the depth limit is refused the spawning tools", () =>
    Effect.gen(function*() {
      const run = yield* engine.run({
        rules: [{
          match: { depth: 0 },
          turns: [
            {
              tool_calls: [
                { name: "task", args: { description: "too deep", prompt: "x" } },
                { name: "agent_spawn", args: { prompt: "x" } }
              ]
            },
            { text: "root done" }
          ]
        }]
      }, { settings: { maxDepth: 0 } })
      assert.strictEqual(run.text, "root done")
      assert.strictEqual(run.toolResults.length, 2)
      for (const refused of run.toolResults) {
        assert.isTrue(refused.isFailure, JSON.stringify(refused))
        assertShape(refused.result, Refusal, refused.name)
        assert.strictEqual(failed(refused), "PermissionDenied")
      }
      assert.deepStrictEqual(childrenOf(run.agents), [])
    }))

  test("ask: with nobody to answer, a spawn an ask rule holds is denied with a reason the model reads; none starts", () =>
    Effect.gen(function*() {
      const run = yield* engine.run({
        rules: [{
          match: { depth: 0 },
          turns: [
            { tool_calls: [{ name: "task", args: { description: "asked", prompt: "x" } }] },
            { text: "root done" }
          ]
        }]
      }, { settings: { ask: ["spawn"] } })
      assert.strictEqual(run.text, "root done")
      const [refused] = run.toolResults
      assert.isTrue(refused?.isFailure, JSON.stringify(refused))
      assertShape(refused!.result, Refusal, "task")
      assert.strictEqual(failed(refused!), "ApprovalDenied")
      assert.include(String((refused!.result as { message: string }).message), "nobody can answer approval questions")
      assert.deepStrictEqual(childrenOf(run.agents), [])
    }))

  test("ask: a spawn's ask_tools make the child's calls ask (a posture here); with nobody to answer, denied", () =>
    Effect.gen(function*() {
      const summary = yield* listingChild({ description: "asked", prompt: "x", ask_tools: ["read"] })
      assert.include(summary, "ApprovalDenied")
      assert.include(summary, "read tools ask")
    }))

  // --- MCP servers per agent (issue 34): a child's servers are within its parent's ---

  test("mcp_servers: a child narrowed to one server is not offered another's tools nor may call them, nor give them to its children", () =>
    Effect.gen(function*() {
      const offered = (c: ScriptedModel.Conversation) =>
        `offered ${c.tools.filter((name) => name.startsWith("mcp__")).join(",")}`
      const run = yield* engine.run({
        rules: [
          {
            // The grandchild asked for nothing: it inherits its parent's one server.
            match: { depth: 2 },
            respond: (c) =>
              c.turn === 0
                ? { tool_calls: [{ name: "mcp__beta__ping", args: {} }] }
                : { text: report(offered(c)) }
          },
          {
            match: { depth: 1 },
            respond: (c) =>
              c.turn === 0
                ? {
                  tool_calls: [
                    { name: "mcp__alpha__ping", args: {} },
                    { name: "mcp__beta__ping", args: {} },
                    { name: "agent_spawn", args: { prompt: "wider", mcp_servers: ["beta"] } },
                    { name: "agent_spawn", args: { prompt: "inherits" } }
                  ]
                }
                : c.turn === 1
                ? { tool_calls: [{ name: "agent_wait", args: {} }] }
                : { text: report(offered(c)) }
          },
          {
            match: { depth: 0 },
            turns: [
              {
                tool_calls: [
                  { name: "task", args: { description: "narrow", prompt: "x", mcp_servers: ["alpha"] } },
                  { name: "task", args: { description: "typo", prompt: "x", mcp_servers: ["gamma"] } }
                ]
              },
              { text: "root done" }
            ]
          }
        ]
      }, { settings: { maxDepth: 2 }, tools: [ping("alpha"), ping("beta")] })
      assert.strictEqual(run.text, "root done")
      const [task, typo] = run.toolResults
      assert.isFalse(task!.isFailure, JSON.stringify(task))
      assert.strictEqual((task!.result as { summary: string }).summary, "offered mcp__alpha__ping")
      // A server that is not configured is refused, naming those there are.
      assert.isTrue(typo!.isFailure, JSON.stringify(typo))
      assertShape(typo!.result, Refusal, "task")
      assert.strictEqual(failed(typo!), "McpServersRefused")
      assert.include((typo!.result as { message: string }).message, `"gamma" is not configured here`)
      assert.include((typo!.result as { message: string }).message, "alpha, beta")

      const [child] = childrenOf(run.agents)
      const results = toolResultsOf(run.transcripts[child!.agentId]!)
      const byName = (name: string) => results.filter((r) => r.name === name)
      assert.strictEqual(byName("mcp__alpha__ping")[0]?.result, "alpha pong")
      // Called by name, the other server's tool is denied, and nothing ran.
      const beta = byName("mcp__beta__ping")[0]!
      assert.isTrue(beta.isFailure, JSON.stringify(beta))
      assert.include(String((beta.result as { message: string }).message), `"mcp__beta__ping" is denied`)
      // Its child may not be given the server it lacks: refused, naming the one it may give.
      const [wider, inherits] = byName("agent_spawn")
      assert.isTrue(wider!.isFailure, JSON.stringify(wider))
      assert.strictEqual(failed(wider!), "McpServersRefused")
      assert.include((wider!.result as { message: string }).message, `its parent may not use "beta"`)
      assert.include((wider!.result as { message: string }).message, "may be given alpha")
      assert.isFalse(inherits!.isFailure, JSON.stringify(inherits))
      // The grandchild that asked for nothing has its parent's one server, and is denied the other.
      const grandchildren = run.agents.filter((agent) => agent.depth === 2)
      assert.strictEqual(grandchildren.length, 1)
      const below = toolResultsOf(run.transcripts[grandchildren[0]!.agentId]!)
      assert.isTrue(below[0]!.isFailure, JSON.stringify(below))
      assert.include(String((below[0]!.result as { message: string }).message), `"mcp__beta__ping" is denied`)
      const waited = JSON.stringify(byName("agent_wait")[0]?.result)
      assert.include(waited, "offered mcp__alpha__ping")
      assert.notInclude(waited, "beta")
    }))

  test("mcp_servers: a role's configured servers ([roles.<role>] mcp_servers) narrow its agents, met with a spawn's own", () =>
    Effect.gen(function*() {
      const run = yield* engine.run({
        rules: [
          {
            match: { depth: 1 },
            respond: (c) => ({
              text: report(`offered ${c.tools.filter((name) => name.startsWith("mcp__")).join(",")}`)
            })
          },
          {
            match: { depth: 0 },
            turns: [
              {
                tool_calls: [
                  { name: "task", args: { description: "role", prompt: "x", subagent_type: "explore" } },
                  {
                    name: "task",
                    args: { description: "met", prompt: "x", subagent_type: "explore", mcp_servers: ["beta"] }
                  },
                  { name: "task", args: { description: "other role", prompt: "x" } }
                ]
              },
              { text: "root done" }
            ]
          }
        ]
      }, { settings: { roleMcpServers: { explore: ["alpha"] } }, tools: [ping("alpha"), ping("beta")] })
      assert.strictEqual(run.text, "root done")
      const summaries = run.toolResults.map((r) => (r.result as { summary?: string }).summary)
      // The role's one server; the spawn's own met with it (nothing left); another role has both.
      assert.deepStrictEqual(summaries, [
        "offered mcp__alpha__ping",
        "offered",
        "offered mcp__alpha__ping,mcp__beta__ping"
      ])
    }))

  test("mcp_servers: an agent definition's mcpServers narrow its agents", () =>
    Effect.gen(function*() {
      const run = yield* engine.run({
        rules: [
          {
            match: { depth: 1 },
            respond: (c) => ({
              text: report(`offered ${c.tools.filter((name) => name.startsWith("mcp__")).join(",")}`)
            })
          },
          {
            match: { depth: 0 },
            turns: [
              { tool_calls: [{ name: "task", args: { description: "pinger", prompt: "x", subagent_type: "pinger" } }] },
              { text: "root done" }
            ]
          }
        ]
      }, {
        tools: [ping("alpha"), ping("beta")],
        settings: { agentFiles: { "pinger.md": "---\ndescription: pings\nmcpServers: [alpha]\n---\nPing.\n" } }
      })
      assert.strictEqual(run.text, "root done")
      const [task] = run.toolResults
      assert.isFalse(task!.isFailure, JSON.stringify(task))
      assert.strictEqual((task!.result as { summary: string }).summary, "offered mcp__alpha__ping")
    }))

  test("ask: an agent definition's ask_tools make its agent's calls ask; with nobody to answer, denied", () =>
    Effect.gen(function*() {
      const summary = yield* listingChild({ description: "careful", prompt: "x", subagent_type: "careful" }, {
        settings: {
          agentFiles: {
            "careful.md": "---\ndescription: asks before listing\nask_tools: [list_dir]\n---\nBe careful.\n"
          }
        }
      })
      assert.include(summary, "ApprovalDenied")
      assert.include(summary, "list_dir")
    }))

  test("an unknown role is UnknownRole, naming the accepted ones", () =>
    Effect.gen(function*() {
      const run = yield* engine.run({
        rules: [{
          match: { depth: 0 },
          turns: [
            {
              tool_calls: [
                { name: "task", args: { description: "who", prompt: "x", subagent_type: "wizard" } },
                { name: "agent_spawn", args: { prompt: "x", subagent_type: "wizard" } }
              ]
            },
            { text: "root done" }
          ]
        }]
      })
      assert.strictEqual(run.toolResults.length, 2)
      for (const refused of run.toolResults) {
        assert.isTrue(refused.isFailure, JSON.stringify(refused))
        assertShape(refused.result, Refusal, refused.name)
        assert.strictEqual(failed(refused), "UnknownRole")
        assert.include((refused.result as { message: string }).message, "explore")
      }
      assert.deepStrictEqual(childrenOf(run.agents), [])
    }))

  // Issue 36: isolation. "process" needs a parent process that owns the child's process: the
  // embedded engine without a host program (this suite gives it none) and the cluster (a child is
  // a workflow any worker may take over) refuse it at once, the same way. "worktree" is refused by
  // the cluster (a worktree would live on the claiming worker's own clone, which the cluster does
  // not manage) and needs a git repository in the embedded engine (this suite's is not one).
  test("isolation is refused with a typed error and starts no child: process (both), worktree (per engine)", () =>
    Effect.gen(function*() {
      const run = yield* engine.run({
        rules: [{
          match: { depth: 0 },
          turns: [
            {
              tool_calls: [
                { name: "task", args: { description: "apart", prompt: "x", isolation: "process" } },
                { name: "agent_spawn", args: { prompt: "x", isolation: "process" } },
                { name: "task", args: { description: "apart", prompt: "x", isolation: "worktree" } },
                { name: "agent_spawn", args: { prompt: "x", isolation: "worktree" } }
              ]
            },
            { text: "root done" }
          ]
        }]
      })
      assert.strictEqual(run.toolResults.length, 4)
      const worktree = engine.name === "cluster" ? "IsolationUnavailable" : "NotAGitWorkspace"
      run.toolResults.forEach((refused, i) => {
        assert.isTrue(refused.isFailure, JSON.stringify(refused))
        assertShape(refused.result, Refusal, refused.name)
        // One refusal for both modes and both engines (the mode, why, and what is accepted).
        assert.strictEqual(failed(refused), i < 2 ? "IsolationUnavailable" : worktree)
      })
      const message = (run.toolResults[0]!.result as { message: string }).message
      assert.include(message, "isolation \"process\" is not available here: ")
      // The embedded engine (Fibril.layer) gives worktrees; the cluster neither mode.
      const accepted = engine.name === "cluster" ? "" : "isolation \"worktree\" or "
      assert.include(message, `; accepted here: ${accepted}no isolation (omit it)`)
      assert.deepStrictEqual(childrenOf(run.agents), [])
    }))

  test("arguments that are not JSON are InvalidArguments saying so, for every sub-agent tool", () =>
    Effect.gen(function*() {
      const calls = ["task", "agent_spawn", "agent_wait", "agent_list", "agent_result", "agent_cancel"]
      const run = yield* engine.run({
        rules: [{
          match: { depth: 0 },
          turns: [{ tool_calls: calls.map((name) => ({ name, args: "{\"prompt\": \"x\"" })) as never }, {
            text: "root done"
          }]
        }]
      })
      assert.deepStrictEqual(run.toolResults.map((r) => r.name), calls)
      for (const refused of run.toolResults) {
        assert.isTrue(refused.isFailure, JSON.stringify(refused))
        assertShape(refused.result, Refusal, refused.name)
        assert.strictEqual(failed(refused), "InvalidArguments", refused.name)
        assert.include((refused.result as { message: string }).message, "not valid JSON", refused.name)
      }
      assert.deepStrictEqual(childrenOf(run.agents), [])
    }))

  test("an id no agent has is AgentNotFound, for every tool that takes one", () =>
    Effect.gen(function*() {
      const calls = [
        { name: "agent_result", args: { agent_id: "ag_nope" } },
        { name: "agent_wait", args: { ids: ["ag_nope"] } },
        { name: "agent_cancel", args: { agent_id: "ag_nope" } },
        { name: "agent_send_input", args: { agent_id: "ag_nope", message: "hi" } },
        { name: "agent_resume", args: { agent_id: "ag_nope", message: "hi" } },
        { name: "agent_assign", args: { agent_id: "ag_nope", objective: "x" } }
      ]
      const run = yield* engine.run({
        rules: [{ match: { depth: 0 }, turns: [{ tool_calls: calls as never }, { text: "root done" }] }]
      })
      assert.deepStrictEqual(run.toolResults.map((r) => r.name), calls.map((c) => c.name))
      for (const refused of run.toolResults) {
        assert.isTrue(refused.isFailure, JSON.stringify(refused))
        assertShape(refused.result, Refusal, refused.name)
        assert.strictEqual(failed(refused), "AgentNotFound", refused.name)
      }
    }))

  test("budgets: a child over its step budget or its token budget is a failed task result naming the budget", () =>
    Effect.gen(function*() {
      const run = yield* engine.run({
        rules: [
          {
            match: { depth: 1, prompt: "steps" },
            turns: [{ tool_calls: [{ name: "list_dir", args: {} }], usage: { input: 1, output: 1 } }],
            repeat_last: true
          },
          {
            match: { depth: 1, prompt: "tokens" },
            turns: [{ tool_calls: [{ name: "list_dir", args: {} }], usage: { input: 400, output: 200 } }, {
              text: report("never")
            }]
          },
          {
            match: { depth: 0 },
            turns: [
              {
                tool_calls: [
                  { name: "task", args: { description: "busy", prompt: "steps" } },
                  { name: "task", args: { description: "costly", prompt: "tokens" } }
                ]
              },
              { text: "root done" }
            ]
          }
        ]
      }, { settings: { childMaxSteps: 3, childMaxTokens: 500 } })
      assert.strictEqual(run.text, "root done")
      const [steps, cost] = run.toolResults
      for (const [task, budget] of [[steps!, "max_steps"], [cost!, "max_tokens"]] as const) {
        assert.isFalse(task.isFailure, JSON.stringify(task))
        assertShape(task.result, FailedTask, `task over ${budget}`)
        const result = task.result as { status: string; summary: string }
        assert.strictEqual(result.status, "failed")
        assert.include(result.summary, budget)
      }
      assert.deepStrictEqual(childrenOf(run.agents).map((a) => a.status), ["failed", "failed"])
    }))

  test("a provider that reports no usage: the tokens are estimated, not 0", () =>
    Effect.gen(function*() {
      const run = yield* engine.run({
        rules: [
          { match: { depth: 1 }, turns: [{ text: report("uncounted"), usage: null }] },
          {
            match: { depth: 0 },
            turns: [{ tool_calls: [{ name: "task", args: { description: "silent", prompt: "count me" } }] }, {
              text: "root done"
            }]
          }
        ]
      })
      const [child] = childrenOf(run.agents)
      assert.isAbove(child!.tokens, 0, "the child's record counts its tokens")
      const [task] = run.toolResults
      assert.isFalse(task!.isFailure, JSON.stringify(task))
      const counted = (task!.result as { tokens?: { input: number; output: number } }).tokens
      assert.isAbove(counted?.input ?? 0, 0, JSON.stringify(task!.result))
      assert.isAbove(counted?.output ?? 0, 0, JSON.stringify(task!.result))
    }))

  test("heartbeat: a child without progress is cancelled with the heartbeat's reason", () =>
    Effect.gen(function*() {
      const { tool } = yield* gate
      const run = yield* engine.run({
        rules: [
          held,
          {
            match: { depth: 0 },
            respond: (c) => {
              switch (c.turn) {
                case 0:
                  return { tool_calls: [{ name: "agent_spawn", args: { description: "stuck", prompt: "hang" } }] }
                case 1:
                  return { tool_calls: [{ name: "agent_wait", args: { ids: [idIn(c, 0)] } }] }
                default:
                  return { text: "root done" }
              }
            }
          }
        ]
      }, { tools: [tool], settings: { heartbeatSecs: 1 } })
      assert.strictEqual(run.text, "root done")
      const [, waited] = run.toolResults
      assertShape(waited!.result, { timed_out: "boolean", completed: [Stopped], still_running: [] }, "agent_wait")
      const [child] = (waited!.result as { completed: ReadonlyArray<{ status: string; reason: string }> }).completed
      assert.deepStrictEqual([child!.status, child!.reason], [
        "cancelled",
        "Auto-cancelled after 1s without sub-agent progress."
      ])
    }))

  // --- Typed results (issue 35): the same `output` from both engines ---

  test("output_schema: a repaired answer is the output (task, agent_wait), one still invalid fails closed, an unsupported schema is refused", () =>
    Effect.gen(function*() {
      const schema = {
        type: "object",
        properties: { files: { type: "array", items: { type: "string" } }, count: { type: "integer", minimum: 0 } },
        required: ["files", "count"],
        additionalProperties: false
      }
      const value = { files: ["a.ts"], count: 1 }
      const run = yield* engine.run({
        rules: [
          {
            match: { depth: 1, prompt: "repairable" },
            turns: [
              { tool_calls: [{ name: "final_answer", args: { files: ["a.ts"], count: -1 } }] },
              { tool_calls: [{ name: "final_answer", args: value }] }
            ]
          },
          {
            match: { depth: 1, prompt: "hopeless" },
            turns: [{ text: "no JSON here" }, { text: "{\"files\": 3}" }]
          },
          {
            match: { depth: 0 },
            respond: (c) => {
              const typed = (prompt: string, output_schema: unknown = schema) => ({
                description: "typed",
                prompt,
                output_schema
              })
              switch (c.turn) {
                case 0:
                  return { tool_calls: [{ name: "task", args: typed("repairable") }] }
                case 1:
                  return { tool_calls: [{ name: "agent_spawn", args: typed("hopeless") }] }
                case 2:
                  return { tool_calls: [{ name: "agent_wait", args: { ids: [idIn(c, 1)] } }] }
                case 3:
                  return {
                    tool_calls: [{
                      name: "task",
                      args: typed("never", { type: "object", properties: { a: { $ref: "#/a" } } })
                    }]
                  }
                default:
                  return { text: "root done" }
              }
            }
          }
        ]
      })
      assert.strictEqual(run.text, "root done")
      const [task, , waited, refused] = run.toolResults
      // A typed result is its value: no sections, and no empty summary, violations or claims.
      const {
        claims: _noClaims,
        contract_violations: _violations,
        sections: _sections,
        summary: _summary,
        ...typedTask
      } = TaskResult
      assertShape(task!.result, { ...typedTask, output: { files: ["string"], count: "number" } }, "typed task")
      assert.deepStrictEqual((task!.result as { output: unknown }).output, value)
      const [hopeless] = (waited!.result as { completed: ReadonlyArray<{ status: string; reason: string }> })
        .completed
      assertShape(hopeless, Stopped, "failed typed agent")
      assert.strictEqual(hopeless!.status, "failed")
      assert.include(hopeless!.reason, "does not match output_schema after one repair turn")
      assert.isTrue(refused!.isFailure)
      assert.strictEqual(failed(refused!), "UnsupportedOutputSchema")
      assert.include((refused!.result as { message: string }).message, "/properties/a/$ref")
      assert.deepStrictEqual(childrenOf(run.agents).map((a) => a.status), ["completed", "failed"])
      // The repaired child's transcript, as each engine keeps it: the refused answer's result,
      // the repair request, the accepted answer.
      const repaired = run.transcripts[childrenOf(run.agents)[0]!.agentId]!
      assert.deepStrictEqual(repaired.map((m) => m.role).slice(-5), ["assistant", "tool", "user", "assistant", "tool"])
      assert.deepStrictEqual(toolResultsOf(repaired).map((r) => r.isFailure), [true, false])
      const request = repaired.at(-3)!
      assert.include(JSON.stringify(request.content), "Your result does not match")
    }))
}

for (const engine of engines) {
  // Process children spend their time starting a Node process each: those cases run side by side.
  const group = engine.name === "process" ? describe.concurrent : describe
  group(`the sub-agent contract: ${engine.name}`, () => contract(engine))
}
