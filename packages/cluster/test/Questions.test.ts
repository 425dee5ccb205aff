// Durable approval questions in cluster mode, on SQLite, with real `fibril worker` processes: a
// child's `shell` call asks (`[permissions] ask = ["shell"]`) while its sibling finishes; the
// worker is killed -9 while the question waits; a new worker starts; a third process answers it
// (`fibril agents questions|answer --cluster`); the call runs once (counted on disk) and the run
// completes. The question is a row (ClusterQuestions): asked once, its answer not lost.
import { afterAll, assert, describe, it } from "@effect/vitest"
import type * as Approvals from "@fibril/core/Approvals"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as TestClock from "effect/testing/TestClock"
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as ClusterQuestions from "../src/ClusterQuestions.ts"
import { ClusterStore } from "../src/ClusterStore.ts"
import * as Node from "../src/Node.ts"
import * as Sqlite from "../src/Sqlite.ts"
import * as SqliteClusterStore from "../src/SqliteClusterStore.ts"
import { freePort } from "./postgres.ts"
import { askScript, fibril, killAll, pageSnapshot, sqliteQuery as query, until } from "./processes.ts"
import { agentRow } from "./support.ts"

// The asker calls `shell` twice: the first call's "always" answer covers the second.
const alwaysScript = {
  rules: askScript.rules.map((rule) =>
    rule.match.prompt !== "asker" ? rule : {
      ...rule,
      turns: [
        rule.turns[0]!,
        { tool_calls: [{ name: "shell", args: { command: "echo again >> side-effect.txt" } }] },
        ...rule.turns.slice(1)
      ]
    }
  )
}

const tmp = mkdtempSync(path.join(os.tmpdir(), "fibril-cluster-questions-"))

afterAll(async () => {
  await killAll()
  rmSync(tmp, { recursive: true, force: true })
})

