// Run receipts (issue 17): runs with run ids, the event log, inputs delivered or not, artifacts,
// usage and verification provenance, follow-up and takeover, session names, handle_read.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Context, Effect, Fiber, FileSystem, Layer, Option, Path, Schema, Stream } from "effect"
import { LanguageModel, type Prompt, type Response } from "effect/ai"
import { DatabaseSync } from "node:sqlite"
import type * as AgentResult from "../src/AgentResult.ts"
import * as Fibril from "../src/Fibril.ts"
import * as Names from "../src/internal/names.ts"
import * as Receipt from "../src/Receipt.ts"
import { Session } from "../src/Session.ts"
import * as SqliteSubAgentStore from "../src/SqliteSubAgentStore.ts"
import { SubAgentManager } from "../src/SubAgentManager.ts"
import {
  append,
  currentRunId,
  EventType,
  limits,
  type LogEvent,
  LogEvent as LogEventSchema,
  migrate,
  preview,
  Status,
  SubAgentRecord
} from "../src/SubAgentRecord.ts"
import * as SubAgentStore from "../src/SubAgentStore.ts"
import * as AgentTools from "../src/tools/Agents.ts"
import type * as TranscriptView from "../src/TranscriptView.ts"
import { provideNode, report, setup } from "./support.ts"

const toolResults = (messages: ReadonlyArray<Prompt.Message>) =>
  messages.flatMap((m) => m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [p] : []) : [])

/** agent_eval as the tool runs it (deliver, state, receipt), over the manager in context. */
const evaluate = (
  manager: SubAgentManager["Service"],
  id: string,
  options: { message?: string; block?: boolean; interrupt?: boolean } = {}
) =>
  AgentTools.evaluate.handler(
    {
      agent_id: id,
      ...(options.message === undefined ? {} : { message: options.message }),
      ...(options.block === undefined ? {} : { block: options.block }),
      ...(options.interrupt === undefined ? {} : { interrupt: options.interrupt })
    },
    { sessionId: undefined, callId: "test", role: "general", depth: 0 }
  ).pipe(
    Effect.map((result) => result as AgentResult.EvalResult),
    Effect.provideService(SubAgentManager, manager)
  )

const hangUntilTold = (cue: string, answer: string): ScriptedModel.Rule => ({
  respond: (c) => JSON.stringify(c.messages).includes(cue) ? { text: report(answer) } : { hang: true }
})

