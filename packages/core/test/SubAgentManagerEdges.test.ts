// Edges of SubAgentManager found by its mutation run (docs/testing.md, "SubAgentManager.ts"):
// each test here failed with a mutant of SubAgentManager.ts planted by hand and passes on the
// code as it is. Real layers, the ScriptedModel, the TestClock; two "processes" are two
// stacks on one state directory in this process (each with its own store and boot id).
import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Deferred, Effect, Fiber, FileSystem, Option } from "effect"
import { TestClock } from "effect/testing"
import * as Roles from "../src/Roles.ts"
import { Session } from "../src/Session.ts"
import * as SubAgentManager from "../src/SubAgentManager.ts"
import { SubAgentStore } from "../src/SubAgentStore.ts"
import { provideNode, report, setup } from "./support.ts"

const Manager = SubAgentManager.SubAgentManager

/** Hangs until a message naming `cue` arrives, then answers `answer`. */
const hangUntilTold = (cue: string, answer: string): ScriptedModel.Rule => ({
  respond: (c) => JSON.stringify(c.messages).includes(cue) ? { text: report(answer) } : { hang: true }
})

const userTexts = (messages: ReadonlyArray<{ readonly role: string; readonly content: unknown }>) =>
  messages.filter((m) => m.role === "user").map((m) =>
    typeof m.content === "string"
      ? m.content
      : (m.content as ReadonlyArray<{ type: string; text?: string }>).map((p) => p.text ?? "").join("")
  )

