// Edges of SubAgentManager found by its mutation run (docs/testing.md, "SubAgentManager.ts"):
// each test here failed with a mutant of SubAgentManager.ts planted by hand and passes on the
// code as it is. Real layers, the ScriptedModel, the TestClock; two "processes" are two
// stacks on one state directory in this process (each with its own store and boot id).
import { assert, describe, it } from "@effect/vitest"
import { ScriptedModel } from "@fibril/testkit"
import { Clock, Context, Deferred, Effect, Fiber, FileSystem, Layer, Option, PubSub } from "effect"
import { TestClock } from "effect/testing"
import { AgentEvents } from "../src/AgentEvents.ts"
import * as AgentResult from "../src/AgentResult.ts"
import * as Fibril from "../src/Fibril.ts"
import * as FibrilConfig from "../src/FibrilConfig.ts"
import * as Models from "../src/Models.ts"
import * as OutputContract from "../src/OutputContract.ts"
import * as Roles from "../src/Roles.ts"
import { Session } from "../src/Session.ts"
import * as SubAgentManager from "../src/SubAgentManager.ts"
import * as SubAgentStoreModule from "../src/SubAgentStore.ts"
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
      // A second, later agent there: a name or run id must still find the first.
      const second = yield* owner.spawn(undefined, { prompt: "more work in A" })
      const session = a.get(Session)
      for (let i = 0; i < 100 && !(yield* session.info(agent.agent_id)).waitingOnModel; i++) yield* Effect.yieldNow
      yield* a.get(SubAgentStore).sync

      // B sees it, from another process, and finds it by its session name.
      const listed = (yield* other.list({ includeArchived: false })).filter((v) => v.agent_id !== second.agent_id)
      assert.deepStrictEqual(listed.map((v) => [v.agent_id, v.status, v.from_prior_session]), [[
        agent.agent_id,
        "running",
        true
      ]])
      assert.strictEqual(yield* other.resolve(agent.session_name!), agent.agent_id)
      assert.strictEqual(yield* other.resolve(`${agent.agent_id}-r1`), agent.agent_id)
      assert.strictEqual(yield* other.resolve("no-such-name"), "no-such-name")
      assert.strictEqual(yield* other.resolve(second.session_name!), second.agent_id)
      const host = Option.getOrThrow(yield* a.get(SubAgentStore).get(agent.agent_id)).owner_host
      const seen = yield* other.workerRecord(listed[0]!)
      assert.include(seen.takeover.reason!, `running in another live process (pid ${process.pid} on ${host})`)
      assert.include((yield* owner.workerRecord(listed[0]!)).takeover.reason!, "running in this process")
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

      // A cancel from B: A acts on it and B returns the record as A wrote it; B's blocking read ends with it.
      const reading = yield* Effect.forkChild(other.result(agent.agent_id, { block: true }), { startImmediately: true })
      const cancelling = yield* Effect.forkChild(other.cancel(agent.agent_id, "stop, from B"), {
        startImmediately: true
      })
      for (let i = 0; i < 20 && cancelling.pollUnsafe() === undefined; i++) yield* TestClock.adjust("250 millis")
      const cancelled = yield* Fiber.join(cancelling)
      for (let i = 0; i < 8 && reading.pollUnsafe() === undefined; i++) yield* TestClock.adjust("250 millis")
      assert.strictEqual((yield* Fiber.join(reading)).status, "cancelled")
      assert.strictEqual(cancelled.status, "cancelled")
      assert.strictEqual(cancelled.reason, "stop, from B")
      assert.isTrue(cancelled.from_prior_session)
      assert.strictEqual((yield* owner.result(agent.agent_id, { block: false })).status, "cancelled")
      // Ended: hidden from B's current list, shown archived; an input now is refused with the reason.
      assert.deepStrictEqual((yield* other.list({ includeArchived: false })).map((v) => v.agent_id), [second.agent_id])
      assert.deepStrictEqual(
        (yield* other.list({ includeArchived: true })).map((v) => v.agent_id).sort(),
        [
          agent.agent_id,
          second.agent_id
        ].sort()
      )
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
      const unknown = yield* Effect.flip(manager.assign("agent_nope", { message: "hello" }))
      assert.strictEqual(unknown.message, "no sub-agent with id \"agent_nope\"; agent_list shows the known ones")
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

  it.effect("cancel of a root: every agent of its tree ends cancelled, foreground task children and their background children too", () =>
    Effect.gen(function*() {
      // The root runs a `task` child (foreground: its fiber is the root's child) and spawns a
      // background one; each of them spawns a background grandchild; all of them then wait.
      const spawnOne = (description: string) => ({
        name: "agent_spawn",
        args: { description, prompt: description, subagent_type: "explore" }
      })
      const { get } = yield* setup(
        {
          rules: [
            { match: { depth: 2 }, turns: [{ hang: true }] },
            { match: { prompt: "fg" }, turns: [{ tool_calls: [spawnOne("fg's child")] }, { hang: true }] },
            { match: { prompt: "bg" }, turns: [{ tool_calls: [spawnOne("bg's child")] }, { hang: true }] },
            {
              match: { depth: 0 },
              turns: [{
                tool_calls: [
                  { name: "task", args: { description: "fg", prompt: "fg", subagent_type: "general" } },
                  { name: "agent_spawn", args: { description: "bg", prompt: "bg", subagent_type: "general" } }
                ]
              }, { hang: true }]
            }
          ]
        },
        { maxDepth: 3 },
        { store: "file" }
      )
      const manager = get(Manager)
      const events = yield* get(AgentEvents).subscribe
      const { agent: root, fiber } = yield* get(SubAgentManager.Embedded).startRoot({ prompt: "go" })
      const running = () =>
        Effect.map(manager.list({ includeArchived: true }), (all) => all.filter((a) => a.status === "running").length)
      for (let i = 0; i < 50 && (yield* running()) < 5; i++) yield* TestClock.adjust("10 millis")
      assert.strictEqual(yield* running(), 5, "the root, two children and two grandchildren run")
      yield* manager.cancel(root.agent_id, "Cancelled by Ctrl-C")
      yield* Fiber.await(fiber)
      yield* get(SubAgentStore).flush
      const stored = yield* get(SubAgentStore).all
      assert.strictEqual(stored.length, 5)
      const because = `Cancelled because its parent ${root.agent_id} was cancelled`
      for (const record of stored) {
        assert.deepStrictEqual(
          [record.description, record.status, record.reason],
          [record.description, "cancelled", record.depth === 0 ? "Cancelled by Ctrl-C" : because]
        )
      }
      // The events say so too: one terminal event per agent, each `cancelled`.
      const terminal = (yield* PubSub.takeAll(events)).filter((event) =>
        ["completed", "failed", "cancelled", "interrupted"].includes(event.type)
      )
      assert.deepStrictEqual(terminal.map((event) => event.type), Array(5).fill("cancelled"))
    }).pipe(provideNode))

  it.effect("cancel by session name or run id: the descendants are cancelled, their reason naming the agent id", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ hang: true }] }] }, { maxDepth: 3 })
      const manager = get(Manager)
      const session = get(Session)
      for (const by of ["session name", "run id"] as const) {
        const parent = yield* manager.spawn(undefined, { prompt: `parent by ${by}` })
        for (let i = 0; i < 100 && Option.isNone(session.scopeOf(parent.agent_id)); i++) yield* Effect.yieldNow
        const child = yield* manager.spawn(parent.agent_id, { prompt: "child" })
        for (let i = 0; i < 100 && Option.isNone(session.scopeOf(child.agent_id)); i++) yield* Effect.yieldNow
        const grandchild = yield* manager.spawn(child.agent_id, { prompt: "grandchild" })
        const name = by === "session name" ? parent.session_name! : `${parent.agent_id}-r1`
        assert.notStrictEqual(name, parent.agent_id)
        const cancelled = yield* manager.cancel(name)
        assert.deepStrictEqual([cancelled.agent_id, cancelled.status], [parent.agent_id, "cancelled"])
        const because = `Cancelled because its parent ${parent.agent_id} was cancelled`
        for (const id of [child.agent_id, grandchild.agent_id]) {
          const view = yield* manager.result(id, { block: false })
          assert.deepStrictEqual([view.status, view.reason], ["cancelled", because], `${by}: ${id}`)
        }
      }
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
      // Not at time 0, so a duration is a difference and not the finish time itself.
      yield* TestClock.adjust("1 second")
      const ok = yield* manager.spawn(undefined, { prompt: "work", description: "the job" })
      const bad = yield* manager.spawn(undefined, { prompt: "fail" })
      yield* TestClock.adjust("2 seconds")
      const done = yield* manager.result(ok.agent_id, { block: true })
      assert.deepStrictEqual(AgentResult.of(done), {
        agent_id: done.agent_id,
        session_name: done.session_name!,
        run_id: `${done.agent_id}-r1`,
        description: "the job",
        role: "general",
        status: "completed",
        summary: "all good",
        sections: { changes: "none", evidence: "none", risks: "none", blockers: "none" },
        contract_violations: [],
        claims: { checked: 0, verified: 0, unverified: [] },
        steps: 1,
        tool_calls: 0,
        tokens: done.tokens,
        duration_ms: 1500,
        model: done.model,
        transcript_handle: `${done.agent_id}.jsonl`
      })
      const failed = AgentResult.of(yield* manager.result(bad.agent_id, { block: true }))
      assert.strictEqual(failed.status, "failed")
      assert.include(failed.reason!, "boom")
      assert.strictEqual(failed.summary, "")
      assert.isUndefined(failed.sections)
      assert.deepStrictEqual(failed.contract_violations, [])
      assert.strictEqual(failed.duration_ms, 300)
      const prior = AgentResult.of({ ...done, from_prior_session: true })
      assert.isTrue(prior.from_prior_session)
      const { started_at, ...unstarted } = done
      const { finished_at, ...unfinished } = done
      assert.deepStrictEqual([started_at, finished_at], [done.started_at, done.finished_at])
      assert.isUndefined(AgentResult.of(unstarted).duration_ms)
      assert.isUndefined(AgentResult.of(unfinished).duration_ms)
    }).pipe(provideNode))

  it("optionsFrom carries every [subagents] setting; an unset max_steps leaves the agent's own", () => {
    const subagents = {
      ...FibrilConfig.defaults.subagents,
      maxConcurrent: 3,
      admission: "queue" as const,
      heartbeatTimeoutSecs: 90,
      maxSteps: 7,
      maxTokens: 1000,
      maxWallSecs: 60,
      treeMaxTokens: 5000,
      maxResultChars: 512,
      defaultModel: "m-default",
      explorerModel: "m-explore"
    }
    // `[roles.<role>] mcp_servers`: by canonical role name (an alias is its role), roles without servers left out.
    const roles = { explorer: { mcpServers: ["github"] }, general: {} }
    assert.deepStrictEqual(SubAgentManager.optionsFrom({ ...FibrilConfig.defaults, subagents, roles }), {
      maxConcurrent: 3,
      admission: "queue",
      heartbeatTimeoutSecs: 90,
      budgets: { maxSteps: 7, maxTokens: 1000, maxWallSecs: 60, treeMaxTokens: 5000 },
      defaultModel: "m-default",
      roleModels: { explore: "m-explore" },
      maxResultChars: 512,
      processIsolation: { maxOldSpaceMb: 512, nestedDepth: 0, roleMaxOldSpaceMb: {} },
      roleIsolation: {},
      roleMcpServers: { explore: ["github"] }
    })
    const unset = SubAgentManager.optionsFrom(FibrilConfig.defaults)
    assert.isFalse("maxSteps" in unset.budgets)
  })

  it.effect("queue admission: an agent cancelled while queued leaves the queue, ends once, and a later spawn gets the permit", () =>
    Effect.gen(function*() {
      const go = yield* Deferred.make<void>()
      const { get } = yield* setup(
        {
          rules: [
            {
              match: { prompt: "first" },
              respond: () => Effect.as(Deferred.await(go), { text: report("first done") })
            },
            { match: { prompt: "third" }, turns: [{ hang: true }] },
            { turns: [{ text: report("done") }] }
          ]
        },
        {},
        { subagents: { maxConcurrent: 1, admission: "queue" } }
      )
      const manager = get(Manager)
      const subscription = yield* get(AgentEvents).subscribe
      const first = yield* manager.spawn(undefined, { prompt: "first" })
      const queued = yield* manager.spawn(undefined, { prompt: "queued", description: "waits" })
      assert.strictEqual(queued.status, "pending")
      // A message to a queued agent is delivered: it reads it when it starts.
      assert.isTrue((yield* manager.sendInput(queued.agent_id, "note for later", false)).delivered)
      const cancelled = yield* manager.cancel(queued.agent_id, "not needed")
      assert.deepStrictEqual([cancelled.status, cancelled.reason], ["cancelled", "not needed"])
      assert.isUndefined(cancelled.started_at)
      yield* Deferred.succeed(go, undefined)
      yield* manager.result(first.agent_id, { block: true })
      // The permit went back to the pool, not to the cancelled agent's place in the queue.
      const third = yield* manager.spawn(undefined, { prompt: "third" })
      assert.strictEqual(third.status, "running")
      assert.strictEqual(yield* manager.running, 1)
      // And it holds the only one: the cancelled agent gave back no permit it never had.
      const fourth = yield* manager.spawn(undefined, { prompt: "fourth" })
      assert.strictEqual(fourth.status, "pending")
      const events = (yield* PubSub.takeAll(subscription)).filter((e) => e.agent.agentId === queued.agent_id)
      assert.deepStrictEqual(events.map((e) => e.type), ["spawned", "cancelled"])
      const ended = events[1]!
      assert.strictEqual(ended.reason, "not needed")
      assert.deepStrictEqual(ended.agent, {
        agentId: queued.agent_id,
        parentId: undefined,
        depth: 1,
        role: "general",
        model: queued.model,
        description: "waits",
        step: 0,
        toolCalls: 0,
        lastTool: undefined,
        usage: { input: 0, output: 0, cached: 0 }
      })
      yield* manager.cancel(third.agent_id)
    }).pipe(provideNode))

  it.effect("wait: any returns at once when one already ended; a timeout says so and names the pending", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({
        rules: [
          { match: { prompt: "quick" }, turns: [{ text: report("quick done") }] },
          { match: { prompt: "slow" }, turns: [{ delay_ms: 10_000, text: report("slow done") }] }
        ]
      })
      const manager = get(Manager)
      const quick = yield* manager.spawn(undefined, { prompt: "quick" })
      const slow = yield* manager.spawn(undefined, { prompt: "slow" })
      yield* manager.result(quick.agent_id, { block: true })
      const any = yield* manager.wait([slow.agent_id, quick.agent_id], { mode: "any" })
      assert.isFalse(any.timed_out)
      assert.deepStrictEqual(any.completed.map((v) => v.agent_id), [quick.agent_id])
      assert.deepStrictEqual(any.pending, [slow.agent_id])
      const timing = yield* Effect.forkChild(
        manager.wait([slow.agent_id, quick.agent_id], { mode: "all", timeoutMs: 2000 }),
        { startImmediately: true }
      )
      yield* TestClock.adjust("1999 millis")
      assert.isUndefined(timing.pollUnsafe())
      yield* TestClock.adjust("1 millis")
      const timedOut = yield* Fiber.join(timing)
      assert.isTrue(timedOut.timed_out)
      assert.deepStrictEqual(timedOut.pending, [slow.agent_id])
      const blocked = yield* Effect.forkChild(manager.result(slow.agent_id, { block: true, timeoutMs: 1000 }), {
        startImmediately: true
      })
      yield* TestClock.adjust("1 second")
      assert.strictEqual((yield* Fiber.join(blocked)).status, "running")
      const all = yield* Effect.forkChild(manager.wait([slow.agent_id, quick.agent_id], { mode: "all" }), {
        startImmediately: true
      })
      yield* TestClock.adjust("10 seconds")
      const both = yield* Fiber.join(all)
      assert.isFalse(both.timed_out)
      assert.deepStrictEqual(both.completed.map((v) => v.status), ["completed", "completed"])
      assert.deepStrictEqual(both.pending, [])
    }).pipe(provideNode))

  it.effect("unread children and markRead are per parent; a root is nobody's child; list filters by parent", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({
        rules: [{ match: { depth: 0 }, turns: [{ hang: true }] }, { turns: [{ text: report("ok") }] }]
      }, { maxDepth: 2 })
      const manager = get(Manager)
      const session = get(Session)
      const root = yield* get(SubAgentManager.Embedded).startRoot({ prompt: "root" })
      const rootId = root.agent.agent_id
      for (let i = 0; i < 100 && Option.isNone(session.scopeOf(rootId)); i++) yield* Effect.yieldNow
      const child = yield* manager.spawn(rootId, { prompt: "child" })
      const orphan = yield* manager.spawn(undefined, { prompt: "orphan" })
      yield* manager.wait([child.agent_id, orphan.agent_id], { mode: "all" })
      assert.deepStrictEqual(yield* manager.unreadChildren(rootId), [child.agent_id])
      assert.deepStrictEqual(yield* manager.unreadChildren(undefined), [orphan.agent_id])
      // Marked read by someone who is not its parent: still unread.
      yield* manager.markRead(undefined, [child.agent_id])
      assert.deepStrictEqual(yield* manager.unreadChildren(rootId), [child.agent_id])
      yield* manager.markRead(rootId, [child.agent_id, "agent_unknown"])
      assert.deepStrictEqual(yield* manager.unreadChildren(rootId), [])
      assert.deepStrictEqual(
        (yield* manager.list({ includeArchived: true, parentId: rootId })).map((v) => v.agent_id),
        [child.agent_id]
      )
      assert.deepStrictEqual(
        (yield* manager.list({ includeArchived: true })).map((v) => v.agent_id).sort(),
        [rootId, child.agent_id, orphan.agent_id].sort()
      )
      // The root runs on no sub-agent permit.
      assert.strictEqual(yield* manager.running, 0)
      yield* manager.cancel(rootId)
    }).pipe(provideNode))

  it.effect("heartbeat: checked every quarter of the timeout, an agent cancelled at the first check past it", () =>
    Effect.gen(function*() {
      // early and late block in agent_result on a sleeper (not their child): no progress of
      // theirs; the sleeper's own model call is its progress, so it is never cancelled.
      let sleeper = ""
      const blocked: ScriptedModel.Rule = {
        match: { depth: 1 },
        respond: (c) =>
          c.prompt === "sleep"
            ? { hang: true }
            : { tool_calls: [{ name: "agent_result", args: { id: sleeper, block: true } }] }
      }
      const { get } = yield* setup(
        { rules: [blocked] },
        { apiTimeoutSecs: 600, maxDepth: 2 },
        { subagents: { heartbeatTimeoutSecs: 60 } }
      )
      const manager = get(Manager)
      const start = yield* Clock.currentTimeMillis
      sleeper = (yield* manager.spawn(undefined, { prompt: "sleep" })).agent_id
      const early = yield* manager.spawn(undefined, { prompt: "early" })
      const told = yield* manager.spawn(undefined, { prompt: "told" })
      yield* TestClock.adjust("5 seconds")
      const late = yield* manager.spawn(undefined, { prompt: "late" })
      yield* TestClock.adjust("25 seconds")
      // A message delivered is progress: told is silent from 30 s.
      assert.isTrue((yield* manager.sendInput(told.agent_id, "still there?", false)).delivered)
      // Checks every 15 s: early is silent for 60 s at 60, late (from 5 s) at 65, told at 90.
      for (let i = 0; i < 62; i++) yield* TestClock.adjust("1 second")
      const ended = (id: string) =>
        Effect.map(manager.result(id, { block: false }), (v) => [v.status, (v.finished_at ?? start) - start])
      assert.deepStrictEqual(yield* ended(early.agent_id), ["cancelled", 60_000])
      assert.deepStrictEqual(yield* ended(late.agent_id), ["cancelled", 75_000])
      assert.deepStrictEqual(yield* ended(told.agent_id), ["cancelled", 90_000])
      assert.deepStrictEqual(yield* ended(sleeper), ["running", 0])
      yield* manager.cancel(sleeper)
    }).pipe(provideNode))

  it.effect("an agent definition's model and max_steps apply; an explicit model still wins", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      yield* fs.makeDirectory(`${root}/.fibril/agents`, { recursive: true })
      yield* fs.writeFileString(
        `${root}/.fibril/agents/scribe.md`,
        "---\nname: scribe\ndescription: Writes notes\nrole: general\nmodel: small\nmax_steps: 1\n---\nYou are Scribe.\n"
      )
      // Each model looks once (a tool call), then answers: two steps.
      const script = (name: string): ScriptedModel.ScriptInput => ({
        rules: [{ turns: [{ tool_calls: [{ name: "list_dir", args: {} }] }, { text: report(`answered by ${name}`) }] }]
      })
      const catalog = Layer.unwrap(Effect.gen(function*() {
        const big = yield* ScriptedModel.make(script("big"))
        const small = yield* ScriptedModel.make(script("small"))
        return Models.fromRecord({ big, small }, "big")
      }))
      const built = yield* Layer.build(Fibril.layerWithModels({ cwd: root }).pipe(Layer.provideMerge(catalog)))
      const manager = Context.get(built, Manager)
      const scribe = yield* manager.run(undefined, { prompt: "note it", role: "scribe" })
      assert.deepStrictEqual([scribe.role, scribe.model, scribe.status], ["scribe", "small", "failed"])
      assert.include(scribe.reason!, "max_steps")
      assert.strictEqual(scribe.steps, 1)
      const explicit = yield* manager.run(undefined, { prompt: "note it", role: "scribe", model: "big" })
      assert.deepStrictEqual([explicit.model, explicit.status], ["big", "failed"])
      const general = yield* manager.run(undefined, { prompt: "note it" })
      assert.deepStrictEqual([general.model, general.status, general.outcome?.summary], [
        "big",
        "completed",
        "answered by big"
      ])
    }).pipe(provideNode))

  it.effect("a running agent's view: its steps, calls, last tool and usage so far; the description from the prompt", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({
        rules: [{
          respond: (c) =>
            c.turn === 0
              ? { tool_calls: [{ name: "list_dir", args: {} }], usage: { input: 10, output: 5 } }
              : { hang: true }
        }]
      })
      const manager = get(Manager)
      const session = get(Session)
      const prompt = "Survey the repository and list every package with its purpose, then stop."
      const agent = yield* manager.spawn(undefined, { prompt })
      assert.strictEqual(agent.description, prompt.slice(0, 60))
      assert.strictEqual(agent.objective, prompt)
      assert.isFalse(agent.fork_context)
      assert.isFalse("parent_id" in agent)
      for (let i = 0; i < 100 && (yield* session.info(agent.agent_id)).steps < 2; i++) yield* Effect.yieldNow
      const [running] = yield* manager.list({ includeArchived: false })
      assert.strictEqual(running!.status, "running")
      assert.strictEqual(running!.tool_calls, 1)
      assert.strictEqual(running!.last_tool, "list_dir")
      const info = yield* session.info(agent.agent_id)
      assert.strictEqual(running!.steps, info.steps)
      assert.deepStrictEqual(running!.tokens, info.treeUsage)
      assert.isAtLeast(running!.tokens.input, 10)
      assert.deepStrictEqual(running!.usage, { status: "reported", reported_steps: 1, estimated_steps: 0 })
      yield* manager.cancel(agent.agent_id)
    }).pipe(provideNode))

  it.effect("resume without a message says how the last run ended; a foreground run's caller interrupted is recorded so", () =>
    Effect.gen(function*() {
      const asked: Array<string> = []
      const { get } = yield* setup({
        rules: [
          { match: { prompt: "foreground" }, turns: [{ hang: true }] },
          {
            respond: (c) => {
              const last = userTexts(c.messages).at(-1)!
              asked.push(last)
              return last === "work" ? { hang: true } : { text: report("again") }
            }
          }
        ]
      })
      const manager = get(Manager)
      const agent = yield* manager.spawn(undefined, { prompt: "work" })
      for (let i = 0; i < 100 && asked.length === 0; i++) yield* Effect.yieldNow
      yield* manager.cancel(agent.agent_id, "pause")
      yield* manager.resume(undefined, agent.agent_id)
      const done = yield* manager.result(agent.agent_id, { block: true })
      assert.strictEqual(done.status, "completed")
      assert.strictEqual(asked.at(-1), "Continue where you left off. Your previous run ended cancelled: pause.")
      yield* manager.resume(undefined, agent.agent_id)
      yield* manager.result(agent.agent_id, { block: true })
      assert.strictEqual(asked.at(-1), "Continue where you left off. Your previous run ended completed.")

      const caller = yield* Effect.forkChild(manager.run(undefined, { prompt: "foreground", detached: true }), {
        startImmediately: true
      })
      let id: string | undefined
      for (let i = 0; i < 100 && id === undefined; i++) {
        yield* Effect.yieldNow
        id = (yield* manager.list({ includeArchived: false })).find((a) => a.objective === "foreground")?.agent_id
      }
      const foreground = yield* manager.result(id!, { block: false })
      assert.isFalse(foreground.detached, "a foreground agent is never detached")
      yield* Fiber.interrupt(caller)
      const ended = yield* manager.result(id!, { block: false })
      assert.deepStrictEqual([ended.status, ended.reason], [
        "interrupted",
        "Interrupted: its parent was interrupted or the runtime shut down"
      ])
    }).pipe(provideNode))

  it.effect("queue admission: a waiting caller lends its permit to each queued child in turn, and has it back after", () =>
    Effect.gen(function*() {
      const go = yield* Deferred.make<void>()
      const { get } = yield* setup(
        {
          rules: [
            { match: { prompt: "parent" }, turns: [{ hang: true }] },
            { match: { prompt: "one" }, respond: () => Effect.as(Deferred.await(go), { text: report("child done") }) },
            { turns: [{ text: report("child done") }] }
          ]
        },
        {},
        { subagents: { maxConcurrent: 1, admission: "queue" } }
      )
      const manager = get(Manager)
      const session = get(Session)
      const parent = yield* manager.spawn(undefined, { prompt: "parent" })
      for (let i = 0; i < 100 && Option.isNone(session.scopeOf(parent.agent_id)); i++) yield* Effect.yieldNow
      const one = yield* manager.spawn(parent.agent_id, { prompt: "one" })
      const two = yield* manager.spawn(parent.agent_id, { prompt: "two" })
      assert.deepStrictEqual([one.status, two.status], ["pending", "pending"])
      // By its run id too.
      assert.strictEqual((yield* manager.result(`${one.agent_id}-r1`, { block: false })).agent_id, one.agent_id)
      const waiting = yield* Effect.forkChild(
        manager.wait([one.agent_id, two.agent_id], { mode: "all", caller: parent.agent_id }),
        { startImmediately: true }
      )
      for (let i = 0; i < 20; i++) yield* Effect.yieldNow
      // Lent to one only: another agent queueing meanwhile does not start two on the same permit.
      const other = yield* manager.spawn(undefined, { prompt: "other" })
      const statuses = Effect.forEach(
        [one, two, other],
        (v) => Effect.map(manager.result(v.agent_id, { block: false }), (r) => r.status)
      )
      assert.deepStrictEqual(yield* statuses, ["running", "pending", "pending"])
      assert.strictEqual(yield* manager.running, 2)
      yield* Deferred.succeed(go, undefined)
      const waited = yield* Fiber.join(waiting)
      assert.isFalse(waited.timed_out)
      assert.deepStrictEqual(waited.completed.map((v) => v.outcome?.summary), ["child done", "child done"])
      // The parent has its permit back: nothing more can start until it ends.
      assert.strictEqual(yield* manager.running, 1)
      assert.strictEqual((yield* manager.result(other.agent_id, { block: false })).status, "pending")
      yield* manager.cancel(parent.agent_id)
      assert.strictEqual((yield* manager.result(other.agent_id, { block: true })).status, "completed")
    }).pipe(provideNode))

  it.effect("a parent answering early gets its children's results in one message; a free-form answer keeps its violations", () =>
    Effect.gen(function*() {
      let told: string | undefined
      const { get } = yield* setup({
        rules: [
          {
            match: { depth: 0 },
            respond: (c) => {
              if (c.turn === 0) {
                return { tool_calls: [{ name: "agent_spawn", args: { prompt: "child", description: "c" } }] }
              }
              if (c.turn === 1) return { text: "answering early" }
              told = userTexts(c.messages).at(-1)
              return { text: "final" }
            }
          },
          { match: { prompt: "child" }, turns: [{ delay_ms: 1000, text: "just prose, no sections" }] }
        ]
      })
      const manager = get(Manager)
      const root = yield* get(SubAgentManager.Embedded).startRoot({ prompt: "go" })
      yield* TestClock.adjust("1 second")
      assert.strictEqual((yield* Fiber.join(root.fiber)).text, "final")
      const [child] = yield* manager.list({ includeArchived: true, parentId: root.agent.agent_id })
      assert.strictEqual(child!.parent_id, root.agent.agent_id)
      assert.deepStrictEqual(
        child!.outcome?.contract_violations,
        OutputContract.parse("just prose, no sections").violations.map((v) => v.message)
      )
      assert.isAbove(child!.outcome!.contract_violations.length, 0)
      assert.strictEqual(child!.outcome?.text, "just prose, no sections")
      const head = "Your background sub-agents were still running when you answered; they have now finished. " +
        "Their results:\n"
      const tail = "\nTake them into account, then give your final answer."
      assert.isTrue(told!.startsWith(head), told)
      assert.isTrue(told!.endsWith(tail), told)
      assert.deepStrictEqual(JSON.parse(told!.slice(head.length, -tail.length)), [
        JSON.parse(JSON.stringify(AgentResult.of(child!)))
      ])
    }).pipe(provideNode))

  it.effect("a durable store gets a new agent's opening messages; a fork's copy of its parent's history too", () =>
    Effect.gen(function*() {
      const { get } = yield* setup(
        {
          rules: [
            { match: { depth: 0 }, turns: [{ hang: true }] },
            { turns: [{ text: report("done") }] }
          ]
        },
        {},
        { store: "file" }
      )
      const manager = get(Manager)
      const store = get(SubAgentStore)
      const session = get(Session)
      const root = yield* get(SubAgentManager.Embedded).startRoot({ prompt: "the root's task" })
      const rootId = root.agent.agent_id
      for (let i = 0; i < 100 && !(yield* session.info(rootId)).waitingOnModel; i++) yield* Effect.yieldNow
      const plain = yield* manager.run(rootId, { prompt: "the child's task" })
      const fork = yield* manager.run(rootId, { prompt: "the fork's task", forkContext: true })
      assert.isTrue(fork.fork_context)
      yield* store.flush
      const stored = (handle: string) =>
        Effect.map(store.readTranscript(handle), (lines) => lines as ReadonlyArray<{ role: string; content: unknown }>)
      const plainMessages = yield* stored(plain.transcript_handle)
      assert.deepStrictEqual(plainMessages.slice(0, 2).map((m) => m.role), ["system", "user"])
      assert.deepStrictEqual(userTexts(plainMessages), ["the child's task"])
      const forked = userTexts(yield* stored(fork.transcript_handle))
      assert.deepStrictEqual([forked[0], forked.at(-1)], ["the root's task", "the fork's task"])
      yield* manager.cancel(rootId)
    }).pipe(provideNode))

  it.effect("queue admission: a root waiting on its child lends nothing and takes no permit after", () =>
    Effect.gen(function*() {
      const { get } = yield* setup(
        {
          rules: [
            { match: { depth: 0 }, turns: [{ hang: true }] },
            { match: { prompt: "next" }, turns: [{ hang: true }] },
            { turns: [{ text: report("done") }] }
          ]
        },
        {},
        { subagents: { maxConcurrent: 1, admission: "queue" } }
      )
      const manager = get(Manager)
      const session = get(Session)
      const root = yield* get(SubAgentManager.Embedded).startRoot({ prompt: "root" })
      const rootId = root.agent.agent_id
      for (let i = 0; i < 100 && Option.isNone(session.scopeOf(rootId)); i++) yield* Effect.yieldNow
      const child = yield* manager.spawn(rootId, { prompt: "child" })
      yield* manager.wait([child.agent_id], { mode: "all", caller: rootId })
      assert.strictEqual(yield* manager.running, 0)
      const next = yield* manager.spawn(undefined, { prompt: "next" })
      assert.strictEqual(next.status, "running")
      // The root's end gives back nothing and uncounts nothing.
      yield* manager.cancel(rootId)
      assert.strictEqual(yield* manager.running, 1)
      assert.strictEqual((yield* manager.spawn(undefined, { prompt: "next" })).status, "pending")
    }).pipe(provideNode))

  it.effect("another process's finished agent is taken over by a resume: rebuilt from its transcript, recorded as ours", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      const seen: Array<ReadonlyArray<string>> = []
      const script: ScriptedModel.ScriptInput = {
        rules: [{
          respond: (c) => {
            seen.push(c.messages.map((m) => m.role))
            return { text: report(`run ${seen.length}: ${userTexts(c.messages).join(" | ")}`) }
          }
        }]
      }
      const a = yield* setup(script, {}, { root, store: "file" })
      const b = yield* setup(script, {}, { root, store: "file" })
      const owner = a.get(Manager)
      const other = b.get(Manager)
      const first = yield* owner.run(undefined, { prompt: "first task" })
      assert.strictEqual(first.outcome?.summary, "run 1: first task")
      yield* a.get(SubAgentStore).flush
      const resumed = yield* other.resume(undefined, first.session_name!, "and then this")
      assert.strictEqual(resumed.agent_id, first.agent_id)
      const done = yield* other.result(first.agent_id, { block: true })
      assert.strictEqual(done.status, "completed")
      // Its history came from the store: the first run's task and answer, then the new message.
      assert.strictEqual(done.outcome?.summary, "run 2: first task | and then this")
      assert.deepStrictEqual(seen[1], ["system", "user", "assistant", "user"])
      assert.isFalse(done.from_prior_session)
      assert.strictEqual(done.session_boot_id, other.bootId)
      assert.deepStrictEqual(done.runs?.map((r) => r.steps), [1, 1])
      // Once taken over, a second resume is ours to do (by its session name, now known here).
      yield* other.resume(undefined, first.session_name!, "once more")
      assert.strictEqual(
        (yield* other.result(first.agent_id, { block: true })).outcome?.summary,
        "run 3: first task | and then this | once more"
      )
      // Its runs here were handed to nobody yet.
      assert.deepStrictEqual(yield* other.unreadChildren(undefined), [first.agent_id])
    }).pipe(provideNode))

  it("bound: a text of exactly the limit is whole; a cut backs off only from a low surrogate (U+DC00..U+DFFF)", () => {
    const marker = (n: number) => `\n[... cut: ${n} more characters; the whole answer is in the agent's transcript]`
    assert.strictEqual(AgentResult.bound("abcde", 5), "abcde")
    assert.strictEqual(AgentResult.bound("abcdef", 5), `abcde${marker(1)}`)
    assert.strictEqual(AgentResult.bound("abcde\udc00x", 5), `abcd${marker(3)}`)
    assert.strictEqual(AgentResult.bound("abcde\udfffx", 5), `abcd${marker(3)}`)
    assert.strictEqual(AgentResult.bound("abcde\udbffx", 5), `abcde${marker(2)}`)
    assert.strictEqual(AgentResult.bound("abcde\ue000x", 5), `abcde${marker(2)}`)
  })

  it("the errors' messages say what was refused and what to do", () => {
    assert.strictEqual(
      new SubAgentManager.CapReached({ max: 2, running: 2 }).message,
      "sub-agent cap reached (max 2, running 2): nothing was spawned. " +
        "Wait for a running agent to finish (agent_wait) or cancel one (agent_cancel), then try again."
    )
    assert.strictEqual(
      new SubAgentManager.AgentNotFound({ agentId: "agent_x" }).message,
      "no sub-agent with id \"agent_x\"; agent_list shows the known ones"
    )
  })

  it.effect("reject admission: a cancelled agent's permit is free again, and the cap error counts the running ones", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ hang: true }] }] }, {}, { subagents: { maxConcurrent: 2 } })
      const manager = get(Manager)
      const a = yield* manager.spawn(undefined, { prompt: "a" })
      yield* manager.spawn(undefined, { prompt: "b" })
      yield* manager.cancel(a.agent_id)
      yield* manager.spawn(undefined, { prompt: "c" })
      const refused = yield* Effect.flip(manager.spawn(undefined, { prompt: "d" }))
      assert.strictEqual(refused._tag, "CapReached")
      assert.include(refused.message, "(max 2, running 2)")
    }).pipe(provideNode))

  it.effect("a manager whose store keeps few records forgets the evicted agents at 256, and keeps the rest", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ text: report("done") }], repeat_last: true }] }, {}, {
        layers: { store: Layer.effect(SubAgentStore, SubAgentStoreModule.makeMemory({ maxRecords: 10 })) }
      })
      const manager = get(Manager)
      const session = get(Session)
      const ids: Array<string> = []
      for (let i = 0; i < 256; i++) ids.push((yield* manager.run(undefined, { prompt: `p${i}` })).agent_id)
      yield* get(SubAgentStore).flush
      const kept = ids.at(-2)!
      assert.strictEqual((yield* session.info(kept)).id, kept, "a kept agent keeps its session")
      assert.strictEqual((yield* Effect.flip(manager.result(ids[0]!, { block: false })))._tag, "AgentNotFound")
      assert.isTrue(Option.isNone(yield* Effect.option(session.info(ids[0]!))))
    }).pipe(provideNode))
})
