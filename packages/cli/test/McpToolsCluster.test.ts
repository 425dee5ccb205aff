// MCP tools in cluster mode (issue 34): each `fibril worker` starts the MCP servers of its own
// workspace's configuration, and an MCP tool call is a journaled step like any tool call. A real
// worker on a SQLite file, then on PostgreSQL, runs a child that calls a counting stdio MCP server (a fixture written
// with the MCP SDK, which counts on disk); the worker is killed -9 after the call was journaled,
// a new one finishes the run, and the server-side count is still 1. A call to a server the worker
// does not have is a refusal naming the server, not a silent fallback.
import { afterAll, assert, describe, it } from "@effect/vitest"
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as Pg from "../../cluster/test/postgres.ts"
import { fibril, killAll, sqliteQuery, steps, until } from "../../cluster/test/processes.ts"

const tmp = mkdtempSync(path.join(os.tmpdir(), "fibril-mcp-cluster-"))
const counter = fileURLToPath(new URL("./fixtures/counterMcp.ts", import.meta.url))

let pg: Pg.Postgres | undefined

afterAll(async () => {
  await killAll()
  pg?.stop()
  rmSync(tmp, { recursive: true, force: true })
})

/** The two stores a cluster runs on: where its database is, and a count of rows matching `where`. */
interface Store {
  readonly name: "sqlite" | "postgres"
  readonly skip: string | undefined
  readonly open: (ws: string) => Promise<{ url: string; count: (query: string) => number }>
}

const stores: ReadonlyArray<Store> = [
  {
    name: "sqlite",
    skip: undefined,
    open: async (ws) => {
      const file = path.join(ws, "cluster.db")
      return { url: `sqlite:${file}`, count: (query) => Number(sqliteQuery(file, query)[0]!["n"]) }
    }
  },
  {
    name: "postgres",
    skip: Pg.skipReason(),
    open: async () => {
      pg = await Pg.start()
      pg.createDatabase("mcp")
      const server = pg
      return { url: server.url("mcp"), count: (query) => Number(server.psql("mcp", query)) }
    }
  }
]

const script = {
  rules: [
    {
      match: { depth: 1 },
      // The step after the call comes slowly: the worker is killed while it is awaited. Then a
      // server this worker does not have: a refusal the model reads, naming it.
      turns: [
        { tool_calls: [{ name: "mcp__counter__count", args: {} }] },
        { tool_calls: [{ name: "mcp__tracker__open", args: {} }], delay_ms: 1500 },
        { text: "child done" }
      ]
    },
    {
      match: { depth: 0 },
      turns: [{ tool_calls: [{ name: "task", args: { description: "count", prompt: "count once" } }] }, {
        text: "root done"
      }]
    }
  ]
}

describe.each(stores)("MCP tools in cluster mode ($name)", (store) => {
  it.skipIf(store.skip !== undefined)(
    "a call journaled before kill -9 of the worker is not made again on restart (counted by the server); a server the worker lacks is refused by name",
    async () => {
      const ws = path.join(tmp, store.name, "ws")
      const home = path.join(tmp, store.name, "home")
      mkdirSync(path.join(ws, ".fibril"), { recursive: true })
      mkdirSync(path.join(home, ".fibril"), { recursive: true })
      const count = path.join(tmp, store.name, "count.txt")
      // The user's configuration (trusted): the counter, on this Node.
      writeFileSync(
        path.join(home, ".fibril", "config.toml"),
        `[mcp_servers.counter]\ncommand = ${JSON.stringify(process.execPath)}\nargs = ${
          JSON.stringify([counter, count])
        }\n`
      )
      writeFileSync(path.join(ws, "script.json"), JSON.stringify(script))
      const db = await store.open(ws)
      const url = db.url
      const log = path.join(ws, "steps.log")
      writeFileSync(log, "")
      const migrated = fibril(["cluster", "migrate", "--cluster", url])
      assert.strictEqual(await migrated.done, 0, migrated.out.stderr)
      const port = String(await Pg.freePort())
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
            port
          ],
          { FIBRIL_CLUSTER_STEP_LOG: log, HOME: home }
        )
        await until(() => proc.out.stderr.includes("fibril worker: pid"), `worker up (${proc.out.stderr})`)
        return proc
      }
      const first = await worker()
      const client = fibril(["run", "go", "--cluster", url, "--cwd", ws, "--json"], { HOME: home })
      // The child's tool step ended (its result journaled); its next model step is under way.
      await until(
        () => steps(log).some((e) => e.event === "end" && e.name.startsWith("tool/")),
        `the MCP call's step ended (${first.out.stderr})`
      )
      first.child.kill("SIGKILL")
      await first.done
      assert.strictEqual(readFileSync(count, "utf8").split("\n").filter(Boolean).length, 1)

      await worker()
      assert.strictEqual(await client.done, 0, client.out.stderr)
      const last = JSON.parse(client.out.stdout.trim().split("\n").at(-1)!) as { status: string; text: string }
      assert.deepStrictEqual([last.status, last.text], ["completed", "root done"])
      // Not made again by the worker that finished the run: the server counted one call.
      assert.strictEqual(readFileSync(count, "utf8").split("\n").filter(Boolean).length, 1)
      // The call to a server the worker lacks: refused, naming it (in the child's transcript).
      const refused = db.count(
        // (The server's name between its quotes, whichever way a store escapes them in the JSON.)
        "SELECT count(*) AS n FROM fibril_transcript WHERE message LIKE '%no MCP server %tracker% is running%'"
      )
      assert.strictEqual(refused, 1)
    },
    60_000
  )
})
