// `fibril ui --cluster sqlite:<file>`: the page's data over a cluster's agents. Real processes:
// a `fibril worker` and a `fibril run --cluster` client on one SQLite file, and the page's server
// read as the page reads it (its /events stream and /agent), without a browser (Ui.test.ts
// drives the same page in one).
import { afterAll, assert, describe, it } from "@effect/vitest"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { children, fibril, until } from "../../cluster/test/processes.ts"

const tmp = mkdtempSync(path.join(os.tmpdir(), "fibril-ui-cluster-"))

afterAll(() => {
  for (const child of children) child.kill("SIGKILL")
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

/** The first /events snapshot in which `done` holds (a bounded read of the live stream). */
const snapshotWhere = async (url: string, done: (agents: ReadonlyArray<AgentView>) => boolean) => {
  const response = await fetch(url, { signal: AbortSignal.timeout(30_000) })
  assert.strictEqual(response.status, 200)
  const decoder = new TextDecoder()
  let buffer = ""
  for await (const chunk of response.body!) {
    buffer += decoder.decode(chunk, { stream: true })
    let end: number
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end)
      buffer = buffer.slice(end + 2)
      const agents = (JSON.parse(event.replace(/^data: /, "")) as { agents: ReadonlyArray<AgentView> }).agents
      if (done(agents)) return agents
    }
  }
  throw new Error("the stream ended first")
}

describe("fibril ui --cluster", () => {
  it(
    "shows the cluster's tree (root and child, completed), a child's transcript with its tool call and its result; 401 without the token",
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
      const agents = await snapshotWhere(
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
      worker.child.kill("SIGTERM")
      ui.child.kill("SIGTERM")
    },
    120_000
  )
})