describe("run receipts", () => {
  it.effect("a run, a resume and a second resume give three run ids in one record, stored as such", () =>
    Effect.gen(function*() {
      const { get } = yield* setup(
        { rules: [{ respond: (c) => ({ text: report(`answered after ${c.turn} earlier turns`) }) }] },
        {},
        { store: "file" }
      )
      const manager = get(SubAgentManager)
      const store = get(SubAgentStore.SubAgentStore)
      const agent = yield* manager.spawn(undefined, { prompt: "first" })
      const id = agent.agent_id
      assert.strictEqual(agent.session_name, Names.fromId(id))
      yield* manager.result(id, { block: true })
      yield* manager.resume(undefined, id, "second")
      yield* manager.result(id, { block: true })
      // By session name this time.
      const third = yield* manager.resume(undefined, agent.session_name!, "third")
      assert.strictEqual(third.agent_id, id)
      const done = yield* manager.result(id, { block: true })
      assert.strictEqual(done.status, "completed")
      const runs = done.runs ?? []
      assert.deepStrictEqual(runs.map((r) => r.run_id), [`${id}-r1`, `${id}-r2`, `${id}-r3`])
      assert.deepStrictEqual(runs.map((r) => [r.kind, r.status, r.summary, r.message]), [
        ["spawn", "completed", "answered after 0 earlier turns", "first"],
        ["resume", "completed", "answered after 1 earlier turns", "second"],
        ["resume", "completed", "answered after 2 earlier turns", "third"]
      ])
      for (const run of runs) {
        assert.strictEqual(run.steps, 1)
        assert.isAbove(run.tokens!.input, 0)
        assert.isAtMost(run.started_at!, run.finished_at!)
      }
      assert.deepStrictEqual(done.events!.map((e) => [e.type, e.run_id]), [
        ["spawned", `${id}-r1`],
        ["started", `${id}-r1`],
        ["completed", `${id}-r1`],
        ["resumed", `${id}-r2`],
        ["started", `${id}-r2`],
        ["completed", `${id}-r2`],
        ["resumed", `${id}-r3`],
        ["started", `${id}-r3`],
        ["completed", `${id}-r3`]
      ])
      // The store holds the same receipt (every change was carried by a status-change put).
      yield* store.flush
      const stored = Option.getOrThrow(yield* store.get(id))
      assert.deepStrictEqual(stored.runs, runs)
      assert.deepStrictEqual(stored.events, done.events)
      // The worker record names the current run and offers the resume command.
      const worker = yield* manager.workerRecord(done)
      assert.strictEqual(worker.run_id, `${id}-r3`)
      assert.strictEqual(worker.usage.status, "reported")
    }).pipe(provideNode))

  it.effect("input to a running agent is recorded delivered; to a finished one undelivered, with the reason", () =>
    Effect.gen(function*() {
      const { get } = yield* setup(
        {
          rules: [{
            respond: (c) =>
              c.turn === 0
                ? { tool_calls: [{ name: "list_dir", args: {} }] }
                : { text: report(`saw ${c.messages.filter((m) => m.role === "user").length} user messages`) }
          }]
        },
        {},
        { store: "file" }
      )
      const manager = get(SubAgentManager)
      const store = get(SubAgentStore.SubAgentStore)
      const agent = yield* manager.spawn(undefined, { prompt: "look" })
      const sent = yield* manager.sendInput(agent.agent_id, "also check docs", false, "agent_send_input")
      assert.isTrue(sent.delivered)
      assert.deepInclude(sent.input!, { preview: "also check docs", delivered: true, run_id: `${agent.agent_id}-r1` })
      const done = yield* manager.result(agent.agent_id, { block: true })
      assert.strictEqual(done.outcome?.summary, "saw 2 user messages")
      const late = yield* manager.sendInput(agent.agent_id, `too late ${"x".repeat(500)}`, false, "agent_eval")
      assert.isFalse(late.delivered)
      const inputs = late.agent.inputs ?? []
      assert.strictEqual(inputs.length, 2)
      assert.deepInclude(inputs[0]!, {
        preview: "also check docs",
        chars: 15,
        delivered: true,
        via: "agent_send_input"
      })
      assert.isFalse(inputs[1]!.delivered)
      assert.strictEqual(inputs[1]!.chars, 509)
      assert.strictEqual(inputs[1]!.preview.length, limits.preview + 1) // cut, marked with "…"
      assert.include(inputs[1]!.reason!, "is completed")
      assert.isAtLeast(inputs[1]!.at, inputs[0]!.at)
      assert.deepStrictEqual(
        late.agent.events!.filter((e) => e.type.startsWith("input")).map((e) => e.type),
        ["input_delivered", "input_undelivered"]
      )
      // Both are in the stored record.
      yield* store.flush
      assert.deepStrictEqual(Option.getOrThrow(yield* store.get(agent.agent_id)).inputs, inputs)
    }).pipe(provideNode))

  it.effect("input delivered to a run that then ends before reading it is recorded undelivered, never lost", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ hang: true }] }] })
      const manager = get(SubAgentManager)
      const session = get(Session)
      const agent = yield* manager.spawn(undefined, { prompt: "wait forever" })
      for (let i = 0; i < 50 && !(yield* session.info(agent.agent_id)).waitingOnModel; i++) yield* Effect.yieldNow
      const sent = yield* manager.sendInput(agent.agent_id, "please also do X", false)
      assert.isTrue(sent.delivered)
      const cancelled = yield* manager.cancel(agent.agent_id, "no longer needed")
      assert.strictEqual(cancelled.status, "cancelled")
      const [input] = cancelled.inputs ?? []
      assert.isFalse(input!.delivered)
      assert.include(input!.reason!, "ended (cancelled) before its next step read it")
      assert.deepStrictEqual(
        cancelled.events!.map((e) => e.type),
        ["spawned", "started", "input_delivered", "input_undelivered", "cancelled"]
      )
    }).pipe(provideNode))

  it.effect("agent_eval returns follow_up and takeover for a running, a finished and an interrupted agent", () =>
    Effect.gen(function*() {
      const { get, root } = yield* setup(
        {
          rules: [
            hangUntilTold("finish now", "finished"),
            { match: { prompt: "quick" }, turns: [{ text: report("quick") }] }
          ]
        },
        {},
        { store: "file" }
      )
      const manager = get(SubAgentManager)
      const session = get(Session)
      const running = yield* manager.spawn(undefined, { prompt: "work until told" })
      const name = running.session_name!
      for (let i = 0; i < 50 && !(yield* session.info(running.agent_id)).waitingOnModel; i++) yield* Effect.yieldNow

      const live = yield* evaluate(manager, name)
      assert.strictEqual(live.status, "running")
      assert.strictEqual(live.agent_id, running.agent_id)
      assert.deepStrictEqual(live.follow_up, {
        agent_id: running.agent_id,
        session_name: name,
        tool: "agent_eval",
        accepts_input: true,
        hint: live.follow_up.hint
      })
      assert.isFalse(live.takeover.available)
      assert.include(live.takeover.reason!, "running in this process")
      assert.strictEqual(live.takeover.command, `fibril agents resume ${running.agent_id} --cwd ${root}`)
      assert.deepStrictEqual(live.worker_record.takeover, live.takeover)
      assert.strictEqual(live.worker_record.run_id, live.run_id)

      // A message through agent_eval, then block for the result.
      const told = yield* evaluate(manager, name, { message: "finish now", interrupt: true })
      assert.isTrue(told.delivered)
      const finished = yield* evaluate(manager, running.agent_id, { block: true })
      assert.strictEqual(finished.status, "completed")
      assert.strictEqual(finished.follow_up.tool, "agent_resume")
      assert.isFalse(finished.follow_up.accepts_input)
      assert.isTrue(finished.takeover.available)
      assert.strictEqual(finished.takeover.command, `fibril agents resume ${running.agent_id} --cwd ${root}`)
      assert.strictEqual(
        finished.takeover.transcript_command,
        `fibril agents transcript ${running.agent_id} --cwd ${root}`
      )
      assert.strictEqual(finished.takeover.transcript_handle, `${running.agent_id}.jsonl`)
      assert.strictEqual(finished.inputs[0]!.via, "agent_eval")

      // Interrupted: the `task`-style caller of a foreground run is interrupted.
      const caller = yield* Effect.forkChild(manager.run(undefined, { prompt: "hang in the foreground" }))
      let interrupted: string | undefined
      for (let i = 0; i < 50 && interrupted === undefined; i++) {
        yield* Effect.yieldNow
        interrupted = (yield* manager.list({ includeArchived: false })).find((a) =>
          a.objective === "hang in the foreground"
        )
          ?.agent_id
      }
      yield* Fiber.interrupt(caller)
      const gone = yield* evaluate(manager, interrupted!)
      assert.strictEqual(gone.status, "interrupted")
      assert.strictEqual(gone.follow_up.tool, "agent_resume")
      assert.include(gone.follow_up.hint, "agent_resume")
      assert.isTrue(gone.takeover.available)
      assert.strictEqual(gone.takeover.command, `fibril agents resume ${interrupted} --cwd ${root}`)
    }).pipe(provideNode))

  it.effect("with the memory store, takeover says why it is impossible", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ text: report("done") }] }] })
      const manager = get(SubAgentManager)
      const agent = yield* manager.spawn(undefined, { prompt: "x" })
      const done = yield* evaluate(manager, agent.agent_id, { block: true })
      assert.isFalse(done.takeover.available)
      assert.isUndefined(done.takeover.command)
      assert.include(done.takeover.reason!, "memory")
      assert.strictEqual(done.follow_up.tool, "agent_resume")
    }).pipe(provideNode))

  it.effect("artifacts list the files a child wrote (and its plans), not the ones it failed to write", () =>
    Effect.gen(function*() {
      const { get, fs, path, root } = yield* setup({
        rules: [
          {
            match: { role: "implementer" },
            turns: [
              { tool_calls: [{ name: "write_file", args: { path: "src/a.ts", content: "export const a = 1\n" } }] },
              {
                tool_calls: [
                  { name: "edit_file", args: { path: "./src/a.ts", old_string: "1", new_string: "2" } },
                  { name: "write_file", args: { path: "notes/b.md", content: "b" } },
                  { name: "write_file", args: { path: "../outside.txt", content: "no" } }
                ]
              },
              { text: report("wrote a and b") }
            ]
          },
          {
            match: { role: "plan" },
            turns: [
              { tool_calls: [{ name: "write_file", args: { path: ".fibril/plans/p.md", content: "# plan" } }] },
              { text: report("planned") }
            ]
          }
        ]
      })
      const manager = get(SubAgentManager)
      const writer = yield* manager.spawn(undefined, { prompt: "write", role: "implementer" })
      const done = yield* manager.result(writer.agent_id, { block: true })
      assert.strictEqual(yield* fs.readFileString(path.join(root, "src/a.ts")), "export const a = 2\n")
      const artifacts = done.artifacts ?? []
      assert.deepStrictEqual(artifacts.map((a) => [a.kind, a.ref, a.writes ?? 0]), [
        ["transcript", `${writer.agent_id}.jsonl`, 0],
        ["file", "src/a.ts", 2],
        ["file", "notes/b.md", 1]
      ])
      assert.strictEqual(artifacts[1]!.tool, "edit_file")
      assert.strictEqual(artifacts[1]!.run_id, `${writer.agent_id}-r1`)
      const calls = done.events!.filter((e) => e.type === "tool_call")
      assert.deepStrictEqual(
        calls.map((e) => [e.tool, e.failed ?? false]).sort(),
        [
          ["edit_file", false],
          ["write_file", false],
          ["write_file", false],
          ["write_file", true]
        ].sort()
      )
      const planner = yield* manager.spawn(undefined, { prompt: "plan", role: "plan" })
      const planned = yield* manager.result(planner.agent_id, { block: true })
      assert.deepStrictEqual(planned.artifacts!.map((a) => [a.kind, a.ref]), [
        ["transcript", `${planner.agent_id}.jsonl`],
        ["plan", ".fibril/plans/p.md"]
      ])
    }).pipe(provideNode))

  it.effect("a verifier's result attached as verification changes verification.status", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({
        rules: [
          { match: { prompt: "implement" }, turns: [{ text: report("implemented it") }], repeat_last: true },
          { match: { prompt: "check it passes" }, turns: [{ text: report("tests pass") }] },
          {
            match: { prompt: "check it fails" },
            turns: [{
              text:
                "SUMMARY:\ntwo tests fail\n\nCHANGES:\nnone\n\nEVIDENCE:\nnpm test: 2 failed\n\nRISKS:\nnone\n\nBLOCKERS:\ntest/a.test.ts fails"
            }]
          }
        ]
      })
      const manager = get(SubAgentManager)
      const impl = yield* manager.spawn(undefined, { prompt: "implement the feature", role: "implementer" })
      const claimed = yield* manager.result(impl.agent_id, { block: true })
      assert.strictEqual((yield* manager.workerRecord(claimed)).verification.status, "self_report")

      const verifier = yield* manager.spawn(undefined, {
        prompt: "check it passes",
        role: "verifier",
        verifies: impl.session_name!
      })
      assert.strictEqual(verifier.verifies, `${impl.agent_id}-r1`)
      yield* manager.result(verifier.agent_id, { block: true })
      const checked = yield* manager.result(impl.agent_id, { block: false })
      assert.strictEqual(checked.verification!.status, "verified")
      assert.deepInclude(checked.verification!.receipts[0]!, {
        kind: "agent",
        verdict: "passed",
        run_id: `${impl.agent_id}-r1`,
        agent_id: verifier.agent_id,
        verifier_run_id: `${verifier.agent_id}-r1`,
        summary: "tests pass"
      })
      assert.strictEqual(checked.events!.at(-1)!.type, "verification")

      const second = yield* manager.spawn(undefined, {
        prompt: "check it fails",
        role: "verifier",
        verifies: impl.agent_id
      })
      yield* manager.result(second.agent_id, { block: true })
      const disputed = yield* manager.result(impl.agent_id, { block: false })
      assert.strictEqual(disputed.verification!.status, "disputed")
      assert.include(disputed.verification!.receipts[1]!.summary!, "test/a.test.ts fails")

      // A command's exit code attached by the harness.
      const passed = yield* manager.attachVerification(impl.agent_id, {
        command: "npm test",
        exitCode: 0,
        summary: "ok"
      })
      assert.strictEqual(passed.verification!.status, "verified")
      assert.deepInclude(passed.verification!.receipts[2]!, {
        kind: "command",
        command: "npm test",
        exit_code: 0,
        verdict: "passed"
      })

      // A new run is a new claim: back to self_report, the receipts of the earlier run kept.
      yield* manager.resume(undefined, impl.agent_id, "implement more")
      const again = yield* manager.result(impl.agent_id, { block: true })
      assert.strictEqual(again.verification!.status, "self_report")
      assert.strictEqual(again.verification!.receipts.length, 3)
    }).pipe(provideNode))

  it.effect("session names work in every agent tool", () =>
    Effect.gen(function*() {
      const opened = (c: ScriptedModel.Conversation, description: string) => {
        const result = c.toolResults.find((r) =>
          (r.name === "agent_open" || r.name === "agent_spawn") &&
          (r.result as { description: string }).description === description
        )
        return result === undefined ? undefined : (result.result as { session_name: string }).session_name
      }
      const { get } = yield* setup({
        rules: [
          {
            match: { depth: 0 },
            respond: (c) => {
              const kid = opened(c, "kid") ?? ""
              const doomed = opened(c, "doomed") ?? ""
              const turns: Record<number, ScriptedModel.Turn> = {
                0: { tool_calls: [{ name: "agent_open", args: { prompt: "work until told", description: "kid" } }] },
                1: {
                  tool_calls: [
                    { name: "agent_result", args: { agent_id: kid } },
                    { name: "agent_eval", args: { id: kid } },
                    { name: "agent_assign", args: { agent_id: kid, objective: "work until told, then stop" } },
                    { name: "agent_list", args: {} }
                  ]
                },
                2: {
                  tool_calls: [{
                    name: "agent_send_input",
                    args: { agent_id: kid, message: "finish now", interrupt: true }
                  }]
                },
                3: { tool_calls: [{ name: "agent_wait", args: { ids: [kid], wait_mode: "all" } }] },
                4: {
                  tool_calls: [
                    { name: "handle_read", args: { handle: kid, limit: 2 } },
                    { name: "agent_eval", args: { agent_id: kid } }
                  ]
                },
                5: { tool_calls: [{ name: "agent_resume", args: { agent_id: kid, message: "finish now, again" } }] },
                6: { tool_calls: [{ name: "agent_wait", args: { id: kid } }] },
                7: {
                  tool_calls: [{
                    name: "agent_spawn",
                    args: { prompt: "verify the kid", subagent_type: "verifier", verifies: kid, description: "v" }
                  }]
                },
                8: { tool_calls: [{ name: "agent_wait", args: {} }] },
                9: { tool_calls: [{ name: "agent_open", args: { prompt: "hang", description: "doomed" } }] },
                10: {
                  tool_calls: [
                    { name: "agent_close", args: { agent_id: doomed, reason: "not needed" } },
                    { name: "agent_cancel", args: { id: doomed } }
                  ]
                }
              }
              return turns[c.turn] ?? { text: "done" }
            }
          },
          { match: { prompt: "verify the kid" }, turns: [{ text: report("verified") }] },
          { match: { prompt: "hang" }, turns: [{ hang: true }] },
          hangUntilTold("finish now", "kid done")
        ]
      })
      const session = get(Session)
      const root = yield* session.create()
      const answer = yield* session.prompt(root.id, "go")
      assert.strictEqual(answer.text, "done")
      const results = toolResults(yield* session.transcript(root.id))
      const failures = results.filter((r) => r.isFailure)
      assert.deepStrictEqual(failures, [])
      const kid = results[0]!.result as { agent_id: string; session_name: string }
      assert.match(kid.session_name, /^[a-z]+-[a-z]+$/)
      const byTool = (name: string) =>
        results.filter((r) => r.name === name).map((r) => r.result as Record<string, any>)
      const mentionsKid = (value: Record<string, any>) => JSON.stringify(value).includes(kid.agent_id)
      for (const tool of ["agent_result", "agent_eval", "agent_assign", "agent_send_input", "agent_resume"]) {
        for (const value of byTool(tool)) assert.isTrue(mentionsKid(value), `${tool}: ${JSON.stringify(value)}`)
      }
      // The two waits by name (the third waits for whatever still runs).
      for (const value of byTool("agent_wait").slice(0, 2)) assert.isTrue(mentionsKid(value), JSON.stringify(value))
      assert.isTrue(byTool("agent_send_input")[0]!["delivered"])
      assert.strictEqual(byTool("agent_result")[0]!["transcript_handle"], `${kid.agent_id}.jsonl`)
      assert.deepStrictEqual(
        (byTool("agent_list")[0] as unknown as { agents: Array<{ session_name: string }> }).agents.map((a) =>
          a.session_name
        ),
        [kid.session_name]
      )
      assert.deepStrictEqual(byTool("agent_wait")[0]!["completed"].map((a: { agent_id: string }) => a.agent_id), [
        kid.agent_id
      ])
      assert.strictEqual(byTool("handle_read")[0]!["agent_id"], kid.agent_id)
      assert.strictEqual(byTool("handle_read")[0]!["messages"].length, 2)
      assert.strictEqual(byTool("agent_resume")[0]!["run_id"], `${kid.agent_id}-r2`)
      const [closed, cancelled] = [byTool("agent_close")[0]!, byTool("agent_cancel")[0]!]
      assert.strictEqual(closed["status"], "cancelled")
      assert.strictEqual(cancelled["agent_id"], closed["agent_id"])
      const manager = get(SubAgentManager)
      const record = yield* manager.result(kid.session_name, { block: false })
      assert.strictEqual(record.objective, "work until told, then stop")
      assert.deepStrictEqual(record.runs!.map((r) => r.status), ["completed", "completed"])
      // The verifier (spawned with the session name) checked run 2, the current one.
      assert.strictEqual(record.verification!.status, "verified")
      assert.strictEqual(record.verification!.receipts[0]!.run_id, `${kid.agent_id}-r2`)
      assert.strictEqual(record.verification!.receipts[0]!.verdict, "passed")
    }).pipe(provideNode))

  it.effect("handle_read pages a long transcript, from the store and from memory", () =>
    Effect.gen(function*() {
      const script: ScriptedModel.ScriptInput = {
        rules: [{
          respond: (c) =>
            c.turn < 30
              ? {
                tool_calls: [{
                  name: c.turn === 0 ? "read_file" : "list_dir",
                  args: c.turn === 0 ? { path: "big.txt" } : {}
                }]
              }
              : { text: report("looked 30 times") }
        }]
      }
      for (const store of ["file", "memory"] as const) {
        const { get, fs, path, root } = yield* setup(script, {}, { store })
        yield* fs.writeFileString(path.join(root, "big.txt"), `${"y".repeat(60)}\n`.repeat(200))
        const manager = get(SubAgentManager)
        const agent = yield* manager.spawn(undefined, { prompt: "look around" })
        const done = yield* manager.result(agent.agent_id, { block: true })
        const seen: Array<number> = []
        let offset: number | undefined = 0
        const pages: Array<number> = []
        while (offset !== undefined) {
          const page: TranscriptView.Page = yield* manager.readTranscript(done.transcript_handle, { offset, limit: 20 })
          assert.strictEqual(page.total, 63, store)
          assert.strictEqual(page.agent_id, agent.agent_id)
          pages.push(page.messages.length)
          seen.push(...page.messages.map((m) => m.index))
          offset = page.next_offset
        }
        assert.deepStrictEqual(pages, [20, 20, 20, 3], store)
        assert.deepStrictEqual(seen, Array.from({ length: 63 }, (_, i) => i))
        const first = yield* manager.readTranscript(agent.session_name!, { limit: 4 })
        assert.deepStrictEqual(first.messages.map((m) => m.role), ["system", "user", "assistant", "tool"])
        assert.include(first.messages[2]!.text, "→ read_file")
        // The 12,200-character file result is cut on the page, and says by how much.
        assert.isAbove(first.messages[3]!.cut!, 5_000)
        assert.isBelow(first.messages[3]!.text.length, 4_100)
        const end = yield* manager.readTranscript(done.transcript_handle, { offset: 62 })
        assert.deepStrictEqual(end.messages.map((m) => [m.index, m.role]), [[62, "assistant"]])
        assert.isUndefined(end.next_offset)
        assert.include(end.messages[0]!.text, "looked 30 times")
        const missing = yield* Effect.flip(manager.readTranscript("agent_nope.jsonl", {}))
        assert.strictEqual(missing._tag, "AgentNotFound")
      }
    }).pipe(provideNode))

  it.effect("usage.status: reported by the provider, or estimated when it reports none", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ text: report("counted") }] }] })
      const manager = get(SubAgentManager)
      const reported = yield* manager.spawn(undefined, { prompt: "x" })
      const done = yield* manager.result(reported.agent_id, { block: true })
      assert.deepStrictEqual(done.usage, { status: "reported", reported_steps: 1, estimated_steps: 0 })
      assert.strictEqual((yield* manager.workerRecord(done)).usage.input, done.tokens.input)

      // A provider that reports no usage at all.
      const parts: Array<Response.PartEncoded> = [
        { type: "text", text: report("not counted") },
        {
          type: "finish",
          reason: "stop",
          usage: {
            inputTokens: { uncached: undefined, total: undefined, cacheRead: undefined, cacheWrite: undefined },
            outputTokens: { total: undefined, text: undefined, reasoning: undefined }
          }
        }
      ]
      const silent = Layer.effect(
        LanguageModel.LanguageModel,
        LanguageModel.make({
          generateText: () => Effect.succeed(parts),
          streamText: () => Stream.fromIterable(parts as Array<Response.StreamPartEncoded>)
        })
      )
      const fs = yield* FileSystem.FileSystem
      const context = yield* Layer.build(
        Fibril.layer({ cwd: yield* fs.makeTempDirectoryScoped() }).pipe(Layer.provide(silent))
      )
      const other = Context.get(context, SubAgentManager)
      const agent = yield* other.spawn(undefined, { prompt: "count me" })
      const estimated = yield* other.result(agent.agent_id, { block: true })
      assert.deepStrictEqual(estimated.usage, { status: "estimated", reported_steps: 0, estimated_steps: 1 })
      assert.isAbove(estimated.tokens.input, 0)
      assert.isAbove(estimated.tokens.output, 0)
    }).pipe(provideNode))
})

