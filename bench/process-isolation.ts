/**
 * `node bench/process-isolation.ts [--quick]`: the overhead of `isolation: "process"`
 * (docs/subagents.md, "Process isolation"). Runs children through the parent's side of the
 * pipe (core ProcessIsolation.run) on the CLI's ChildHost, on a scripted model, and beside
 * each figure its floor, measured the same way in the same moment, so what is Fibril's own
 * cost reads as the difference:
 *
 * - start-up: a one-step child, spawn to its end line (Node start, the runtime loaded, one
 *   model turn). Floor: a Node process on the same flags that does nothing (spawn to exit).
 * - per event: in a child of `steps` tool-call steps, the time from the first event the parent
 *   received to the last, over the events between (the child's own work for each step
 *   included; start-up excluded). Floor: a Node process writing as many JSON lines of the same
 *   size on the same kind of pipe, read the same way (readline).
 *
 * Each figure is the median of `runs` runs after one warm-up run (the first fills the OS's
 * file cache), with its range; runs alternate between the kinds so that a change of load
 * shifts them alike. The machine's load is printed too: a figure taken on a loaded machine
 * (load above its cores) is an upper bound, and says so (`loaded`).
 *
 * Prints one JSON line.
 */
import * as ProcessIsolation from "@fibril/core/ProcessIsolation"
import * as Effect from "effect/Effect"
import { spawn } from "node:child_process"
import { mkdtempSync, realpathSync, rmSync, writeFileSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { createInterface } from "node:readline"
import * as ChildHost from "../packages/cli/src/ChildHost.ts"

const quick = process.argv.includes("--quick")
const runs = quick ? 3 : 7
const steps = 40 // under the default step budget (agent.max_steps 50)
const maxOldSpaceMb = 512

const dir = realpathSync(mkdtempSync(path.join(os.tmpdir(), "fibril-bench-process-")))
const script = path.join(dir, "script.json")
writeFileSync(
  script,
  JSON.stringify({
    rules: [
      { match: { prompt: "one step" }, turns: [{ text: "done" }] },
      {
        match: { prompt: "many steps" },
        turns: [...Array.from({ length: steps }, () => ({ tool_calls: [{ name: "todoread" }] })), { text: "done" }]
      }
    ]
  })
)
const host = ChildHost.host(`scripted:${script}`)
/** The host's Node flags (`--conditions`), without its program: what the floors run on. */
const nodeFlags = host.args.slice(0, host.args.indexOf(ChildHost.modulePath))

let eventBytes = 200

const child = (prompt: string) =>
  Effect.gen(function*() {
    let events = 0
    let first = 0
    let last = 0
    const started = performance.now()
    const end = yield* ProcessIsolation.run({
      host,
      maxOldSpaceMb,
      start: { prompt, role: "general", cwd: dir, maxDepth: 0 },
      onEvent: (event) => {
        last = performance.now()
        if (events++ === 0) {
          first = last
          eventBytes = JSON.stringify({ type: "event", event }).length
        }
      }
    })
    return {
      ms: performance.now() - started,
      events,
      perEventUs: events > 1 ? ((last - first) / (events - 1)) * 1000 : 0,
      ok: end.text === "done"
    }
  })

/** A Node process on `args`, timed from spawn to exit, and the gaps between the lines it prints. */
const node = (args: ReadonlyArray<string>) =>
  Effect.promise(() =>
    new Promise<{ readonly ms: number; readonly perLineUs: number; readonly ok: boolean }>((resolve) => {
      const started = performance.now()
      const process_ = spawn(process.execPath, [`--max-old-space-size=${maxOldSpaceMb}`, ...nodeFlags, ...args], {
        cwd: dir,
        stdio: ["pipe", "pipe", "inherit"]
      })
      let lines = 0
      let first = 0
      let last = 0
      createInterface({ input: process_.stdout }).on("line", () => {
        last = performance.now()
        if (lines++ === 0) first = last
      })
      process_.stdin.end()
      process_.on("close", (code) =>
        resolve({
          ms: performance.now() - started,
          perLineUs: lines > 1 ? ((last - first) / (lines - 1)) * 1000 : 0,
          ok: code === 0
        }))
    })
  )

/** The pipe's floor: `count` JSON lines of `bytes` each, written as the child writes its events. */
const lines = (count: number, bytes: number) =>
  node([
    "-e",
    `const line = JSON.stringify({ type: "event", pad: "x".repeat(${Math.max(0, bytes - 30)}) }) + "\\n"
for (let i = 0; i < ${count}; i++) process.stdout.write(line)`
  ])

const sorted = (values: ReadonlyArray<number>) => [...values].sort((a, b) => a - b)
const median = (values: ReadonlyArray<number>) => sorted(values)[Math.floor(values.length / 2)]!
const range = (values: ReadonlyArray<number>) => [Math.round(sorted(values)[0]!), Math.round(sorted(values).at(-1)!)]

const loadBefore = os.loadavg()[0]!
const result = await Effect.runPromise(Effect.gen(function*() {
  // Warm-up: one of each, not counted.
  yield* child("one step")
  yield* node(["-e", ""])
  const one = []
  const many = []
  const bare = []
  const pipe = []
  for (let i = 0; i < runs; i++) {
    one.push(yield* child("one step"))
    bare.push(yield* node(["-e", ""]))
    const stepped = yield* child("many steps")
    many.push(stepped)
    pipe.push(yield* lines(stepped.events, eventBytes))
  }
  const load = Math.max(loadBefore, os.loadavg()[0]!)
  const cores = os.cpus().length
  return {
    ok: [...one, ...many].every((r) => r.ok) && [...bare, ...pipe].every((r) => r.ok),
    runs,
    startup_ms: median(one.map((r) => r.ms)),
    startup_ms_range: range(one.map((r) => r.ms)),
    startup_floor_ms: median(bare.map((r) => r.ms)),
    events_one_step: median(one.map((r) => r.events)),
    events_many_steps: median(many.map((r) => r.events)),
    steps,
    per_message_us: median(many.map((r) => r.perEventUs)),
    per_message_us_range: range(many.map((r) => r.perEventUs)),
    per_message_floor_us: median(pipe.map((r) => r.perLineUs)),
    event_bytes: eventBytes,
    load: Math.round(load * 10) / 10,
    cores,
    loaded: load > cores
  }
}))
rmSync(dir, { recursive: true, force: true })
process.stdout.write(`${JSON.stringify(result)}\n`)
