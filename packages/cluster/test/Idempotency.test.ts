// Tool idempotency in cluster mode, on TestRunner: a step is at-least-once, so a tool step
// interrupted after its tool ran and before its result was journaled runs again. A tool that is
// not idempotent (shell, write_file, ...) committed a marker before it ran and is not run twice:
// the model reads an `Interrupted` result; an idempotent one simply runs again.
//
// The interruption is injected where a crash would hit: the step's transcript write (the last
// thing before its result commits) is interrupted once, after the tool ran; the step's
// transaction rolls back and the workflow runs the step again in the same process, as a
// restarted worker would.
import { assert, describe, it } from "@effect/vitest"
import { ToolRegistry } from "@fibril/core"
import type { ScriptedModel } from "@fibril/testkit"
import { Effect, FileSystem, Option, Schema } from "effect"
import type { Prompt } from "effect/ai"
import * as nodePath from "node:path"
import * as AgentWorkflow from "../src/AgentWorkflow.ts"
import * as ClusterClient from "../src/ClusterClient.ts"
import type * as ClusterStore from "../src/ClusterStore.ts"
import { type Built, get, provideNode, setup } from "./support.ts"

const toolResults = (messages: ReadonlyArray<Prompt.Message>) =>
  messages.flatMap((m) => m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [p] : []) : [])

/** The store, except that the first tool step's transcript write is interrupted (a crash there). */
const crashOnce = (store: ClusterStore.ClusterStore["Service"]): ClusterStore.ClusterStore["Service"] => {
  let crashed = false
  return {
    ...store,
    recordStep: (agentId, messages, tokens, finish, taken) => {
      if (!crashed && messages.some((m) => m.message.role === "tool")) {
        crashed = true
        return Effect.interrupt
      }
      return store.recordStep(agentId, messages, tokens, finish, taken)
    }
  }
}

/** Counts the executions (not replays) of each step by name. */
const stepCounter = () => {
  const starts = new Map<string, number>()
  const onStep: AgentWorkflow.Options["onStep"] = (event, _agentId, _run, name) =>
    Effect.sync(() => {
      if (event === "start") starts.set(name, (starts.get(name) ?? 0) + 1)
    })
  return { starts, onStep }
}

const oneCall = (name: string, args: Record<string, unknown>): ScriptedModel.ScriptInput => ({
  rules: [{ match: { depth: 0 }, turns: [{ tool_calls: [{ name, args }] }, { text: "done" }] }]
})

const lines = (built: Built, file: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const text = yield* fs.readFileString(nodePath.join(built.root, file))
    return text.split("\n").filter((l) => l !== "")
  })

/** A test tool that appends a line to `file` in the workspace per call. */
const appender = (built: Built, name: string, posture: ToolRegistry.Posture, idempotent?: boolean) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    return ToolRegistry.define({
      name,
      description: "appends a line to a file",
      parameters: Schema.Struct({ file: Schema.String }),
      posture,
      ...(idempotent === undefined ? {} : { idempotent }),
      handler: ({ file }) =>
        Effect.as(
          Effect.orDie(fs.writeFileString(nodePath.join(built.root, file), `${name}\n`, { flag: "a" })),
          `${name} appended`
        )
    })
  })

