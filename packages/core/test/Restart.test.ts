// The manager across process ends: a SIGKILLed manager leaves a readable state, and a new
// one resumes an interrupted agent from its persisted transcript.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Effect, Fiber, FileSystem, Path, Schema, Stream } from "effect"
import { Prompt } from "effect/ai"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { DatabaseSync } from "node:sqlite"
import { fileURLToPath } from "node:url"
import { Session } from "../src/Session.ts"
import { SubAgentManager } from "../src/SubAgentManager.ts"
import { SubAgentStore } from "../src/SubAgentStore.ts"
import { provideNode, report, setup } from "./support.ts"

const runner = fileURLToPath(new URL("./fixtures/manager-runner.ts", import.meta.url))

describe("restart", () => {
  it.live("resume continues an agent interrupted by a restart from its persisted transcript", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      const script: ScriptedModel.ScriptInput = {
        rules: [{
          respond: (c) =>
            JSON.stringify(c.messages.at(-1)).includes("Continue where you left off")
              ? { text: report(`continued after ${c.toolResults.length} tool results`) }
              : c.turn < 2
              ? { tool_calls: [{ name: "list_dir", args: {} }] }
              : { hang: true }
        }]
      }
      // First "process": the agent does two steps, then hangs; the process ends.
      const id = yield* Effect.scoped(Effect.gen(function*() {
        const { get } = yield* setup(script, {}, { root, store: "file" })
        const manager = get(SubAgentManager)
        const session = get(Session)
        const agent = yield* manager.spawn(undefined, { prompt: "long job" })
        // Real file IO runs underneath: poll on the real clock until the second tool call is done.
        for (let i = 0; i < 400 && (yield* session.transcript(agent.agent_id)).length < 6; i++) {
          yield* Effect.sleep("5 millis")
        }
        return agent.agent_id
      }))
      // Second "process": the record is interrupted; resume reads the transcript back.
      const { get } = yield* setup(script, {}, { root, store: "file" })
      const manager = get(SubAgentManager)
      const before = yield* manager.result(id, { block: false })
      assert.strictEqual(before.status, "interrupted")
      assert.isTrue(before.from_prior_session)
      yield* manager.resume(undefined, id)
      const after = yield* manager.result(id, { block: true })
      assert.strictEqual(after.status, "completed")
      assert.strictEqual(after.outcome?.summary, "continued after 2 tool results")
      assert.isFalse(after.from_prior_session)
      const transcript = yield* get(Session).transcript(id)
      assert.deepStrictEqual(transcript.map((m) => m.role).slice(0, 6), [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool"
      ])
    }).pipe(provideNode))

  it.live("a typed agent resumed after a restart answers in its output schema again", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      const schema = {
        type: "object",
        properties: { files: { type: "array", items: { type: "string" } } },
        required: ["files"],
        additionalProperties: false
      }
      const script: ScriptedModel.ScriptInput = {
        rules: [{
          respond: (c) => {
            const resumed = JSON.stringify(c.messages).includes("look again")
            return c.tools.includes("final_answer")
              ? { tool_calls: [{ name: "final_answer", args: { files: [resumed ? "b.ts" : "a.ts"] } }] }
              : { text: "no final_answer tool offered" }
          }
        }]
      }
      const id = yield* Effect.scoped(Effect.gen(function*() {
        const { get } = yield* setup(script, {}, { root, store: "file" })
        const manager = get(SubAgentManager)
        const agent = yield* manager.spawn(undefined, { prompt: "list files", outputSchema: schema })
        const first = yield* manager.result(agent.agent_id, { block: true })
        assert.deepStrictEqual(first.outcome?.output, { files: ["a.ts"] })
        return agent.agent_id
      }))
      // Another process: the session is gone, rebuilt from the transcript, with its schema.
      const { get } = yield* setup(script, {}, { root, store: "file" })
      const manager = get(SubAgentManager)
      yield* manager.resume(undefined, id, "look again")
      const after = yield* manager.result(id, { block: true })
      assert.strictEqual(after.status, "completed")
      assert.deepStrictEqual(after.outcome?.output, { files: ["b.ts"] })
    }).pipe(provideNode))

  it.live(
    "SIGKILL of a process running the manager with the file store never leaves an unreadable state",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
        const runs = 8
        for (let run = 0; run < runs; run++) {
          const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
          yield* Effect.scoped(Effect.gen(function*() {
            const handle = yield* spawner.spawn(ChildProcess.make(process.execPath, [runner, root], { cwd: root }))
            const ready = yield* Effect.forkChild(
              handle.stdout.pipe(
                Stream.decodeText(),
                Stream.takeUntil((text) => text.includes("ready")),
                Stream.runDrain
              )
            )
            yield* Fiber.join(ready).pipe(Effect.timeout("20 seconds"))
            yield* Effect.sleep(`${20 + Math.floor(Math.random() * 180)} millis`)
            yield* handle.kill({ killSignal: "SIGKILL" })
          }))
          // Read the database as the killed process left it, then through a new manager.
          const db = new DatabaseSync(path.join(root, ".fibril", "state", "fibril.db"))
          const stored = Number(db.prepare("SELECT COUNT(*) AS n FROM fibril_agents").get()?.["n"])
          db.close()
          assert.isAbove(stored, 0)
          const { get } = yield* setup({ rules: [] }, {}, { root, store: "file" })
          const store = get(SubAgentStore)
          assert.deepStrictEqual(store.warnings, [], `run ${run}: ${store.warnings.join("; ")}`)
          // The killed owner's pid is dead on this host: its live agents read interrupted at once.
          const records = yield* get(SubAgentManager).list({ includeArchived: true })
          assert.strictEqual(records.length, stored)
          for (const record of records) {
            assert.include(["completed", "failed", "cancelled", "interrupted"], record.status)
            const transcript = yield* store.readTranscript(record.transcript_handle)
            yield* Schema.decodeUnknownEffect(Schema.Array(Prompt.Message))(transcript)
          }
        }
      }).pipe(Effect.provide(NodeServices.layer)),
    60_000
  )
})
