import { assert, describe, it } from "@effect/vitest"
import { ScriptedModel } from "@fibril/testkit"
import {
  Clock,
  Context,
  Deferred,
  Effect,
  Exit,
  Fiber,
  FileSystem,
  Layer,
  Option,
  PubSub,
  Random,
  Schema
} from "effect"
import type { Prompt } from "effect/ai"
import { TestClock } from "effect/testing"
import { AgentEvents } from "../src/AgentEvents.ts"
import * as Fibril from "../src/Fibril.ts"
import * as FibrilConfig from "../src/FibrilConfig.ts"
import { Session } from "../src/Session.ts"
import { Embedded, SubAgentManager } from "../src/SubAgentManager.ts"
import * as SubAgentRecord from "../src/SubAgentRecord.ts"
import { SubAgentStore } from "../src/SubAgentStore.ts"
import { provideNode, report, setup } from "./support.ts"

/** A model whose children answer only when the test says so (per prompt). */
const controlled = Effect.gen(function*() {
  const gates = new Map<string, Deferred.Deferred<ScriptedModel.Turn>>()
  const gate = (prompt: string) => {
    let found = gates.get(prompt)
    if (found === undefined) {
      found = Deferred.makeUnsafe<ScriptedModel.Turn>()
      gates.set(prompt, found)
    }
    return found
  }
  const script: ScriptedModel.ScriptInput = {
    rules: [
      { match: { depth: 0 }, turns: [{ hang: true }] },
      { respond: (c) => Deferred.await(gate(c.prompt)) }
    ]
  }
  const answer = (prompt: string, turn: ScriptedModel.Turn) => Deferred.succeed(gate(prompt), turn)
  return { script, answer }
})

const toolResults = (messages: ReadonlyArray<Prompt.Message>) =>
  messages.flatMap((m) => m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [p] : []) : [])

