// SubAgentManager with what another process or the workspace left: a record whose model this
// process does not know, definitions that are not sub-agent types, session names shared by
// several stored records, a store that refuses a write. Real layers, the ScriptedModel; two
// "processes" are two stacks on one state directory (each its own store and boot id). Each test
// here failed with a mutant of SubAgentManager.ts (docs/testing.md).
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { ScriptedModel } from "@fibril/testkit"
import { Context, Effect, Fiber, FileSystem, Layer, Logger, Option } from "effect"
import { TestClock } from "effect/testing"
import * as Fibril from "../src/Fibril.ts"
import * as Models from "../src/Models.ts"
import * as SqliteSubAgentStore from "../src/SqliteSubAgentStore.ts"
import * as SubAgentManager from "../src/SubAgentManager.ts"
import { StoreError, SubAgentStore } from "../src/SubAgentStore.ts"
import { provideNode, report } from "./support.ts"

const Manager = SubAgentManager.SubAgentManager

const answers: ScriptedModel.ScriptInput = { rules: [{ respond: () => ({ text: report("done") }) }] }

/** A stack on `root` with a durable store whose model catalog is exactly `ids`. */
const stack = (
  root: string,
  ids: ReadonlyArray<string>,
  extra: Partial<Fibril.Options> = {},
  script: ScriptedModel.ScriptInput = answers
) =>
  Effect.gen(function*() {
    const catalog = Layer.unwrap(Effect.gen(function*() {
      const model = yield* ScriptedModel.make(script)
      return Models.fromRecord(Object.fromEntries(ids.map((id) => [id, model])))
    }))
    const built = yield* Layer.build(
      Fibril.layerWithModels({ cwd: root, store: "file", ...extra }).pipe(Layer.provideMerge(catalog))
    )
    return {
      manager: Context.get(built, Manager),
      roots: Context.get(built, SubAgentManager.Embedded),
      store: Context.get(built, SubAgentStore)
    }
  })

/** The SQLite store on `root`'s state directory, with some of its operations replaced. */
const storeWith = (
  root: string,
  replace: (store: SubAgentStore["Service"]) => Partial<SubAgentStore["Service"]>
) =>
  Layer.effect(
    SubAgentStore,
    Effect.gen(function*() {
      const store = yield* SubAgentStore
      return SubAgentStore.of({ ...store, ...replace(store) })
    })
  ).pipe(
    Layer.provide(SqliteSubAgentStore.layerSqlite({ dir: `${root}/.fibril/state` })),
    Layer.provide(NodeServices.layer)
  )

/** A logger layer that keeps each message's text in `logs`. */
const captureLogs = () => {
  const logs: Array<string> = []
  const capture = Logger.layer([
    Logger.make(({ message }) => void logs.push((Array.isArray(message) ? message : [message]).join(" ")))
  ])
  return { capture, logs }
}

const tempRoot = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  return yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
})

