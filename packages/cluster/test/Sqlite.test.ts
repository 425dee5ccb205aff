// Cluster mode on one machine without a database server: `--cluster sqlite:<file>`, with real
// `fibril worker` and client processes on one SQLite file. kill -9 of the worker mid-run and a
// restart: the run completes, no step journaled before the kill runs again, input sent while no
// worker runs is delivered once; `fibril agents` and `fibril cluster prune` read the same file.
// Needs nothing installed (Node's built-in node:sqlite).
import { afterAll, assert, describe, it } from "@effect/vitest"
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { freePort } from "./postgres.ts"
import { agentIdOf, crashScript, fibril, killAll, sqliteQuery as query, stepOfRow, steps, until } from "./processes.ts"

const tmp = mkdtempSync(path.join(os.tmpdir(), "fibril-cluster-sqlite-"))

afterAll(async () => {
  await killAll()
  rmSync(tmp, { recursive: true, force: true })
})

describe("cluster mode on SQLite (one machine, no server) with fibril worker processes", () => {
  it("a file that cannot be opened: exit 2, naming it and what to check", async () => {
    const url = `sqlite:${path.join(tmp, "missing", "dir", "cluster.db")}`
    const migrated = fibril(["cluster", "migrate", "--cluster", url])
    assert.strictEqual(await migrated.done, 2)
    assert.include(migrated.out.stderr, `cannot open the cluster database ${url}`)
    assert.include(migrated.out.stderr, "Check that its directory exists and is writable")
  })

  it(
    "kill -9 of the worker mid-run, restart: the run completes, no step journaled before the kill runs again, input sent meanwhile is delivered",
    async () => {
      const ws = path.join(tmp, "crash")
      mkdirSync(path.join(ws, ".fibril"), { recursive: true })
      writeFileSync(path.join(ws, "a.txt"), "hello")
      writeFileSync(path.join(ws, "script.json"), JSON.stringify(crashScript))
      const file = path.join(ws, "cluster.db")
      const url = `sqlite:${file}`
      const log = path.join(ws, "steps.log")
      writeFileSync(log, "")
      const migrated = fibril(["cluster", "migrate", "--cluster", url])
      assert.strictEqual(await migrated.done, 0, migrated.out.stderr)
      const port = String(await freePort())
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
          { FIBRIL_CLUSTER_STEP_LOG: log }
        )
        await until(() => proc.out.stderr.includes("fibril worker: pid"), `worker up (${proc.out.stderr})`)
        return proc
      }

      const first = await worker()
      const client = fibril(["run", "go", "--cluster", url, "--cwd", ws, "--json"])
      await until(() => steps(log).filter((e) => e.event === "end").length >= 8, "8 steps done")
      const killed = first.child.pid!
      first.child.kill("SIGKILL")
      await first.done
      const journaled = new Set(
        query(file, `SELECT agent_id, run, step, slot FROM fibril_transcript WHERE pid = ${killed}`).flatMap((r) => {
          const name = stepOfRow(Number(r["step"]), Number(r["slot"]))
          return name === undefined ? [] : [`${String(r["agent_id"])}#${String(r["run"])}:${name}`]
        })
      )
      // agent_send_input while no worker runs: the root reads it at its next model step.
      const root = agentIdOf(client)!
      const input = fibril(["cluster", "input", root, "hello across the restart", "--cluster", url])
      assert.strictEqual(await input.done, 0, input.out.stderr + input.out.stdout)

      await worker()
      assert.strictEqual(await client.done, 0, client.out.stderr)
      // The documented `--json` stream, as the embedded engine speaks it: `root` first, `final` last.
      const lines = client.out.stdout.trim().split("\n").map((line) => JSON.parse(line) as Record<string, unknown>)
      assert.deepStrictEqual(lines[0], { type: "root", agent_id: root })
      const last = lines.at(-1) as { type: string; agent_id: string; status: string; text: string; totals: object }
      assert.deepStrictEqual([last.type, last.agent_id, last.status, last.text], [
        "final",
        root,
        "completed",
        "root ok"
      ])
      assert.includeMembers(Object.keys(last.totals), ["agents", "tool_calls", "tokens", "duration_ms", "model"])
      assert.strictEqual((last.totals as { agents: number }).agents, 5)
      assert.deepStrictEqual(
        query(file, "SELECT count(*) AS n FROM fibril_agents WHERE depth = 1 AND status = 'completed'"),
        [{ n: 4 }]
      )
      const rerun = [...journaled].filter((key) =>
        steps(log).some((e) => e.event === "start" && e.pid !== killed && `${e.agentId}#${e.run}:${e.name}` === key)
      )
      assert.isAtLeast(journaled.size, 4, "steps were journaled before the kill")
      assert.deepStrictEqual(rerun, [], "a step journaled before the kill ran again")
      assert.deepStrictEqual(
        query(
          file,
          `SELECT count(*) AS n FROM fibril_transcript WHERE agent_id = '${root}' AND message LIKE '%hello across the restart%'`
        ),
        [{ n: 1 }]
      )
      assert.deepStrictEqual(query(file, "SELECT count(*) AS n FROM fibril_inbox"), [{ n: 0 }])

      // The same file serves the other commands: the tree, then a prune of what is finished.
      const shown = fibril(["agents", "show", root, "--cluster", url])
      assert.strictEqual(await shown.done, 0, shown.out.stderr)
      assert.strictEqual(shown.out.stdout.trim().split("\n").length, 5)
      const pruned = fibril(["cluster", "prune", "--older-than", "0 seconds", "--cluster", url])
      assert.strictEqual(await pruned.done, 0, pruned.out.stderr)
      assert.deepStrictEqual(query(file, "SELECT count(*) AS n FROM fibril_agents"), [{ n: 0 }])
      assert.deepStrictEqual(query(file, "SELECT count(*) AS n FROM fibril_steps"), [{ n: 0 }])
      console.log(
        `sqlite crash test: ${journaled.size} steps journaled before the kill, 0 ran again; ${
          steps(log).filter((e) => e.event === "start").length
        } step executions`
      )
    },
    60_000
  )
})
