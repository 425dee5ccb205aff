// Real `fibril` processes for the cluster's integration tests (processes.ts gives them the test
// run's bundle) and for bench/cluster-kill.ts (the sources): spawning them, waiting for a
// condition, the workers' step log, the crash tests' script.
import { type ChildProcess, spawn } from "node:child_process"
import { readFileSync } from "node:fs"
import { DatabaseSync } from "node:sqlite"

/** Every process still running (each test file kills what is left when it ends: `killAll`). */
export const children = new Set<ChildProcess>()

/**
 * Kills every process still running and waits for each to exit: a worker still writing into a
 * test's temp dir while it is removed makes the removal fail (ENOTEMPTY).
 */
export const killAll = () =>
  Promise.all([...children].map((child) =>
    new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve()
      child.once("exit", () => resolve())
      child.kill("SIGKILL")
    })
  ))

export interface Proc {
  readonly child: ChildProcess
  readonly out: { stdout: string; stderr: string }
  readonly done: Promise<number>
}

/** `node --conditions=@fibril/source <bin> ...args` (a bundle of the sources, or `src/bin.ts`). */
export const fibrilAt = (bin: string, args: ReadonlyArray<string>, env: Record<string, string> = {}): Proc => {
  const child = spawn(process.execPath, ["--conditions=@fibril/source", bin, ...args], {
    env: { ...process.env, OPENAI_API_KEY: "", FIBRIL_MODEL: "", ...env },
    stdio: ["ignore", "pipe", "pipe"]
  })
  children.add(child)
  const out = { stdout: "", stderr: "" }
  child.stdout!.on("data", (d) => out.stdout += String(d))
  child.stderr!.on("data", (d) => out.stderr += String(d))
  const done = new Promise<number>((resolve) =>
    child.on("exit", (code, signal) => {
      children.delete(child)
      resolve(code ?? (signal === "SIGKILL" ? 137 : 1))
    })
  )
  return { child, out, done }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

export const until = async (check: () => boolean, what: string, ms = 30_000) => {
  const deadline = Date.now() + ms
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`)
    await sleep(50)
  }
}

export interface StepEvent {
  readonly pid: number
  readonly event: "start" | "end"
  readonly agentId: string
  readonly run: number
  readonly name: string
  readonly t: number
}

/** The workers' step log (`FIBRIL_CLUSTER_STEP_LOG`): one line per step start and end. */
export const steps = (log: string): ReadonlyArray<StepEvent> =>
  readFileSync(log, "utf8").split("\n").filter((l) => l !== "").map((l) => JSON.parse(l) as StepEvent)

/** The step a transcript row belongs to (see AgentWorkflow: slot 100 the answer, 1000+i tool call i). */
export const stepOfRow = (step: number, slot: number) =>
  slot === 100
    ? `model/${step}`
    : slot >= 1000
    ? `tool/${step}/${slot - 1000}`
    : slot >= 0 && step >= 0
    ? `model/${step}`
    : undefined

/** The root agent's id, from `fibril run --json`'s output. */
export const agentIdOf = (proc: Proc) => {
  // The opening line of the `--json` stream: `{"type":"root","agent_id":…}`.
  const line = proc.out.stdout.split("\n").find((l) => l.startsWith("{\"type\":\"root\""))
  return line === undefined ? undefined : (JSON.parse(line) as { agent_id: string }).agent_id
}

/**
 * The crash tests' script: a root that starts `count` children with `task`, each child three
 * tool steps (150 ms a model call) then its answer, so a kill lands mid-run with steps journaled.
 */
export const crashScriptFor = (count: number) => ({
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
          tool_calls: Array.from({ length: count }, (_, i) => ({
            name: "task",
            args: { description: `part ${i + 1}`, prompt: `part ${i + 1}` }
          }))
        },
        { text: "root ok" }
      ]
    }
  ]
})

/** The crash tests' script with 4 children. */
export const crashScript = crashScriptFor(4)

/**
 * The questions tests' script (`[permissions] ask = ["shell"]`): the root starts an asker and a
 * sibling; the asker's `shell` call, whose side effect is counted on disk (one line per
 * execution), asks; the sibling reads and finishes meanwhile.
 */
export const askScript = {
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

/** One query on a cluster's SQLite file, read-only, as a third process would. */
export const sqliteQuery = (file: string, sql: string): ReadonlyArray<Record<string, unknown>> => {
  const db = new DatabaseSync(file, { readOnly: true })
  try {
    return db.prepare(sql).all() as Array<Record<string, unknown>>
  } finally {
    db.close()
  }
}

/**
 * The first snapshot of a `fibril ui` page's /events stream (server-sent events, one JSON
 * `{agents}` each) whose agents `done` holds for: a bounded read (30 s) of the live stream.
 */
export const pageSnapshot = async <A>(
  url: string,
  done: (agents: ReadonlyArray<A>) => boolean
): Promise<ReadonlyArray<A>> => {
  const response = await fetch(url, { signal: AbortSignal.timeout(30_000) })
  if (response.status !== 200) throw new Error(`${url}: status ${response.status}`)
  const decoder = new TextDecoder()
  let buffer = ""
  for await (const chunk of response.body!) {
    buffer += decoder.decode(chunk, { stream: true })
    for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
      const agents = (JSON.parse(buffer.slice(0, end).replace(/^data: /, "")) as { agents: Array<A> }).agents
      buffer = buffer.slice(end + 2)
      if (done(agents)) return agents
    }
  }
  throw new Error(`${url}: the stream ended first`)
}
