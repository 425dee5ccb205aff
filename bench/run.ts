/**
 * `npm run bench` (`-- --quick` for K = 10, 100 and fewer repetitions): W1, W2 and W3 of
 * shared/BENCH.md on Fibril's real path, each measurement in a fresh process, medians of the
 * repetitions, every count verified. Prints a table and writes bench/results.json.
 */
import { execFileSync } from "node:child_process"
import { writeFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import * as HoldTheLine from "./hold-the-line.ts"

const quick = process.argv.includes("--quick")
const reps = quick ? 3 : 5
const ks = quick ? [10, 100] : [10, 100, 1000]
const measure = fileURLToPath(new URL("./measure.ts", import.meta.url))

type Row = Record<string, unknown> & { readonly ok: boolean }

const once = (args: ReadonlyArray<string>): Row =>
  JSON.parse(execFileSync(process.execPath, [measure, ...args], { encoding: "utf8", maxBuffer: 1 << 24 }).trim()) as Row

const median = (values: ReadonlyArray<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!

const mustBeZero = new Set(["leaked_lookups", "timers_armed", "model_calls_after_abort"])

const run = (label: string, args: ReadonlyArray<string>, fields: ReadonlyArray<string>) => {
  const rows = Array.from({ length: reps }, () => once(args))
  const ok = rows.every((row) => row.ok)
  const figures: Record<string, number | boolean> = {}
  for (const field of fields) {
    const values = rows.map((row) => row[field])
    // A leak in any repetition is a leak: counts that must be zero report the worst run, flags all runs.
    figures[field] = typeof values[0] === "boolean"
      ? values.every(Boolean)
      : mustBeZero.has(field)
      ? Math.max(...values.map(Number))
      : median(values.map(Number))
  }
  const extra = rows[0]!
  return { label, args, ok, reps, ...figures, sample: extra }
}

const results: Array<ReturnType<typeof run>> = []
const show = (r: ReturnType<typeof run>) => {
  results.push(r)
  const figures = Object.entries(r)
    .filter(([k]) => !["label", "args", "ok", "reps", "sample"].includes(k))
    .map(([k, v]) => `${k}=${typeof v === "number" ? (Number.isInteger(v) ? v : v.toFixed(1)) : String(v)}`)
    .join("  ")
  console.log(`${r.ok ? "ok  " : "FAIL"} ${r.label.padEnd(34)} ${figures}`)
}

console.log(`Fibril orchestration benchmark (${quick ? "quick" : "full"}; medians of ${reps} fresh processes)`)
const w1Fields = ["us_per_subagent", "cpu_us_per_subagent", "wall_ms", "cpu_ms", "peak_rss_mib"]
const w2Fields = [
  "abort_to_settled_ms",
  "leaked_lookups",
  "timers_armed",
  "model_calls_after_abort",
  "exits_on_its_own"
]
const w3Fields = ["median_us", "p99_us"]
// The floors first: the plain Promise loop ("floor"), the minimal Effect runtime with Fibril's
// structure ("effect floor", bench/effect-floor.ts) and the same with `effect/ai` Prompt/Response
// values per step ("effect/ai floor", bench/effect-ai-floor.ts: what the model port Fibril is
// built on costs) on the same script say how fast this machine is right now, and what the
// Effect machinery alone costs.
for (
  const [name, runtime] of [["floor", "floor"], ["effect floor", "effect"], ["effect/ai floor", "effect-ai"]] as const
) {
  for (const cap of ["none", "10"]) {
    for (const K of ks) {
      show(run(`${name} W1 K=${K} cap=${cap}`, ["w1", String(K), cap, "memory", runtime], w1Fields))
    }
  }
  show(run(`${name} W2 K=100`, ["w2", "100", "none", "memory", runtime], w2Fields))
  show(run(`${name} W2 warm K=100`, ["w2warm", "100", "none", "memory", runtime], w2Fields))
  show(run(`${name} W3`, ["w3", "1", "none", "memory", runtime], w3Fields))
}
/** "file" selects the persistent store, the shared SQLite database. */
const storeName = (store: string) => store === "file" ? "sqlite" : store
for (const store of ["memory", "file"]) {
  for (const cap of ["none", "10"]) {
    for (const K of ks) {
      if (store === "file" && cap === "10" && K !== ks.at(-1)) continue
      show(run(`W1 K=${K} cap=${cap} store=${storeName(store)}`, ["w1", String(K), cap, store], w1Fields))
    }
  }
}
show(run("W2 K=100 store=memory", ["w2", "100", "none", "memory"], w2Fields))
// Not in BENCH.md: a second cancellation in the same process, once the code is compiled.
show(run("W2 warm K=100 store=memory", ["w2warm", "100", "none", "memory"], w2Fields))
show(run("W3 store=memory", ["w3", "1", "none", "memory"], w3Fields))

const figure = (label: string, field: string) =>
  Number((results.find((r) => r.label === label) as Record<string, unknown> | undefined)?.[field])
const kMax = ks.at(-1)!
/** One row's figure over another's, from this run. */
const ratio = (label: string, over: string, field: string) => figure(label, field) / figure(over, field)
const w1 = `W1 K=${kMax} cap=none store=memory`
/** Fibril over one floor ("floor", "effect floor" or "effect/ai floor"), same run. */
const ratiosOver = (floor: string) => ({
  w1_us_per_subagent: ratio(w1, `${floor} W1 K=${kMax} cap=none`, "us_per_subagent"),
  w1_cpu: ratio(w1, `${floor} W1 K=${kMax} cap=none`, "cpu_ms"),
  w1_capped_cpu: ratio(`W1 K=${kMax} cap=10 store=memory`, `${floor} W1 K=${kMax} cap=10`, "cpu_ms"),
  w1_peak_rss: ratio(w1, `${floor} W1 K=${kMax} cap=none`, "peak_rss_mib"),
  w2_abort_to_settled: ratio("W2 K=100 store=memory", `${floor} W2 K=100`, "abort_to_settled_ms"),
  w2_warm_abort_to_settled: ratio("W2 warm K=100 store=memory", `${floor} W2 warm K=100`, "abort_to_settled_ms"),
  w3_median: ratio("W3 store=memory", `${floor} W3`, "median_us"),
  w3_p99: ratio("W3 store=memory", `${floor} W3`, "p99_us")
})
const ratios = ratiosOver("floor")
const effectRatios = ratiosOver("effect floor")
const effectAiRatios = ratiosOver("effect/ai floor")
const flatness = ratio(w1, `W1 K=${ks.at(-2)} cap=none store=memory`, "us_per_subagent")
const flatnessCpu = ratio(w1, `W1 K=${ks.at(-2)} cap=none store=memory`, "cpu_ms") * (ks.at(-2)! / kMax)
for (
  const [name, r] of [["Promise floor", ratios], ["Effect floor", effectRatios], [
    "effect/ai floor",
    effectAiRatios
  ]] as const
) {
  console.log(
    `     Fibril / ${name}, same run: W1 K=${kMax} ${r.w1_us_per_subagent.toFixed(1)}x per sub-agent (CPU ${
      r.w1_cpu.toFixed(1)
    }x; capped at 10 ${r.w1_capped_cpu.toFixed(1)}x), ${r.w1_peak_rss.toFixed(1)}x peak RSS; W2 ${
      r.w2_abort_to_settled.toFixed(1)
    }x (warm ${r.w2_warm_abort_to_settled.toFixed(1)}x); W3 ${r.w3_median.toFixed(1)}x median, ${
      r.w3_p99.toFixed(1)
    }x p99`
  )
}
console.log(
  `     flatness: W1 per sub-agent at K=${kMax} is ${flatness.toFixed(2)}x K=${ks.at(-2)}'s (CPU ${
    flatnessCpu.toFixed(2)
  }x) (goal <= 1.5x)`
)

// Hold the line (issue 38): against the ratios recorded in docs/performance.md, only on a full run (K = 1000).
const holdTheLine = quick ? undefined : HoldTheLine.verdict(effectRatios)
for (const line of holdTheLine?.lines ?? []) console.log(line)

// Beyond the peers' figures: persistence cost, the parent's context growth, fork prefix share.
const w1Store = (store: string, field: string) => figure(`W1 K=${kMax} cap=none store=${store}`, field)
const persistence = {
  K: kMax,
  sqlite_minus_memory_us_per_subagent: w1Store("sqlite", "us_per_subagent") - w1Store("memory", "us_per_subagent"),
  sqlite_over_memory_per_subagent: w1Store("sqlite", "us_per_subagent") / w1Store("memory", "us_per_subagent"),
  sqlite_over_memory_cpu: w1Store("sqlite", "cpu_ms") / w1Store("memory", "cpu_ms")
}
interface SqliteFloorRow {
  readonly ok: boolean
  readonly us_per_agent: number
  readonly cpu_us_per_agent: number
  readonly json_us_per_agent: number
  readonly json_bytes_per_agent: number
}
// The persistent store's floor: the same rows written by node:sqlite with nothing of Fibril
// around the writes (bench/sqlite-floor.ts), medians of fresh processes.
const sqliteFloorRows = Array.from({ length: reps }, () =>
  JSON.parse(
    execFileSync(process.execPath, [fileURLToPath(new URL("./sqlite-floor.ts", import.meta.url)), String(kMax)], {
      encoding: "utf8"
    }).trim()
  ) as SqliteFloorRow)
const sqliteFloor = {
  ok: sqliteFloorRows.every((row) => row.ok),
  us_per_agent: median(sqliteFloorRows.map((row) => row.us_per_agent)),
  cpu_us_per_agent: median(sqliteFloorRows.map((row) => row.cpu_us_per_agent)),
  json_us_per_agent: median(sqliteFloorRows.map((row) => row.json_us_per_agent)),
  json_bytes_per_agent: median(sqliteFloorRows.map((row) => row.json_bytes_per_agent))
}
const persistenceFloor = {
  ...sqliteFloor,
  /** The least the SQLite store could cost over the memory store: the memory store plus the writes alone. */
  floor_over_memory: (w1Store("memory", "us_per_subagent") + sqliteFloor.us_per_agent) /
    w1Store("memory", "us_per_subagent"),
  /** What the store adds beyond the writes themselves (the queue, the waits, the hand-over). */
  store_beyond_writes_us: persistence.sqlite_minus_memory_us_per_subagent - sqliteFloor.us_per_agent
}
const context = JSON.parse(
  execFileSync(process.execPath, [fileURLToPath(new URL("./context.ts", import.meta.url))], { encoding: "utf8" }).trim()
) as { delegation: Record<string, number>; fork: Record<string, number> }
const { delegation, fork } = context
console.log(
  `     persistence at K=${persistence.K}: the SQLite store costs ${
    persistence.sqlite_over_memory_per_subagent.toFixed(2)
  }x the memory store per sub-agent (+${persistence.sqlite_minus_memory_us_per_subagent.toFixed(1)} us; CPU ${
    persistence.sqlite_over_memory_cpu.toFixed(2)
  }x) (goal <= 1.5x)`
)
console.log(
  `     ${persistenceFloor.ok ? "" : "FAIL "}persistence floor: node:sqlite alone writing the same rows (${
    persistenceFloor.json_bytes_per_agent.toFixed(0)
  } B of JSON per sub-agent, the store's schema, statements and settings) costs ${
    persistenceFloor.us_per_agent.toFixed(1)
  } us per sub-agent (CPU ${persistenceFloor.cpu_us_per_agent.toFixed(1)}; the JSON alone ${
    persistenceFloor.json_us_per_agent.toFixed(1)
  }): memory + that = ${persistenceFloor.floor_over_memory.toFixed(2)}x the memory store; the store adds ${
    persistenceFloor.store_beyond_writes_us.toFixed(1)
  } us beyond its writes`
)
console.log(
  `     context growth per delegated task: the parent gains ${delegation["parent_bytes_added_per_task"]} B (~${
    delegation["parent_tokens_added_per_task_est"]
  } tokens); the child's whole conversation is ${delegation["child_conversation_bytes"]} B (~${
    delegation["child_conversation_tokens_est"]
  } tokens), ${delegation["child_to_parent_ratio"]!.toFixed(1)}x`
)
console.log(
  `     fork_context: ${fork["identical_prefix_bytes"]} of the child's first ${fork["child_first_request_bytes"]} B (${
    (fork["prefix_share"]! * 100).toFixed(1)
  }%) are a byte-identical prefix of the parent's ${fork["parent_request_bytes"]} B request`
)

// The orchestration lab (bench/lab.ts, its own process; figures in bench/lab-results.json).
const lab = JSON.parse(
  execFileSync(process.execPath, [fileURLToPath(new URL("./lab.ts", import.meta.url)), ...(quick ? ["--quick"] : [])], {
    encoding: "utf8"
  }).trim()
) as Record<string, number>
console.log(
  `${lab["ok"] ? "ok  " : "FAIL"} lab: ${lab["small_per_s"]!.toFixed(0)} schedules/s for trees of 1-3 sub-agents (${
    lab["small_cpu_ms_per_schedule"]!.toFixed(2)
  } ms CPU each; goal >= 2,000/s; ${lab["small_parallel_per_s"]!.toFixed(0)}/s on ${
    lab["parallel_workers"]
  } worker threads, start-up included), ${lab["tree50_per_s"]!.toFixed(1)}/s for trees of 50 agents (${
    lab["tree50_cpu_ms_per_schedule"]!.toFixed(1)
  } ms CPU each)`
)

// isolation: "process": a child's start-up and cost per message over its pipe (bench/process-isolation.ts).
const processIsolation = JSON.parse(
  execFileSync(process.execPath, [
    fileURLToPath(new URL("./process-isolation.ts", import.meta.url)),
    ...(quick ? ["--quick"] : [])
  ], {
    encoding: "utf8"
  }).trim()
) as Record<string, number | boolean>
// Each figure with its floor beside it (a bare Node process; plain JSON lines on a pipe), medians
// after a warm-up; on a machine loaded past its cores the figures are upper bounds and say so.
console.log(
  `${processIsolation["ok"] ? "ok  " : "FAIL"} process isolation: start-up ${
    Number(processIsolation["startup_ms"]).toFixed(0)
  } ms per child (a one-step child, spawn to end; a bare Node start: ${
    Number(processIsolation["startup_floor_ms"]).toFixed(0)
  } ms), ${Number(processIsolation["per_message_us"]).toFixed(0)} µs per event over the pipe (a ${
    processIsolation["steps"]
  }-step child, its work included; plain lines of that size: ${
    Number(processIsolation["per_message_floor_us"]).toFixed(0)
  } µs), medians of ${processIsolation["runs"]}, load ${processIsolation["load"]} on ${
    processIsolation["cores"]
  } cores${processIsolation["loaded"] ? " (loaded: upper bounds)" : ""}`
)
// A fan-out under a provider's rate limit (bench/ratelimit.ts, its own process), limiter on and off.
interface RateLimitRun {
  readonly failed: number
  readonly makespan_ms: number
  readonly makespan_over_ideal: number
  readonly requests: number
  readonly rejected_share: number
}
const rateLimit = JSON.parse(
  execFileSync(process.execPath, [fileURLToPath(new URL("./ratelimit.ts", import.meta.url))], { encoding: "utf8" })
    .trim()
) as { ok: boolean; K: number; ideal_ms: number; on: RateLimitRun; off: RateLimitRun } & Record<string, unknown>
const rateLimitRun = (figures: RateLimitRun) =>
  `${figures.failed} failed, makespan ${figures.makespan_ms} ms = ${figures.makespan_over_ideal.toFixed(2)}x T, ${
    (figures.rejected_share * 100).toFixed(1)
  }% of ${figures.requests} requests answered 429`
console.log(
  `${
    rateLimit.ok ? "ok  " : "FAIL"
  } rate limit: K=${rateLimit.K} children, 10 at once and a token budget, T=${rateLimit.ideal_ms} ms: ${
    rateLimitRun(rateLimit.on)
  } (goal 0 failed, <= 1.15x T, <= 5% 429); limiter off: ${rateLimitRun(rateLimit.off)}`
)
// The scorecard of issue 38 (bench/scorecard.ts, a fresh process): fan-out makespan, the context
// rows from this run's bench/context.ts figures, budget overshoot, and the lab's invariant rows.
const contextJson = fileURLToPath(new URL("./context-results.json", import.meta.url))
writeFileSync(contextJson, JSON.stringify(context))
const scorecardOut = execFileSync(
  process.execPath,
  [fileURLToPath(new URL("./scorecard.ts", import.meta.url)), ...(quick ? ["--quick"] : []), contextJson],
  { encoding: "utf8", maxBuffer: 1 << 24 }
)
const scorecardLine = scorecardOut.split("\n").find((line) => line.startsWith("SCORECARD "))
for (const line of scorecardOut.split("\n")) if (line !== "" && line !== scorecardLine) console.log(line)
const scorecard = JSON.parse(scorecardLine?.slice("SCORECARD ".length) ?? "[]") as ReadonlyArray<{ ok?: boolean }>

const out = fileURLToPath(new URL("./results.json", import.meta.url))
writeFileSync(
  out,
  JSON.stringify(
    {
      date: new Date().toISOString(),
      node: process.version,
      quick,
      results,
      ratios,
      effectRatios,
      effectAiRatios,
      flatness,
      flatnessCpu,
      persistence,
      persistenceFloor,
      context,
      processIsolation,
      rateLimit,
      scorecard
    },
    null,
    2
  )
)
console.log(`wrote ${out}`)
if (
  !results.every((r) => r.ok) || !lab["ok"] || !persistenceFloor.ok || !processIsolation["ok"] || !rateLimit.ok ||
  holdTheLine?.ok === false || scorecard.some((row) => row.ok === false)
) {
  process.exitCode = 1
}

// Cluster mode on PostgreSQL: per-step overhead and a K = 100 fan-out over two workers
// (bench/cluster.ts; it says why when it cannot run, e.g. without PostgreSQL).
execFileSync(process.execPath, [fileURLToPath(new URL("./cluster.ts", import.meta.url))], { stdio: "inherit" })

// Cluster scale: K = 300 children of 500 ms over 1, 2 and 3 workers, capped per worker and not,
// and the cap-bound pair, on PostgreSQL (when its binaries are here) and on SQLite
// (bench/cluster-scale.ts; a minute or two per worker count and store).
execFileSync(process.execPath, [fileURLToPath(new URL("./cluster-scale.ts", import.meta.url))], { stdio: "inherit" })

// Start-up from a project install: spawn -> first tools/list of `fibril mcp`, spawn -> exit of
// `fibril --help`, beside a bare node start (bench/startup.ts; it packs and installs the tarballs).
execFileSync(process.execPath, [fileURLToPath(new URL("./startup.ts", import.meta.url))], { stdio: "inherit" })
