// Step-exact transcripts across kill -9: a real process runs an agent that reads a file, its
// tool result reaches the SQLite transcript, then the process is SIGKILLed. A new manager on
// the same workspace finds the agent interrupted (its owner's pid is dead) and resumes it: the
// model gets the file's content back, and an "interrupted" note only for a call that really
// had not finished when the kill landed.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Effect, Fiber, FileSystem, Option, Path, Stream } from "effect"
import type { Prompt } from "effect/ai"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { readFileSync } from "node:fs"
import { DatabaseSync } from "node:sqlite"
import { fileURLToPath } from "node:url"
import * as SqliteSubAgentStore from "../src/SqliteSubAgentStore.ts"
import { SubAgentManager } from "../src/SubAgentManager.ts"
import { notesFile, readCallId, sleepCallId, sleeperPidFile } from "./fixtures/step-runner.ts"
import { alive, report, setup } from "./support.ts"

const runner = fileURLToPath(new URL("./fixtures/step-runner.ts", import.meta.url))

const notes = "the launch code is 4217-ALPHA\nsecond line of the notes\n"
const interruptedNote = "interrupted before this call finished"

interface Part {
  readonly type: string
  readonly id?: string
  readonly name?: string
  readonly isFailure?: boolean
  readonly result?: unknown
}
interface StoredMessage {
  readonly role: string
  readonly content: string | ReadonlyArray<Part>
}

const partsOf = (message: StoredMessage): ReadonlyArray<Part> =>
  typeof message.content === "string" ? [] : message.content

/** The agent's transcript as the database holds it now (read with a connection of its own). */
const storedTranscript = (file: string, handle: string): ReadonlyArray<StoredMessage> => {
  const db = new DatabaseSync(file)
  try {
    return (db.prepare("SELECT message FROM fibril_transcripts WHERE handle = ? ORDER BY id").all(handle) as Array<
      Record<string, unknown>
    >).map((row) => JSON.parse(String(row["message"])) as StoredMessage)
  } catch {
    return [] // not created yet
  } finally {
    db.close()
  }
}

const toolResults = (messages: ReadonlyArray<StoredMessage | Prompt.Message>) =>
  messages.flatMap((message) =>
    message.role === "tool" ? partsOf(message as StoredMessage).filter((part) => part.type === "tool-result") : []
  )

/**
 * Runs the fixture on a fresh workspace until the read_file result is durable (and, in
 * "parallel" mode, the sleeping shell call has started), then SIGKILLs it.
 */
const runAndKill = (mode: "single" | "parallel") =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
    const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
    yield* fs.writeFileString(path.join(root, notesFile), notes)
    const file = path.join(root, ".fibril", "state", SqliteSubAgentStore.databaseFileName)
    const sleeperPid = path.join(root, sleeperPidFile)

    const killed = yield* Effect.scoped(Effect.gen(function*() {
      const handle = yield* spawner.spawn(ChildProcess.make(process.execPath, [runner, root, mode], { cwd: root }))
      const started = yield* Effect.forkChild(
        handle.stdout.pipe(
          Stream.decodeText(),
          Stream.splitLines,
          Stream.filter((line) => line.startsWith("{")),
          Stream.runHead
        )
      )
      const line = yield* Fiber.join(started).pipe(Effect.timeout("30 seconds"))
      const { agent, pid } = JSON.parse(Option.getOrThrow(line)) as { agent: string; pid: number }
      const handleName = `${agent}.jsonl`
      const sleeper = () => {
        try {
          return Number.parseInt(readFileSync(sleeperPid, "utf8"), 10)
        } catch {
          return Number.NaN
        }
      }
      // Real IO underneath: poll on the real clock until the kill would land where we want it.
      const ready = () =>
        toolResults(storedTranscript(file, handleName)).some((part) => part.id === readCallId) &&
        (mode === "single" || Number.isInteger(sleeper()))
      for (let i = 0; i < 400 && !ready(); i++) yield* Effect.sleep("25 millis")
      assert.isTrue(ready(), "the read_file result reached the database before the kill")
      // What the kill leaves: the system prompt, the task, the step-1 calls, and only the
      // read_file result (in parallel mode the shell call is still sleeping).
      const before = storedTranscript(file, handleName)
      assert.deepStrictEqual(before.map((m) => m.role), ["system", "user", "assistant", "tool"])
      assert.deepStrictEqual(toolResults(before).map((part) => part.id), [readCallId])
      yield* handle.kill({ killSignal: "SIGKILL" })
      yield* handle.exitCode.pipe(Effect.ignore)
      return { agent, pid, sleeper: sleeper() }
    }))
    assert.isFalse(alive(killed.pid), "the runner is dead")
    // The shell call's process outlives its killed parent: end it here.
    if (Number.isInteger(killed.sleeper) && alive(killed.sleeper)) process.kill(killed.sleeper, "SIGKILL")
    return { root, ...killed }
  })