/** A version 1 record: no record_version, past runs in `history`. */
const V1Record = Schema.Struct({
  ...SubAgentRecord.mapFields(({ record_version: _v, runs: _r, ...rest }) => rest).fields,
  history: Schema.optionalKey(Schema.Array(Schema.Struct({
    status: Status,
    reason: Schema.optionalKey(Schema.String),
    started_at: Schema.optionalKey(Schema.Int),
    finished_at: Schema.optionalKey(Schema.Int),
    summary: Schema.optionalKey(Schema.String),
    session_boot_id: Schema.String
  })))
})

const isRecord = Schema.is(SubAgentRecord)
// What `Receipt.log` is given: a log event without its run id (the log adds it).
const { run_id: _runId, ...loggedFields } = LogEventSchema.fields
const LoggedEvent = Schema.Struct(loggedFields)

describe("receipt invariants", () => {
  it.prop(
    "the event log stays within its bound, counts what it dropped, and drops tool calls before anything else",
    [Schema.Array(EventType)],
    ([types]) => {
      let events: ReadonlyArray<LogEvent> = []
      let dropped = 0
      types.forEach((type, at) => {
        const next = append(events, { at, type }, limits.events, (e) => e.type === "tool_call")
        events = next.list
        dropped += next.dropped
      })
      assert.isAtMost(events.length, limits.events)
      assert.strictEqual(events.length + dropped, types.length)
      const lifecycle = types.filter((t) => t !== "tool_call").length
      // Lifecycle events go only once every tool call has gone.
      if (lifecycle <= limits.events) assert.strictEqual(events.filter((e) => e.type !== "tool_call").length, lifecycle)
      // Order is kept.
      assert.deepStrictEqual(events.map((e) => e.at), [...events.map((e) => e.at)].sort((a, b) => a - b))
    }
  )

  // `finished` and `log` build their values field by field (for speed): they must give what
  // the plain definition gives, whatever the record and its current run hold.
  it.prop(
    "finished: the run keeps its own fields, its reason and summary replaced, what it did added; the log gets its end",
    [SubAgentRecord, Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 5 }))],
    ([generated, baseSteps]) => {
      const record = structuredClone(generated) as Receipt.Draft
      // Also a record with no end time, whose run may have one.
      if (baseSteps % 2 === 1) delete record.finished_at
      const run = record.runs?.at(-1)
      const base = { steps: baseSteps, toolCalls: 1, tokens: { input: 2, output: 0, cached: 1 } }
      Receipt.finished(record, base)
      if (run === undefined) {
        assert.deepStrictEqual(record.runs, generated.runs)
      } else {
        const { reason: _reason, summary: _summary, ...rest } = run
        const now = record.finished_at
        assert.deepStrictEqual(record.runs!.at(-1), {
          ...rest,
          status: record.status,
          ...(record.reason === undefined ? {} : { reason: preview(record.reason) }),
          ...(now === undefined ? {} : { finished_at: now }),
          ...(record.outcome === undefined ? {} : { summary: preview(record.outcome.summary) }),
          steps: Math.max(0, record.steps - base.steps),
          tool_calls: Math.max(0, record.tool_calls - base.toolCalls),
          tokens: {
            input: Math.max(0, record.tokens.input - base.tokens.input),
            output: Math.max(0, record.tokens.output - base.tokens.output),
            cached: Math.max(0, record.tokens.cached - base.tokens.cached)
          }
        })
        assert.deepStrictEqual(record.runs!.slice(0, -1), generated.runs!.slice(0, -1))
      }
      const last = record.events!.at(-1)!
      assert.deepStrictEqual(last, {
        at: record.finished_at ?? record.created_at,
        type: record.status === "pending" || record.status === "running" ? "failed" : record.status,
        ...(record.reason === undefined ? {} : { detail: preview(record.reason) }),
        run_id: currentRunId(record)
      })
      assert.isTrue(isRecord(record))
    }
  )

  it("finished: a record with no end time keeps its run's", () => {
    const record: Receipt.Draft = {
      record_version: 2,
      agent_id: "a",
      depth: 1,
      role: "worker",
      model: "m",
      description: "d",
      objective: "o",
      status: "failed",
      detached: false,
      fork_context: false,
      session_boot_id: "b",
      created_at: 1,
      steps: 0,
      tool_calls: 0,
      tokens: { input: 0, output: 0, cached: 0 },
      transcript_handle: "a.jsonl",
      runs: [{ run_id: "a-r1", kind: "spawn", status: "running", session_boot_id: "b", finished_at: 7, message: "m" }]
    }
    Receipt.finished(record, { steps: 0, toolCalls: 0, tokens: { input: 0, output: 0, cached: 0 } })
    assert.deepStrictEqual(record.runs, [{
      run_id: "a-r1",
      kind: "spawn",
      status: "failed",
      session_boot_id: "b",
      finished_at: 7,
      message: "m",
      steps: 0,
      tool_calls: 0,
      tokens: { input: 0, output: 0, cached: 0 }
    }])
  })

  it.prop(
    "log: the entry is the event with the current run's id, every field it has and no other",
    [SubAgentRecord, LoggedEvent],
    ([generated, event]) => {
      const record = structuredClone(generated) as Receipt.Draft
      Receipt.log(record, event)
      const entries = record.events!
      assert.deepStrictEqual(entries.at(-1), { ...event, run_id: currentRunId(record) })
    }
  )

  it.prop("any version 1 record migrates to a valid version 2 record with one run per past run, plus the current", [
    V1Record
  ], ([old]) => {
    const migrated = migrate(JSON.parse(JSON.stringify(old)))
    assert.isTrue(isRecord(migrated), JSON.stringify(migrated))
    const record = migrated as SubAgentRecord
    const past = old.history?.length ?? 0
    const runs = record.runs!
    assert.strictEqual(runs.length, Math.min(past + 1, limits.runs))
    assert.strictEqual(runs.at(-1)!.run_id, `${old.agent_id}-r${past + 1}`)
    assert.strictEqual(runs.at(-1)!.status, old.status)
    assert.strictEqual(record.session_name, Names.fromId(old.agent_id))
    assert.notProperty(record, "history")
    assert.deepStrictEqual(migrate(record), record) // already current: unchanged
  })

  it.effect("a version 1 row with history is read as runs, and rewriting it drops the retired field", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = yield* fs.makeTempDirectoryScoped()
      const store = yield* SqliteSubAgentStore.makeSqlite({ dir })
      const boot = store.owner.boot_id
      const v1 = {
        agent_id: "agent_v1old",
        depth: 1,
        role: "explore",
        model: "m",
        description: "old",
        objective: "look",
        status: "completed",
        detached: false,
        fork_context: false,
        session_boot_id: boot,
        created_at: 10,
        started_at: 20,
        finished_at: 30,
        steps: 2,
        tool_calls: 1,
        tokens: { input: 5, output: 5, cached: 0 },
        transcript_handle: "agent_v1old.jsonl",
        outcome: {
          text: "t",
          summary: "found it",
          sections: { summary: "found it", changes: "", evidence: "", risks: "", blockers: "" },
          contract_violations: []
        },
        history: [
          { status: "interrupted", reason: "restart", started_at: 1, finished_at: 2, session_boot_id: "a" },
          { status: "failed", reason: "boom", started_at: 3, finished_at: 4, summary: "half", session_boot_id: "b" }
        ],
        x_future: 1
      }
      const db = new DatabaseSync(path.join(dir, SqliteSubAgentStore.databaseFileName))
      yield* Effect.addFinalizer(() => Effect.sync(() => db.close()))
      db.prepare(
        `INSERT INTO fibril_agents (agent_id, parent_id, status, owner_boot, handle, created_at, finished_at, record)
         VALUES (?, NULL, 'completed', ?, ?, 10, 30, ?)`
      ).run(v1.agent_id, boot, v1.transcript_handle, JSON.stringify(v1))
      const read = Option.getOrThrow(yield* store.get(v1.agent_id))
      assert.strictEqual(read.record_version, 2)
      assert.deepStrictEqual(read.runs!.map((r) => [r.run_id, r.kind, r.status, r.reason ?? r.summary]), [
        ["agent_v1old-r1", "spawn", "interrupted", "restart"],
        ["agent_v1old-r2", "resume", "failed", "boom"],
        ["agent_v1old-r3", "resume", "completed", "found it"]
      ])
      assert.deepStrictEqual(read.events!.map((e) => [e.type, e.at]), [["spawned", 10], ["resumed", 20], [
        "completed",
        30
      ]])
      assert.deepStrictEqual(read.artifacts, [{ kind: "transcript", ref: "agent_v1old.jsonl" }])
      assert.strictEqual(read.usage!.status, "unknown")
      assert.strictEqual(
        Receipt.workerRecord(read, { workspace: undefined, durable: true, owner: "self" }).run_id,
        "agent_v1old-r3"
      )
      yield* store.put(read)
      yield* store.flush
      const row = JSON.parse(
        String(db.prepare("SELECT record FROM fibril_agents WHERE agent_id = ?").get(v1.agent_id)!["record"])
      )
      assert.notProperty(row, "history")
      assert.strictEqual(row["record_version"], 2)
      assert.strictEqual(row["x_future"], 1) // unknown fields are still kept
      assert.strictEqual(row["runs"].length, 3)
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
})