describe("durable approval questions in cluster mode (SQLite, fibril worker processes)", () => {
  it(
    "a question pending, kill -9 of the worker, restart, answered from another process: the call runs once, the run completes",
    async () => {
      const ws = path.join(tmp, "ask")
      mkdirSync(path.join(ws, ".fibril"), { recursive: true })
      writeFileSync(path.join(ws, ".fibril", "config.toml"), `[permissions]\nask = ["shell"]\n`)
      writeFileSync(path.join(ws, "a.txt"), "hello")
      writeFileSync(path.join(ws, "script.json"), JSON.stringify(alwaysScript))
      const file = path.join(ws, "cluster.db")
      const url = `sqlite:${file}`
      // In process: a `fibril cluster migrate` process would add its start-up time.
      await Effect.runPromise(Effect.provide(Node.migrate, Node.database(url)))
      const port = String(await freePort())
      const worker = async () => {
        const proc = fibril([
          "worker",
          "--cluster",
          url,
          "--cwd",
          ws,
          "--model",
          `scripted:${path.join(ws, "script.json")}`,
          "--port",
          port
        ])
        await until(() => proc.out.stderr.includes("fibril worker: pid"), `worker up (${proc.out.stderr})`)
        return proc
      }
      const questionRows = () =>
        existsSync(file) ? query(file, "SELECT id, answer, asked_at FROM fibril_questions ORDER BY asked_at, id") : []
      const siblingDone = () =>
        query(file, "SELECT count(*) AS n FROM fibril_agents WHERE prompt = 'sibling' AND status = 'completed'")[0]![
          "n"
        ] === 1

      // The web view of the cluster (`fibril ui --cluster`), started with the first worker.
      const ui = fibril(["ui", "--cluster", url, "--cwd", ws])
      const first = await worker()
      const client = fibril(["run", "go", "--cluster", url, "--cwd", ws, "--json"])
      await until(() => {
        try {
          return questionRows().length === 1 && siblingDone()
        } catch {
          return false // the table is not there yet
        }
      }, `the question asked and the sibling done (${first.out.stderr})`)
      const [asked] = questionRows()
      assert.strictEqual(asked!["answer"], null)
      first.child.kill("SIGKILL")
      await first.done
      assert.isFalse(existsSync(path.join(ws, "side-effect.txt")), "the call waited: nothing ran")

      await worker()
      // The page shows the question on the asker's row, and answers it (allow, always).
      await until(() => /fibril ui: http/.test(ui.out.stderr), `ui up (${ui.out.stderr})`)
      const page = new URL(/fibril ui: (http:\/\/\S+)/.exec(ui.out.stderr)![1]!)
      const token = page.searchParams.get("token")!
      const shownOnPage = await pageSnapshot<PageAgent>(
        `${page.origin}/events?token=${token}`,
        (agents) => agents.some((agent) => agent.questions.length > 0)
      )
      const onRow = shownOnPage.find((agent) => agent.questions.length > 0)!
      assert.strictEqual(onRow.description, "asker")
      assert.deepStrictEqual(onRow.questions.map((q) => [q.id, q.tool]), [[String(asked!["id"]), "shell"]])
      // Listed from another process too.
      const listed = fibril(["agents", "questions", "--json", "--cluster", url])
      assert.strictEqual(await listed.done, 0, listed.out.stderr)
      const waiting = JSON.parse(listed.out.stdout) as ReadonlyArray<{ id: string; tool: string; reason: string }>
      assert.deepStrictEqual(waiting.map((q) => [q.id, q.tool]), [[String(asked!["id"]), "shell"]])
      assert.include(waiting[0]!.reason, "shell")
      const answered = await fetch(
        `${page.origin}/answer?id=${String(asked!["id"])}&decision=allow&always=true&token=${token}`,
        { method: "POST" }
      )
      assert.strictEqual(answered.status, 200, await answered.text())

      assert.strictEqual(await client.done, 0, client.out.stderr)
      const last = JSON.parse(client.out.stdout.trim().split("\n").at(-1)!) as { status: string; text: string }
      assert.deepStrictEqual([last.status, last.text], ["completed", "root ok"])
      // Asked once (the replayed step found its row, the same asked_at), ran once; the second
      // call was decided by the "always" answer as it was asked, and ran.
      const after = questionRows()
      assert.strictEqual(after.length, 2)
      assert.strictEqual(after[0]!["asked_at"], asked!["asked_at"])
      assert.include(String(after[0]!["answer"]), "\"allow\"")
      assert.include(String(after[1]!["answer"]), "\"standing answer\"")
      assert.strictEqual(readFileSync(path.join(ws, "side-effect.txt"), "utf8"), "ran\nagain\n")
      // The decision is recorded: a `question` and an `answered` event (who: the answering
      // process) in the client's `--json` stream, and the asker's receipt (`agents show`).
      const events = client.out.stdout.trim().split("\n").map((line) => JSON.parse(line) as Record<string, any>)
      const told = events.filter((event) => event["question"]?.id === asked!["id"])
      assert.deepStrictEqual(told.map((event) => [event["type"], event["tool"]]), [["question", "shell"], [
        "answered",
        "shell"
      ]])
      assert.deepStrictEqual(told[1]!["answer"]["decision"], "allow")
      assert.strictEqual(told[1]!["answer"]["by"], "fibril ui")
      assert.strictEqual(told[0]!["description"], "asker")
      const rootId = String(query(file, "SELECT agent_id FROM fibril_agents WHERE parent_id IS NULL")[0]!["agent_id"])
      // The path names the asker's ancestors, root first.
      assert.deepStrictEqual(told[0]!["question"]["path"], [rootId, told[0]!["agent_id"]])
      const shown = fibril(["agents", "show", rootId, "--cluster", url])
      assert.strictEqual(await shown.done, 0, shown.out.stderr)
      const receipts = shown.out.stdout.trim().split("\n").map((line) => JSON.parse(line) as Record<string, any>)
      const asker = receipts.find((receipt) => receipt["description"] === "asker")!
      assert.deepStrictEqual(
        asker["approvals"].map((
          entry: Record<string, unknown>
        ) => [entry["question_id"], entry["tool"], entry["decision"]]),
        [[asked!["id"], "shell", "allow"], [after[1]!["id"], "shell", "allow"]]
      )
      assert.isTrue(asker["approvals"][0]["always"])
      assert.strictEqual(asker["approvals"][1]["by"], "standing answer")
      // Decided as it was asked: only `answered`, as the embedded runtime publishes it.
      assert.deepStrictEqual(
        events.filter((event) => event["question"]?.id === after[1]!["id"]).map((event) => event["answer"]?.by),
        ["standing answer"]
      )
      assert.strictEqual(asker["approvals"][0]["by"], "fibril ui")
      assert.strictEqual(asker["approvals"][0]["asked_at"], Number(asked!["asked_at"]))
      assert.isUndefined(receipts.find((receipt) => receipt["description"] === "sibling")!["approvals"])

      // Answered already: a second answer is refused, naming what is pending.
      const again = fibril(["agents", "answer", String(asked!["id"]), "deny", "--cluster", url])
      assert.strictEqual(await again.done, 1)
      assert.include(again.out.stderr, `there is no pending question "${String(asked!["id"])}"`)
    },
    60_000
  )
})

