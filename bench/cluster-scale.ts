/**
 * Cluster scale (issue 38; `npm run bench` runs it after bench/cluster.ts; alone:
 * `NODE_OPTIONS=--conditions=@fibril/source node bench/cluster-scale.ts [K]`). Needs PostgreSQL's
 * server binaries (packages/cluster/test/postgres.ts); without them it says so and stops.
 *
 * K = 300 children (one `task` each from one root), each one scripted model call of 500 ms, over
 * 1, 2 and 3 `fibril worker` processes on PostgreSQL (a fresh database per run), timed by an
 * in-process client from start to the root's answer once every worker holds its shards; every
 * child must have completed (the store is counted), or the run is a failure, not a figure.
 *
 * Two rounds per worker count:
 * - **cap 10 per worker**: the cap is cluster-wide in Fibril (`--max-concurrent`, a permit table
 *   in the database: docs/cluster.md), so "10 per worker" is a cluster cap of 10 x n with
 *   `admission = "queue"`; its bound is ceil(K / (10 n)) x 500 ms (15 s, 7.5 s, 5 s). It shows
 *   whether the permits, the queue's wake-ups and n workers deliver what the cap allows.
 * - **no cap**: all K children at once; the bound is one call (500 ms) and what is left is the
 *   CPU of the workers and of PostgreSQL. That is where more workers help only with more cores.
 *
 * Then the goal's round, **cap-bound**: K = 100 children of 2 s, cap 10 per worker, over 1 and 2
 * workers (bounds 20 s and 10 s): children long enough that the cap binds, not the CPU (each
 * line prints the CPU the round used, as a share of the machine's); the goal is >= 1.8x from 1 to
 * 2 workers. On 2 cores the 500 ms rounds are CPU-bound (docs/performance.md, "Cluster scale").
 */
import * as ClusterClient from "@fibril/cluster/ClusterClient"
import * as Node from "@fibril/cluster/Node"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { type ChildProcess, spawn } from "node:child_process"
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as Pg from "../packages/cluster/test/postgres.ts"

const reason = Pg.skipReason()
if (reason !== undefined) {
  console.log(`skip cluster scale bench: ${reason}`)
  process.exit(0)
}

const count = Number(process.argv[2] ?? 300)
const latencyMs = 500
const capPerWorker = 10
// For iteration: `[K] [worker counts, e.g. 1,2] [cap: the capped rounds only | bound: the cap-bound rounds only]`.
const workerCounts = (process.argv[3] ?? "1,2,3").split(",").map(Number)
const cappedOnly = process.argv[4] === "cap"
const boundOnly = process.argv[4] === "bound"

/** A round's fan-out: K children, each one scripted model call of `latencyMs`. */
interface Shape {
  readonly count: number
  readonly latencyMs: number
}
const fanOut: Shape = { count, latencyMs }
/**
 * Children long enough for the cap to bind on this machine's 2 cores (the workers' and
 * PostgreSQL's CPU well below them): the goal's condition, measured beside the 500 ms rounds.
 */
const capBound: Shape = { count: 100, latencyMs: 2000 }

const ws = mkdtempSync(path.join(os.tmpdir(), "fibril-bench-scale-"))
/** The model script of a shape: one root turn calling `task` K times, each child one delayed answer. */
const scriptFor = (shape: Shape) => {
  const file = path.join(ws, `script-${shape.count}-${shape.latencyMs}.json`)
  writeFileSync(
    file,
    JSON.stringify({
      rules: [
        { match: { depth: 1 }, turns: [{ text: "child ok", delay_ms: shape.latencyMs }] },
        {
          match: { depth: 0 },
          turns: [
            {
              tool_calls: Array.from(
                { length: shape.count },
                (_, i) => ({ name: "task", args: { description: `scale ${i}`, prompt: `scale ${i}` } })
              )
            },
            { text: "root ok" }
          ]
        }
      ]
    })
  )
  return file
}
const bin = fileURLToPath(new URL("../packages/cli/src/bin.ts", import.meta.url))
const load = () => os.loadavg().map((l) => l.toFixed(1)).join(" ")

// With SCALE_MESSAGES=1, also the statements the server ran most (pg_stat_statements, if installed).
const diagnose = process.env.SCALE_MESSAGES === "1"
const counting = diagnose && existsSync(path.join(Pg.findBin()!, "..", "lib", "pg_stat_statements.so"))
const pg = await Pg.start({ fsync: true, settings: counting ? ["shared_preload_libraries=pg_stat_statements"] : [] })
const children = new Set<ChildProcess>()