describe("SubAgentManager edges", () => {
  it.effect("another process's agent: listed, told, refused a verification and a resume, cancelled through its owner", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      const script: ScriptedModel.ScriptInput = { rules: [hangUntilTold("never sent", "done")] }
      const a = yield* setup(script, {}, { root, store: "file" })
      const b = yield* setup(script, {}, { root, store: "file" })
      const owner = a.get(Manager)
      const other = b.get(Manager)
      assert.notStrictEqual(owner.bootId, other.bootId)
      const agent = yield* owner.spawn(undefined, { prompt: "work in A", description: "a's job" })
      const session = a.get(Session)
      for (let i = 0; i < 100 && !(yield* session.info(agent.agent_id)).waitingOnModel; i++) yield* Effect.yieldNow
      yield* a.get(SubAgentStore).sync

      // B sees it, from another process, and finds it by its session name.
      const listed = yield* other.list({ includeArchived: false })
      assert.deepStrictEqual(listed.map((v) => [v.agent_id, v.status, v.from_prior_session]), [[
        agent.agent_id,
        "running",
        true
      ]])
      assert.strictEqual(yield* other.resolve(agent.session_name!), agent.agent_id)
      assert.strictEqual((yield* other.result(agent.session_name!, { block: false })).agent_id, agent.agent_id)

      // A message from B is queued for A, which delivers it at its next poll.
      const told = yield* other.sendInput(agent.agent_id, "from B: hello", false)
      assert.isTrue(told.delivered)
      assert.strictEqual(
        told.reason,
        `queued for the process that runs it (pid ${process.pid}); it delivers it within a second`
      )
      assert.isUndefined(told.input)
      for (let i = 0; i < 4; i++) yield* TestClock.adjust("500 millis")
      const inputs = (yield* owner.result(agent.agent_id, { block: false })).inputs ?? []
      assert.deepStrictEqual(inputs.map((input) => [input.via, input.delivered, input.preview]), [[
        "request",
        true,
        "from B: hello"
      ]])

      // B may not attach a check to A's record, nor resume an agent A runs.
      const refused = yield* Effect.flip(other.attachVerification(agent.agent_id, { command: "npm test", exitCode: 0 }))
      assert.strictEqual(refused._tag, "NotOwned")
      assert.strictEqual(
        refused.message,
        `sub-agent ${agent.agent_id} is recorded by another process (pid ${process.pid} on ${
          (yield* a.get(SubAgentStore).get(agent.agent_id)).pipe(Option.getOrThrow).owner_host
        }); only the process that owns its record can change it`
      )
      const busy = yield* Effect.flip(other.resume(undefined, agent.agent_id, "go"))
      assert.strictEqual(busy._tag, "NotResumable")
      assert.strictEqual(
        busy.message,
        `sub-agent ${agent.agent_id} is running in another live process (pid ${process.pid}); only a finished agent (completed, failed, cancelled or interrupted) can be resumed`
      )

      // A cancel from B: A acts on it and B returns the record as A wrote it.
      const cancelling = yield* Effect.forkChild(other.cancel(agent.agent_id, "stop, from B"), {
        startImmediately: true
      })
      for (let i = 0; i < 20 && cancelling.pollUnsafe() === undefined; i++) yield* TestClock.adjust("250 millis")
      const cancelled = yield* Fiber.join(cancelling)
      assert.strictEqual(cancelled.status, "cancelled")
      assert.strictEqual(cancelled.reason, "stop, from B")
      assert.isTrue(cancelled.from_prior_session)
      assert.strictEqual((yield* owner.result(agent.agent_id, { block: false })).status, "cancelled")
      // Ended: hidden from B's current list, shown archived; an input now is refused with the reason.
      assert.deepStrictEqual(yield* other.list({ includeArchived: false }), [])
      assert.deepStrictEqual((yield* other.list({ includeArchived: true })).map((v) => v.agent_id), [agent.agent_id])
      const late = yield* other.sendInput(agent.agent_id, "too late", false)
      assert.isFalse(late.delivered)
      assert.strictEqual(
        late.reason,
        `agent ${agent.agent_id} is cancelled; nothing is running to receive input (agent_resume continues it)`
      )
      assert.strictEqual(late.agent.status, "cancelled")
    }).pipe(provideNode))

  it.effect("assign: the note a live agent reads, the event it logs; a finished agent narrows, a widening is refused", () =>
    Effect.gen(function*() {
      const go = yield* Deferred.make<void>()
      const { get } = yield* setup({
        rules: [
          {
            match: { prompt: "live job" },
            respond: (c) =>
              c.turn === 0
                ? Effect.as(Deferred.await(go), { tool_calls: [{ name: "list_dir", args: {} }] })
                : { text: report(userTexts(c.messages).at(-1)!) }
          },
          { turns: [{ text: report("finished") }] }
        ]
      })
      const manager = get(Manager)
      const live = yield* manager.spawn(undefined, { prompt: "live job" })
      const assigned = yield* manager.assign(live.agent_id, {
        role: "explore",
        objective: "map the repo",
        message: "start with src"
      })
      assert.isTrue(assigned.delivered)
      assert.strictEqual(assigned.input?.via, "agent_assign")
      assert.strictEqual(assigned.agent.role, "explore")
      assert.strictEqual(assigned.agent.objective, "map the repo")
      assert.deepStrictEqual(
        (assigned.agent.events ?? []).filter((e) => e.type === "assigned").map((e) => e.detail),
        ["role explore; objective: map the repo"]
      )
      yield* Deferred.succeed(go, undefined)
      const done = yield* manager.result(live.agent_id, { block: true })
      assert.strictEqual(
        done.outcome?.summary,
        "Your assignment was updated by your parent.\nObjective: map the repo\nRole: explore — " +
          Roles.roles.explore.description + "\nstart with src"
      )

      // Finished: a note alone is logged as such and not delivered.
      const finished = yield* manager.spawn(undefined, { prompt: "short job" })
      yield* manager.result(finished.agent_id, { block: true })
      const noted = yield* manager.assign(finished.agent_id, { message: "for the record" })
      assert.isFalse(noted.delivered)
      assert.include(noted.reason!, "is completed")
      assert.deepStrictEqual(
        (noted.agent.events ?? []).filter((e) => e.type === "assigned").map((e) => e.detail),
        ["note"]
      )
      // A finished general agent may be narrowed to review (its resume derives its rules from that)...
      const narrowed = yield* manager.assign(finished.agent_id, { role: "review" })
      assert.strictEqual(narrowed.agent.role, "review")
      // ...and then not widened back: refused, naming both roles, the record unchanged.
      const widening = yield* Effect.flip(manager.assign(finished.agent_id, { role: "general", objective: "x" }))
      assert.strictEqual(widening._tag, "PermissionWidening")
      assert.include(widening.message, "review")
      assert.include(widening.message, "general")
      const after = yield* manager.result(finished.agent_id, { block: false })
      assert.strictEqual(after.role, "review")
      assert.strictEqual(after.objective, "short job")
    }).pipe(provideNode))

  it.effect("cancel: the default reason, each descendant's reason naming the cancelled agent, a finished agent unchanged", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ hang: true }] }] }, { maxDepth: 3 })
      const manager = get(Manager)
      const session = get(Session)
      const parent = yield* manager.spawn(undefined, { prompt: "parent" })
      for (let i = 0; i < 100 && Option.isNone(session.scopeOf(parent.agent_id)); i++) yield* Effect.yieldNow
      const child = yield* manager.spawn(parent.agent_id, { prompt: "child" })
      for (let i = 0; i < 100 && Option.isNone(session.scopeOf(child.agent_id)); i++) yield* Effect.yieldNow
      const grandchild = yield* manager.spawn(child.agent_id, { prompt: "grandchild" })
      const detached = yield* manager.spawn(parent.agent_id, { prompt: "detached", detached: true })
      const cancelled = yield* manager.cancel(parent.agent_id)
      assert.strictEqual(cancelled.status, "cancelled")
      assert.strictEqual(cancelled.reason, "Cancelled by request")
      const reasonOf = (id: string) => Effect.map(manager.result(id, { block: false }), (v) => [v.status, v.reason])
      const because = `Cancelled because its parent ${parent.agent_id} was cancelled`
      assert.deepStrictEqual(yield* reasonOf(child.agent_id), ["cancelled", because])
      assert.deepStrictEqual(yield* reasonOf(grandchild.agent_id), ["cancelled", because])
      assert.deepStrictEqual(yield* reasonOf(detached.agent_id), ["running", undefined])
      const again = yield* manager.cancel(parent.agent_id, "again")
      assert.deepStrictEqual([again.status, again.reason], ["cancelled", "Cancelled by request"])
      yield* manager.cancel(detached.agent_id)
    }).pipe(provideNode))

  it.effect("what a model sees of an agent: the record flattened, the duration, a prior session's flag", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({
        rules: [
          { match: { prompt: "fail" }, turns: [{ delay_ms: 300, error: { kind: "fatal", message: "boom" } }] },
          { turns: [{ delay_ms: 1500, text: report("all good") }] }
        ]
      }, { maxRetries: 0 })
      const manager = get(Manager)
      const ok = yield* manager.spawn(undefined, { prompt: "work", description: "the job" })
      const bad = yield* manager.spawn(undefined, { prompt: "fail" })
      yield* TestClock.adjust("2 seconds")
      const done = yield* manager.result(ok.agent_id, { block: true })
      assert.deepStrictEqual(SubAgentManager.agentResultForModel(done), {
        agent_id: done.agent_id,
        session_name: done.session_name,
        run_id: `${done.agent_id}-r1`,
        description: "the job",
        role: "general",
        status: "completed",
        summary: "all good",
        sections: { changes: "none", evidence: "none", risks: "none", blockers: "none" },
        contract_violations: [],
        steps: 1,
        tool_calls: 0,
        tokens: done.tokens,
        duration_ms: 1500,
        model: done.model,
        transcript_handle: `${done.agent_id}.jsonl`
      })
      const failed = SubAgentManager.agentResultForModel(yield* manager.result(bad.agent_id, { block: true }))
      assert.strictEqual(failed.status, "failed")
      assert.include(failed.reason!, "boom")
      assert.strictEqual(failed.summary, "")
      assert.isUndefined(failed.sections)
      assert.deepStrictEqual(failed.contract_violations, [])
      assert.strictEqual(failed.duration_ms, 300)
      const prior = SubAgentManager.agentResultForModel({ ...done, from_prior_session: true })
      assert.isTrue(prior.from_prior_session)
      const unstarted = SubAgentManager.agentResultForModel({ ...done, started_at: undefined })
      assert.isUndefined(unstarted.duration_ms)
      assert.isUndefined(SubAgentManager.agentResultForModel({ ...done, finished_at: undefined }).duration_ms)
    }).pipe(provideNode))
})