interface PageAgent {
  readonly description: string
  readonly questions: ReadonlyArray<{ readonly id: string; readonly tool: string }>
}

const request = (agentId: string): Approvals.Ask => ({
  kind: "tool",
  agentId,
  path: [agentId],
  role: "general",
  depth: 1,
  tool: "shell",
  posture: "shell",
  arguments: "{}",
  reason: "\"shell\" is an ask tool"
})

/** A running agent's row (a root unless told otherwise). */
const row = (agentId: string) =>
  agentRow(agentId, { parentId: null, rootId: "ag_1", description: "asker", status: "running" })

let files = 0
/** The questions on a new SQLite file with one running agent `ag_1` (TestClock: time moves when told). */
const withQuestions = <A, E>(
  body: (questions: ClusterQuestions.Service, store: ClusterStore["Service"]) => Effect.Effect<A, E>,
  options: ClusterQuestions.Options = {}
) =>
  Effect.gen(function*() {
    yield* SqliteClusterStore.migrate
    return yield* Effect.gen(function*() {
      const store = yield* ClusterStore
      yield* store.insert(row("ag_1"))
      return yield* body(yield* ClusterQuestions.make({ timeoutSecs: 60, pollMs: 5000, ...options }), store)
    }).pipe(Effect.provide(SqliteClusterStore.layer))
  }).pipe(Effect.provide(Sqlite.layer(path.join(tmp, `questions${files++}.db`))))

