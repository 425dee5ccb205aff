// `ask` rules through the real services (Fibril.layer, the embedded manager, the ScriptedModel):
// a grandchild's call waits alone for a person while its sibling works, and every way a
// question ends — allowed, denied, timed out, withdrawn by a cancel, the default's denial — is
// seen by the model, the disk, the events and the receipt.
import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Deferred, Effect, Fiber, Stream } from "effect"
import { TestClock } from "effect/testing"
import type { AgentEvent } from "../src/AgentEvents.ts"
import { AgentEvents } from "../src/AgentEvents.ts"
import * as Approvals from "../src/Approvals.ts"
import { SubAgentManager } from "../src/SubAgentManager.ts"
import { provideNode, report, setup } from "./support.ts"

/**
 * The tree: a parent at depth 1 (it waits), and under it an asker and a worker at depth 2. The
 * asker calls `shell` (an ask tool), then reports what it read; the worker lists the directory
 * and finishes as soon as the test lets it (`workerGo`).
 */
const tree = Effect.gen(function*() {
  const workerGo = yield* Deferred.make<void>()
  const script: ScriptedModel.ScriptInput = {
    rules: [
      { match: { prompt: "parent" }, turns: [{ hang: true }] },
      {
        match: { prompt: "asker" },
        respond: (c) =>
          c.turn === 0
            ? { tool_calls: [{ name: "shell", args: { command: "echo ran >> side-effect.txt" } }] }
            : { text: report(`shell said: ${JSON.stringify(c.lastToolResults[0]?.result)}`) }
      },
      {
        match: { prompt: "worker" },
        respond: (c) =>
          c.turn === 0
            ? { tool_calls: [{ name: "list_dir", args: {} }] }
            : Effect.as(Deferred.await(workerGo), { text: report("listed") })
      }
    ]
  }
  return { script, workerGo }
})

const start = Effect.fn("start")(function*(options: { readonly approvals?: Approvals.Service }) {
  const { script, workerGo } = yield* tree
  const { fs, get, path, root } = yield* setup(
    script,
    { maxDepth: 2 },
    { ask: ["shell"], sandbox: { mode: "off", network: false, writablePaths: [] } }
  )
  const manager = get(SubAgentManager)
  const seen: Array<AgentEvent> = []
  const events = get(AgentEvents)
  yield* Effect.forkScoped(
    Stream.runForEach(events.stream, (event) => Effect.sync(() => void seen.push(event)))
  )
  yield* Effect.yieldNow
  const parent = yield* manager.spawn(undefined, { prompt: "parent", role: "general" })
  const asker = yield* manager.spawn(parent.agent_id, { prompt: "asker", role: "general" })
  const worker = yield* manager.spawn(parent.agent_id, { prompt: "worker", role: "general" })
  const sideEffect = path.join(root, "side-effect.txt")
  return { fs, manager, parent, asker, worker, workerGo, sideEffect, seen, approvals: options.approvals }
})

const spawnCall = (i: number) => ({
  name: "agent_spawn",
  args: { prompt: `explore part ${i}`, subagent_type: "explore" }
})

/** Waits (on the test's own clock, not real time) until `approvals` has a question. */
const firstQuestion = (approvals: Approvals.Service) =>
  Stream.runHead(approvals.questions).pipe(Effect.map((question) => {
    assert.isTrue(question._tag === "Some")
    return question._tag === "Some" ? question.value : undefined!
  }))