/** A `fibril worker` on `url` with a cluster-wide cap (0: none); resolves once it serves. */
const worker = (url: string, cap: number, script: string) =>
  new Promise<ChildProcess>((resolve, reject) => {
    const child = spawn(process.execPath, [
      bin,
      "worker",
      "--cluster",
      url,
      "--cwd",
      ws,
      "--model",
      `scripted:${script}`,
      "--max-concurrent",
      String(cap)
    ], {
      stdio: ["ignore", "ignore", "pipe"],
      // Over the cap a child waits for a permit (the default, "reject", would fail it).
      env: { ...process.env, FIBRIL_SUBAGENTS_ADMISSION: "queue" }
    })
    children.add(child)
    let err = ""
    child.stderr!.on("data", (d) => {
      err += String(d)
      if (err.includes("fibril worker: pid")) resolve(child)
    })
    child.on("exit", () => reject(new Error(`worker exited: ${err}`)))
  })

/** Waits until the shards are split over `n` workers (the same split twice, a second apart). */
const settle = async (db: string, n: number) => {
  const started = performance.now()
  for (let last = "";;) {
    await new Promise((resolve) => setTimeout(resolve, 1000))
    const now = pg.psql(
      db,
      "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND granted GROUP BY pid ORDER BY 1"
    )
    const shards = now.split("\n").filter((l) => l !== "").map(Number)
    if (now === last && shards.length === n && shards.reduce((a, b) => a + b, 0) === Node.shardsPerGroup) return
    if (performance.now() - started > 90_000) throw new Error(`shards did not settle over ${n} workers: ${now}`)
    last = now
  }
}

interface Round {
  readonly shape: Shape
  readonly n: number
  readonly cap: number
  readonly ms: number
  readonly bound: number
  readonly workersCpuMs: number
  readonly serverCpuMs: number
}

let database = 0
const round = async (n: number, cap: number, shape: Shape = fanOut): Promise<Round> => {
  const db = `scale${database++}`
  pg.createDatabase(db)
  const url = pg.url(db)
  await Effect.runPromise(Effect.provide(Node.migrate, Node.database(url)))
  const script = scriptFor(shape)
  const started = await Promise.all(Array.from({ length: n }, () => worker(url, cap, script)))
  try {
    await settle(db, n)
    const pids = new Set(started.map((child) => child.pid!))
    const workersCpu = () => Pg.processCpuSeconds((pid) => pids.has(pid))
    const workers0 = workersCpu()
    const server0 = pg.cpuSeconds()
    if (counting) pg.psql(db, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT pg_stat_statements_reset()")
    const ms = await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const context = yield* Layer.build(Node.client.pipe(Layer.provideMerge(Node.database(url))))
      const t0 = performance.now()
      const outcome = yield* Effect.provide(ClusterClient.run({ prompt: "scale", workspace: ws }), context)
      if (outcome.text !== "root ok") return yield* Effect.die(`unexpected answer ${outcome.text}`)
      return performance.now() - t0
    })))
    const completed = Number(pg.psql(db, "SELECT count(*) FROM fibril_agents WHERE depth = 1 AND status = 'completed'"))
    if (completed !== shape.count) {
      throw new Error(`${n} worker(s), cap ${cap}: ${completed} of ${shape.count} children completed`)
    }
    if (counting) {
      console.log(pg.psql(
        db,
        "SELECT calls || '  ' || left(regexp_replace(query, '\\s+', ' ', 'g'), 110) FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) ORDER BY calls DESC LIMIT 8"
      ))
    }
    if (diagnose) {
      // What the cluster was asked to deliver in this round, by kind (where the CPU goes).
      console.log(pg.psql(
        db,
        "SELECT entity_type || ' ' || coalesce(tag, '-') || ' kind=' || kind || ' ' || count(*) FROM cluster_messages GROUP BY entity_type, tag, kind ORDER BY count(*) DESC"
      ))
      // How often the root was woken: resumed by a child's end, or its durable clocks completed.
      console.log(pg.psql(
        db,
        "SELECT 'root wakes: ' || count(*) FROM cluster_messages WHERE entity_id = (SELECT execution_id FROM fibril_agents WHERE depth = 0) AND (tag = 'resume' OR (tag = 'deferred' AND payload::text LIKE '%DurableClock/%'))"
      ))
      // Where the makespan goes: the root's start to its first child's model call, the children's
      // runs, the gap from a child's end to the next child's start (the queue's hand-off: the
      // i-th end against the (i + cap)-th start), and the last child's end to the root's.
      console.log(pg.psql(
        db,
        `WITH c AS (SELECT * FROM fibril_agents WHERE depth = 1), r AS (SELECT * FROM fibril_agents WHERE depth = 0),
          s AS (SELECT row_number() OVER (ORDER BY run_started_at) AS i, run_started_at AS t FROM c),
          f AS (SELECT row_number() OVER (ORDER BY run_finished_at) AS i, run_finished_at AS t FROM c),
          g AS (SELECT extract(epoch FROM s.t - f.t) * 1000 AS ms FROM f JOIN s ON s.i = f.i + ${Math.max(cap, 1)})
        SELECT 'timeline ms: root start -> first child ' ||
          round(extract(epoch FROM (SELECT min(run_started_at) FROM c) - (SELECT run_started_at FROM r)) * 1000) ||
          ', children ' || round(extract(epoch FROM (SELECT max(run_finished_at) - min(run_started_at) FROM c)) * 1000) ||
          ', last child -> root end ' ||
          round(extract(epoch FROM (SELECT run_finished_at FROM r) - (SELECT max(run_finished_at) FROM c)) * 1000) ||
          '; hand-off gap p50 ' || coalesce(round((SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) FROM g)::numeric)::text, '-') ||
          ' p90 ' || coalesce(round((SELECT percentile_cont(0.9) WITHIN GROUP (ORDER BY ms) FROM g)::numeric)::text, '-') ||
          ' max ' || coalesce(round((SELECT max(ms) FROM g)::numeric)::text, '-')`
      ))
    }
    return {
      shape,
      n,
      cap,
      ms,
      bound: cap === 0 ? shape.latencyMs : Math.ceil(shape.count / cap) * shape.latencyMs,
      workersCpuMs: (workersCpu() - workers0) * 1000,
      serverCpuMs: (pg.cpuSeconds() - server0) * 1000
    }
  } finally {
    for (const child of started) {
      children.delete(child)
      child.kill("SIGKILL")
    }
  }
}