describe("SubAgentManager", () => {
  it.effect("at the cap an 11th spawn fails naming the cap and running count, and creates nothing", () =>
    Effect.gen(function*() {
      const { script, answer } = yield* controlled
      const { get } = yield* setup(script, {}, { subagents: { maxConcurrent: 10 } })
      const manager = get(SubAgentManager)
      const store = get(SubAgentStore)
      for (let i = 0; i < 10; i++) yield* manager.spawn(undefined, { prompt: `job-${i}` })
      assert.strictEqual(yield* manager.running, 10)
      const error = yield* Effect.flip(manager.spawn(undefined, { prompt: "job-10" }))
      assert.strictEqual(error._tag, "CapReached")
      assert.include(error.message, "max 10")
      assert.include(error.message, "running 10")
      assert.strictEqual((yield* store.all).length, 10)
      assert.strictEqual((yield* manager.list({ includeArchived: true })).length, 10)
      // One finishes: a spawn is admitted again.
      yield* answer("job-0", { text: report("done") })
      yield* manager.wait([(yield* manager.list({ includeArchived: false }))[0]!.agent_id], { mode: "all" })
      const next = yield* manager.spawn(undefined, { prompt: "job-10" })
      assert.strictEqual(next.status, "running")
    }).pipe(provideNode))

  it.effect("with admission = queue, the 11th is pending and starts when one finishes", () =>
    Effect.gen(function*() {
      const { script, answer } = yield* controlled
      const { get } = yield* setup(script, {}, { subagents: { maxConcurrent: 10, admission: "queue" } })
      const manager = get(SubAgentManager)
      const first = yield* manager.spawn(undefined, { prompt: "job-0" })
      for (let i = 1; i < 10; i++) yield* manager.spawn(undefined, { prompt: `job-${i}` })
      const queued = yield* manager.spawn(undefined, { prompt: "job-10" })
      assert.strictEqual(queued.status, "pending")
      assert.strictEqual((yield* manager.result(queued.agent_id, { block: false })).status, "pending")
      yield* answer("job-0", { text: report("done") })
      yield* manager.wait([first.agent_id], { mode: "all" })
      yield* Effect.yieldNow
      assert.strictEqual((yield* manager.result(queued.agent_id, { block: false })).status, "running")
      assert.strictEqual(yield* manager.running, 10)
      yield* answer("job-10", { text: report("queued one done") })
      const done = yield* manager.result(queued.agent_id, { block: true })
      assert.strictEqual(done.status, "completed")
      assert.strictEqual(done.outcome?.summary, "queued one done")
    }).pipe(provideNode))

  it.effect("admission = queue set in .fibril/config.toml reaches the manager: at the cap a spawn waits, it is not refused", () =>
    Effect.gen(function*() {
      const { script, answer } = yield* controlled
      const fs = yield* FileSystem.FileSystem
      const cwd = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      yield* fs.makeDirectory(`${cwd}/.fibril`)
      yield* fs.writeFileString(`${cwd}/.fibril/config.toml`, `[subagents]\nmax_concurrent = 2\nadmission = "queue"\n`)
      const { settings } = yield* FibrilConfig.load({ cwd, home: cwd, env: {} })
      const context = yield* Layer.build(
        Fibril.layerFromSettings(cwd, settings).pipe(Layer.provide(ScriptedModel.layer(script)))
      )
      const manager = Context.get(context, SubAgentManager)
      assert.strictEqual(manager.options.admission, "queue")
      const first = yield* manager.spawn(undefined, { prompt: "job-0" })
      yield* manager.spawn(undefined, { prompt: "job-1" })
      const third = yield* manager.spawn(undefined, { prompt: "job-2" })
      assert.strictEqual(third.status, "pending")
      yield* answer("job-0", { text: report("done") })
      yield* manager.wait([first.agent_id], { mode: "all" })
      yield* answer("job-2", { text: report("third done") })
      const done = yield* manager.result(third.agent_id, { block: true })
      assert.strictEqual(done.outcome?.summary, "third done")
    }).pipe(provideNode))

  it.effect("send_input to a completed agent is not delivered; to a running one it is read before its next step", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({
        rules: [{
          respond: (c) =>
            c.turn === 0
              ? { tool_calls: [{ name: "list_dir", args: {} }] }
              : { text: report(`saw: ${c.messages.filter((m) => m.role === "user").length} user messages`) }
        }]
      })
      const manager = get(SubAgentManager)
      const agent = yield* manager.spawn(undefined, { prompt: "look" })
      const sent = yield* manager.sendInput(agent.agent_id, "also check docs", false)
      assert.isTrue(sent.delivered)
      const done = yield* manager.result(agent.agent_id, { block: true })
      assert.strictEqual(done.outcome?.summary, "saw: 2 user messages")
      const late = yield* manager.sendInput(agent.agent_id, "too late", false)
      assert.isFalse(late.delivered)
      assert.include(late.reason!, "is completed")
      assert.strictEqual(late.agent.status, "completed")
    }).pipe(provideNode))

  it.effect("send_input with interrupt cancels the model step in flight and delivers at once", () =>
    Effect.gen(function*() {
      const { get } = yield* setup(
        {
          rules: [{
            respond: (c) =>
              JSON.stringify(c.messages.at(-1)).includes("urgent: stop")
                ? { text: report("switched to the urgent request") }
                : { delay_ms: 100_000, text: report("finished the slow way") }
          }]
        },
        { apiTimeoutSecs: 600 }
      )
      const manager = get(SubAgentManager)
      const session = get(Session)
      const agent = yield* manager.spawn(undefined, { prompt: "slow work" })
      for (let i = 0; i < 50 && !(yield* session.info(agent.agent_id)).waitingOnModel; i++) yield* Effect.yieldNow
      assert.isTrue((yield* session.info(agent.agent_id)).waitingOnModel)
      const sent = yield* manager.sendInput(agent.agent_id, "urgent: stop", true)
      assert.isTrue(sent.delivered)
      // No clock movement: the slow call was cancelled, the message delivered, the next step answered.
      const done = yield* manager.result(agent.agent_id, { block: true })
      assert.strictEqual(done.outcome?.summary, "switched to the urgent request")
      assert.strictEqual(done.steps, 1)
    }).pipe(provideNode))

  it.effect("detached children survive their parent's cancellation; non-detached grandchildren do not", () =>
    Effect.gen(function*() {
      const { script } = yield* controlled
      const { get } = yield* setup(
        {
          rules: [
            {
              match: { prompt: "parent" },
              turns: [
                {
                  tool_calls: [
                    { name: "agent_spawn", args: { prompt: "child-attached", subagent_type: "general" } },
                    { name: "agent_spawn", args: { prompt: "child-detached", detached: true } }
                  ]
                },
                { hang: true }
              ]
            },
            {
              match: { prompt: "child-attached" },
              turns: [{ tool_calls: [{ name: "agent_spawn", args: { prompt: "grandchild" } }] }, { hang: true }]
            },
            ...script.rules
          ]
        },
        { maxDepth: 3 }
      )
      const manager = get(SubAgentManager)
      const parent = yield* manager.spawn(undefined, { prompt: "parent" })
      // wait until the three descendants exist
      for (let i = 0; i < 100 && (yield* manager.list({ includeArchived: false })).length < 4; i++) {
        yield* Effect.yieldNow
      }
      const all = yield* manager.list({ includeArchived: false })
      const byObjective = (o: string) => all.find((a) => a.objective === o)!
      assert.strictEqual(all.length, 4)
      yield* manager.cancel(parent.agent_id, "stop")
      const after = (o: string) => manager.result(byObjective(o).agent_id, { block: false })
      assert.strictEqual((yield* manager.result(parent.agent_id, { block: false })).status, "cancelled")
      assert.strictEqual((yield* after("child-attached")).status, "cancelled")
      assert.strictEqual((yield* after("grandchild")).status, "cancelled")
      assert.include((yield* after("grandchild")).reason!, "parent")
      assert.strictEqual((yield* after("child-detached")).status, "running")
    }).pipe(provideNode))

  it.effect("a parent that answers while background children run waits and gets their results first", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({
        rules: [
          {
            match: { depth: 0 },
            respond: (c) =>
              c.turn === 0
                ? { tool_calls: [{ name: "agent_spawn", args: { prompt: "slow child" } }] }
                : c.turn === 1
                ? { text: "answering early" }
                : {
                  text: `final after ${
                    c.messages.filter((m) => m.role === "user" && JSON.stringify(m.content).includes("slow result"))
                      .length
                  } child report`
                }
          },
          { match: { prompt: "slow child" }, turns: [{ delay_ms: 5000, text: report("slow result") }] }
        ]
      })
      const session = get(Session)
      const root = yield* session.create()
      const fiber = yield* Effect.forkChild(session.prompt(root.id, "go"))
      for (let i = 0; i < 20 && fiber.pollUnsafe() === undefined; i++) yield* TestClock.adjust("1 second")
      const answer = yield* Fiber.join(fiber)
      assert.strictEqual(answer.text, "final after 1 child report")
    }).pipe(provideNode))

  it.effect("fork_context: the child's first request begins with the parent's request, byte for byte", () =>
    Effect.gen(function*() {
      const requests = new Map<string, ReadonlyArray<Prompt.Message>>()
      const { get } = yield* setup({
        rules: [
          {
            match: { depth: 0 },
            respond: (c) => {
              if (c.turn === 0) requests.set("parent", c.messages)
              return c.turn === 0
                ? {
                  tool_calls: [{
                    name: "agent_spawn",
                    args: { prompt: "forked task", fork_context: true, type: "explore" }
                  }]
                }
                : c.turn === 1
                ? { tool_calls: [{ name: "agent_wait", args: {} }] }
                : { text: "done" }
            }
          },
          {
            respond: (c) => {
              if (c.turn === 0) requests.set("child", c.messages)
              return { text: report(`child role ${c.role}`) }
            }
          }
        ]
      })
      const session = get(Session)
      const root = yield* session.create()
      yield* session.prompt(root.id, "hello parent")
      const parent = requests.get("parent")!
      const child = requests.get("child")!
      const encode = (ms: ReadonlyArray<Prompt.Message>) => ms.map((m) => JSON.stringify(m))
      assert.deepStrictEqual(encode(child.slice(0, parent.length)), encode(parent))
      const rest = child.slice(parent.length).map((m) => JSON.stringify(m))
      assert.include(rest[0]!, "[fork]")
      assert.include(rest[1]!, "Fibril agent: role=explore depth=1")
      assert.include(rest[2]!, "forked task")
      const list = yield* get(SubAgentManager).list({ includeArchived: false })
      assert.strictEqual(list[0]!.outcome?.summary, "child role explore")
    }).pipe(provideNode))

  it.effect("without fork_context the child sees its role prompt and task only", () =>
    Effect.gen(function*() {
      let seen: ReadonlyArray<Prompt.Message> = []
      const { get } = yield* setup({
        rules: [{ respond: (c) => ((seen = c.messages), { text: report("ok") }) }]
      })
      const manager = get(SubAgentManager)
      const agent = yield* manager.spawn(undefined, { prompt: "just this", role: "review" })
      yield* manager.wait([agent.agent_id], { mode: "all" })
      assert.deepStrictEqual(seen.map((m) => m.role), ["system", "user"])
      assert.include(JSON.stringify(seen[0]), "Fibril agent: role=review depth=1")
    }).pipe(provideNode))

  it.effect("heartbeat: a silent agent is auto-cancelled and frees its permit; one inside a slow model call is not", () =>
    Effect.gen(function*() {
      const { get } = yield* setup(
        {
          rules: [
            {
              match: { prompt: "silent" },
              turns: [{ tool_calls: [{ name: "shell", args: { command: "sleep 1000", timeout_ms: 3_600_000 } }] }]
            },
            { match: { prompt: "thinking" }, turns: [{ delay_ms: 200_000, text: report("thought hard") }] }
          ]
        },
        { apiTimeoutSecs: 600 },
        { subagents: { maxConcurrent: 2, heartbeatTimeoutSecs: 60 }, tools: { shellTimeoutSecs: 3600 } }
      )
      const manager = get(SubAgentManager)
      const silent = yield* manager.spawn(undefined, { prompt: "silent" })
      const thinking = yield* manager.spawn(undefined, { prompt: "thinking" })
      yield* TestClock.adjust("61 seconds")
      yield* TestClock.adjust("15 seconds")
      const cancelled = yield* manager.result(silent.agent_id, { block: true })
      assert.strictEqual(cancelled.status, "cancelled")
      assert.strictEqual(cancelled.reason, "Auto-cancelled after 60s without sub-agent progress.")
      assert.strictEqual((yield* manager.result(thinking.agent_id, { block: false })).status, "running")
      assert.strictEqual(yield* manager.running, 1, "the silent agent's permit is free")
      yield* TestClock.adjust("200 seconds")
      assert.strictEqual((yield* manager.result(thinking.agent_id, { block: true })).status, "completed")
    }).pipe(provideNode))

  it.effect("heartbeat: a coordinator waiting on a live child is not silent; the child's own heartbeat bounds it", () =>
    Effect.gen(function*() {
      // The coordinator spawns a worker and waits for it; the worker thinks for 200 s. Nothing
      // the coordinator does shows as progress, but its child's model call does.
      const { get } = yield* setup(
        {
          rules: [
            { match: { prompt: "work" }, turns: [{ delay_ms: 200_000, text: report("worked slowly") }] },
            {
              match: { prompt: "coordinate" },
              respond: (c) =>
                c.turn === 0
                  ? { tool_calls: [{ name: "agent_spawn", args: { description: "w", prompt: "work" } }] }
                  : c.turn === 1
                  ? {
                    tool_calls: [{
                      name: "agent_wait",
                      args: { ids: [String((c.lastToolResults[0]?.result as { agent_id: string }).agent_id)] }
                    }]
                  }
                  : { text: report(`got: ${JSON.stringify(c.lastToolResults[0]?.result).includes("worked slowly")}`) }
            }
          ]
        },
        { apiTimeoutSecs: 600 },
        { subagents: { heartbeatTimeoutSecs: 60 } }
      )
      const manager = get(SubAgentManager)
      const coordinator = (yield* get(Embedded).startRoot({ prompt: "coordinate" })).agent
      for (let i = 0; i < 4; i++) yield* TestClock.adjust("60 seconds")
      const done = yield* manager.result(coordinator.agent_id, { block: true })
      assert.strictEqual(done.status, "completed", done.reason)
      assert.strictEqual(done.outcome?.summary, "got: true")
    }).pipe(provideNode))

  it.effect("heartbeat: a sub-agent blocked in task on a slow child is not silent either", () =>
    Effect.gen(function*() {
      const { get } = yield* setup(
        {
          rules: [
            { match: { prompt: "work" }, turns: [{ delay_ms: 200_000, text: report("worked slowly") }] },
            {
              match: { prompt: "delegate" },
              turns: [
                { tool_calls: [{ name: "task", args: { description: "w", prompt: "work" } }] },
                { text: report("delegated") }
              ]
            },
            {
              match: { depth: 0 },
              turns: [{ tool_calls: [{ name: "agent_spawn", args: { description: "d", prompt: "delegate" } }] }, {
                hang: true
              }]
            }
          ]
        },
        { apiTimeoutSecs: 600 },
        { subagents: { heartbeatTimeoutSecs: 60 } }
      )
      const manager = get(SubAgentManager)
      yield* get(Embedded).startRoot({ prompt: "coordinate" })
      for (let i = 0; i < 4; i++) yield* TestClock.adjust("60 seconds")
      const delegate = (yield* manager.list({ includeArchived: true })).find((agent) => agent.depth === 1)!
      const done = yield* manager.result(delegate.agent_id, { block: true })
      assert.strictEqual(done.status, "completed", done.reason)
      assert.strictEqual(done.outcome?.summary, "delegated")
    }).pipe(provideNode))

  it.effect("queue admission: a depth-5 tree under a cap of 2 completes (a waiting parent lends its permit to its child)", () =>
    Effect.gen(function*() {
      // A chain: each level spawns the next and waits for it (agent_wait); level 5 answers.
      // Levels 1 and 2 take the two permits; before lending, level 3 queued behind parents that
      // kept theirs while they waited, and nothing moved until the heartbeat cancelled them.
      const level = (prompt: string) => Number(prompt.slice("level-".length))
      const { get } = yield* setup(
        {
          rules: [{
            respond: (c) => {
              const depth = level(c.prompt)
              if (depth === 5) return { text: report("level-5 done") }
              if (c.turn === 0) {
                return {
                  tool_calls: [{
                    name: "agent_spawn",
                    args: { description: `level-${depth + 1}`, prompt: `level-${depth + 1}` }
                  }]
                }
              }
              if (c.turn === 1) {
                const id = (c.lastToolResults[0]?.result as { agent_id: string }).agent_id
                return { tool_calls: [{ name: "agent_wait", args: { ids: [id], wait_mode: "all" } }] }
              }
              const got = (c.lastToolResults[0]?.result as { completed: ReadonlyArray<{ summary: string }> })
                .completed[0]?.summary
              return { text: report(`level-${depth} done <- ${got}`) }
            }
          }]
        },
        { maxDepth: 5, apiTimeoutSecs: 600 },
        { subagents: { maxConcurrent: 2, admission: "queue", heartbeatTimeoutSecs: 600 } }
      )
      const manager = get(SubAgentManager)
      const events = yield* (get(AgentEvents)).subscribe
      const root = (yield* get(Embedded).startRoot({ prompt: "level-0" })).agent
      // Ten virtual seconds: far less than the heartbeat, far more than the tree needs.
      for (let i = 0; i < 10; i++) yield* TestClock.adjust("1 second")
      const done = yield* manager.result(root.agent_id, { block: false })
      const agents = yield* manager.list({ includeArchived: true })
      const statuses = agents.filter((a) => a.depth > 0).map((a) => `${a.description}:${a.status}`).sort()
      assert.strictEqual(done.status, "completed", `the tree did not finish: ${statuses.join(", ")}`)
      assert.strictEqual(
        done.outcome?.summary,
        "level-0 done <- level-1 done <- level-2 done <- level-3 done <- level-4 done <- level-5 done"
      )
      assert.deepStrictEqual(statuses, [1, 2, 3, 4, 5].map((d) => `level-${d}:completed`))
      // Agents working at once (running, and not blocked waiting for a child) never exceeded 2.
      const working = new Set<string>()
      let peak = 0
      for (const event of yield* PubSub.takeAll(events)) {
        const id = event.agent.agentId
        if (event.agent.depth === 0) continue
        if (event.type === "started") working.add(id)
        if (event.type === "tool_call" && event.tool === "agent_wait") working.delete(id)
        if (event.type === "tool_result" && event.tool === "agent_wait") working.add(id)
        if (event.type === "completed" || event.type === "failed" || event.type === "cancelled") working.delete(id)
        peak = Math.max(peak, working.size)
      }
      assert.isAtMost(peak, 2)
      assert.isAtLeast(peak, 1)
    }).pipe(provideNode))

  it.effect("queue admission: a wait that times out while its lent permit is in use leaves it with the child; the parent queues for one", () =>
    Effect.gen(function*() {
      // Cap 1. The parent holds the only permit, spawns a child (queued) and waits for it with a
      // 1 s timeout: the child runs on the lent permit for 5 s. When the wait times out, the
      // child keeps it, and the parent's next model step waits until the child has ended.
      const parentSteps: Array<number> = []
      const { get } = yield* setup(
        {
          rules: [
            { match: { prompt: "child" }, turns: [{ delay_ms: 5000, text: report("child done") }] },
            {
              match: { prompt: "parent" },
              respond: (c) =>
                Effect.map(Clock.currentTimeMillis, (now): ScriptedModel.Turn => {
                  parentSteps.push(now)
                  if (c.turn === 0) {
                    return { tool_calls: [{ name: "agent_spawn", args: { description: "child", prompt: "child" } }] }
                  }
                  if (c.turn === 1) {
                    const id = (c.lastToolResults[0]?.result as { agent_id: string }).agent_id
                    return {
                      tool_calls: [{ name: "agent_wait", args: { ids: [id], wait_mode: "all", timeout_ms: 1000 } }]
                    }
                  }
                  return { text: report(`waited: ${JSON.stringify(c.lastToolResults[0]?.result)}`) }
                })
            },
            { match: { depth: 0 }, turns: [{ hang: true }] }
          ]
        },
        { apiTimeoutSecs: 600, maxDepth: 2 },
        { subagents: { maxConcurrent: 1, admission: "queue", heartbeatTimeoutSecs: 600 } }
      )
      const manager = get(SubAgentManager)
      const start = yield* Clock.currentTimeMillis
      const parent = yield* manager.spawn(undefined, { prompt: "parent" })
      for (let i = 0; i < 8; i++) yield* TestClock.adjust("1 second")
      const done = yield* manager.result(parent.agent_id, { block: true })
      assert.strictEqual(done.status, "completed", done.reason)
      assert.include(done.outcome?.summary ?? "", `"timed_out":true`)
      const child = (yield* manager.list({ includeArchived: true })).find((a) => a.description === "child")!
      assert.strictEqual(child.status, "completed")
      // The wait timed out at 1 s; the parent's third step came only once the child had ended at 5 s.
      // (A step at 5 s may follow: its answer found the child's end not yet recorded.)
      const steps = parentSteps.map((t) => t - start)
      assert.deepStrictEqual(steps.slice(0, 3), [0, 0, 5000])
      assert.isTrue(steps.every((t) => t === 0 || t === 5000), `parent steps at ${steps.join(", ")} ms`)
      assert.strictEqual(child.finished_at! - start, 5000)
    }).pipe(provideNode))

  it.effect("a child resumed from outside the instant it completes: its parent's agent_wait still gets the result it waited for", () =>
    Effect.gen(function*() {
      // The outside observer waits for the child before the parent does, so it is woken first
      // when the child completes, and resumes it before the parent's wait reads the views.
      let waited: unknown
      const { get } = yield* setup(
        {
          rules: [
            // The resumed run (turn 1) takes 5 s: it is running when the parent reads the views.
            {
              match: { prompt: "child" },
              turns: [{ delay_ms: 1000, text: report("child done") }, { delay_ms: 5000, text: report("again done") }]
            },
            {
              match: { depth: 0 },
              respond: (c) => {
                if (c.turn === 0) {
                  return { tool_calls: [{ name: "agent_spawn", args: { description: "child", prompt: "child" } }] }
                }
                if (c.turn === 1) {
                  const id = (c.lastToolResults[0]?.result as { agent_id: string }).agent_id
                  return { delay_ms: 100, tool_calls: [{ name: "agent_wait", args: { ids: [id], wait_mode: "all" } }] }
                }
                if (c.turn === 2) waited = c.lastToolResults[0]?.result
                return { text: report("done") }
              }
            }
          ]
        },
        { apiTimeoutSecs: 600 }
      )
      const manager = get(SubAgentManager)
      const events = yield* (get(AgentEvents)).subscribe
      yield* get(Embedded).startRoot({ prompt: "coordinate" })
      const spawned = yield* PubSub.take(events).pipe(
        Effect.repeat({ until: (event) => event.type === "spawned" && event.agent.depth === 1 })
      )
      const child = spawned.agent.agentId
      const outside = yield* Effect.forkChild(
        Effect.andThen(manager.result(child, { block: true }), manager.resume(undefined, child, "again")),
        { startImmediately: true }
      )
      for (let i = 0; i < 3; i++) yield* TestClock.adjust("1 second")
      assert.include(["pending", "running"], (yield* Fiber.join(outside)).status)
      const result = waited as {
        completed: ReadonlyArray<{ agent_id: string; summary: string; status: string }>
        still_running: ReadonlyArray<string>
      }
      assert.deepStrictEqual(
        [result.completed.map((a) => [a.agent_id, a.status, a.summary]), result.still_running],
        [[[child, "completed", "child done"]], []]
      )
    }).pipe(provideNode))

  it.effect("after a jittered retry under a TestClock, every time in the record is a whole millisecond and it decodes", () =>
    Effect.gen(function*() {
      // The backoff of 500 ms +- jitter used to be slept as is: a fractional sleep moves a
      // TestClock to a fractional time, and `finished_at` failed the record schema (integers).
      const { get } = yield* setup(
        {
          rules: [{
            turns: [{ text: report("done"), error: { kind: "retryable", message: "try again", times: 1 } }]
          }]
        },
        { maxRetries: 2, retryBaseMs: 500, retryMaxMs: 500, apiTimeoutSecs: 60 }
      )
      const manager = get(SubAgentManager)
      const store = get(SubAgentStore)
      const agent = yield* manager.spawn(undefined, { prompt: "work" }).pipe(Random.withSeed(7))
      for (let i = 0; i < 2; i++) yield* TestClock.adjust("1 second")
      const done = yield* manager.result(agent.agent_id, { block: true })
      assert.strictEqual(done.status, "completed", done.reason)
      const stored = Option.getOrThrow(yield* store.get(agent.agent_id))
      const times = [
        stored.created_at,
        stored.started_at,
        stored.finished_at,
        ...(stored.events ?? []).map((e) => e.at)
      ]
      assert.isTrue(times.every((t) => Number.isInteger(t)), `times: ${times.join(", ")}`)
      assert.isAbove(stored.finished_at!, 250)
      const decoded = Schema.decodeUnknownExit(SubAgentRecord.SubAgentRecord)(JSON.parse(JSON.stringify(stored)))
      assert.isTrue(Exit.isSuccess(decoded), String(decoded))
    }).pipe(provideNode))

  it.effect("resuming an agent cancelled while it was queued gives it its task (it never read it)", () =>
    Effect.gen(function*() {
      // Found by the lab: such an agent's first prompt was never delivered, so the resumed run
      // saw only the resume message and did not know what it was for.
      const { script, answer } = yield* controlled
      const { get } = yield* setup(script, {}, { subagents: { maxConcurrent: 1, admission: "queue" } })
      const manager = get(SubAgentManager)
      const session = get(Session)
      const first = yield* manager.spawn(undefined, { prompt: "job-a" })
      const queued = yield* manager.spawn(undefined, { prompt: "job-b: count the files" })
      assert.strictEqual(queued.status, "pending")
      assert.strictEqual((yield* manager.cancel(queued.agent_id, "not now")).status, "cancelled")
      yield* answer("job-a", { text: report("a done") })
      yield* manager.wait([first.agent_id], { mode: "all" })
      yield* manager.resume(undefined, queued.agent_id, "go on")
      yield* answer("job-b: count the files\n\ngo on", { text: report("b done") })
      yield* answer("go on", { text: report("b, without its task") })
      const done = yield* manager.result(queued.agent_id, { block: true })
      assert.strictEqual(done.status, "completed", done.reason)
      assert.strictEqual(done.outcome?.summary, "b done")
      const users = (yield* session.transcript(queued.agent_id)).filter((m) => m.role === "user")
      assert.strictEqual(users.length, 1)
    }).pipe(provideNode))

  it.effect("agent_wait without ids hands over each child's result once, also of a child that finished before it asked", () =>
    Effect.gen(function*() {
      // fast answers at once, slow after 1 s. The root reads slow by id (by then fast has long
      // finished), then waits twice without ids: the first wait must hand over fast (and not
      // slow again), the second nothing.
      const completedOf = (result: unknown) =>
        (result as { completed: ReadonlyArray<{ summary: string }> }).completed.map((agent) => agent.summary).join("+")
      const { get } = yield* setup({
        rules: [
          { match: { prompt: "fast" }, turns: [{ text: report("fast done") }] },
          { match: { prompt: "slow" }, turns: [{ delay_ms: 1000, text: report("slow done") }] },
          {
            match: { depth: 0 },
            respond: (c) => {
              const last = c.lastToolResults[0]?.result as { agent_id?: string } | undefined
              switch (c.turn) {
                case 0:
                  return {
                    tool_calls: [
                      { name: "agent_spawn", args: { description: "f", prompt: "fast" } },
                      { name: "agent_spawn", args: { description: "s", prompt: "slow" } }
                    ]
                  }
                case 1: {
                  const slow = (c.lastToolResults[1]?.result as { agent_id: string }).agent_id
                  return { tool_calls: [{ name: "agent_result", args: { id: slow, block: true } }] }
                }
                case 2:
                  return { tool_calls: [{ name: "agent_wait", args: { wait_mode: "all" } }] }
                case 3:
                  return { tool_calls: [{ name: "agent_wait", args: {} }] }
                default:
                  return { text: `second wait: [${completedOf(last)}]` }
              }
            }
          }
        ]
      })
      const roots = get(Embedded)
      const session = get(Session)
      const root = yield* roots.startRoot({ prompt: "coordinate" })
      yield* TestClock.adjust("2 seconds")
      const answer = yield* Fiber.join(root.fiber)
      assert.strictEqual(answer.text, "second wait: []")
      const results = toolResults(yield* session.transcript(root.agent.agent_id)).map((part) => part.result)
      assert.include(JSON.stringify(results[2]), "slow done")
      assert.strictEqual(completedOf(results[3]), "fast done", "the first wait hands over fast, not slow again")
    }).pipe(provideNode))

  it.effect("resume continues an interrupted agent from its transcript", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({
        rules: [{
          respond: (c) =>
            JSON.stringify(c.messages.at(-1)).includes("carry on")
              ? {
                text: report(`resumed with ${c.toolResults.length} earlier tool result(s) and ${c.turn} turns before`)
              }
              : c.turn === 0
              ? { tool_calls: [{ name: "list_dir", args: {} }] }
              : { hang: true }
        }]
      })
      const manager = get(SubAgentManager)
      const agent = yield* manager.spawn(undefined, { prompt: "work" })
      const session = get(Session)
      for (let i = 0; i < 100 && (yield* session.transcript(agent.agent_id)).length < 4; i++) {
        yield* Effect.yieldNow
      }
      yield* manager.cancel(agent.agent_id, "pause")
      assert.strictEqual((yield* manager.result(agent.agent_id, { block: false })).status, "cancelled")
      yield* manager.resume(undefined, agent.agent_id, "carry on")
      const done = yield* manager.result(agent.agent_id, { block: true })
      assert.strictEqual(done.status, "completed")
      assert.strictEqual(done.outcome?.summary, "resumed with 1 earlier tool result(s) and 1 turns before")
    }).pipe(provideNode))

  it.effect("an agent resumed by a running parent is that parent's child: cancelling the parent ends it", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({
        rules: [
          { match: { prompt: "parent" }, turns: [{ hang: true }] },
          {
            respond: (c) =>
              JSON.stringify(c.messages.at(-1)).includes("carry on") ? { hang: true } : { text: report("first run") }
          }
        ]
      })
      const manager = get(SubAgentManager)
      const session = get(Session)
      const agent = yield* manager.spawn(undefined, { prompt: "work" })
      assert.strictEqual((yield* manager.result(agent.agent_id, { block: true })).status, "completed")
      const parent = yield* manager.spawn(undefined, { prompt: "parent" })
      for (let i = 0; i < 100 && session.scopeOf(parent.agent_id)._tag === "None"; i++) yield* Effect.yieldNow
      assert.strictEqual(session.scopeOf(parent.agent_id)._tag, "Some", "the parent's prompt is running")
      yield* manager.resume(parent.agent_id, agent.agent_id, "carry on")
      for (let i = 0; i < 100 && (yield* manager.result(agent.agent_id, { block: false })).status !== "running"; i++) {
        yield* Effect.yieldNow
      }
      assert.strictEqual((yield* manager.result(agent.agent_id, { block: false })).status, "running")
      yield* manager.cancel(parent.agent_id, "parent stopped")
      // Non-blocking reads: in the manager's scope the resumed run would hang on forever.
      const status = () => Effect.map(manager.result(agent.agent_id, { block: false }), (view) => view.status)
      for (let i = 0; i < 1000 && (yield* status()) === "running"; i++) yield* Effect.yieldNow
      const ended = yield* manager.result(agent.agent_id, { block: false })
      assert.notStrictEqual(ended.status, "running")
      assert.notStrictEqual(ended.status, "completed")
      assert.strictEqual(yield* manager.running, 0)
    }).pipe(provideNode))

  it.effect("a resume at the cap with admission = reject is refused and leaves the finished agent as it was", () =>
    Effect.gen(function*() {
      const { get } = yield* setup(
        {
          rules: [
            { match: { prompt: "busy" }, turns: [{ hang: true }] },
            { turns: [{ text: report("first run") }] }
          ]
        },
        {},
        { subagents: { maxConcurrent: 1 } }
      )
      const manager = get(SubAgentManager)
      const agent = yield* manager.spawn(undefined, { prompt: "work" })
      const before = yield* manager.result(agent.agent_id, { block: true })
      assert.strictEqual(before.status, "completed")
      const busy = yield* manager.spawn(undefined, { prompt: "busy" })
      const error = yield* Effect.flip(manager.resume(undefined, agent.agent_id, "again"))
      assert.strictEqual(error._tag, "CapReached")
      assert.include(error.message, "max 1")
      const after = yield* manager.result(agent.agent_id, { block: false })
      assert.strictEqual(after.status, "completed")
      assert.strictEqual(after.outcome?.summary, "first run")
      assert.strictEqual(yield* manager.running, 1)
      // Once the cap frees, the same resume is admitted.
      yield* manager.cancel(busy.agent_id, "done with it")
      yield* manager.wait([busy.agent_id], { mode: "all" })
      const resumed = yield* manager.resume(undefined, agent.agent_id, "again")
      assert.notStrictEqual(resumed.status, "completed")
    }).pipe(provideNode))

  it.effect("restart: a running record becomes interrupted, flagged from a prior session, hidden unless archived", () =>
    Effect.gen(function*() {
      const { fs, path } = yield* setup({ rules: [] })
      const dir = yield* fs.makeTempDirectoryScoped()
      const stateDir = path.join(dir, ".fibril", "state")
      // A version 1 record (no record_version), as Fibril 0.1 wrote it.
      const old: Omit<SubAgentRecord.SubAgentRecord, "record_version"> = {
        agent_id: "agent_old1",
        depth: 1,
        role: "explore",
        model: "default",
        description: "left running",
        objective: "x",
        status: "running",
        detached: false,
        fork_context: false,
        session_boot_id: "previous",
        created_at: 1,
        started_at: 2,
        steps: 3,
        tool_calls: 1,
        tokens: { input: 10, output: 5, cached: 0 },
        transcript_handle: "agent_old1.jsonl"
      }
      yield* fs.makeDirectory(stateDir, { recursive: true })
      yield* fs.writeFileString(
        path.join(stateDir, "subagents.v1.json"),
        JSON.stringify({ version: 1, records: [old] })
      )
      const { get } = yield* setup({ rules: [] }, {}, { root: dir, store: "file" })
      const manager = get(SubAgentManager)
      assert.deepStrictEqual(yield* manager.list({ includeArchived: false }), [])
      const archived = yield* manager.list({ includeArchived: true })
      assert.strictEqual(archived.length, 1)
      assert.strictEqual(archived[0]!.status, "interrupted")
      assert.strictEqual(archived[0]!.reason, "Interrupted by process restart")
      assert.isTrue(archived[0]!.from_prior_session)
    }).pipe(provideNode))

  it.effect("task goes through the manager: recorded, counted against the cap, structured result", () =>
    Effect.gen(function*() {
      const { get } = yield* setup(
        {
          rules: [
            // The child's model yields once, so the two tasks overlap: the second arrives while
            // the first holds the only permit (a synchronous child would finish before it starts).
            { match: { role: "explore" }, respond: () => Effect.as(Effect.yieldNow, { text: report("explored") }) },
            {
              match: { depth: 0 },
              turns: [
                {
                  tool_calls: [
                    { name: "task", args: { description: "a", prompt: "one", subagent_type: "explore" } },
                    { name: "task", args: { description: "b", prompt: "two", subagent_type: "explore" } }
                  ]
                },
                { text: "done" }
              ]
            }
          ]
        },
        {},
        { subagents: { maxConcurrent: 1 } }
      )
      const session = get(Session)
      const root = yield* session.create()
      yield* session.prompt(root.id, "go")
      const results = toolResults(yield* session.transcript(root.id))
      // One of the two parallel tasks got the permit; the other was refused by the cap.
      assert.deepStrictEqual(results.map((r) => r.isFailure).sort(), [false, true])
      const refused = results.find((r) => r.isFailure)!.result as { error: string; message: string }
      assert.strictEqual(refused.error, "CapReached")
      assert.include(refused.message, "max 1")
      const records = yield* get(SubAgentManager).list({ includeArchived: true })
      assert.strictEqual(records.length, 1)
      assert.strictEqual(records[0]!.status, "completed")
    }).pipe(provideNode))

  it.effect("allowed_tools naming a tool that does not exist is refused with the names, creates nothing, frees the permit", () =>
    Effect.gen(function*() {
      const { get } = yield* setup(
        {
          rules: [
            { match: { depth: 1 }, turns: [{ text: report("read it") }] },
            {
              match: { depth: 0 },
              turns: [
                {
                  tool_calls: [{
                    name: "task",
                    args: {
                      description: "typo",
                      prompt: "read the config",
                      subagent_type: "custom",
                      allowed_tools: ["read_fle", "grep"]
                    }
                  }]
                },
                // The model corrects the name; the cap of 1 must have its permit back.
                {
                  tool_calls: [{
                    name: "task",
                    args: {
                      description: "fixed",
                      prompt: "read the config",
                      subagent_type: "custom",
                      allowed_tools: ["read_file", "grep"]
                    }
                  }]
                },
                { text: "done" }
              ]
            }
          ]
        },
        {},
        { subagents: { maxConcurrent: 1 } }
      )
      const session = get(Session)
      const root = yield* session.create()
      assert.strictEqual((yield* session.prompt(root.id, "go")).text, "done")
      const [refused, accepted] = toolResults(yield* session.transcript(root.id))
      assert.isTrue(refused!.isFailure)
      const failure = refused!.result as { error: string; message: string }
      assert.strictEqual(failure.error, "InvalidRoleRequest")
      assert.include(failure.message, "allowed_tools names a tool that does not exist: \"read_fle\"")
      assert.include(failure.message, "the tools are: ")
      assert.include(failure.message, "read_file")
      assert.isFalse(accepted!.isFailure)
      const records = yield* get(SubAgentManager).list({ includeArchived: true })
      assert.strictEqual(records.length, 1)
      assert.strictEqual(records[0]!.status, "completed")
      // A root agent is held to the same rule.
      const root2 = yield* Effect.flip(session.create({ allowedTools: ["lookup"] }))
      assert.strictEqual(root2._tag, "InvalidRoleRequest")
    }).pipe(provideNode))

  it.effect("each agent has exactly one terminal event", () =>
    Effect.gen(function*() {
      const { script, answer } = yield* controlled
      const { get } = yield* setup(script)
      const subscription = yield* get(AgentEvents).subscribe
      const manager = get(SubAgentManager)
      const a = yield* manager.spawn(undefined, { prompt: "a" })
      const b = yield* manager.spawn(undefined, { prompt: "b" })
      yield* answer("a", { text: report("ok") })
      yield* manager.cancel(b.agent_id)
      yield* manager.wait([a.agent_id, b.agent_id], { mode: "all" })
      yield* manager.cancel(a.agent_id)
      const events = yield* PubSub.takeAll(subscription)
      const terminal = events.filter((e) => ["completed", "failed", "cancelled", "interrupted"].includes(e.type))
      assert.deepStrictEqual(
        terminal.map((e) => [e.agent.agentId, e.type]).sort(),
        [[a.agent_id, "completed"], [b.agent_id, "cancelled"]].sort()
      )
    }).pipe(provideNode))

  it.effect("a long-lived manager forgets the agents its store evicted, sessions included", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ text: report("done") }], repeat_last: true }] })
      const manager = get(SubAgentManager)
      const session = get(Session)
      const store = get(SubAgentStore)
      const root = yield* session.create()
      // The memory store keeps the newest 1000 finished records; run well past that.
      const ids: Array<string> = []
      for (let i = 0; i < 2600; i++) {
        ids.push((yield* manager.run(root.id, { prompt: `p${i}`, role: "explore" })).agent_id)
        if (i % 500 === 499) yield* store.flush
      }
      yield* store.flush
      const kept = (yield* store.all).map((r) => r.agent_id)
      assert.strictEqual(kept.length, 1000)
      assert.deepStrictEqual(kept.sort(), ids.slice(-1000).sort())
      assert.deepStrictEqual([...(yield* store.ids)].sort(), kept)
      // Evicted agents are gone from the manager and their sessions are released...
      const oldest = ids[0]!
      const error = yield* Effect.flip(manager.result(oldest, { block: false }))
      assert.strictEqual(error._tag, "AgentNotFound")
      assert.isTrue((yield* Effect.exit(session.info(oldest)))._tag === "Failure")
      // ...while what the store holds is still listed, and bounded (about twice the store).
      const listed = yield* manager.list({ includeArchived: true })
      assert.isAtMost(listed.length, 2000)
      const newest = ids.at(-1)!
      assert.include(listed.map((a) => a.agent_id), newest)
      assert.strictEqual((yield* session.info(newest)).id, newest)
    }).pipe(provideNode))
})
