// A tree run by two real `fibril worker` processes (and a `fibril run --cluster` client) on one
// SQLite file, each exporting its spans with `--otlp` to one OTLP/HTTP receiver: the spans of
// both workers join into one trace, each agent's `invoke_agent` span under the tool call of its
// parent that started it, whichever worker ran which (GenAiTrace, AgentPayload.trace).
import { afterAll, assert, describe, it } from "@effect/vitest"
import { OtlpReceiver } from "@fibril/testkit"
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import * as Http from "node:http"
import * as os from "node:os"
import * as path from "node:path"
import { DatabaseSync } from "node:sqlite"
import { freePort } from "./postgres.ts"
import { fibril, killAll, steps, until } from "./processes.ts"

const tmp = mkdtempSync(path.join(os.tmpdir(), "fibril-cluster-traces-"))
const servers: Array<Http.Server> = []

afterAll(async () => {
  await killAll()
  for (const server of servers) server.close()
  rmSync(tmp, { recursive: true, force: true })
})

/** An OTLP/HTTP traces endpoint keeping what it receives (testkit's parsing). */
const receiver = () =>
  new Promise<{ url: string; spans: Array<OtlpReceiver.ReceivedSpan> }>((resolve) => {
    const spans: Array<OtlpReceiver.ReceivedSpan> = []
    const server = Http.createServer((request, response) => {
      let body = ""
      request.on("data", (chunk) => (body += String(chunk)))
      request.on("end", () => {
        if (request.url === "/v1/traces") spans.push(...OtlpReceiver.spansOf(body))
        response.writeHead(200, { "content-type": "application/json" }).end("{}")
      })
    })
    servers.push(server)
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as { port: number }).port
      resolve({ url: `http://127.0.0.1:${port}/v1/traces`, spans })
    })
  })

const report = (summary: string) =>
  `SUMMARY:\n${summary}\n\nCHANGES:\nnone\n\nEVIDENCE:\nnone\n\nRISKS:\nnone\n\nBLOCKERS:\nnone`

// Root -> six general children (task) -> one explore grandchild each (agent_spawn, then
// agent_wait): thirteen agents, spread over the two workers' shards.
const script = {
  rules: [
    { match: { depth: 2 }, turns: [{ tool_calls: [{ name: "list_dir", args: {} }] }, { text: report("listed") }] },
    {
      match: { depth: 1 },
      turns: [
        {
          tool_calls: [{
            name: "agent_spawn",
            args: { description: "look", prompt: "look", subagent_type: "explore" }
          }]
        },
        { tool_calls: [{ name: "agent_wait", args: { wait_mode: "all" } }] },
        { text: report("looked") }
      ]
    },
    {
      match: { depth: 0 },
      turns: [
        {
          tool_calls: [1, 2, 3, 4, 5, 6].map((i) => ({
            name: "task",
            args: { description: `part ${i}`, prompt: `part ${i}`, subagent_type: "general" }
          }))
        },
        { text: "root ok" }
      ]
    }
  ]
}