describe("Approvals", () => {
  it.effect("a grandchild's ask waits alone while its sibling finishes; allowed, it runs once, and the receipt and events say who and when", () =>
    Effect.gen(function*() {
      const approvals = yield* Approvals.make({ timeout: "10 minutes" })
      yield* Effect.gen(function*() {
        const { asker, fs, manager, parent, seen, sideEffect, worker, workerGo } = yield* start({ approvals })
        const question = yield* firstQuestion(approvals)
        assert.strictEqual(question.agentId, asker.agent_id)
        assert.deepStrictEqual(question.path, [parent.agent_id, asker.agent_id])
        assert.strictEqual(question.depth, 2)
        assert.strictEqual(question.role, "general")
        assert.strictEqual(question.tool, "shell")
        assert.include(question.arguments, "echo ran >> side-effect.txt")
        assert.include(question.reason, `"shell" is an ask tool`)
        assert.isTrue(approvals.waiting(asker.agent_id))
        // The sibling goes on and ends while the question waits; nothing ran for the asker.
        yield* Deferred.succeed(workerGo, undefined)
        const done = yield* manager.result(worker.agent_id, { block: true })
        assert.strictEqual(done.status, "completed")
        assert.isFalse(yield* fs.exists(sideEffect))
        // The heartbeat (300 s) does not count the person's thinking time as a stall.
        yield* TestClock.adjust("6 minutes")
        assert.strictEqual((yield* manager.result(asker.agent_id, { block: false })).status, "running")
        yield* approvals.decide(question.id, { decision: "allow", by: "terminal" })
        const answered = yield* manager.result(asker.agent_id, { block: true })
        assert.strictEqual(answered.status, "completed")
        assert.strictEqual(yield* fs.readFileString(sideEffect), "ran\n")
        assert.deepStrictEqual(yield* approvals.pending, [])
        const types = seen.filter((e) => e.agent.agentId === asker.agent_id).map((e) => e.type)
        assert.includeMembers(types, ["question", "answered"])
        const event = seen.find((e) => e.type === "answered")!
        assert.strictEqual(event.question?.id, question.id)
        assert.strictEqual(event.answer?.by, "terminal")
        const record = yield* manager.workerRecord(
          (yield* manager.list({ includeArchived: true })).find((a) => a.agent_id === asker.agent_id)!
        )
        assert.strictEqual(record.approvals?.length, 1)
        const entry = record.approvals![0]!
        assert.strictEqual(entry.question_id, question.id)
        assert.strictEqual(entry.decision, "allow")
        assert.strictEqual(entry.by, "terminal")
        assert.strictEqual(entry.tool, "shell")
        assert.isAbove(entry.at, entry.asked_at)
      }).pipe(Effect.provideService(Approvals.Approvals, approvals))
    }).pipe(Effect.scoped, provideNode))

  it.effect("a deny's reason reaches the model, a timeout denies, and nothing runs", () =>
    Effect.gen(function*() {
      const approvals = yield* Approvals.make({ timeout: "2 minutes" })
      yield* Effect.gen(function*() {
        const { asker, fs, manager, sideEffect } = yield* start({ approvals })
        const question = yield* firstQuestion(approvals)
        yield* approvals.decide(question.id, { decision: "deny", reason: "not on a Friday", by: "process 42" })
        const denied = yield* manager.result(asker.agent_id, { block: true })
        assert.include(denied.outcome?.summary ?? "", "not on a Friday")
        assert.include(denied.outcome?.summary ?? "", "ApprovalDenied")
        assert.isFalse(yield* fs.exists(sideEffect))
        // A second asker times out: a denial "by timeout" after 2 minutes of TestClock.
        const late = yield* manager.spawn(asker.parent_id!, { prompt: "asker again", role: "general" })
        const next = yield* firstQuestion(approvals)
        assert.strictEqual(next.agentId, late.agent_id)
        yield* TestClock.adjust("121 seconds")
        const timedOut = yield* manager.result(late.agent_id, { block: true })
        assert.include(timedOut.outcome?.summary ?? "", "no answer within 2m")
        assert.isFalse(yield* fs.exists(sideEffect))
        assert.isTrue(
          (yield* Effect.flip(approvals.decide(next.id, { decision: "allow", by: "terminal" })))._tag ===
            "UnknownQuestion"
        )
      }).pipe(Effect.provideService(Approvals.Approvals, approvals))
    }).pipe(Effect.scoped, provideNode))

  it.effect("cancelling the tree withdraws its questions; the default approver denies at once with a reason", () =>
    Effect.gen(function*() {
      const approvals = yield* Approvals.make({ timeout: "10 minutes" })
      yield* Effect.gen(function*() {
        const { asker, fs, manager, parent, sideEffect } = yield* start({ approvals })
        yield* firstQuestion(approvals)
        yield* manager.cancel(parent.agent_id, "done here")
        const cancelled = yield* manager.result(asker.agent_id, { block: true })
        assert.strictEqual(cancelled.status, "cancelled")
        assert.deepStrictEqual(yield* approvals.pending, [])
        assert.isFalse(approvals.waiting(asker.agent_id))
        assert.isFalse(yield* fs.exists(sideEffect))
      }).pipe(Effect.provideService(Approvals.Approvals, approvals))
      // Nothing provided: the default denies, naming how a person could answer.
      const { asker, fs, manager, sideEffect } = yield* start({})
      const denied = yield* manager.result(asker.agent_id, { block: true })
      assert.include(denied.outcome?.summary ?? "", "nobody can answer approval questions here")
      assert.isFalse(yield* fs.exists(sideEffect))
    }).pipe(Effect.scoped, provideNode))

  it.effect("an \"always\" answer covers the subtree it names and no other; a standing answer never reaches a denial", () =>
    Effect.gen(function*() {
      const approvals = yield* Approvals.make({ timeout: "1 minute" })
      const ask = (agentId: string, path: ReadonlyArray<string>) =>
        approvals.ask({
          kind: "tool",
          agentId,
          path,
          role: "general",
          depth: path.length - 1,
          tool: "shell",
          posture: "shell",
          arguments: "{}",
          reason: "test"
        })
      const first = yield* Effect.forkChild(ask("b", ["root", "a", "b"]))
      const question = yield* firstQuestion(approvals)
      yield* approvals.decide(question.id, { decision: "allow", always: true, subtree: "a", by: "terminal" })
      assert.strictEqual((yield* Fiber.join(first)).answer.decision, "allow")
      const sameSubtree = yield* ask("c", ["root", "a", "c"])
      assert.strictEqual(sameSubtree.answer.by, "standing answer")
      const other = yield* Effect.forkChild(ask("d", ["root", "x", "d"]))
      yield* TestClock.adjust("61 seconds")
      assert.strictEqual((yield* Fiber.join(other)).answer.by, "timeout")
    }))

  it.effect("a turn asking for 12 children over the limit is one question with the count and the estimate; deny starts none and the model sees why", () =>
    Effect.gen(function*() {
      const approvals = yield* Approvals.make({
        timeout: "10 minutes",
        fanOut: { maxAgents: 8, usdPerMtok: { scripted: 3 } }
      })
      yield* Effect.gen(function*() {
        const script: ScriptedModel.ScriptInput = {
          rules: [{
            match: { prompt: "coordinate" },
            respond: (c) =>
              c.turn === 0
                ? {
                  tool_calls: [spawnCall(0), ...Array.from({ length: 11 }, (_, i) => spawnCall(i + 1))]
                }
                : { text: report(`spawn said: ${JSON.stringify(c.lastToolResults[0]?.result)}`) }
          }, { turns: [{ text: report("explored") }], repeat_last: true }]
        }
        const { get } = yield* setup(script, { maxDepth: 2 })
        const manager = get(SubAgentManager)
        const parent = yield* manager.spawn(undefined, { prompt: "coordinate", role: "general" })
        const question = yield* firstQuestion(approvals)
        assert.strictEqual(question.kind, "fan_out")
        assert.strictEqual(question.agentId, parent.agent_id)
        assert.strictEqual(
          question.reason,
          "start 12 agents (12 explore), est. 180k tokens ≈ $0.54: more than fan_out_max_agents = 8"
        )
        assert.deepStrictEqual(yield* approvals.pending, [question])
        yield* approvals.decide(question.id, { decision: "deny", reason: "too many", by: "terminal" })
        const done = yield* manager.result(parent.agent_id, { block: true })
        assert.include(done.outcome?.summary ?? "", "none of the 12 agents was started")
        assert.include(done.outcome?.summary ?? "", "too many")
        const all = yield* manager.list({ includeArchived: true })
        assert.deepStrictEqual(all.map((agent) => agent.agent_id), [parent.agent_id])
      }).pipe(Effect.provideService(Approvals.Approvals, approvals))
    }).pipe(Effect.scoped, provideNode))
})