/** A new manager on the workspace resumes the agent; returns the first request its model got. */
const resumeAfterKill = (root: string, agentId: string, deadPid: number) =>
  Effect.gen(function*() {
    const requests: Array<ReadonlyArray<Prompt.Message>> = []
    const script: ScriptedModel.ScriptInput = {
      rules: [{
        respond: (c) => {
          requests.push(c.messages)
          return { text: report("resumed with the notes") }
        }
      }]
    }
    const { get } = yield* setup(script, {}, { root, store: "file" })
    const manager = get(SubAgentManager)
    const before = yield* manager.result(agentId, { block: false })
    assert.strictEqual(before.status, "interrupted")
    assert.include(before.reason ?? "", `pid ${deadPid}`)
    yield* manager.resume(undefined, agentId)
    const after = yield* manager.result(agentId, { block: true, timeoutMs: 20_000 })
    assert.strictEqual(after.status, "completed")
    assert.strictEqual(requests.length, 1)
    return requests[0]!
  })

describe("step-exact transcripts across kill -9", () => {
  it.live(
    "a tool result that landed before the kill is resumed as is, with no interrupted note",
    () =>
      Effect.gen(function*() {
        const { agent, pid, root } = yield* runAndKill("single")
        const request = yield* resumeAfterKill(root, agent, pid)
        assert.deepStrictEqual(request.map((m) => m.role), ["system", "user", "assistant", "tool", "user"])
        const results = toolResults(request)
        assert.strictEqual(results.length, 1)
        const read = results[0]!
        assert.strictEqual(read.id, readCallId)
        assert.strictEqual(read.name, "read_file")
        assert.isFalse(read.isFailure)
        assert.include(JSON.stringify(read.result), "the launch code is 4217-ALPHA")
        assert.include(JSON.stringify(read.result), "second line of the notes")
        assert.notInclude(JSON.stringify(request), interruptedNote)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    60_000
  )

  it.live(
    "of two parallel calls, only the one still running at the kill is resumed as interrupted",
    () =>
      Effect.gen(function*() {
        const { agent, pid, root } = yield* runAndKill("parallel")
        const request = yield* resumeAfterKill(root, agent, pid)
        // The landed result, then the note for the call that did not finish, then the resume.
        assert.deepStrictEqual(request.map((m) => m.role), ["system", "user", "assistant", "tool", "tool", "user"])
        const results = toolResults(request)
        assert.deepStrictEqual(results.map((part) => part.id), [readCallId, sleepCallId])
        const [read, sleep] = results as [Part, Part]
        assert.isFalse(read.isFailure)
        assert.include(JSON.stringify(read.result), "the launch code is 4217-ALPHA")
        assert.notInclude(JSON.stringify(read.result), interruptedNote)
        assert.isTrue(sleep.isFailure)
        assert.strictEqual(sleep.name, "shell")
        assert.include(JSON.stringify(sleep.result), interruptedNote)
        assert.strictEqual(JSON.stringify(request).split(interruptedNote).length - 1, 1, "one interrupted note")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    60_000
  )
})
