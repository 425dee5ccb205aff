// Approval questions across processes: a grandchild (depth 2) of this process asks to run
// `shell` while its sibling works and finishes; a second process (`fibril agents questions`)
// lists the question from the workspace's store, a third (`fibril agents answer`) allows it,
// and the call runs once here. `fibril run` off a terminal never waits: `--approve` decides.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import * as Approvals from "@fibril/core/Approvals"
import * as Fibril from "@fibril/core/Fibril"
import { SubAgentManager } from "@fibril/core/SubAgentManager"
import { SubAgentStore } from "@fibril/core/SubAgentStore"
import { ScriptedModel } from "@fibril/testkit"
import { Context, Deferred, Effect, FileSystem, Layer, Option, Path, Schedule } from "effect"
import { fibril } from "./run.ts"

const report = (summary: string) =>
  `SUMMARY:\n${summary}\n\nCHANGES:\nnone\n\nEVIDENCE:\nnone\n\nRISKS:\nnone\n\nBLOCKERS:\nnone`

describe("approvals across processes", () => {
  it.live("a grandchild's question is listed and answered from other processes while its sibling finishes", () =>
    Effect.flatMap(Approvals.make({ timeout: "2 minutes" }), (approvals) =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
        const workerGo = yield* Deferred.make<void>()
        const script: ScriptedModel.ScriptInput = {
          rules: [
            { match: { prompt: "parent" }, turns: [{ hang: true }] },
            {
              match: { prompt: "asker" },
              respond: (c) =>
                c.turn === 0
                  ? { tool_calls: [{ name: "shell", args: { command: "echo ran >> side-effect.txt" } }] }
                  : { text: report(`shell: ${JSON.stringify(c.lastToolResults[0]?.result)}`) }
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
        const context = yield* Layer.build(
          Fibril.layer({
            cwd: root,
            store: "file",
            session: { maxDepth: 2 },
            ask: ["shell"],
            sandbox: { mode: "off", network: false, writablePaths: [] }
          }).pipe(Layer.provide(ScriptedModel.layer(script)))
        )
        const manager = Context.get(context, SubAgentManager)
        const parent = yield* manager.spawn(undefined, { prompt: "parent" })
        const asker = yield* manager.spawn(parent.agent_id, { prompt: "asker" })
        const worker = yield* manager.spawn(parent.agent_id, { prompt: "worker" })
        // The question reaches the store at this process's next request poll (500 ms).
        const store = Context.get(context, SubAgentStore)
        yield* store.get(asker.agent_id).pipe(
          Effect.filterOrFail((record) => Option.isSome(record) && (record.value.questions?.length ?? 0) > 0),
          Effect.retry({ times: 50, schedule: Schedule.spaced("100 millis") })
        )
        yield* store.flush
        const listed = yield* fibril(["agents", "questions", "--json"], { cwd: root })
        assert.strictEqual(listed.exitCode, 0, listed.stderr)
        const questions = JSON.parse(listed.stdout) as ReadonlyArray<Approvals.Question>
        assert.strictEqual(questions.length, 1)
        const question = questions[0]!
        assert.strictEqual(question.agentId, asker.agent_id)
        assert.deepStrictEqual(question.path, [parent.agent_id, asker.agent_id])
        assert.strictEqual(question.depth, 2)
        assert.include(question.arguments, "side-effect.txt")
        // The sibling finishes while the question waits; the asker has run nothing.
        yield* Deferred.succeed(workerGo, undefined)
        assert.strictEqual((yield* manager.result(worker.agent_id, { block: true })).status, "completed")
        assert.isFalse(yield* fs.exists(path.join(root, "side-effect.txt")))
        const answered = yield* fibril(["agents", "answer", question.id, "allow"], { cwd: root })
        assert.strictEqual(answered.exitCode, 0, answered.stderr)
        const done = yield* manager.result(asker.agent_id, { block: true })
        assert.strictEqual(done.status, "completed")
        assert.strictEqual(yield* fs.readFileString(path.join(root, "side-effect.txt")), "ran\n")
        const stored = (yield* manager.list({ includeArchived: true })).find((a) => a.agent_id === asker.agent_id)!
        const record = yield* manager.workerRecord(stored)
        assert.strictEqual(record.approvals?.[0]?.decision, "allow")
        assert.include(record.approvals?.[0]?.by ?? "", "fibril agents answer")
      }).pipe(Effect.provideService(Approvals.Approvals, approvals))).pipe(
        Effect.scoped,
        Effect.provide(NodeServices.layer)
      ))

  it.live("fibril run off a terminal decides at once by --approve (default deny), and --json shows the decision", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      yield* fs.makeDirectory(path.join(root, ".fibril"))
      yield* fs.writeFileString(path.join(root, ".fibril", "config.toml"), `[permissions]\nask = ["shell"]\n`)
      yield* fs.writeFileString(
        path.join(root, "script.json"),
        JSON.stringify({
          rules: [{
            turns: [
              { tool_calls: [{ name: "shell", args: { command: "echo ran >> side-effect.txt" } }] },
              { text: "done" }
            ]
          }]
        })
      )
      const run = yield* fibril(["run", "go", "--model", "scripted:script.json", "--json"], { cwd: root })
      assert.strictEqual(run.exitCode, 0, run.stderr)
      const events = run.stdout.trim().split("\n").map((line) => JSON.parse(line) as Record<string, unknown>)
      const answered = events.find((event) => event["type"] === "answered") as
        | { readonly answer: Approvals.Answer; readonly question: Approvals.Question }
        | undefined
      assert.isDefined(answered)
      assert.strictEqual(answered!.answer.decision, "deny")
      assert.strictEqual(answered!.answer.by, "--approve=deny")
      assert.strictEqual(answered!.question.tool, "shell")
      const result = events.find((event) => event["type"] === "tool_result" && event["tool"] === "shell")
      assert.include(String(result?.["reason"]), "(the default without a terminal)")
      assert.isFalse(yield* fs.exists(path.join(root, "side-effect.txt")))
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
})
