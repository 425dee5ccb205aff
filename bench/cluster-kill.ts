/**
 * `node --conditions=@fibril/source bench/cluster-kill.ts` (the scorecard's cluster row): the
 * cluster's exactly-once guarantees measured across kill -9, with real `fibril worker` processes
 * on one SQLite file. A root starts K children with `task` in one turn; each child makes three
 * tool steps, then answers (150 ms a model call). The worker is killed with SIGKILL twice, each
 * time once more steps have ended, and a new one started; then the run is awaited.
 *
 * Counted from the workers' step log (`FIBRIL_CLUSTER_STEP_LOG`) and the store:
 * - journaled steps re-run: a step whose transcript row a killed worker committed, started again
 *   by a later worker (goal 0);
 * - completions delivered: the `task` results in the root's transcript, each one row per child
 *   (goal exactly K, each `completed`).
 *
 * Prints one JSON line (`CLUSTER_KILL {...}`) after a readable summary.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { freePort } from "../packages/cluster/test/postgres.ts"
import {
  crashScriptFor,
  fibrilAt,
  killAll,
  sqliteQuery as query,
  stepOfRow,
  steps,
  until
} from "../packages/cluster/test/workerProcesses.ts"

const bin = fileURLToPath(new URL("../packages/cli/src/bin.ts", import.meta.url))
const fibril = (args: ReadonlyArray<string>, env: Record<string, string> = {}) => fibrilAt(bin, args, env)

export interface Result {
  readonly children: number
  readonly kills: number
  readonly journaledBeforeKills: number
  readonly rerun: ReadonlyArray<string>
  readonly delivered: number
  readonly completed: number
  readonly ms: number
}

export const measure = async (children = 6): Promise<Result> => {
  const ws = mkdtempSync(join(tmpdir(), "fibril-bench-kill-"))
  try {
    mkdirSync(join(ws, ".fibril"))
    writeFileSync(join(ws, "a.txt"), "hello")
    writeFileSync(join(ws, "script.json"), JSON.stringify(crashScriptFor(children)))
    const file = join(ws, "cluster.db")
    const url = `sqlite:${file}`
    const log = join(ws, "steps.log")
    writeFileSync(log, "")
    const migrated = fibril(["cluster", "migrate", "--cluster", url])
    if (await migrated.done !== 0) throw new Error(`cluster migrate: ${migrated.out.stderr}`)
    const port = String(await freePort())
    const worker = async () => {
      const proc = fibril(
        ["worker", "--cluster", url, "--cwd", ws, "--model", `scripted:${join(ws, "script.json")}`, "--port", port],
        { FIBRIL_CLUSTER_STEP_LOG: log }
      )
      await until(() => proc.out.stderr.includes("fibril worker: pid"), `worker up (${proc.out.stderr})`, 60_000)
      return proc
    }
    const ended = () => steps(log).filter((e) => e.event === "end").length
    const started = Date.now()
    // The workers in the order they ran; a step is keyed by its agent, run and name.
    const workers = [await worker()]
    const client = fibril(["run", "go", "--cluster", url, "--cwd", ws, "--json"])
    // What each killed worker committed: key -> the index of that worker.
    const journaled = new Map<string, number>()
    // Killed twice: once the children are under way, and again half-way through their steps.
    for (const after of [children + 2, children * 3]) {
      await until(() => ended() >= after, `${after} steps ended`, 60_000)
      const killed = workers.at(-1)!
      killed.child.kill("SIGKILL")
      await killed.done
      const rows = query(
        file,
        `SELECT agent_id, run, step, slot FROM fibril_transcript WHERE pid = ${killed.child.pid}`
      )
      for (const row of rows) {
        const name = stepOfRow(Number(row["step"]), Number(row["slot"]))
        if (name !== undefined) {
          journaled.set(`${String(row["agent_id"])}#${String(row["run"])}:${name}`, workers.length - 1)
        }
      }
      workers.push(await worker())
    }
    const exit = await client.done
    if (exit !== 0) throw new Error(`fibril run --cluster: exit ${exit}: ${client.out.stderr}`)
    const ms = Date.now() - started
    // A step a killed worker committed, started again by a worker that came after it.
    const pids = workers.map((w) => w.child.pid)
    const rerun = [...journaled].filter(([key, by]) =>
      steps(log).some((e) =>
        e.event === "start" && pids.indexOf(e.pid) > by && `${e.agentId}#${e.run}:${e.name}` === key
      )
    ).map(([key]) => key)
    const root = query(file, "SELECT agent_id FROM fibril_agents WHERE depth = 0")[0]!["agent_id"] as string
    const delivered = query(
      file,
      `SELECT message FROM fibril_transcript WHERE agent_id = '${root}' AND step = 0 AND slot >= 1000`
    )
    const completed = delivered.filter((row) => {
      const message = JSON.parse(String(row["message"])) as { content: ReadonlyArray<{ result?: { status?: string } }> }
      return message.content.every((part) => part.result?.status === "completed")
    })
    return {
      children,
      kills: workers.length - 1,
      journaledBeforeKills: journaled.size,
      rerun,
      delivered: delivered.length,
      completed: completed.length,
      ms
    }
  } finally {
    await killAll()
    rmSync(ws, { recursive: true, force: true })
  }
}

if (import.meta.main) {
  const result = await measure(Number(process.argv[2] ?? 6))
  console.log(
    `cluster kill -9 (SQLite, ${result.children} children, ${result.kills} kills): ${result.journaledBeforeKills} steps journaled by killed workers, ${result.rerun.length} ran again; ${result.delivered} task results delivered to the root (${result.completed} completed); ${result.ms} ms`
  )
  process.stdout.write(`CLUSTER_KILL ${JSON.stringify(result)}\n`)
}