describe("SubAgentManager and what others left", () => {
  it.effect("a finished agent recorded with a model unknown here: its resume is refused, and an assign still only narrows", () =>
    Effect.gen(function*() {
      const root = yield* tempRoot
      const a = yield* stack(root, ["model-a"])
      const agent = yield* a.manager.run(undefined, { prompt: "first task", description: "a's job" })
      assert.deepStrictEqual([agent.status, agent.model, agent.role], ["completed", "model-a", "general"])
      yield* a.store.flush

      const b = yield* stack(root, ["model-b"])
      const refused = yield* Effect.flip(b.manager.resume(undefined, agent.agent_id, "again"))
      assert.strictEqual(refused._tag, "UnknownModel")
      assert.include(refused.message, "model-a")
      assert.include(refused.message, "model-b")
      // Its run was another process's: whoever waited for it was there, so nobody here has it unread.
      assert.deepStrictEqual(yield* b.manager.unreadChildren(undefined), [])

      // Taken over, but no session could be built here: an assign checks the new role against
      // the recorded one. Narrowing to explore is taken: recorded, logged, and the note kept as
      // an input nobody received.
      const narrowed = yield* b.manager.assign(agent.agent_id, { role: "explore", objective: "only look" })
      assert.isFalse(narrowed.delivered)
      assert.strictEqual(
        narrowed.reason,
        `agent ${agent.agent_id} is completed; nothing is running to receive input (agent_resume continues it)`
      )
      assert.deepStrictEqual([narrowed.agent.role, narrowed.agent.objective], ["explore", "only look"])
      assert.deepStrictEqual(narrowed.agent.permissions, agent.permissions)
      assert.deepStrictEqual(
        (narrowed.agent.events ?? []).filter((e) => e.type === "assigned").map((e) => e.detail),
        ["role explore; objective: only look"]
      )
      assert.strictEqual(narrowed.input?.via, "agent_assign")
      const stored = Option.getOrThrow(yield* b.store.get(agent.agent_id))
      assert.deepStrictEqual([stored.role, stored.objective], ["explore", "only look"])

      // Widening back to general is refused, naming both roles and what it would grant; the
      // record is unchanged.
      const widening = yield* Effect.flip(b.manager.assign(agent.agent_id, { role: "general", objective: "write" }))
      assert.strictEqual(widening._tag, "PermissionWidening")
      assert.include(widening.message, "explore")
      assert.include(widening.message, "general")
      assert.include(widening.message, "write")
      const after = yield* b.manager.result(agent.agent_id, { block: false })
      assert.deepStrictEqual([after.role, after.objective], ["explore", "only look"])
      // The same role again widens nothing.
      const same = yield* b.manager.assign(agent.agent_id, { role: "explore" })
      assert.strictEqual(same.agent.role, "explore")
    }).pipe(provideNode))

  it.effect("an opencode primary agent is loaded but is no sub-agent type: refused, and not offered", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const root = yield* tempRoot
      yield* fs.makeDirectory(`${root}/.opencode/agent`, { recursive: true })
      yield* fs.writeFileString(
        `${root}/.opencode/agent/boss.md`,
        "---\ndescription: Runs things\nmode: primary\n---\nBoss.\n"
      )
      yield* fs.writeFileString(
        `${root}/.opencode/agent/helper.md`,
        "---\ndescription: Helps\nmode: subagent\n---\nHelper.\n"
      )
      const { manager } = yield* stack(root, ["m"])
      const refused = yield* Effect.flip(manager.spawn(undefined, { prompt: "lead", role: "boss" }))
      assert.strictEqual(refused._tag, "UnknownRole")
      assert.include(refused.message, "unknown sub-agent type \"boss\"")
      assert.isTrue(
        refused.message.endsWith("; agents defined in .fibril/agents, .claude/agents or .opencode/agent: helper"),
        refused.message
      )
      const helper = yield* manager.run(undefined, { prompt: "help", role: "helper" })
      assert.deepStrictEqual([helper.role, helper.status], ["helper", "completed"])
    }).pipe(provideNode))

  it.effect("a session name several stored records share names the most recent of them", () =>
    Effect.gen(function*() {
      const root = yield* tempRoot
      const a = yield* stack(root, ["m"])
      const runs = [
        yield* a.manager.run(undefined, { prompt: "one" }),
        yield* a.manager.run(undefined, { prompt: "two" }),
        yield* a.manager.run(undefined, { prompt: "three" })
      ]
      // Another process drew the same name for each (names are unique only within a process).
      const createdAt = [2_000, 3_000, 1_000]
      for (const [i, run] of runs.entries()) {
        yield* a.store.put({ ...run, session_name: "shared-name", created_at: createdAt[i]! })
      }
      yield* a.store.flush
      const b = yield* stack(root, ["m"])
      assert.strictEqual(yield* b.manager.resolve("shared-name"), runs[1]!.agent_id)
      // An agent id is itself, whatever names the records carry.
      assert.strictEqual(yield* b.manager.resolve(runs[2]!.agent_id), runs[2]!.agent_id)
      // Once B takes the oldest over, the name is B's own agent's first.
      yield* b.manager.resume(undefined, runs[2]!.agent_id, "yours now")
      assert.strictEqual(yield* b.manager.resolve("shared-name"), runs[2]!.agent_id)
      assert.strictEqual((yield* b.manager.result("shared-name", { block: true })).agent_id, runs[2]!.agent_id)
      // A name B's own agent already has stays its: a record taken over under the same name
      // does not take it.
      const own = yield* b.manager.run(undefined, { prompt: "b's own" })
      yield* a.store.put({ ...runs[0]!, session_name: own.session_name! })
      yield* a.store.flush
      yield* b.manager.resume(undefined, runs[0]!.agent_id, "also yours")
      assert.strictEqual(yield* b.manager.resolve(own.session_name!), own.agent_id)
    }).pipe(provideNode))

  it.effect("a store that refuses a transcript write: the agent still runs, and the refusal is logged", () =>
    Effect.gen(function*() {
      const root = yield* tempRoot
      const { capture, logs } = captureLogs()
      const refusing = storeWith(
        root,
        () => ({
          queueTranscript: (handle) => Effect.fail(new StoreError({ path: handle, reason: "disk full" }))
        })
      )
      const agent = yield* Effect.gen(function*() {
        const { manager } = yield* stack(root, ["m"], { layers: { store: refusing } })
        return yield* manager.run(undefined, { prompt: "work" })
      }).pipe(Effect.provide(capture))
      assert.strictEqual(agent.status, "completed")
      // Not a verifier: nothing said about one.
      assert.isFalse(logs.some((line) => line.includes("verifier")), logs.join("\n"))
      assert.isTrue(
        logs.includes(`sub-agent store: ${agent.agent_id}.jsonl: disk full`),
        `expected the refusal in the log:\n${logs.join("\n")}`
      )
    }).pipe(provideNode))

  it.effect("a store that cannot read a transcript: a takeover starts a fresh conversation, and the transcript reads empty", () =>
    Effect.gen(function*() {
      const root = yield* tempRoot
      const a = yield* stack(root, ["m"])
      const agent = yield* a.manager.run(undefined, { prompt: "first task" })
      yield* a.store.flush
      const unreadable = storeWith(
        root,
        () => ({
          readTranscript: (handle) => Effect.fail(new StoreError({ path: handle, reason: "unreadable" }))
        })
      )
      const seen: Array<ReadonlyArray<string>> = []
      const b = yield* stack(root, ["m"], { layers: { store: unreadable } }, {
        rules: [{
          respond: (c) => {
            seen.push(c.messages.map((m) => m.role))
            return { text: report("again") }
          }
        }]
      })
      yield* b.manager.resume(undefined, agent.agent_id, "go on")
      const done = yield* b.manager.result(agent.agent_id, { block: true })
      assert.strictEqual(done.status, "completed")
      // No history could be read: the system prompt and the new message only.
      assert.deepStrictEqual(seen, [["system", "user"]])
      const page = yield* b.manager.readTranscript(agent.transcript_handle, {})
      assert.deepStrictEqual([page.total, page.messages], [0, []])
    }).pipe(provideNode))

  it.effect("requests from other processes are read while agents are live, and not after", () =>
    Effect.gen(function*() {
      const root = yield* tempRoot
      let reads = 0
      const counting = storeWith(
        root,
        (store) => ({ takeRequests: Effect.suspend(() => (reads++, store.takeRequests)) })
      )
      const { manager } = yield* stack(root, ["m"], { layers: { store: counting } }, {
        rules: [{ turns: [{ text: report("slow"), delay_ms: 2_000 }] }]
      })
      const agent = yield* manager.spawn(undefined, { prompt: "work" })
      yield* TestClock.adjust("1 second")
      // Read at once, then every half second while the agent runs.
      assert.isAtLeast(reads, 2)
      yield* TestClock.adjust("2 seconds")
      assert.strictEqual((yield* manager.result(agent.agent_id, { block: true })).status, "completed")
      yield* TestClock.adjust("1 second")
      const settled = reads
      yield* TestClock.adjust("10 seconds")
      assert.strictEqual(reads, settled)
    }).pipe(provideNode))

  it.effect("a cancel asked of another process for an agent that has since finished leaves it no request", () =>
    Effect.gen(function*() {
      const root = yield* tempRoot
      const a = yield* stack(root, ["m"])
      const b = yield* stack(root, ["m"])
      const agent = yield* a.manager.run(undefined, { prompt: "work" })
      yield* a.store.flush
      // B read it while it ran; by the time B asks, it has finished.
      const stale = { ...agent, status: "running" as const }
      const latest = yield* SubAgentManager.requestCancel(stale, "stop").pipe(
        Effect.provideService(SubAgentStore, b.store)
      )
      assert.strictEqual(latest.status, "completed")
      yield* b.store.flush
      assert.deepStrictEqual(yield* a.store.takeRequests, [])
    }).pipe(provideNode))

  it.effect("only what could be a session name or a run id makes a lookup read the stored records", () =>
    Effect.gen(function*() {
      const root = yield* tempRoot
      let scans = 0
      const counting = storeWith(root, (store) => ({ all: Effect.suspend(() => (scans++, store.all)) }))
      const { manager } = yield* stack(root, ["m"], { layers: { store: counting } })
      const scanned = (id: string) =>
        Effect.gen(function*() {
          const before = scans
          assert.strictEqual(yield* manager.resolve(id), id)
          return scans - before
        })
      // Names are two lowercase words and an optional number; run ids end in -r<n>.
      for (const name of ["brave-otter", "brave-otter-2", "brave-otter-12", "agent_x1-r3"]) {
        assert.strictEqual(yield* scanned(name), 1, name)
      }
      for (const other of ["agent_k3x91", "9brave-otter", "brave-otter_x", "brave-otter-x", "brave", "Brave-Otter"]) {
        assert.strictEqual(yield* scanned(other), 0, other)
      }
    }).pipe(provideNode))

  it.effect("a verifier of another process's agent: its result stays in its own record, and the log says so", () =>
    Effect.gen(function*() {
      const root = yield* tempRoot
      const { capture, logs } = captureLogs()
      const a = yield* stack(root, ["m"])
      const checked = yield* a.manager.run(undefined, { prompt: "work" })
      yield* a.store.flush
      const b = yield* stack(root, ["m"])
      const verifier = yield* b.manager.run(undefined, { prompt: "check it", verifies: checked.agent_id }).pipe(
        Effect.provide(capture)
      )
      assert.strictEqual(verifier.verifies, `${checked.agent_id}-r1`)
      assert.include(
        logs,
        `verifier ${verifier.agent_id}: ${checked.agent_id}-r1 is not an agent of this process; its result stays in the verifier's record`
      )
      // A's record has no check attached by B.
      yield* b.store.flush
      assert.isUndefined(Option.getOrThrow(yield* a.store.get(checked.agent_id)).verification)
    }).pipe(provideNode))

  it.effect("role requests: a role that needs allowed_tools without them is refused as such, not as unknown", () =>
    Effect.gen(function*() {
      const root = yield* tempRoot
      const { manager } = yield* stack(root, ["m"])
      const refused = yield* Effect.flip(manager.spawn(undefined, { prompt: "x", role: "custom" }))
      assert.strictEqual(refused._tag, "InvalidRoleRequest")
    }).pipe(provideNode))

  it.effect("reject admission: a root's end gives back no permit it never took", () =>
    Effect.gen(function*() {
      const root = yield* tempRoot
      const { manager, roots } = yield* stack(root, ["m"], { subagents: { maxConcurrent: 2 } }, {
        rules: [{
          respond: (c) => JSON.stringify(c.messages).includes("HOLD") ? { hang: true } : { text: report("ok") }
        }]
      })
      const { fiber } = yield* roots.startRoot({ prompt: "the root" })
      yield* Fiber.join(fiber)
      yield* manager.spawn(undefined, { prompt: "HOLD one" })
      yield* manager.spawn(undefined, { prompt: "HOLD two" })
      const refused = yield* Effect.flip(manager.spawn(undefined, { prompt: "HOLD three" }))
      assert.strictEqual(refused.message.split(":")[0], "sub-agent cap reached (max 2, running 2)")
    }).pipe(provideNode))
})
