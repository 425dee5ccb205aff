// A cancel interrupts the step in flight, on TestRunner: the workflow's own interrupt reaches an
// agent only at its next step boundary, so the worker running a model or tool step watches the
// agent's cancellation and stops the call (a hung model call, a blocked tool, a `shell` command,
// whose processes are killed).
import { assert, describe, it } from "@effect/vitest"
import { ToolRegistry } from "@fibril/core"
import type { ScriptedModel } from "@fibril/testkit"
import { Deferred, Effect, FileSystem, Schema } from "effect"
import type { Prompt } from "effect/ai"
import * as nodePath from "node:path"
import type * as AgentWorkflow from "../src/AgentWorkflow.ts"
import * as ClusterClient from "../src/ClusterClient.ts"
import type * as ClusterStore from "../src/ClusterStore.ts"
import { get, provideNode, setup } from "./support.ts"

const toolResults = (messages: ReadonlyArray<Prompt.Message>) =>
  messages.flatMap((m) => m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [p] : []) : [])

/** Resolves when a step named `name` starts executing. */
const stepStarted = (name: string) =>
  Effect.map(Deferred.make<void>(), (started) => {
    const onStep: AgentWorkflow.Options["onStep"] = (event, _agentId, _run, step) =>
      event === "start" && step === name ? Deferred.succeed(started, undefined).pipe(Effect.asVoid) : Effect.void
    return { started: Deferred.await(started), onStep }
  })

const options = { cancelCheckMs: 50 }

