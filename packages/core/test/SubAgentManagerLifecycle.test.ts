// Lifecycle edges of SubAgentManager in its second half (start, resume, list, the watchdog,
// another process's agents), found by the mutation run of lines 808 to the end
// (docs/testing.md, "SubAgentManager.ts"): each test here failed with a mutant of
// SubAgentManager.ts planted by hand and passes on the code as it is. Real layers, the
// ScriptedModel, the TestClock; two "processes" are two stacks on one state directory.
import { assert, describe, it } from "@effect/vitest"
import { ScriptedModel } from "@fibril/testkit"
import { Clock, Context, Deferred, Duration, Effect, Fiber, FileSystem, Layer, Option, PubSub, Tracer } from "effect"
import { TestClock } from "effect/testing"
import { AgentEvents } from "../src/AgentEvents.ts"
import * as Fibril from "../src/Fibril.ts"
import * as Models from "../src/Models.ts"
import * as Permission from "../src/Permission.ts"
import { Session } from "../src/Session.ts"
import * as SubAgentManager from "../src/SubAgentManager.ts"
import { SubAgentStore } from "../src/SubAgentStore.ts"
import { provideNode, report, setup } from "./support.ts"

const Manager = SubAgentManager.SubAgentManager

const userTexts = (messages: ReadonlyArray<{ readonly role: string; readonly content: unknown }>) =>
  messages.filter((m) => m.role === "user").map((m) =>
    typeof m.content === "string"
      ? m.content
      : (m.content as ReadonlyArray<{ type: string; text?: string }>).map((p) => p.text ?? "").join("")
  )

/** Answers `report(...)` unless the last user message contains `cue`, then hangs. */
const hangOn = (cue: string): ScriptedModel.Rule => ({
  respond: (c) => userTexts(c.messages).at(-1)!.includes(cue) ? { hang: true } : { text: report("first run") }
})

/** Yields until `session` has a running prompt scope for `id`. */
const untilRunning = (session: Session["Service"], id: string) =>
  Effect.gen(function*() {
    for (let i = 0; i < 100 && Option.isNone(session.scopeOf(id)); i++) yield* Effect.yieldNow
    assert.isTrue(Option.isSome(session.scopeOf(id)), `${id} is running`)
  })