describe("GenAI traces across cluster workers", () => {
  it(
    "two fibril worker processes and a client export to one receiver: one trace, each run under its starter",
    async () => {
      const ws = path.join(tmp, "ws")
      mkdirSync(path.join(ws, ".fibril"), { recursive: true })
      writeFileSync(path.join(ws, "script.json"), JSON.stringify(script))
      writeFileSync(path.join(ws, ".fibril", "config.toml"), "[subagents]\nmax_depth = 2\nmax_concurrent = 20\n")
      const file = path.join(ws, "cluster.db")
      const url = `sqlite:${file}`
      const log = path.join(ws, "steps.log")
      writeFileSync(log, "")
      const otlp = await receiver()
      const migrated = fibril(["cluster", "migrate", "--cluster", url])
      assert.strictEqual(await migrated.done, 0, migrated.out.stderr)
      const worker = async () => {
        const proc = fibril(
          [
            "worker",
            "--cluster",
            url,
            "--cwd",
            ws,
            "--model",
            `scripted:${path.join(ws, "script.json")}`,
            "--port",
            String(await freePort()),
            "--otlp",
            otlp.url
          ],
          { FIBRIL_CLUSTER_STEP_LOG: log }
        )
        await until(() => proc.out.stderr.includes("fibril worker: pid"), `worker up (${proc.out.stderr})`)
        return proc
      }
      const workers = await Promise.all([worker(), worker()])
      // Both hold shards before the tree starts (the second takes its share from the first).
      const holders = () => {
        const db = new DatabaseSync(file, { readOnly: true })
        try {
          return Number(
            (db.prepare("SELECT count(DISTINCT address) AS n FROM cluster_locks").get() as { n: number }).n
          )
        } finally {
          db.close()
        }
      }
      await until(() => holders() === 2, "both workers hold shards")
      const client = fibril(["run", "go", "--cluster", url, "--cwd", ws, "--json", "--otlp", otlp.url])
      assert.strictEqual(await client.done, 0, client.out.stderr + client.out.stdout)
      // Stopped, each worker flushes what it has not sent yet.
      for (const proc of workers) proc.child.kill("SIGTERM")
      await Promise.all(workers.map((proc) => proc.done))

      const ran = new Set(steps(log).map((e) => e.pid))
      assert.strictEqual(ran.size, 2, "both workers ran steps")
      const spans = otlp.spans
      const names = spans.map((s) => s.name).join(", ")
      const byId = new Map(spans.map((s) => [s.spanId, s]))
      const ancestor = (span: OtlpReceiver.ReceivedSpan, prefix: string) => {
        let at = span.parentSpanId === undefined ? undefined : byId.get(span.parentSpanId)
        while (at !== undefined && !at.name.startsWith(prefix)) {
          at = at.parentSpanId === undefined ? undefined : byId.get(at.parentSpanId)
        }
        return at
      }
      const agents = spans.filter((s) => s.attributes["gen_ai.operation.name"] === "invoke_agent")
      const atDepth = (depth: number) => agents.filter((s) => s.attributes["fibril.agent.depth"] === depth)
      assert.deepStrictEqual(
        [0, 1, 2].map((d) => new Set(atDepth(d).map((s) => s.attributes["gen_ai.agent.id"])).size),
        [1, 6, 6],
        names
      )
      const genAi = spans.filter((s) => s.attributes["gen_ai.operation.name"] !== undefined)
      assert.strictEqual(new Set(genAi.map((s) => s.traceId)).size, 1, "one trace")
      // The root under the client's `fibril.run` span (the trace's root); every run under the tool call that started it.
      for (const root of atDepth(0)) assert.strictEqual(ancestor(root, "fibril.run")?.parentSpanId, undefined, names)
      for (const child of atDepth(1)) {
        assert.strictEqual(ancestor(child, "execute_tool ")?.name, "execute_tool task")
        assert.strictEqual(ancestor(ancestor(child, "execute_tool ")!, "invoke_agent "), atDepth(0)[0])
      }
      for (const grandchild of atDepth(2)) {
        const call = ancestor(grandchild, "execute_tool ")!
        assert.strictEqual(call.name, "execute_tool agent_spawn")
        assert.strictEqual(
          ancestor(call, "invoke_agent ")?.attributes["gen_ai.agent.id"],
          grandchild.attributes["fibril.agent.parent_id"]
        )
      }
      const chats = spans.filter((s) => s.attributes["gen_ai.operation.name"] === "chat")
      assert.isAtLeast(chats.length, 1 + 6 * 3 + 6 * 2)
      for (const chat of chats) assert.isNumber(chat.attributes["gen_ai.usage.input_tokens"])
      assert.strictEqual(spans.filter((s) => s.name === "execute_tool list_dir").length, 6)
    },
    90_000
  )
})