const line = (label: string, r: Round) => {
  const cpuShare = (r.workersCpuMs + r.serverCpuMs) / (r.ms * os.cpus().length)
  return `ok   cluster scale (postgres), ${label}: K=${r.shape.count} x ${r.shape.latencyMs} ms over ${r.n} worker(s)  makespan=${
    r.ms.toFixed(0)
  } ms (${(r.ms / r.bound).toFixed(2)} x its bound of ${r.bound} ms)  ${
    (r.shape.count / (r.ms / 1000)).toFixed(1)
  } agents/s  cpu: workers=${r.workersCpuMs.toFixed(0)} ms postgres=${r.serverCpuMs.toFixed(0)} ms (${
    (100 * cpuShare).toFixed(0)
  }% of ${os.cpus().length} CPU(s))  load average ${load()}`
}

try {
  const capped: Array<Round> = []
  const uncapped: Array<Round> = []
  for (const n of boundOnly ? [] : workerCounts) {
    capped.push(await round(n, capPerWorker * n))
    console.log(line(`cap ${capPerWorker} per worker (cluster cap ${capPerWorker * n})`, capped.at(-1)!))
    if (cappedOnly) continue
    uncapped.push(await round(n, 0))
    console.log(line("no cap", uncapped.at(-1)!))
  }
  // The goal's condition: the cap binds, not the CPU (children of 2 s, 1 and 2 workers).
  const bound: Array<Round> = []
  for (const n of workerCounts.filter((w) => w <= 2)) {
    bound.push(await round(n, capPerWorker * n, capBound))
    console.log(line(`cap-bound, cap ${capPerWorker} per worker (cluster cap ${capPerWorker * n})`, bound.at(-1)!))
  }
  // NaN where a round was left out (see the arguments above).
  const speedup = (rounds: ReadonlyArray<Round>, to: number) => (rounds[0]?.ms ?? NaN) / (rounds[to]?.ms ?? NaN)
  const twoBound = speedup(bound, 1)
  console.log(
    `${
      twoBound >= 1.8 ? "ok  " : "MISS"
    } cluster scale where the cap binds (K=${capBound.count} x ${capBound.latencyMs} ms, cap ${capPerWorker} per worker): 1 -> 2 workers ${
      twoBound.toFixed(2)
    }x (goal >= 1.8x, ideal 2.00x)`
  )
  console.log(
    `     cluster scale, K=${count} x ${latencyMs} ms, cap ${capPerWorker} per worker: 1 -> 2 workers ${
      speedup(capped, 1).toFixed(2)
    }x, 1 -> 3 workers ${speedup(capped, 2).toFixed(2)}x (ideal ${
      (Math.ceil(count / capPerWorker) / Math.ceil(count / (capPerWorker * 2))).toFixed(2)
    }x, ${(Math.ceil(count / capPerWorker) / Math.ceil(count / (capPerWorker * 3))).toFixed(2)}x); no cap: 1 -> 2 ${
      speedup(uncapped, 1).toFixed(2)
    }x, 1 -> 3 ${
      speedup(uncapped, 2).toFixed(2)
    }x (${os.cpus().length} CPU(s) for the workers, PostgreSQL and this client: each round's share is on its line)`
  )
} finally {
  for (const child of children) child.kill("SIGKILL")
  pg.stop()
  rmSync(ws, { recursive: true, force: true })
}
process.exit(0)
