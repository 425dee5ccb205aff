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
import { type ChildProcess, spawn } from "node:child_process"
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DatabaseSync } from "node:sqlite"
import { fileURLToPath } from "node:url"

const bin = fileURLToPath(new URL("../packages/cli/src/bin.ts", import.meta.url))

export interface Result {
  readonly children: number
  readonly kills: number
  readonly journaledBeforeKills: number
  readonly rerun: ReadonlyArray<string>
  readonly delivered: number
  readonly completed: number
  readonly ms: number
}

interface Proc {
  readonly child: ChildProcess
  readonly out: { stdout: string; stderr: string }
  readonly done: Promise<number>
}

const running = new Set<ChildProcess>()

const fibril = (args: ReadonlyArray<string>, env: Record<string, string> = {}): Proc => {
  const child = spawn(process.execPath, ["--conditions=@fibril/source", bin, ...args], {
    env: { ...process.env, OPENAI_API_KEY: "", FIBRIL_MODEL: "", ...env },
    stdio: ["ignore", "pipe", "pipe"]
  })
  running.add(child)
  const out = { stdout: "", stderr: "" }
  child.stdout!.on("data", (d) => out.stdout += String(d))
  child.stderr!.on("data", (d) => out.stderr += String(d))
  const done = new Promise<number>((resolve) =>
    child.on("exit", (code, signal) => {
      running.delete(child)
      resolve(code ?? (signal === "SIGKILL" ? 137 : 1))
    })
  )
  return { child, out, done }
}

const until = async (check: () => boolean, what: string, ms = 60_000) => {
  const deadline = Date.now() + ms
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

const freePort = () =>
  new Promise<number>((resolve) => {
    const server = createServer()
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      server.close(() => resolve(typeof address === "object" && address !== null ? address.port : 0))
    })
  })

const query = (file: string, sql: string) => {
  const db = new DatabaseSync(file, { readOnly: true })
  try {
    return db.prepare(sql).all() as Array<Record<string, unknown>>
  } finally {
    db.close()
  }
}

interface StepEvent {
  readonly pid: number
  readonly event: "start" | "end"
  readonly agentId: string
  readonly run: number
  readonly name: string
}

const steps = (log: string): ReadonlyArray<StepEvent> =>
  readFileSync(log, "utf8").split("\n").filter((l) => l !== "").map((l) => JSON.parse(l) as StepEvent)

/** The step a transcript row belongs to (AgentWorkflow: slot 100 the answer, 1000 + i tool call i). */
const stepOfRow = (step: number, slot: number) =>
  slot === 100 ? `model/${step}` : slot >= 1000 ? `tool/${step}/${slot - 1000}` : `model/${step}`

const script = (children: number) => ({
  rules: [
    {
      match: { depth: 1 },
      turns: [
        { tool_calls: [{ name: "read_file", args: { path: "a.txt" } }], delay_ms: 150 },
        { tool_calls: [{ name: "list_dir", args: {} }], delay_ms: 150 },
        { tool_calls: [{ name: "read_file", args: { path: "a.txt" } }], delay_ms: 150 },
        { text: "child ok", delay_ms: 150 }
      ]
    },
    {
      match: { depth: 0 },
      turns: [
        {
          tool_calls: Array.from({ length: children }, (_, i) => ({
            name: "task",
            args: { description: `part ${i}`, prompt: `part ${i}` }
          }))
        },
        { text: "root ok" }
      ]
    }
  ]
})

export const measure = async (children = 6): Promise<Result> => {
  const ws = mkdtempSync(join(tmpdir(), "fibril-bench-kill-"))
  try {
    mkdirSync(join(ws, ".fibril"))
    writeFileSync(join(ws, "a.txt"), "hello")
    writeFileSync(join(ws, "script.json"), JSON.stringify(script(children)))
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
      await until(() => proc.out.stderr.includes("fibril worker: pid"), `worker up (${proc.out.stderr})`)
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
      await until(() => ended() >= after, `${after} steps ended`)
      const killed = workers.at(-1)!
      killed.child.kill("SIGKILL")
      await killed.done
      const rows = query(
        file,
        `SELECT agent_id, run, step, slot FROM fibril_transcript WHERE pid = ${killed.child.pid}`
      )
      for (const row of rows) {
        const name = stepOfRow(Number(row["step"]), Number(row["slot"]))
        journaled.set(`${String(row["agent_id"])}#${String(row["run"])}:${name}`, workers.length - 1)
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
    await Promise.all([...running].map((child) =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve()
        child.once("exit", () => resolve())
        child.kill("SIGKILL")
      })
    ))
    if (process.env["KEEP"] === undefined) rmSync(ws, { recursive: true, force: true })
    else console.log(ws)
  }
}

if (import.meta.main) {
  const result = await measure(Number(process.argv[2] ?? 6))
  console.log(
    `cluster kill -9 (SQLite, ${result.children} children, ${result.kills} kills): ${result.journaledBeforeKills} steps journaled by killed workers, ${result.rerun.length} ran again; ${result.delivered} task results delivered to the root (${result.completed} completed); ${result.ms} ms`
  )
  process.stdout.write(`CLUSTER_KILL ${JSON.stringify(result)}\n`)
}
