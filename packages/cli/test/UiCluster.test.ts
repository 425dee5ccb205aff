// `fibril ui --cluster sqlite:<file>`: the page's data over a cluster's agents. Real processes:
// a `fibril worker` and a `fibril run --cluster` client on one SQLite file, and the page's server
// read as the page reads it (its /events stream and /agent), without a browser (Ui.test.ts
// drives the same page in one). On the same worker: `fibril mcp --cluster` as an MCP tasks
// server, killed between the task call and the poll (McpTasks.test.ts covers the embedded one).
import { afterAll, assert, describe, it } from "@effect/vitest"
import { spawn } from "node:child_process"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { freePort } from "../../cluster/test/postgres.ts"
import { children, fibril, killAll, pageSnapshot, until } from "../../cluster/test/processes.ts"
import { bin, sourceCondition } from "./run.ts"

const tmp = mkdtempSync(path.join(os.tmpdir(), "fibril-ui-cluster-"))

afterAll(async () => {
  await killAll()
  rmSync(tmp, { recursive: true, force: true })
})

const script = {
  rules: [
    { match: { depth: 1 }, turns: [{ tool_calls: [{ name: "list_dir", args: {} }] }, { text: "child done" }] },
    {
      match: { depth: 0 },
      turns: [{ tool_calls: [{ name: "task", args: { description: "a look", prompt: "look" } }] }, {
        text: "root done"
      }]
    }
  ]
}

interface AgentView {
  readonly id: string
  readonly parent_id: string | null
  readonly status: string
  readonly description: string
}

/** `fibril mcp` with its stdin open: `call` sends a request and waits (bounded) for its answer. */
const mcp = (args: ReadonlyArray<string>) => {
  const child = spawn(process.execPath, [sourceCondition, bin, ...args], {
    env: { ...process.env, OPENAI_API_KEY: "", FIBRIL_MODEL: "" },
    stdio: ["pipe", "pipe", "pipe"]
  })
  children.add(child)
  const answers = new Map<number, { result?: any; error?: { code: number } }>()
  let pending = ""
  let stderr = ""
  child.stderr.on("data", (d) => (stderr += String(d)))
  child.stdout.on("data", (d) => {
    pending += String(d)
    for (let end = pending.indexOf("\n"); end >= 0; end = pending.indexOf("\n")) {
      const message = JSON.parse(pending.slice(0, end)) as { id?: number; result?: unknown }
      if (typeof message.id === "number") answers.set(message.id, message)
      pending = pending.slice(end + 1)
    }
  })
  let next = 1
  const call = async (method: string, params: Record<string, unknown>) => {
    const id = next++
    child.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", id, method, params })}\n`)
    await until(() => answers.has(id), `an answer to ${method} (${stderr})`, 60_000)
    return answers.get(id)!
  }
  return { child, call }
}

const tasksMeta = {
  "io.modelcontextprotocol/protocolVersion": "2026-07-28",
  "io.modelcontextprotocol/clientInfo": { name: "tasks", version: "0" },
  "io.modelcontextprotocol/clientCapabilities": { extensions: { "io.modelcontextprotocol/tasks": {} } }
}

describe("fibril ui --cluster", () => {
  it(
    "shows the cluster's tree (root and child, completed), a child's transcript with its tool call and its result; 401 without the token; an MCP task outlives the server that made it",
    async () => {
      writeFileSync(path.join(tmp, "script.json"), JSON.stringify(script))
      const model = `scripted:${path.join(tmp, "script.json")}`
      const url = `sqlite:${path.join(tmp, "cluster.db")}`
      const migrated = fibril(["cluster", "migrate", "--cluster", url])
      assert.strictEqual(await migrated.done, 0, migrated.out.stderr)
      const port = String(await freePort())
      const worker = fibril(["worker", "--cluster", url, "--cwd", tmp, "--model", model, "--port", port])
      const ui = fibril(["ui", "--cluster", url, "--cwd", tmp])
      await until(() => worker.out.stderr.includes("fibril worker: pid"), `worker up (${worker.out.stderr})`)
      await until(() => /fibril ui: http/.test(ui.out.stderr), `ui up (${ui.out.stderr})`)
      const page = new URL(/fibril ui: (http:\/\/\S+)/.exec(ui.out.stderr)![1]!)
      const token = page.searchParams.get("token")!
      assert.strictEqual((await fetch(`${page.origin}/events`)).status, 401)

      const client = fibril(["run", "go", "--cluster", url, "--cwd", tmp, "--json"])
      assert.strictEqual(await client.done, 0, client.out.stderr)
      const agents = await pageSnapshot<AgentView>(
        `${page.origin}/events?token=${token}`,
        (all) => all.length === 2 && all.every((agent) => agent.status === "completed")
      )
      const child = agents.find((agent) => agent.parent_id !== null)!
      assert.strictEqual(child.parent_id, agents.find((agent) => agent.parent_id === null)!.id)
      const detail = await (await fetch(`${page.origin}/agent?id=${child.id}&token=${token}`)).json() as {
        transcript: ReadonlyArray<{ text: string }>
        result: { text: string }
      }
      assert.isTrue(detail.transcript.some((message) => message.text.startsWith("→ list_dir")))
      assert.strictEqual(detail.result.text, "child done")

      // A task through one `fibril mcp --cluster`, killed at once; another answers its poll.
      const first = mcp(["mcp", "--cluster", url, "--cwd", tmp])
      const created = await first.call("tools/call", {
        name: "task",
        arguments: { description: "a look", prompt: "look" },
        _meta: tasksMeta
      })
      assert.strictEqual(created.result.resultType, "task", JSON.stringify(created))
      first.child.kill("SIGKILL")
      const second = mcp(["mcp", "--cluster", url, "--cwd", tmp])
      let polled = await second.call("tasks/get", { taskId: created.result.taskId, _meta: tasksMeta })
      for (let i = 0; i < 300 && polled.result?.status === "working"; i++) {
        await new Promise((resolve) => setTimeout(resolve, 100))
        polled = await second.call("tasks/get", { taskId: created.result.taskId, _meta: tasksMeta })
      }
      assert.strictEqual(polled.result?.status, "completed", JSON.stringify(polled))
      assert.strictEqual(polled.result.result.structuredContent.status, "completed")
      assert.strictEqual(polled.result.result.structuredContent.agent_id, created.result.taskId)
      second.child.kill("SIGTERM")
      worker.child.kill("SIGTERM")
      ui.child.kill("SIGTERM")
    },
    120_000
  )
})