describe("a cancel interrupts the step in flight", () => {
  /** A model whose every call hangs until interrupted; `entered` when a call began, `interrupted` when it was stopped. */
  const hangingModel = Effect.gen(function*() {
    const interrupted = yield* Deferred.make<number>()
    const entered = yield* Deferred.make<void>()
    const script: ScriptedModel.ScriptInput = {
      rules: [{
        respond: () =>
          Effect.andThen(
            Deferred.succeed(entered, undefined),
            Effect.never.pipe(
              Effect.onInterrupt(() =>
                Effect.andThen(Effect.sync(() => Date.now()), (t) => Deferred.succeed(interrupted, t))
              )
            )
          )
      }]
    }
    return { script, entered: Deferred.await(entered), interrupted: Deferred.await(interrupted) }
  })

  it.live("a model call in flight is interrupted within the check interval, not left to finish", () =>
    Effect.gen(function*() {
      const model = yield* hangingModel
      const built = yield* setup(model.script, options)
      const id = yield* built.provide(ClusterClient.start({ prompt: "hang", workspace: built.root }))
      yield* model.entered
      const cancelledAt = Date.now()
      yield* built.provide(ClusterClient.cancel(id, "stop now"))
      const at = yield* model.interrupted.pipe(Effect.timeout("5 seconds"))
      assert.isBelow(at - cancelledAt, 2000)
      const row = yield* built.store.get(id)
      assert.strictEqual(row?.status, "cancelled")
      assert.strictEqual(row?.reason, "stop now")
    }).pipe(Effect.scoped, provideNode))

  it.live("cancelled as its first step begins (before the run is marked running): it stays cancelled, the call is stopped", () =>
    Effect.gen(function*() {
      const model = yield* hangingModel
      const step = yield* stepStarted("model/0")
      const built = yield* setup(model.script, { ...options, onStep: step.onStep })
      const id = yield* built.provide(ClusterClient.start({ prompt: "hang", workspace: built.root }))
      yield* step.started
      yield* built.provide(ClusterClient.cancel(id, "stop now"))
      yield* model.interrupted.pipe(Effect.timeout("5 seconds"))
      assert.strictEqual((yield* built.store.get(id))?.status, "cancelled")
    }).pipe(Effect.scoped, provideNode))

  it.live("a blocked tool call is interrupted; its result says so; the tree is cancelled", () =>
    Effect.gen(function*() {
      const interrupted = yield* Deferred.make<void>()
      const step = yield* stepStarted("tool/0/0")
      const built = yield* setup({
        rules: [{ turns: [{ tool_calls: [{ name: "block", args: {} }] }, { text: "never" }] }]
      }, { ...options, onStep: step.onStep })
      yield* get(built, ToolRegistry.ToolRegistry).register(ToolRegistry.define({
        name: "block",
        description: "blocks until interrupted",
        parameters: Schema.Struct({}),
        posture: "read",
        handler: () => Effect.never.pipe(Effect.onInterrupt(() => Deferred.succeed(interrupted, undefined)))
      }))
      const id = yield* built.provide(ClusterClient.start({ prompt: "block", workspace: built.root }))
      yield* step.started
      yield* built.provide(ClusterClient.cancel(id, "stop now"))
      yield* Deferred.await(interrupted).pipe(Effect.timeout("5 seconds"))
      // The step ends with its result written (in its transaction).
      let result: ReturnType<typeof toolResults>[number] | undefined
      for (let i = 0; i < 200 && result === undefined; i++) {
        result = toolResults(yield* built.store.transcript(id))[0]
        if (result === undefined) yield* Effect.sleep(10)
      }
      assert.strictEqual(result?.isFailure, true)
      assert.deepInclude(result?.result as object, { error: "Cancelled" })
      assert.strictEqual((yield* built.store.get(id))?.status, "cancelled")
    }).pipe(Effect.scoped, provideNode))

  it.live(
    "a shell command in flight is stopped: its processes are killed, the command never completes",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const step = yield* stepStarted("tool/0/0")
        const built = yield* setup({
          rules: [{
            turns: [{
              tool_calls: [{ name: "shell", args: { command: "echo started > a.txt; sleep 3; echo late > b.txt" } }]
            }, {
              text: "never"
            }]
          }]
        }, { ...options, onStep: step.onStep })
        const id = yield* built.provide(ClusterClient.start({ prompt: "run", workspace: built.root }))
        yield* step.started
        const a = nodePath.join(built.root, "a.txt")
        for (let i = 0; i < 300 && !(yield* fs.exists(a)); i++) yield* Effect.sleep(10)
        const cancelledAt = Date.now()
        yield* built.provide(ClusterClient.cancel(id, "stop now"))
        let result: ReturnType<typeof toolResults>[number] | undefined
        for (let i = 0; i < 300 && result === undefined; i++) {
          result = toolResults(yield* built.store.transcript(id))[0]
          if (result === undefined) yield* Effect.sleep(10)
        }
        assert.isBelow(Date.now() - cancelledAt, 2500, "the step ended before the command's 3 s sleep")
        assert.deepInclude(result?.result as object, { error: "Cancelled" })
        // Past the command's own end: it was killed, so it never wrote b.txt.
        yield* Effect.sleep(3500 - (Date.now() - cancelledAt))
        assert.isFalse(yield* fs.exists(nodePath.join(built.root, "b.txt")))
      }).pipe(Effect.scoped, provideNode),
    20_000
  )

  it.live("steps in flight on a worker are watched with one look per interval: a cancelled tree's five blocked calls all stop", () =>
    Effect.gen(function*() {
      const looks: Array<number> = []
      const counting = (store: ClusterStore.ClusterStore["Service"]): ClusterStore.ClusterStore["Service"] => ({
        ...store,
        cancelledAmong: (ids) => Effect.andThen(Effect.sync(() => looks.push(ids.length)), store.cancelledAmong(ids))
      })
      const built = yield* setup(
        {
          rules: [
            { match: { depth: 1 }, turns: [{ tool_calls: [{ name: "block", args: {} }] }, { text: "never" }] },
            {
              match: { depth: 0 },
              turns: [
                {
                  tool_calls: [1, 2, 3, 4, 5].map((i) => ({
                    name: "agent_spawn",
                    args: { prompt: `child ${i}` }
                  })) as never
                },
                { tool_calls: [{ name: "agent_wait", args: { wait_mode: "all" } }] },
                { text: "never" }
              ]
            }
          ]
        },
        options,
        {},
        undefined,
        counting
      )
      const entered = { count: 0 }
      const stopped = { count: 0 }
      yield* get(built, ToolRegistry.ToolRegistry).register(ToolRegistry.define({
        name: "block",
        description: "blocks until interrupted",
        parameters: Schema.Struct({}),
        posture: "read",
        handler: () =>
          Effect.andThen(
            Effect.sync(() => entered.count++),
            Effect.never.pipe(Effect.onInterrupt(() => Effect.sync(() => stopped.count++)))
          )
      }))
      const id = yield* built.provide(ClusterClient.start({ prompt: "tree", workspace: built.root }))
      for (let i = 0; i < 500 && entered.count < 5; i++) yield* Effect.sleep(10)
      assert.strictEqual(entered.count, 5)
      looks.length = 0
      yield* Effect.sleep(500)
      // Five steps in flight, one look per 50 ms naming all five (not one look per step).
      assert.isAtMost(looks.length, 12)
      assert.isAtLeast(looks.length, 5)
      assert.isTrue(looks.every((n) => n === 5), JSON.stringify(looks))
      yield* built.provide(ClusterClient.cancel(id, "stop the tree"))
      for (let i = 0; i < 500 && stopped.count < 5; i++) yield* Effect.sleep(10)
      assert.strictEqual(stopped.count, 5)
      const children = (yield* built.store.list).filter((r) => r.depth === 1)
      assert.deepStrictEqual(children.map((r) => r.status), [
        "cancelled",
        "cancelled",
        "cancelled",
        "cancelled",
        "cancelled"
      ])
      // Nothing in flight: no more looks.
      yield* Effect.sleep(200)
      looks.length = 0
      yield* Effect.sleep(300)
      assert.deepStrictEqual(looks, [])
    }).pipe(Effect.scoped, provideNode))
})
