// The sub-agent contract in cluster mode, on TestRunner: cap (reject and queue), cancel of a
// tree (detached agents excepted), agent_send_input through the durable inbox, agent_wait /
// agent_result timeouts, resume of a finished agent, a failed child as a tool result, and a
// worker refusing a workspace it does not have.
import { assert, describe, it } from "@effect/vitest"
import { ToolRegistry } from "@fibril/core"
import type { ScriptedModel } from "@fibril/testkit"
import { Deferred, Effect, Exit, Option, Schema } from "effect"
import type { Prompt } from "effect/ai"
import * as AgentWorkflow from "../src/AgentWorkflow.ts"
import * as ClusterClient from "../src/ClusterClient.ts"
import type * as ClusterStore from "../src/ClusterStore.ts"
import { type Built, get, provideNode, setup } from "./support.ts"

const toolResults = (messages: ReadonlyArray<Prompt.Message>) =>
  messages.flatMap((m) => m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [p] : []) : [])

/** A tool that blocks until the test opens its gate; `entered` counts the calls that reached it. */
const addGate = (built: Built) =>
  Effect.gen(function*() {
    const gate = yield* Deferred.make<void>()
    const entered = { count: 0 }
    yield* get(built, ToolRegistry.ToolRegistry).register(ToolRegistry.define({
      name: "gate",
      description: "blocks until the test opens it",
      parameters: Schema.Struct({}),
      posture: "read",
      handler: () =>
        Effect.andThen(Effect.sync(() => entered.count++), Effect.as(Deferred.await(gate), "passed the gate"))
    }))
    return { open: Deferred.succeed(gate, undefined), entered }
  })

const until = <E, R>(check: Effect.Effect<boolean, E, R>, what: string) =>
  Effect.gen(function*() {
    for (let i = 0; i < 500; i++) {
      if (yield* check) return
      yield* Effect.sleep(10)
    }
    return yield* Effect.die(`timed out waiting until ${what}`)
  })

const rows = (built: Built) => built.store.list
const byDepth = (all: ReadonlyArray<ClusterStore.AgentRow>, depth: number) => all.filter((r) => r.depth === depth)

const spawnCalls = (n: number, extra: Record<string, unknown> = {}) =>
  Array.from({ length: n }, (_, i) => ({ name: "agent_spawn", args: { prompt: `job ${i}`, ...extra } }))

