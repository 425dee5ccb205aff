// Lifecycle edges of SubAgentManager in its second half (start, resume, list, the watchdog,
// another process's agents), found by the mutation run of lines 808 to the end
// (docs/testing.md, "SubAgentManager.ts"): each test here failed with a mutant of
// SubAgentManager.ts planted by hand and passes on the code as it is. Real layers, the
// ScriptedModel, the TestClock; two "processes" are two stacks on one state directory.
import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Clock, Deferred, Duration, Effect, Fiber, FileSystem, Option } from "effect"
import { TestClock } from "effect/testing"
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
      const root = yield* manager.startRoot({ prompt: "root" })
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
          return [ended.status, (ended.finished_at ?? start) - start]
        })
      // 200 s: a quarter is 50 s, so checks every 30 s; silent from 0, cancelled at 210 s.
      assert.deepStrictEqual(yield* silentFor(200, "0 millis", "1 second", 215), ["cancelled", 210_000])
      // 2 s: a quarter is 500 ms, so checks every second; silent from 400 ms, cancelled at 3 s.
      assert.deepStrictEqual(yield* silentFor(2, "400 millis", "100 millis", 40), ["cancelled", 3000])
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
      const parent = yield* owner.startRoot({ prompt: "root" })
      const parentId = parent.agent.agent_id
      yield* untilRunning(a.get(Session), parentId)
      const child = yield* owner.spawn(parentId, { prompt: "child" })
      const orphan = yield* owner.spawn(undefined, { prompt: "orphan" })
      yield* a.get(SubAgentStore).sync

      const ids = (options: { readonly parentSessionId?: string }) =>
        Effect.map(other.list({ includeArchived: false, ...options }), (views) => views.map((v) => v.agent_id).sort())
      assert.deepStrictEqual(yield* ids({}), [parentId, child.agent_id, orphan.agent_id].sort())
      assert.deepStrictEqual(yield* ids({ parentSessionId: parentId }), [child.agent_id])
      assert.deepStrictEqual(yield* ids({ parentSessionId: "agent_nobody" }), [])

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
})