describe("tool idempotency in cluster mode", () => {
  it.live(
    "a shell call whose step is interrupted after it ran is not run again: the model reads Interrupted; the file has one line",
    () =>
      Effect.gen(function*() {
        const counter = stepCounter()
        const built = yield* setup(
          oneCall("shell", { command: "echo ran >> log.txt" }),
          { onStep: counter.onStep },
          {},
          undefined,
          crashOnce
        )
        const outcome = yield* built.provide(ClusterClient.run({ prompt: "go", workspace: built.root }))
        assert.strictEqual(outcome.text, "done")
        // The tool step ran twice (the interruption made the workflow run it again)...
        assert.strictEqual(counter.starts.get("tool/0/0"), 2)
        // ...and the command once.
        assert.deepStrictEqual(yield* lines(built, "log.txt"), ["ran"])
        const [result] = toolResults(yield* built.store.transcript(outcome.agentId))
        assert.strictEqual(result?.isFailure, true)
        const failure = result?.result as { error: string; message: string }
        assert.strictEqual(failure.error, "Interrupted")
        assert.match(
          failure.message,
          /not run again because shell is not idempotent: it may have run in part or in full/
        )
        // The marker stays committed: the call's start is known.
        assert.isFalse(yield* built.store.startToolCall(outcome.agentId, { run: 0, step: 0, slot: 1000 }))
      }).pipe(Effect.scoped, provideNode)
  )

  it.live("write_file is not idempotent either: interrupted after it wrote, it is not written again", () =>
    Effect.gen(function*() {
      const counter = stepCounter()
      const built = yield* setup(
        oneCall("write_file", { path: "out.txt", content: "hello\n" }),
        { onStep: counter.onStep },
        {},
        undefined,
        crashOnce
      )
      const outcome = yield* built.provide(ClusterClient.run({ prompt: "go", workspace: built.root }))
      assert.strictEqual(counter.starts.get("tool/0/0"), 2)
      assert.deepStrictEqual(yield* lines(built, "out.txt"), ["hello"])
      const [result] = toolResults(yield* built.store.transcript(outcome.agentId))
      assert.strictEqual((result?.result as { error: string }).error, "Interrupted")
    }).pipe(Effect.scoped, provideNode))

  it.live("an idempotent tool simply runs again: its real result, the side effect twice", () =>
    Effect.gen(function*() {
      const counter = stepCounter()
      const built = yield* setup(
        oneCall("probe", { file: "probe.txt" }),
        { onStep: counter.onStep },
        {},
        undefined,
        crashOnce
      )
      // A read-posture tool is idempotent by default; it appends here only so the test can count.
      yield* get(built, ToolRegistry.ToolRegistry).register(yield* appender(built, "probe", "read"))
      const outcome = yield* built.provide(ClusterClient.run({ prompt: "go", workspace: built.root }))
      assert.strictEqual(counter.starts.get("tool/0/0"), 2)
      assert.deepStrictEqual(yield* lines(built, "probe.txt"), ["probe", "probe"])
      const [result] = toolResults(yield* built.store.transcript(outcome.agentId))
      assert.strictEqual(result?.isFailure, false)
      assert.strictEqual(result?.result, "probe appended")
    }).pipe(Effect.scoped, provideNode))

  it.live("a tool may declare itself idempotent whatever its posture; one declared not, even a read, runs once", () =>
    Effect.gen(function*() {
      const script: ScriptedModel.ScriptInput = {
        rules: [{
          match: { depth: 0 },
          turns: [
            { tool_calls: [{ name: "put", args: { file: "put.txt" } }] },
            { tool_calls: [{ name: "peek", args: { file: "peek.txt" } }] },
            { text: "done" }
          ]
        }]
      }
      // Both tool steps are interrupted once after their tool ran.
      const crashEach = (store: ClusterStore.ClusterStore["Service"]): ClusterStore.ClusterStore["Service"] => {
        const crashed = new Set<number>()
        return {
          ...store,
          recordStep: (agentId, messages, tokens, finish, taken) => {
            const tool = messages.find((m) => m.message.role === "tool")
            if (tool !== undefined && !crashed.has(tool.at.step)) {
              crashed.add(tool.at.step)
              return Effect.interrupt
            }
            return store.recordStep(agentId, messages, tokens, finish, taken)
          }
        }
      }
      const built = yield* setup(script, {}, {}, undefined, crashEach)
      const registry = get(built, ToolRegistry.ToolRegistry)
      yield* registry.register(yield* appender(built, "put", "write", true))
      yield* registry.register(yield* appender(built, "peek", "read", false))
      const outcome = yield* built.provide(ClusterClient.run({ prompt: "go", workspace: built.root }))
      assert.strictEqual(outcome.text, "done")
      assert.deepStrictEqual(yield* lines(built, "put.txt"), ["put", "put"])
      assert.deepStrictEqual(yield* lines(built, "peek.txt"), ["peek"])
      const results = toolResults(yield* built.store.transcript(outcome.agentId))
      assert.deepStrictEqual(results.map((r) => r.isFailure), [false, true])
    }).pipe(Effect.scoped, provideNode))

  it.live("a step interrupted at every attempt fails its run after 5, saying so; the shell ran once", () =>
    Effect.gen(function*() {
      const counter = stepCounter()
      const always = (store: ClusterStore.ClusterStore["Service"]): ClusterStore.ClusterStore["Service"] => ({
        ...store,
        recordStep: (agentId, messages, tokens, finish, taken) =>
          messages.some((m) => m.message.role === "tool")
            ? Effect.interrupt
            : store.recordStep(agentId, messages, tokens, finish, taken)
      })
      const built = yield* setup(
        oneCall("shell", { command: "echo ran >> log.txt" }),
        { onStep: counter.onStep },
        {},
        undefined,
        always
      )
      const failed = yield* Effect.flip(built.provide(ClusterClient.run({ prompt: "go", workspace: built.root })))
      assert.match(String(failed.message), /step tool\/0\/0 of \S+ was interrupted 5 times/)
      assert.strictEqual(counter.starts.get("tool/0/0"), 5)
      assert.deepStrictEqual(yield* lines(built, "log.txt"), ["ran"])
    }).pipe(Effect.scoped, provideNode))

  it.live("without an interruption a non-idempotent tool runs once, with its result", () =>
    Effect.gen(function*() {
      const counter = stepCounter()
      const built = yield* setup(oneCall("shell", { command: "echo ran >> log.txt" }), { onStep: counter.onStep })
      const outcome = yield* built.provide(ClusterClient.run({ prompt: "go", workspace: built.root }))
      assert.strictEqual(counter.starts.get("tool/0/0"), 1)
      assert.deepStrictEqual(yield* lines(built, "log.txt"), ["ran"])
      const [result] = toolResults(yield* built.store.transcript(outcome.agentId))
      assert.strictEqual(result?.isFailure, false)
    }).pipe(Effect.scoped, provideNode))

  it.live("the built-in tools' declarations: reads and todowrite are idempotent; shell and the writes are not", () =>
    Effect.gen(function*() {
      const built = yield* setup(oneCall("list_dir", {}))
      const registry = get(built, ToolRegistry.ToolRegistry)
      const idempotent = (name: string) => Option.getOrThrow(registry.get(name)).idempotent
      for (const name of ["read_file", "grep", "glob", "list_dir", "todoread", "todowrite"]) {
        assert.isTrue(idempotent(name), name)
      }
      for (const name of ["shell", "write_file", "edit_file", "remember"]) assert.isFalse(idempotent(name), name)
    }).pipe(Effect.scoped, provideNode))
})