describe("ClusterQuestions (in process, SQLite, TestClock)", () => {
  it.effect("an \"always\" answer covers its tool in its subtree only, durably: recorded as a standing answer", () =>
    withQuestions((questions, store) =>
      Effect.gen(function*() {
        const agent = (agentId: string, parentId: string) =>
          store.insert({ ...row("ag_1"), agentId, parentId, depth: 2 })
        // ag_1 > ag_2 > ag_4, and ag_1 > ag_3
        yield* agent("ag_2", "ag_1")
        yield* agent("ag_3", "ag_1")
        yield* agent("ag_4", "ag_2")
        const first = yield* Effect.forkChild(questions.forCall("q-a").ask(request("ag_2")))
        yield* TestClock.adjust("1 second")
        const [asked] = yield* questions.pending
        assert.deepStrictEqual(asked!.path, ["ag_1", "ag_2"])
        yield* questions.decide("q-a", { decision: "allow", always: true, subtree: "ag_2", by: "test" })
        yield* TestClock.adjust("5 seconds")
        assert.strictEqual((yield* Fiber.join(first)).answer.decision, "allow")
        // Below ag_2: decided as asked, and recorded.
        const covered = yield* questions.forCall("q-b").ask(request("ag_4"))
        assert.deepStrictEqual([covered.answer.decision, covered.answer.by], ["allow", "standing answer"])
        assert.deepStrictEqual(covered.question.path, ["ag_1", "ag_2", "ag_4"])
        // Another tool, or an agent outside ag_2's subtree: asked.
        const other = yield* Effect.forkChild(questions.forCall("q-c").ask({ ...request("ag_4"), tool: "write_file" }))
        const outside = yield* Effect.forkChild(questions.forCall("q-d").ask(request("ag_3")))
        yield* TestClock.adjust("1 second")
        assert.deepStrictEqual((yield* questions.pending).map((q) => q.id), ["q-c", "q-d"])
        yield* questions.decide("q-c", { decision: "deny", reason: "no", by: "test" })
        yield* questions.decide("q-d", { decision: "deny", reason: "no", by: "test" })
        yield* TestClock.adjust("5 seconds")
        yield* Fiber.join(other)
        yield* Fiber.join(outside)
        // The receipt of ag_4: both its decisions, who and when, through core's Receipt.
        const receipt = ClusterQuestions.receiptFields(yield* questions.ofAgents(["ag_4"]))
        assert.deepStrictEqual(
          receipt.approvals?.map((entry) => [entry.question_id, entry.tool, entry.decision, entry.by]),
          [["q-b", "shell", "allow", "standing answer"], ["q-c", "write_file", "deny", "test"]]
        )
        assert.isUndefined(receipt.questions)
        // The tree's, for a client's events: every question under the root, oldest first.
        assert.deepStrictEqual((yield* questions.ofTree("ag_1")).map((stored) => stored.question.id), [
          "q-a",
          "q-b",
          "q-c",
          "q-d"
        ])
      })
    ))

  it.effect("[permissions] allow answers its tools' and postures' questions as asked, recorded; others wait", () =>
    withQuestions(
      (questions) =>
        Effect.gen(function*() {
          const byName = yield* questions.forCall("q-n").ask(request("ag_1"))
          assert.deepStrictEqual([byName.answer.decision, byName.answer.by], ["allow", "[permissions] allow"])
          const byPosture = yield* questions.forCall("q-p").ask({ ...request("ag_1"), tool: "grep", posture: "read" })
          assert.strictEqual(byPosture.answer.by, "[permissions] allow")
          // Another tool waits for a person; a fan-out is always asked about.
          const other = yield* Effect.forkChild(
            questions.forCall("q-o").ask({ ...request("ag_1"), tool: "write_file", posture: "write" })
          )
          const fanOut = yield* Effect.forkChild(
            questions.forCall("q-f").ask({ ...request("ag_1"), kind: "fan_out", posture: "shell" })
          )
          yield* TestClock.adjust("1 second")
          assert.sameMembers((yield* questions.pending).map((q) => q.id), ["q-o", "q-f"])
          yield* Fiber.interrupt(other)
          yield* Fiber.interrupt(fanOut)
          const receipt = ClusterQuestions.receiptFields(yield* questions.ofAgents(["ag_1"]))
          assert.deepStrictEqual(receipt.approvals?.map((entry) => [entry.question_id, entry.by]), [
            ["q-n", "[permissions] allow"],
            ["q-p", "[permissions] allow"]
          ])
        }),
      { allow: ["shell", "read"] }
    ))

  it.effect("an unanswered question is a denial at ask_timeout_secs, counted from when it was asked", () =>
    withQuestions((questions) =>
      Effect.gen(function*() {
        const waiting = yield* Effect.forkChild(questions.forCall("q-1").ask(request("ag_1")))
        yield* TestClock.adjust("59 seconds")
        assert.deepStrictEqual((yield* questions.pending).map((q) => q.id), ["q-1"])
        // The heartbeat's filter: waiting on a person is not a stall.
        assert.deepStrictEqual(yield* questions.waitingAmong(["ag_1", "ag_2"], 10_000), ["ag_1"])
        yield* TestClock.adjust("2 seconds")
        const decided = yield* Fiber.join(waiting)
        assert.deepStrictEqual([decided.answer.decision, decided.answer.by], ["deny", "timeout"])
        assert.include(decided.answer.reason!, "no answer within 1m")
        assert.deepStrictEqual(yield* questions.pending, [])
        // Just answered (its call may be running): still not a stall; long after, it may be.
        assert.deepStrictEqual(yield* questions.waitingAmong(["ag_1"], 10_000), ["ag_1"])
        yield* TestClock.adjust("11 seconds")
        assert.deepStrictEqual(yield* questions.waitingAmong(["ag_1"], 10_000), [])
        // Asked again (a replayed step): the stored timeout, not a new wait.
        const replayed = yield* questions.forCall("q-1").ask(request("ag_1"))
        assert.strictEqual(replayed.answer.by, "timeout")
      })
    ))

  it.effect("a cancelled agent's question is withdrawn: not listed, its answer refused, its call denied", () =>
    withQuestions((questions, store) =>
      Effect.gen(function*() {
        const waiting = yield* Effect.forkChild(questions.forCall("q-2").ask(request("ag_1")))
        yield* TestClock.adjust("1 second")
        assert.deepStrictEqual((yield* questions.pending).map((q) => q.id), ["q-2"])
        yield* store.update("ag_1", { status: "cancelled", reason: "cancelled" })
        assert.deepStrictEqual(yield* questions.pending, [])
        const refused = yield* Effect.flip(questions.decide("q-2", { decision: "allow", by: "test" }))
        assert.strictEqual(refused._tag, "UnknownQuestion")
        yield* TestClock.adjust("5 seconds") // its next look at the row
        const decided = yield* Fiber.join(waiting)
        assert.deepStrictEqual([decided.answer.decision, decided.answer.by], ["deny", "cancel"])
      })
    ))
})
