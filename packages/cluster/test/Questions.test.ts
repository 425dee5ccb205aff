// Durable approval questions in cluster mode, on SQLite, with real `fibril worker` processes: a
// child's `shell` call asks (`[permissions] ask = ["shell"]`) while its sibling finishes; the
// worker is killed -9 while the question waits; a new worker starts; a third process answers it
// (`fibril agents questions|answer --cluster`); the call runs once (counted on disk) and the run
// completes. The question is a row (ClusterQuestions): asked once, its answer not lost.
import { afterAll, assert, describe, it } from "@effect/vitest"
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { DatabaseSync } from "node:sqlite"
import { children, fibril, until } from "./processes.ts"

const tmp = mkdtempSync(path.join(os.tmpdir(), "fibril-cluster-questions-"))

afterAll(async () => {
  // Kill AND await every process before its directory goes.
  await Promise.all(
    [...children].map((child) => new Promise((resolve) => (child.once("exit", resolve), child.kill("SIGKILL"))))
  )
  rmSync(tmp, { recursive: true, force: true })
})

const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const server = net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })

const query = (file: string, sql: string): ReadonlyArray<Record<string, unknown>> => {
  const db = new DatabaseSync(file, { readOnly: true })
  try {
    return db.prepare(sql).all() as Array<Record<string, unknown>>
  } finally {
    db.close()
  }
}

/** A tool call's side effect, counted on disk: one line per execution. */
const askScript = {
  rules: [
    {
      match: { prompt: "asker" },
      turns: [
        { tool_calls: [{ name: "shell", args: { command: "echo ran >> side-effect.txt" } }] },
        { text: "asker done" }
      ]
    },
    {
      match: { prompt: "sibling" },
      turns: [{ tool_calls: [{ name: "read_file", args: { path: "a.txt" } }] }, { text: "sibling done" }]
    },
    {
      match: { depth: 0 },
      turns: [
        {
          tool_calls: [
            { name: "task", args: { description: "asker", prompt: "asker" } },
            { name: "task", args: { description: "sibling", prompt: "sibling" } }
          ]
        },
        { text: "root ok" }
      ]
    }
  ]
}

describe("durable approval questions in cluster mode (SQLite, fibril worker processes)", () => {
  it(
    "a question pending, kill -9 of the worker, restart, answered from another process: the call runs once, the run completes",
    async () => {
      const ws = path.join(tmp, "ask")
      mkdirSync(path.join(ws, ".fibril"), { recursive: true })
      writeFileSync(path.join(ws, ".fibril", "config.toml"), `[permissions]\nask = ["shell"]\n`)
      writeFileSync(path.join(ws, "a.txt"), "hello")
      writeFileSync(path.join(ws, "script.json"), JSON.stringify(askScript))
      const file = path.join(ws, "cluster.db")
      const url = `sqlite:${file}`
      const migrated = fibril(["cluster", "migrate", "--cluster", url])
      assert.strictEqual(await migrated.done, 0, migrated.out.stderr)
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
        existsSync(file) ? query(file, "SELECT id, answer, asked_at FROM fibril_questions") : []
      const siblingDone = () =>
        query(file, "SELECT count(*) AS n FROM fibril_agents WHERE prompt = 'sibling' AND status = 'completed'")[0]![
          "n"
        ] === 1

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
      // Listed from a third process, then answered from it.
      const listed = fibril(["agents", "questions", "--json", "--cluster", url])
      assert.strictEqual(await listed.done, 0, listed.out.stderr)
      const waiting = JSON.parse(listed.out.stdout) as ReadonlyArray<{ id: string; tool: string; reason: string }>
      assert.deepStrictEqual(waiting.map((q) => [q.id, q.tool]), [[String(asked!["id"]), "shell"]])
      assert.include(waiting[0]!.reason, "shell")
      const answered = fibril(["agents", "answer", String(asked!["id"]), "allow", "--cluster", url])
      assert.strictEqual(await answered.done, 0, answered.out.stderr + answered.out.stdout)

      assert.strictEqual(await client.done, 0, client.out.stderr)
      const last = JSON.parse(client.out.stdout.trim().split("\n").at(-1)!) as { status: string; text: string }
      assert.deepStrictEqual([last.status, last.text], ["completed", "root ok"])
      // Asked once (the replayed step found its row, the same asked_at), ran once.
      const after = questionRows()
      assert.strictEqual(after.length, 1)
      assert.strictEqual(after[0]!["asked_at"], asked!["asked_at"])
      assert.include(String(after[0]!["answer"]), "\"allow\"")
      assert.strictEqual(readFileSync(path.join(ws, "side-effect.txt"), "utf8"), "ran\n")
      // Answered already: a second answer is refused, naming what is pending.
      const again = fibril(["agents", "answer", String(asked!["id"]), "deny", "--cluster", url])
      assert.strictEqual(await again.done, 1)
      assert.include(again.out.stderr, `there is no pending question "${String(asked!["id"])}"`)
    },
    60_000
  )
})