describe("cluster contract on TestRunner", () => {
  it.live("cap with reject: a spawn over max_concurrent is a CapReached result; permits come back", () =>
    Effect.gen(function*() {
      const script: ScriptedModel.ScriptInput = {
        rules: [
          { match: { depth: 1 }, turns: [{ tool_calls: [{ name: "gate" }] }, { text: "child done" }] },
          {
            match: { depth: 0 },
            turns: [
              { tool_calls: spawnCalls(3) as never },
              { tool_calls: [{ name: "agent_wait", args: { wait_mode: "all" } }] },
              { text: "root done" }
            ]
          }
        ]
      }
      const built = yield* setup(script, { maxConcurrent: 2, admission: "reject" })
      const gate = yield* addGate(built)
      const id = yield* built.provide(ClusterClient.start({ prompt: "fan out", workspace: built.root }))
      yield* until(Effect.sync(() => gate.entered.count === 2), "two children are in the gate")
      assert.strictEqual((yield* built.store.permits).length, 2)
      yield* gate.open
      const outcome = yield* built.provide(ClusterClient.await_(id))
      assert.strictEqual(outcome.text, "root done")
      const results = toolResults(yield* built.store.transcript(id))
      const spawns = results.slice(0, 3)
      assert.deepStrictEqual(spawns.map((p) => p.isFailure).sort(), [false, false, true])
      assert.strictEqual((spawns.find((p) => p.isFailure)!.result as { error: string }).error, "CapReached")
      const children = byDepth(yield* rows(built), 1)
      assert.deepStrictEqual(children.map((c) => c.status), ["completed", "completed"])
      assert.deepStrictEqual(yield* built.store.permits, [])
    }).pipe(Effect.scoped, provideNode))

  it.live("cap with queue: five children, never more than two running at once, all finish; each release wakes a queued one (no polling: the fallback is 60 s)", () =>
    Effect.gen(function*() {
      let store: ClusterStore.ClusterStore["Service"] | undefined
      let maxHeld = 0
      const script: ScriptedModel.ScriptInput = {
        rules: [
          {
            match: { depth: 1 },
            respond: (c) =>
              Effect.gen(function*() {
                const held = (yield* Effect.orDie(store!.permits)).length
                maxHeld = Math.max(maxHeld, held)
                yield* Effect.sleep(15)
                return c.turn === 0 ? { tool_calls: [{ name: "list_dir", args: {} }] } : { text: `${c.prompt} ok` }
              })
          },
          {
            match: { depth: 0 },
            turns: [
              { tool_calls: spawnCalls(5) as never },
              { tool_calls: [{ name: "agent_wait", args: { wait_mode: "all" } }] },
              { text: "root done" }
            ]
          }
        ]
      }
      const built = yield* setup(script, { maxConcurrent: 2, admission: "queue", waitFallbackMs: 60_000 })
      store = built.store
      const outcome = yield* built.provide(ClusterClient.run({ prompt: "fan out", workspace: built.root }))
      assert.strictEqual(outcome.text, "root done")
      const children = byDepth(yield* rows(built), 1)
      assert.strictEqual(children.length, 5)
      assert.isTrue(children.every((c) => c.status === "completed"))
      assert.strictEqual(maxHeld, 2)
      assert.deepStrictEqual(yield* built.store.permits, [])
    }).pipe(Effect.scoped, provideNode))

  it.live("agent_cancel from a client cancels the tree: parent, child and grandchild stop; a detached child runs on", () =>
    Effect.gen(function*() {
      let modelCalls = 0
      let grandchildCalls = 0
      const script: ScriptedModel.ScriptInput = {
        rules: [
          {
            // Busy for good: a step every 20 ms, each with a tool call.
            match: { depth: 2 },
            respond: () =>
              Effect.as(
                Effect.andThen(Effect.sync(() => grandchildCalls++), Effect.sleep(20)),
                { tool_calls: [{ name: "list_dir", args: {} }] }
              )
          },
          {
            match: { depth: 1, prompt: "detached" },
            turns: [{ tool_calls: [{ name: "gate" }] }, { text: "survived" }]
          },
          {
            match: { depth: 1 },
            turns: [
              { tool_calls: [{ name: "agent_spawn", args: { prompt: "grandchild" } }] },
              { tool_calls: [{ name: "agent_wait", args: {} }] },
              { text: "never" }
            ]
          },
          {
            match: { depth: 0 },
            respond: (c) => {
              modelCalls++
              return c.turn === 0
                ? {
                  tool_calls: [
                    { name: "agent_spawn", args: { prompt: "child" } },
                    { name: "agent_spawn", args: { prompt: "detached one", detached: true } }
                  ]
                }
                : c.turn === 1
                ? { tool_calls: [{ name: "agent_wait", args: { wait_mode: "all" } }] }
                : { text: "never" }
            }
          }
        ]
      }
      const built = yield* setup(script, { maxDepth: 2, maxConcurrent: 0 })
      const gate = yield* addGate(built)
      const id = yield* built.provide(ClusterClient.start({ prompt: "tree", workspace: built.root }))
      yield* until(
        Effect.map(rows(built), (all) => byDepth(all, 2).some((r) => r.status === "running")),
        "the grandchild runs"
      )
      yield* until(Effect.sync(() => gate.entered.count === 1), "the detached child is in the gate")
      yield* built.provide(ClusterClient.cancel(id, "stop everything"))
      const grandchildAtCancel = grandchildCalls
      const exit = yield* Effect.exit(built.provide(ClusterClient.await_(id)))
      assert.isTrue(Exit.isFailure(exit))
      const all = yield* rows(built)
      const cancelled = all.filter((r) => !r.detached)
      assert.strictEqual(cancelled.length, 3)
      for (const row of cancelled) {
        assert.strictEqual(row.status, "cancelled", `${row.agentId} at depth ${row.depth}`)
        yield* until(
          Effect.map(
            built.provide(AgentWorkflow.AgentWorkflow.poll(row.executionId)),
            (p) => Option.isSome(p) && p.value._tag === "Complete"
          ),
          `${row.agentId} is complete`
        )
      }
      const callsAtCancel = modelCalls
      // An activity in flight finishes (activities are not interrupted midway): at most the
      // step that was running when the cancel landed, then nothing.
      yield* Effect.sleep(150)
      assert.isAtMost(grandchildCalls - grandchildAtCancel, 1, "the grandchild stopped by its next step boundary")
      const detached = all.find((r) => r.detached)!
      assert.strictEqual(detached.status, "running")
      yield* gate.open
      yield* until(
        Effect.map(built.store.get(detached.agentId), (r) => r?.status === "completed"),
        "the detached child finishes"
      )
      yield* Effect.sleep(50)
      assert.strictEqual(modelCalls, callsAtCancel, "the cancelled root took no further model step")
    }).pipe(Effect.scoped, provideNode))

  it.live("agent_send_input: queued in the durable inbox, read by the agent's next model step, kept in its transcript", () =>
    Effect.gen(function*() {
      const script: ScriptedModel.ScriptInput = {
        rules: [{
          respond: (c) => {
            if (c.turn === 0) return { tool_calls: [{ name: "gate" }] }
            const last = c.messages[c.messages.length - 1]!
            const said = last.role === "user" && last.content[0]?.type === "text" ? last.content[0].text : "(nothing)"
            return { text: `got: ${said}` }
          }
        }]
      }
      const built = yield* setup(script)
      const gate = yield* addGate(built)
      const id = yield* built.provide(ClusterClient.start({ prompt: "wait for me", workspace: built.root }))
      yield* until(Effect.sync(() => gate.entered.count === 1), "the agent is in the gate")
      const sent = yield* built.provide(ClusterClient.sendInput(id, "hello from another process"))
      assert.isTrue(sent.delivered)
      yield* gate.open
      const outcome = yield* built.provide(ClusterClient.await_(id))
      assert.strictEqual(outcome.text, "got: hello from another process")
      const transcript = yield* built.store.transcript(id)
      assert.deepStrictEqual(transcript.map((m) => m.role), ["user", "assistant", "tool", "user", "assistant"])
      assert.deepStrictEqual(yield* built.store.takeInbox(id), [])
      const late = yield* built.provide(ClusterClient.sendInput(id, "too late"))
      assert.deepStrictEqual(late, { delivered: false, status: "completed" })
    }).pipe(Effect.scoped, provideNode))

  it.live("agent_wait and agent_result time out on the durable clock; the child is then cancelled by its parent", () =>
    Effect.gen(function*() {
      const script: ScriptedModel.ScriptInput = {
        rules: [
          {
            match: { depth: 1 },
            respond: () => Effect.as(Effect.sleep(20), { tool_calls: [{ name: "list_dir", args: {} }] })
          },
          {
            match: { depth: 0 },
            respond: (c) => {
              const childId = (c.toolResults[0]?.result as { agent_id?: string } | undefined)?.agent_id ?? ""
              switch (c.turn) {
                case 0:
                  return { tool_calls: [{ name: "agent_spawn", args: { prompt: "slow" } }] }
                case 1:
                  return { tool_calls: [{ name: "agent_wait", args: { ids: [childId], timeout_ms: 60 } }] }
                case 2:
                  return {
                    tool_calls: [{ name: "agent_result", args: { agent_id: childId, block: true, timeout_ms: 40 } }]
                  }
                case 3:
                  return { tool_calls: [{ name: "agent_cancel", args: { agent_id: childId } }] }
                default:
                  return { text: "gave up on it" }
              }
            }
          }
        ]
      }
      const built = yield* setup(script)
      const outcome = yield* built.provide(ClusterClient.run({ prompt: "impatient", workspace: built.root }))
      assert.strictEqual(outcome.text, "gave up on it")
      const results = toolResults(yield* built.store.transcript(outcome.agentId))
      const childId = (results[0]!.result as { agent_id: string }).agent_id
      assert.deepStrictEqual(results[1]!.result, { timed_out: true, completed: [], still_running: [childId] })
      // core's agent_result: the agent's state when the wait gave up (no `timed_out` field).
      const blocked = results[2]!.result as { status: string; agent_id: string }
      assert.strictEqual(blocked.agent_id, childId)
      assert.strictEqual(blocked.status, "running")
      assert.strictEqual((results[3]!.result as { status: string }).status, "cancelled")
      assert.strictEqual((yield* built.store.get(childId))!.status, "cancelled")
    }).pipe(Effect.scoped, provideNode))

  it.live("agent_wait sleeps durably and a child's end wakes it: no look until then (the fallback is 60 s)", () =>
    Effect.gen(function*() {
      const built = yield* setup({
        rules: [
          { match: { depth: 1 }, turns: [{ tool_calls: [{ name: "gate" }] }, { text: "child done" }] },
          {
            match: { depth: 0 },
            turns: [
              { tool_calls: spawnCalls(2) as never },
              { tool_calls: [{ name: "agent_wait", args: { wait_mode: "all" } }] },
              { text: "root done" }
            ]
          }
        ]
      }, { maxConcurrent: 0, waitFallbackMs: 60_000 })
      const gate = yield* addGate(built)
      const id = yield* built.provide(ClusterClient.start({ prompt: "fan out", workspace: built.root }))
      yield* until(Effect.sync(() => gate.entered.count === 2), "both children are in the gate")
      const opened = Date.now()
      yield* gate.open
      const outcome = yield* built.provide(ClusterClient.await_(id))
      assert.strictEqual(outcome.text, "root done")
      // Woken by the children's ends, not by the 60 s fallback.
      assert.isBelow(Date.now() - opened, 10_000)
      const results = toolResults(yield* built.store.transcript(id))
      const waited = results[2]!.result as { timed_out: boolean; completed: ReadonlyArray<{ status: string }> }
      assert.isFalse(waited.timed_out)
      assert.deepStrictEqual(waited.completed.map((c) => c.status), ["completed", "completed"])
    }).pipe(Effect.scoped, provideNode))

  it.live("resume of a finished agent starts a new run from its transcript", () =>
    Effect.gen(function*() {
      const built = yield* setup({ rules: [{ turns: [{ text: "first answer" }, { text: "second answer" }] }] })
      const first = yield* built.provide(ClusterClient.run({ prompt: "one", workspace: built.root }))
      assert.strictEqual(first.text, "first answer")
      const running = yield* built.provide(ClusterClient.sendInput(first.agentId, "x"))
      assert.isFalse(running.delivered)
      const run = yield* built.provide(ClusterClient.resume(first.agentId, "two"))
      assert.strictEqual(run, 1)
      const second = yield* built.provide(ClusterClient.await_(first.agentId))
      assert.strictEqual(second.text, "second answer")
      const transcript = yield* built.store.transcript(first.agentId)
      assert.deepStrictEqual(transcript.map((m) => m.role), ["user", "assistant", "user", "assistant"])
      const row = yield* built.store.get(first.agentId)
      assert.strictEqual(row!.run, 1)
      assert.strictEqual(row!.status, "completed")
      const again = yield* Effect.flip(built.provide(ClusterClient.resume("ag_nope", "x")))
      assert.strictEqual(again._tag, "NotResumable")
    }).pipe(Effect.scoped, provideNode))

  it.live("a failed child is a task tool result; the parent goes on", () =>
    Effect.gen(function*() {
      const built = yield* setup({
        rules: [
          { match: { depth: 1 }, turns: [{ error: { kind: "fatal", message: "provider says no" } }] },
          {
            match: { depth: 0 },
            turns: [{ tool_calls: [{ name: "task", args: { description: "doomed", prompt: "doomed" } }] }, {
              text: "handled it"
            }]
          }
        ]
      })
      const outcome = yield* built.provide(ClusterClient.run({ prompt: "try", workspace: built.root }))
      assert.strictEqual(outcome.text, "handled it")
      const [result] = toolResults(yield* built.store.transcript(outcome.agentId))
      // As embedded (core's taskResult): a failed child is a `failed` result, not a tool error.
      assert.isFalse(result!.isFailure)
      const task = result!.result as { status: string; summary: string; agent_id: string }
      assert.strictEqual(task.status, "failed")
      assert.include(task.summary, "provider says no")
      assert.strictEqual(byDepth(yield* rows(built), 1)[0]!.status, "failed")
    }).pipe(Effect.scoped, provideNode))

  it.live("a sub-agent over its token budget ([subagents] max_tokens) fails; its parent reads that as the task's result", () =>
    Effect.gen(function*() {
      const built = yield* setup({
        rules: [
          {
            match: { depth: 1 },
            turns: [{ tool_calls: [{ name: "list_dir", args: {} }], usage: { input: 400, output: 200 } }, {
              text: "never"
            }]
          },
          {
            match: { depth: 0 },
            turns: [
              { tool_calls: [{ name: "task", args: { description: "expensive", prompt: "expensive" } }] },
              { text: "over budget noted" }
            ]
          }
        ]
      }, { childMaxTokens: 500 })
      const outcome = yield* built.provide(ClusterClient.run({ prompt: "try", workspace: built.root }))
      assert.strictEqual(outcome.text, "over budget noted")
      const [result] = toolResults(yield* built.store.transcript(outcome.agentId))
      assert.isFalse(result!.isFailure)
      const task = result!.result as { status: string; summary: string; tokens: { input: number; output: number } }
      assert.strictEqual(task.status, "failed")
      assert.include(task.summary, "max_tokens=500")
      assert.deepInclude(task.tokens, { input: 400, output: 200 })
    }).pipe(Effect.scoped, provideNode))

  it.live("a worker refuses an agent for a workspace it does not have, saying why", () =>
    Effect.gen(function*() {
      const built = yield* setup({ rules: [{ turns: [{ text: "never" }] }] })
      const error = yield* Effect.flip(
        built.provide(ClusterClient.run({ prompt: "x", workspace: "/srv/other-repo" }))
      )
      assert.strictEqual(error._tag, "AgentFailed")
      assert.include(error.message, "refused by this worker")
      assert.include(error.message, "/srv/other-repo")
    }).pipe(Effect.scoped, provideNode))

  it.live("a spawn's allowed_tools narrows the child as embedded; a tool that does not exist is refused, naming it", () =>
    Effect.gen(function*() {
      const seen: Array<ReadonlyArray<string>> = []
      const built = yield* setup({
        rules: [
          {
            match: { depth: 1 },
            respond: (c) => {
              seen.push(c.tools)
              return c.turn === 0 ? { tool_calls: [{ name: "list_dir", args: {} }] } : { text: "child done" }
            }
          },
          {
            match: { depth: 0 },
            turns: [
              {
                tool_calls: [
                  { name: "task", args: { description: "look", prompt: "look", allowed_tools: ["read_file", "grep"] } },
                  { name: "task", args: { description: "look", prompt: "look", allowed_tools: ["read_fil"] } }
                ]
              },
              { text: "root done" }
            ]
          }
        ]
      })
      const outcome = yield* built.provide(ClusterClient.run({ prompt: "go", workspace: built.root }))
      assert.strictEqual(outcome.text, "root done")
      assert.deepStrictEqual(seen[0]?.toSorted(), ["grep", "read_file"])
      const [narrowed, refused] = toolResults(yield* built.store.transcript(outcome.agentId))
      assert.isFalse(narrowed!.isFailure)
      assert.isTrue(refused!.isFailure)
      assert.deepInclude(refused!.result as object, { error: "InvalidRoleRequest" })
      assert.include((refused!.result as { message: string }).message, "\"read_fil\"")
      const [child] = byDepth(yield* rows(built), 1)
      const childResults = toolResults(yield* built.store.transcript(child!.agentId))
      assert.deepStrictEqual(childResults.map((p) => [p.name, p.isFailure]), [["list_dir", true]])
    }).pipe(Effect.scoped, provideNode))
})