describe("SubAgentManager lifecycle", () => {
  it.effect("a parent answering is not held back by a detached child, which runs on", () =>
    Effect.gen(function*() {
      const go = yield* Deferred.make<void>()
      const { get } = yield* setup({
        rules: [
          { match: { depth: 0 }, respond: () => Effect.as(Deferred.await(go), { text: "final" }) },
          { turns: [{ hang: true }] }
        ]
      })
      const manager = get(Manager)
      const root = yield* get(SubAgentManager.Embedded).startRoot({ prompt: "root" })
      const rootId = root.agent.agent_id
      yield* untilRunning(get(Session), rootId)
      const child = yield* manager.spawn(rootId, { prompt: "on its own", detached: true })
      assert.isTrue(child.detached)
      yield* Deferred.succeed(go, undefined)
      for (let i = 0; i < 100 && root.fiber.pollUnsafe() === undefined; i++) yield* Effect.yieldNow
      assert.isDefined(root.fiber.pollUnsafe(), "the root answered without waiting for its detached child")
      assert.strictEqual((yield* Fiber.join(root.fiber)).text, "final")
      assert.strictEqual((yield* manager.result(child.agent_id, { block: false })).status, "running")
      yield* manager.cancel(child.agent_id)
    }).pipe(provideNode))

  it.effect("a detached agent resumed by a running parent stays detached: cancelling that parent leaves it running", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({
        rules: [{ match: { prompt: "parent" }, turns: [{ hang: true }] }, hangOn("carry on")]
      })
      const manager = get(Manager)
      const agent = yield* manager.spawn(undefined, { prompt: "work", detached: true })
      assert.strictEqual((yield* manager.result(agent.agent_id, { block: true })).status, "completed")
      const parent = yield* manager.spawn(undefined, { prompt: "parent" })
      yield* untilRunning(get(Session), parent.agent_id)
      yield* manager.resume(parent.agent_id, agent.agent_id, "carry on")
      yield* untilRunning(get(Session), agent.agent_id)
      yield* manager.cancel(parent.agent_id, "parent stopped")
      for (let i = 0; i < 100; i++) yield* Effect.yieldNow
      const after = yield* manager.result(agent.agent_id, { block: false })
      assert.deepStrictEqual([after.status, after.reason], ["running", undefined])
      yield* manager.cancel(agent.agent_id)
    }).pipe(provideNode))

  it.effect("a resumed agent's view drops the ended run's reason, finish time and outcome; its runs keep them", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [hangOn("carry on")] })
      const manager = get(Manager)
      const completed = yield* manager.run(undefined, { prompt: "work" })
      assert.isDefined(completed.outcome)
      assert.isDefined(completed.finished_at)
      const resumed = yield* manager.resume(undefined, completed.agent_id, "carry on")
      assert.strictEqual(resumed.status, "running")
      for (const view of [resumed, yield* manager.result(completed.agent_id, { block: false })]) {
        assert.isUndefined(view.outcome)
        assert.isUndefined(view.finished_at)
        assert.isUndefined(view.reason)
      }
      yield* manager.cancel(completed.agent_id, "pause")
      const cancelled = yield* manager.result(completed.agent_id, { block: false })
      assert.deepStrictEqual([cancelled.status, cancelled.reason], ["cancelled", "pause"])
      const again = yield* manager.resume(undefined, completed.agent_id, "carry on")
      assert.isUndefined(again.reason)
      assert.isUndefined(again.finished_at)
      assert.deepStrictEqual(again.runs?.map((r) => r.status), ["completed", "cancelled", "running"])
      yield* manager.cancel(completed.agent_id)
    }).pipe(provideNode))

  it.effect("the watchdog checks every quarter of the timeout, but at most every 30 s and at least every 1 s", () =>
    Effect.gen(function*() {
      // As in the edges' heartbeat test: `blocked` waits in agent_result on a sleeper (not its
      // child), so it makes no progress; the sleeper's model call is its progress.
      const silentFor = (heartbeatTimeoutSecs: number, after: Duration.Input, step: Duration.Input, steps: number) =>
        Effect.gen(function*() {
          let sleeper = ""
          const { get } = yield* setup(
            {
              rules: [{
                respond: (c) =>
                  c.prompt === "sleep"
                    ? { hang: true }
                    : { tool_calls: [{ name: "agent_result", args: { id: sleeper, block: true } }] }
              }]
            },
            { apiTimeoutSecs: 600, maxDepth: 2 },
            { subagents: { heartbeatTimeoutSecs } }
          )
          const manager = get(Manager)
          const start = yield* Clock.currentTimeMillis
          sleeper = (yield* manager.spawn(undefined, { prompt: "sleep" })).agent_id
          yield* TestClock.adjust(after)
          const blocked = yield* manager.spawn(undefined, { prompt: "blocked" })
          for (let i = 0; i < steps; i++) yield* TestClock.adjust(step)
          const ended = yield* manager.result(blocked.agent_id, { block: false })
          yield* manager.cancel(sleeper)
          return [ended.status, (ended.finished_at ?? start) - start, ended.reason]
        })
      // 200 s: a quarter is 50 s, so checks every 30 s; silent from 0, cancelled at 210 s.
      assert.deepStrictEqual(yield* silentFor(200, "0 millis", "1 second", 215), [
        "cancelled",
        210_000,
        "Auto-cancelled after 200s without sub-agent progress."
      ])
      // 2 s: a quarter is 500 ms, so checks every second; silent from 400 ms, cancelled at 3 s.
      assert.deepStrictEqual(yield* silentFor(2, "400 millis", "100 millis", 40), [
        "cancelled",
        3000,
        "Auto-cancelled after 2s without sub-agent progress."
      ])
    }).pipe(provideNode))

  it.effect("a resumed agent is watched again: silent in its new run, it is auto-cancelled", () =>
    Effect.gen(function*() {
      // Its new run blocks in agent_result on another process's agent, so this process has no
      // other live agent: only the resume can wake the watchdog.
      const fs = yield* FileSystem.FileSystem
      const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      let sleeper = ""
      const script: ScriptedModel.ScriptInput = {
        rules: [
          { match: { prompt: "sleep" }, turns: [{ hang: true }] },
          {
            respond: (c) =>
              userTexts(c.messages).at(-1) === "wait for it"
                ? { tool_calls: [{ name: "agent_result", args: { id: sleeper, block: true } }] }
                : { text: report("first run") }
          }
        ]
      }
      const options = { subagents: { heartbeatTimeoutSecs: 4 }, root, store: "file" as const }
      const a = yield* setup(script, { apiTimeoutSecs: 600, maxDepth: 2 }, options)
      const b = yield* setup(script, { apiTimeoutSecs: 600, maxDepth: 2 }, options)
      sleeper = (yield* b.get(Manager).spawn(undefined, { prompt: "sleep" })).agent_id
      yield* b.get(SubAgentStore).sync
      const manager = a.get(Manager)
      const agent = yield* manager.run(undefined, { prompt: "work" })
      assert.strictEqual(agent.status, "completed")
      const start = yield* Clock.currentTimeMillis
      yield* manager.resume(undefined, agent.agent_id, "wait for it")
      for (let i = 0; i < 10; i++) yield* TestClock.adjust("1 second")
      const ended = yield* manager.result(agent.agent_id, { block: false })
      assert.deepStrictEqual([ended.status, ended.reason, ended.finished_at! - start], [
        "cancelled",
        "Auto-cancelled after 4s without sub-agent progress.",
        4000
      ])
      yield* b.get(Manager).cancel(sleeper)
    }).pipe(provideNode))

  it.effect("resume: an agent that never started is given its task, alone when no message comes with it", () =>
    Effect.gen(function*() {
      const go = yield* Deferred.make<void>()
      const asked: Array<string> = []
      const { get } = yield* setup(
        {
          rules: [
            {
              match: { prompt: "first" },
              respond: () => Effect.as(Deferred.await(go), { text: report("first done") })
            },
            {
              respond: (c) => {
                asked.push(userTexts(c.messages).join(" | "))
                return { text: report("done") }
              }
            }
          ]
        },
        {},
        { subagents: { maxConcurrent: 1, admission: "queue" } }
      )
      const manager = get(Manager)
      const first = yield* manager.spawn(undefined, { prompt: "first" })
      const queued = yield* manager.spawn(undefined, { prompt: "count the files" })
      yield* manager.cancel(queued.agent_id, "not now")
      yield* Deferred.succeed(go, undefined)
      yield* manager.result(first.agent_id, { block: true })
      yield* manager.resume(undefined, queued.agent_id)
      assert.strictEqual((yield* manager.result(queued.agent_id, { block: true })).status, "completed")
      assert.deepStrictEqual(asked, ["count the files"])
    }).pipe(provideNode))

  it.effect("queue admission: a resumed run cancelled while queued publishes its one terminal event", () =>
    Effect.gen(function*() {
      const { get } = yield* setup(
        { rules: [{ match: { prompt: "holder" }, turns: [{ hang: true }] }, { turns: [{ text: report("done") }] }] },
        {},
        { subagents: { maxConcurrent: 1, admission: "queue" } }
      )
      const manager = get(Manager)
      const agent = yield* manager.run(undefined, { prompt: "work" })
      const holder = yield* manager.spawn(undefined, { prompt: "holder" })
      const subscription = yield* get(AgentEvents).subscribe
      const resumed = yield* manager.resume(undefined, agent.agent_id, "more")
      assert.strictEqual(resumed.status, "pending")
      yield* manager.cancel(agent.agent_id, "never mind")
      const events = (yield* PubSub.takeAll(subscription)).filter((e) => e.agent.agentId === agent.agent_id)
      assert.deepStrictEqual(events.map((e) => [e.type, e.reason]), [["cancelled", "never mind"]])
      yield* manager.cancel(holder.agent_id)
    }).pipe(provideNode))

  it.effect("queue admission: a queued spawn refused when its session is created gives back no permit it never had", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ hang: true }] }] }, {}, {
        subagents: { maxConcurrent: 1, admission: "queue" }
      })
      const manager = get(Manager)
      const running = yield* manager.spawn(undefined, { prompt: "a" })
      const refused = yield* Effect.flip(
        manager.spawn(undefined, { prompt: "b", role: "custom", allowedTools: ["no_such_tool"] })
      )
      assert.strictEqual(refused._tag, "InvalidRoleRequest")
      const next = yield* manager.spawn(undefined, { prompt: "c" })
      assert.strictEqual(next.status, "pending")
      assert.strictEqual(yield* manager.running, 1)
      yield* manager.cancel(next.agent_id)
      yield* manager.cancel(running.agent_id)
    }).pipe(provideNode))

  it.effect("a task's result is its parent's: no unread child after run; an undelivered input is stored at once", () =>
    Effect.gen(function*() {
      const script: ScriptedModel.ScriptInput = {
        rules: [{ match: { depth: 0 }, turns: [{ hang: true }] }, { turns: [{ text: report("done") }] }]
      }
      const { get, root: dir } = yield* setup(script, {}, { store: "file" })
      const manager = get(Manager)
      const root = yield* get(SubAgentManager.Embedded).startRoot({ prompt: "root" })
      const rootId = root.agent.agent_id
      yield* untilRunning(get(Session), rootId)
      const child = yield* manager.run(rootId, { prompt: "child" })
      assert.strictEqual(child.status, "completed")
      assert.deepStrictEqual(yield* manager.unreadChildren(rootId), [])
      // Its own finished agent is current: listed without asking for the archive.
      assert.include((yield* manager.list({ includeArchived: false })).map((v) => v.agent_id), child.agent_id)
      yield* get(SubAgentStore).sync
      const late = yield* manager.sendInput(child.agent_id, "too late", false)
      assert.isFalse(late.delivered)
      yield* get(SubAgentStore).sync
      // Read by another process: what the file holds, not this store's copy.
      const other = yield* setup(script, {}, { root: dir, store: "file" })
      const stored = Option.getOrThrow(yield* other.get(SubAgentStore).get(child.agent_id))
      assert.deepStrictEqual(stored.inputs?.map((i) => [i.preview, i.delivered]), [["too late", false]])
      yield* manager.cancel(rootId)
    }).pipe(provideNode))

  it.effect("another process's finished agent taken over keeps its recorded permissions, role and model", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      const script: ScriptedModel.ScriptInput = { rules: [hangOn("carry on")] }
      const a = yield* setup(script, {}, { root, store: "file" })
      const b = yield* setup(script, {}, { root, store: "file" })
      const first = yield* a.get(Manager).run(undefined, { prompt: "look", allowedTools: ["list_dir", "read_file"] })
      assert.strictEqual(first.status, "completed")
      yield* a.get(SubAgentStore).flush
      yield* b.get(Manager).resume(undefined, first.agent_id, "carry on")
      const info = yield* b.get(Session).info(first.agent_id)
      assert.deepStrictEqual(Permission.toJson(info.rules), first.permissions)
      assert.deepStrictEqual([info.depth, info.model, info.role, info.description], [
        first.depth,
        first.model,
        first.role,
        first.description
      ])
      yield* b.get(Manager).cancel(first.agent_id)
    }).pipe(provideNode))

  it.effect("another process's agents: a blocking read polls every 250 ms; list filters them by parent", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      const script: ScriptedModel.ScriptInput = { rules: [{ turns: [{ hang: true }] }] }
      const a = yield* setup(script, { maxDepth: 2 }, { root, store: "file" })
      const b = yield* setup(script, { maxDepth: 2 }, { root, store: "file" })
      const owner = a.get(Manager)
      const other = b.get(Manager)
      const parent = yield* a.get(SubAgentManager.Embedded).startRoot({ prompt: "root" })
      const parentId = parent.agent.agent_id
      yield* untilRunning(a.get(Session), parentId)
      const child = yield* owner.spawn(parentId, { prompt: "child" })
      const orphan = yield* owner.spawn(undefined, { prompt: "orphan" })
      yield* a.get(SubAgentStore).sync

      const ids = (options: { readonly parentId?: string }) =>
        Effect.map(other.list({ includeArchived: false, ...options }), (views) => views.map((v) => v.agent_id).sort())
      assert.deepStrictEqual(yield* ids({}), [parentId, child.agent_id, orphan.agent_id].sort())
      assert.deepStrictEqual(yield* ids({ parentId: parentId }), [child.agent_id])
      assert.deepStrictEqual(yield* ids({ parentId: "agent_nobody" }), [])
      // The owner lists its own agents once, though its store holds them too.
      const own = (yield* owner.list({ includeArchived: true })).map((v) => v.agent_id).sort()
      assert.deepStrictEqual(own, [parentId, child.agent_id, orphan.agent_id].sort())

      // An input from B is delivered by A at its next poll, as a plain message (no interruption).
      assert.isTrue((yield* other.sendInput(child.agent_id, "from B", false)).delivered)
      for (let i = 0; i < 2; i++) yield* TestClock.adjust("500 millis")
      const inputs = (yield* owner.result(child.agent_id, { block: false })).inputs ?? []
      assert.deepStrictEqual(inputs.map((input) => ({ ...input, at: 0 })), [{
        at: 0,
        run_id: `${child.agent_id}-r1`,
        via: "request",
        delivered: true,
        preview: "from B",
        chars: 6
      }])

      // B blocks on A's orphan; A cancels it: B sees it at its next poll, 250 ms later.
      const reading = yield* Effect.forkChild(other.result(orphan.agent_id, { block: true }), {
        startImmediately: true
      })
      yield* owner.cancel(orphan.agent_id, "done with it")
      yield* a.get(SubAgentStore).sync
      for (let i = 0; i < 20; i++) yield* Effect.yieldNow
      assert.isUndefined(reading.pollUnsafe())
      yield* TestClock.adjust("250 millis")
      for (let i = 0; i < 20 && reading.pollUnsafe() === undefined; i++) yield* Effect.yieldNow
      assert.isDefined(reading.pollUnsafe(), "read within a poll of 250 ms")
      assert.deepStrictEqual(
        [(yield* Fiber.join(reading)).status, (yield* Fiber.join(reading)).reason],
        ["cancelled", "done with it"]
      )
      yield* owner.cancel(parentId)
    }).pipe(provideNode))

  it.effect("with a tracer installed, each manager operation is a span named after it", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({
        rules: [{ match: { depth: 0 }, turns: [{ hang: true }] }, { turns: [{ text: report("done") }] }]
      })
      const manager = get(Manager)
      const names: Array<string> = []
      const tracer = Tracer.make({
        span(options) {
          names.push(options.name)
          return Tracer.nativeTracer.span(options)
        }
      })
      yield* Effect.gen(function*() {
        const root = yield* get(SubAgentManager.Embedded).startRoot({ prompt: "root" })
        const spawned = yield* manager.spawn(undefined, { prompt: "one" })
        yield* manager.run(undefined, { prompt: "two" })
        yield* manager.wait([spawned.agent_id], { mode: "all" })
        yield* manager.result(spawned.agent_id, { block: false })
        yield* manager.list({ includeArchived: true })
        yield* manager.sendInput(spawned.agent_id, "note", false)
        yield* manager.assign(spawned.agent_id, { message: "note" })
        yield* manager.attachVerification(spawned.agent_id, { command: "true", exitCode: 0 })
        yield* manager.readTranscript(spawned.transcript_handle, {})
        yield* manager.resume(undefined, spawned.agent_id, "again")
        yield* manager.cancel(root.agent.agent_id)
      }).pipe(Effect.withTracer(tracer))
      const ours = new Set(names.filter((name) => name.startsWith("SubAgentManager.")))
      assert.deepStrictEqual(
        [...ours].sort(),
        [
          "assign",
          "attachVerification",
          "cancel",
          "list",
          "readTranscript",
          "result",
          "resume",
          "run",
          "sendInput",
          "spawn",
          "startRoot",
          "wait"
        ].map((name) => `SubAgentManager.${name}`)
      )
    }).pipe(provideNode))

  it.effect("wait on no agents returns at once; a root agent gets the role and tools it was started with", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ hang: true }] }] })
      const manager = get(Manager)
      for (const mode of ["any", "all"] as const) {
        assert.deepStrictEqual(yield* manager.wait([], { mode }), { timed_out: false, completed: [], pending: [] })
      }
      const narrow = yield* get(SubAgentManager.Embedded).startRoot({
        prompt: "look",
        role: "explore",
        allowedTools: ["list_dir"]
      })
      const wide = yield* get(SubAgentManager.Embedded).startRoot({ prompt: "look" })
      const session = get(Session)
      const narrowInfo = yield* session.info(narrow.agent.agent_id)
      const wideInfo = yield* session.info(wide.agent.agent_id)
      assert.deepStrictEqual([narrowInfo.role, wideInfo.role], ["explore", "general"])
      assert.deepStrictEqual(narrow.agent.permissions, Permission.toJson(narrowInfo.rules))
      assert.notDeepEqual(Permission.toJson(narrowInfo.rules), Permission.toJson(wideInfo.rules))
      yield* manager.cancel(narrow.agent.agent_id)
      yield* manager.cancel(wide.agent.agent_id)
    }).pipe(provideNode))

  it.effect("with a durable store, a tool result is committed before the next model call", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      let handle = ""
      let seenBefore: ReadonlyArray<string> = []
      const reader = yield* setup({ rules: [] }, {}, { root, store: "file" })
      const committed = () =>
        Effect.map(
          Effect.orDie(reader.get(SubAgentStore).readTranscript(handle)),
          (lines) => (lines as ReadonlyArray<{ readonly role: string }>).map((m) => m.role)
        )
      const { get } = yield* setup(
        {
          rules: [{
            respond: (c) =>
              c.turn === 0
                ? { tool_calls: [{ name: "list_dir", args: {} }] }
                : Effect.map(committed(), (roles) => {
                  seenBefore = roles
                  return { text: report("done") }
                })
          }]
        },
        {},
        { root, store: "file" }
      )
      const manager = get(Manager)
      const agent = yield* manager.spawn(undefined, { prompt: "look" })
      handle = agent.transcript_handle
      assert.strictEqual((yield* manager.result(agent.agent_id, { block: true })).status, "completed")
      assert.deepStrictEqual(seenBefore, ["system", "user", "assistant", "tool"])
    }).pipe(provideNode))

  describe("survivors of the first mutation run of lines 808-end", () => {
    it.effect("assign with a message only: the note has no empty lines, arrives without interrupting, via agent_assign", () =>
      Effect.gen(function*() {
        const go = yield* Deferred.make<void>()
        const { get } = yield* setup({
          rules: [{
            respond: (c) =>
              c.turn === 0
                ? Effect.as(Deferred.await(go), { tool_calls: [{ name: "list_dir", args: {} }] })
                : { text: report(userTexts(c.messages).at(-1)!) }
          }]
        })
        const manager = get(Manager)
        const agent = yield* manager.spawn(undefined, { prompt: "work" })
        const assigned = yield* manager.assign(agent.agent_id, { message: "only this" })
        assert.deepStrictEqual([assigned.delivered, assigned.input?.via, assigned.input?.interrupt], [
          true,
          "agent_assign",
          undefined
        ])
        yield* Deferred.succeed(go, undefined)
        const done = yield* manager.result(agent.agent_id, { block: true })
        assert.strictEqual(done.outcome?.summary, "Your assignment was updated by your parent.\nonly this")
        // A plain sendInput is recorded as coming from the API.
        const late = yield* manager.sendInput(agent.agent_id, "late", false)
        assert.strictEqual(late.input?.via, "api")
      }).pipe(provideNode))

    it.effect("assign narrows a live agent to explore: its rules and record follow, and it keeps explore's tools", () =>
      Effect.gen(function*() {
        const go = yield* Deferred.make<void>()
        const { get } = yield* setup({
          rules: [{
            respond: (c) =>
              c.turn === 0
                ? Effect.as(Deferred.await(go), { tool_calls: [{ name: "list_dir", args: {} }] })
                : { text: report("listed") }
          }]
        })
        const manager = get(Manager)
        const session = get(Session)
        const agent = yield* manager.spawn(undefined, { prompt: "work" })
        const before = Permission.toJson((yield* session.info(agent.agent_id)).rules)
        const assigned = yield* manager.assign(agent.agent_id, { role: "explore" })
        const rules = Permission.toJson((yield* session.info(agent.agent_id)).rules)
        assert.notDeepEqual(rules, before)
        assert.deepStrictEqual(assigned.agent.permissions, rules)
        yield* Deferred.succeed(go, undefined)
        assert.strictEqual((yield* manager.result(agent.agent_id, { block: true })).status, "completed")
        const results = (yield* session.transcript(agent.agent_id)).flatMap((m) =>
          m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [p] : []) : []
        )
        assert.deepStrictEqual(results.map((r) => [r.name, r.isFailure]), [["list_dir", false]])
        // A role that needs allowed_tools is not refused for naming none: its ceiling is every
        // tool, and its meet with the agent's own rules is what applies.
        const narrow = yield* manager.spawn(undefined, { prompt: "narrow", role: "custom", allowedTools: ["list_dir"] })
        const again = yield* manager.assign(narrow.agent_id, { role: "custom" })
        assert.deepStrictEqual(again.agent.permissions, narrow.permissions)
      }).pipe(provideNode))

    it.effect("wait any returns when the first of several running agents ends", () =>
      Effect.gen(function*() {
        const { get } = yield* setup({
          rules: [
            { match: { prompt: "quick" }, turns: [{ delay_ms: 1000, text: report("quick") }] },
            { turns: [{ delay_ms: 10_000, text: report("slow") }] }
          ]
        })
        const manager = get(Manager)
        const slow = yield* manager.spawn(undefined, { prompt: "slow" })
        const quick = yield* manager.spawn(undefined, { prompt: "quick" })
        const waiting = yield* Effect.forkChild(manager.wait([slow.agent_id, quick.agent_id], { mode: "any" }), {
          startImmediately: true
        })
        yield* TestClock.adjust("1 second")
        for (let i = 0; i < 20 && waiting.pollUnsafe() === undefined; i++) yield* Effect.yieldNow
        assert.isDefined(waiting.pollUnsafe(), "returned at the first end")
        const any = yield* Fiber.join(waiting)
        assert.deepStrictEqual([any.timed_out, any.completed.map((v) => v.agent_id), any.pending], [
          false,
          [quick.agent_id],
          [slow.agent_id]
        ])
        yield* manager.cancel(slow.agent_id)
      }).pipe(provideNode))

    it.effect("a blocking read of a resumed agent that times out gets its current run, not the one before", () =>
      Effect.gen(function*() {
        const { get } = yield* setup({ rules: [hangOn("carry on")] })
        const manager = get(Manager)
        const agent = yield* manager.run(undefined, { prompt: "work" })
        yield* manager.resume(undefined, agent.agent_id, "carry on")
        const reading = yield* Effect.forkChild(manager.result(agent.agent_id, { block: true, timeoutMs: 1000 }), {
          startImmediately: true
        })
        yield* TestClock.adjust("1 second")
        const read = yield* Fiber.join(reading)
        assert.deepStrictEqual([read.status, read.runs?.length], ["running", 2])
        yield* manager.cancel(agent.agent_id)
      }).pipe(provideNode))

    it.effect("markRead of a child still running does not count: it is unread once it ends", () =>
      Effect.gen(function*() {
        const { get } = yield* setup({
          rules: [{ match: { depth: 0 }, turns: [{ hang: true }] }, { turns: [{ delay_ms: 1000, text: report("ok") }] }]
        })
        const manager = get(Manager)
        const root = yield* get(SubAgentManager.Embedded).startRoot({ prompt: "root" })
        const rootId = root.agent.agent_id
        yield* untilRunning(get(Session), rootId)
        const child = yield* manager.spawn(rootId, { prompt: "child" })
        yield* manager.markRead(rootId, [child.agent_id])
        yield* TestClock.adjust("1 second")
        assert.strictEqual((yield* manager.result(child.agent_id, { block: true })).status, "completed")
        assert.deepStrictEqual(yield* manager.unreadChildren(rootId), [child.agent_id])
        yield* manager.cancel(rootId)
      }).pipe(provideNode))

    it.effect("queue admission: a blocking read lends the caller's permit to the queued agent it reads", () =>
      Effect.gen(function*() {
        const { get } = yield* setup(
          { rules: [{ match: { prompt: "parent" }, turns: [{ hang: true }] }, { turns: [{ text: report("done") }] }] },
          {},
          { subagents: { maxConcurrent: 1, admission: "queue" } }
        )
        const manager = get(Manager)
        const parent = yield* manager.spawn(undefined, { prompt: "parent" })
        yield* untilRunning(get(Session), parent.agent_id)
        const child = yield* manager.spawn(parent.agent_id, { prompt: "child" })
        assert.strictEqual(child.status, "pending")
        const reading = yield* Effect.forkChild(
          manager.result(child.agent_id, { block: true, caller: parent.agent_id }),
          { startImmediately: true }
        )
        for (let i = 0; i < 100 && reading.pollUnsafe() === undefined; i++) yield* Effect.yieldNow
        assert.isDefined(reading.pollUnsafe(), "the child ran on the lent permit")
        assert.strictEqual((yield* Fiber.join(reading)).status, "completed")
        yield* manager.cancel(parent.agent_id)
      }).pipe(provideNode))

    it.effect("queue admission: a parent answering early lends its permit to its queued child", () =>
      Effect.gen(function*() {
        const { get } = yield* setup(
          {
            rules: [
              {
                match: { prompt: "parent" },
                respond: (c) =>
                  c.turn === 0
                    ? { tool_calls: [{ name: "agent_spawn", args: { prompt: "child", description: "c" } }] }
                    : c.turn === 1
                    ? { text: "early" }
                    : { text: report("final") }
              },
              { turns: [{ text: report("child done") }] }
            ]
          },
          { maxDepth: 2 },
          { subagents: { maxConcurrent: 1, admission: "queue" } }
        )
        const manager = get(Manager)
        const parent = yield* manager.spawn(undefined, { prompt: "parent" })
        const reading = yield* Effect.forkChild(manager.result(parent.agent_id, { block: true }), {
          startImmediately: true
        })
        for (let i = 0; i < 200 && reading.pollUnsafe() === undefined; i++) yield* Effect.yieldNow
        assert.isDefined(reading.pollUnsafe(), "the parent finished")
        assert.strictEqual((yield* Fiber.join(reading)).outcome?.summary, "final")
      }).pipe(provideNode))

    it.effect("resume: refused for a running agent; a reject-admission resume gives its permit back when it ends", () =>
      Effect.gen(function*() {
        const { get } = yield* setup(
          {
            rules: [{ match: { prompt: "hang" }, turns: [{ hang: true }] }, {
              turns: [{ text: report("done") }],
              repeat_last: true
            }]
          },
          {},
          { subagents: { maxConcurrent: 1 } }
        )
        const manager = get(Manager)
        const agent = yield* manager.run(undefined, { prompt: "work" })
        yield* manager.resume(undefined, agent.agent_id, "again")
        assert.strictEqual((yield* manager.result(agent.agent_id, { block: true })).status, "completed")
        const hanging = yield* manager.spawn(undefined, { prompt: "hang" })
        assert.strictEqual(hanging.status, "running")
        const refused = yield* Effect.flip(manager.resume(undefined, hanging.agent_id, "now"))
        assert.strictEqual(
          refused.message,
          `sub-agent ${hanging.agent_id} is running; only a finished agent (completed, failed, cancelled or interrupted) can be resumed`
        )
        const missing = yield* Effect.flip(manager.readTranscript("agent_nope.jsonl", {}))
        assert.strictEqual(
          missing.message,
          "no sub-agent with id \"agent_nope.jsonl\"; agent_list shows the known ones"
        )
        yield* manager.cancel(hanging.agent_id)
      }).pipe(provideNode))

    it.effect("a local resume continues the same conversation (the session is not rebuilt from the store)", () =>
      Effect.gen(function*() {
        const seen: Array<ReadonlyArray<string>> = []
        const { get } = yield* setup({
          rules: [{
            respond: (c) => {
              seen.push(c.messages.map((m) => m.role))
              return { text: report(userTexts(c.messages).join(" | ")) }
            }
          }]
        })
        const manager = get(Manager)
        const agent = yield* manager.run(undefined, { prompt: "first task" })
        yield* manager.resume(undefined, agent.agent_id, "and then this")
        const done = yield* manager.result(agent.agent_id, { block: true })
        assert.strictEqual(done.outcome?.summary, "first task | and then this")
        assert.deepStrictEqual(seen[1], ["system", "user", "assistant", "user"])
      }).pipe(provideNode))

    it.effect("a spawn or resume whose parent is not running a prompt lives in the manager's scope", () =>
      Effect.gen(function*() {
        const { get } = yield* setup({ rules: [{ turns: [{ text: report("done") }], repeat_last: true }] })
        const manager = get(Manager)
        const idle = yield* manager.run(undefined, { prompt: "idle parent" })
        const child = yield* manager.spawn(idle.agent_id, { prompt: "child" })
        assert.strictEqual((yield* manager.result(child.agent_id, { block: true })).status, "completed")
        yield* manager.resume(idle.agent_id, child.agent_id, "again")
        assert.strictEqual((yield* manager.result(child.agent_id, { block: true })).status, "completed")
      }).pipe(provideNode))

    it.effect("the watchdog: a parent whose children all ended is silent; a queued agent is never cancelled", () =>
      Effect.gen(function*() {
        let sleeper = ""
        const rules: ReadonlyArray<ScriptedModel.Rule> = [
          { match: { prompt: "sleep" }, turns: [{ hang: true }] },
          { match: { prompt: "child" }, turns: [{ text: report("child done") }] },
          { respond: () => ({ tool_calls: [{ name: "agent_result", args: { id: sleeper, block: true } }] }) }
        ]
        const first = yield* setup({ rules }, { apiTimeoutSecs: 600, maxDepth: 2 }, {
          subagents: { heartbeatTimeoutSecs: 60 }
        })
        const manager = first.get(Manager)
        const start = yield* Clock.currentTimeMillis
        sleeper = (yield* manager.spawn(undefined, { prompt: "sleep" })).agent_id
        const parent = yield* manager.spawn(undefined, { prompt: "parent" })
        yield* untilRunning(first.get(Session), parent.agent_id)
        const child = yield* manager.spawn(parent.agent_id, { prompt: "child" })
        assert.strictEqual((yield* manager.result(child.agent_id, { block: true })).status, "completed")
        for (let i = 0; i < 62; i++) yield* TestClock.adjust("1 second")
        const ended = yield* manager.result(parent.agent_id, { block: false })
        assert.deepStrictEqual([ended.status, ended.finished_at! - start], ["cancelled", 60_000])
        yield* manager.cancel(sleeper)

        const second = yield* setup({ rules: [{ turns: [{ hang: true }] }] }, { apiTimeoutSecs: 600 }, {
          subagents: { heartbeatTimeoutSecs: 60, maxConcurrent: 1, admission: "queue" }
        })
        const queueing = second.get(Manager)
        const holder = yield* queueing.spawn(undefined, { prompt: "holder" })
        const queued = yield* queueing.spawn(undefined, { prompt: "queued" })
        for (let i = 0; i < 130; i++) yield* TestClock.adjust("1 second")
        assert.strictEqual((yield* queueing.result(queued.agent_id, { block: false })).status, "pending")
        yield* queueing.cancel(queued.agent_id)
        yield* queueing.cancel(holder.agent_id)
      }).pipe(provideNode))

    it.effect("a verifier's spawn event names the run it checks; another agent's has no detail and no verifies", () =>
      Effect.gen(function*() {
        const { get } = yield* setup({ rules: [{ turns: [{ hang: true }] }] })
        const manager = get(Manager)
        const worker = yield* manager.spawn(undefined, { prompt: "work" })
        const verifier = yield* manager.spawn(undefined, { prompt: "check", verifies: worker.agent_id })
        assert.isFalse("verifies" in worker)
        const spawned = (view: SubAgentManager.AgentView) =>
          view.events?.filter((e) => e.type === "spawned").map((e) => e.detail)
        assert.deepStrictEqual(spawned(worker), [undefined])
        assert.strictEqual(verifier.verifies, `${worker.agent_id}-r1`)
        assert.deepStrictEqual(spawned(verifier), [`verifies ${worker.agent_id}-r1`])
        yield* manager.cancel(verifier.agent_id)
        yield* manager.cancel(worker.agent_id)
      }).pipe(provideNode))

    it.effect("[subagents] max_steps applies to an agent with no definition", () =>
      Effect.gen(function*() {
        const { get } = yield* setup(
          { rules: [{ turns: [{ tool_calls: [{ name: "list_dir", args: {} }] }, { text: report("done") }] }] },
          {},
          { subagents: { budgets: { maxSteps: 1 } } }
        )
        const done = yield* get(Manager).run(undefined, { prompt: "work" })
        assert.strictEqual(done.status, "failed")
        assert.include(done.reason!, "max_steps=1")
      }).pipe(provideNode))

    it.effect("a child without a model of its own gets its parent's", () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
        const script: ScriptedModel.ScriptInput = { rules: [{ turns: [{ hang: true }] }] }
        const catalog = Layer.unwrap(Effect.gen(function*() {
          const big = yield* ScriptedModel.make(script)
          const small = yield* ScriptedModel.make(script)
          return Models.fromRecord({ big, small }, "big")
        }))
        const built = yield* Layer.build(Fibril.layerWithModels({ cwd: root }).pipe(Layer.provideMerge(catalog)))
        const manager = Context.get(built, Manager)
        const parent = yield* manager.spawn(undefined, { prompt: "parent", model: "small" })
        yield* untilRunning(Context.get(built, Session), parent.agent_id)
        const child = yield* manager.spawn(parent.agent_id, { prompt: "child" })
        assert.deepStrictEqual([parent.model, child.model], ["small", "small"])
        yield* manager.cancel(parent.agent_id)
      }).pipe(provideNode))

    it.effect("a takeover whose stored transcript does not decode starts a fresh conversation instead of failing", () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
        const seen: Array<ReadonlyArray<string>> = []
        const script: ScriptedModel.ScriptInput = {
          rules: [{
            respond: (c) => {
              seen.push(c.messages.map((m) => m.role))
              return { text: report(userTexts(c.messages).join(" | ")) }
            }
          }]
        }
        const a = yield* setup(script, {}, { root, store: "file" })
        const b = yield* setup(script, {}, { root, store: "file" })
        const first = yield* a.get(Manager).run(undefined, { prompt: "first task" })
        yield* a.get(SubAgentStore).appendTranscript(first.transcript_handle, [{ role: "not a message" }])
        yield* a.get(SubAgentStore).flush
        yield* b.get(Manager).resume(undefined, first.agent_id, "go on")
        const done = yield* b.get(Manager).result(first.agent_id, { block: true })
        assert.deepStrictEqual([done.status, done.outcome?.summary], ["completed", "go on"])
        assert.deepStrictEqual(seen[1], ["system", "user"])
      }).pipe(provideNode))
  })
})
