/**
 * `node bench/process-isolation.ts [--quick]`: the overhead of `isolation: "process"`
 * (docs/subagents.md, "Process isolation"). Runs children through the parent's side of the
 * pipe (core ProcessIsolation.run) on the CLI's ChildHost, on a scripted model:
 *
 * - start-up: a one-step child, spawn to its end line (Node start, the runtime loaded, one
 *   model turn), median of the runs;
 * - per message: in a child of `steps` tool-call steps, the time from the first event the
 *   parent received to the last, over the events between (the child's own work for each step
 *   included; start-up excluded).
 *
 * Prints one JSON line.
 */
import * as ProcessIsolation from "@fibril/core/ProcessIsolation"
import * as Effect from "effect/Effect"
import { mkdtempSync, realpathSync, rmSync, writeFileSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as ChildHost from "../packages/cli/src/ChildHost.ts"

const quick = process.argv.includes("--quick")
const runs = quick ? 3 : 5
const steps = 40 // under the default step budget (agent.max_steps 50)

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

const child = (prompt: string) =>
  Effect.gen(function*() {
    let events = 0
    let first = 0
    let last = 0
    const started = performance.now()
    const end = yield* ProcessIsolation.run({
      host,
      maxOldSpaceMb: 512,
      start: { prompt, role: "general", cwd: dir, maxDepth: 0 },
      onEvent: () => {
        last = performance.now()
        if (events++ === 0) first = last
      }
    })
    return {
      ms: performance.now() - started,
      events,
      perEventUs: events > 1 ? ((last - first) / (events - 1)) * 1000 : 0,
      ok: end.text === "done"
    }
  })

const median = (values: ReadonlyArray<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!

const result = await Effect.runPromise(Effect.gen(function*() {
  const one = []
  const many = []
  for (let i = 0; i < runs; i++) {
    one.push(yield* child("one step"))
    many.push(yield* child("many steps"))
  }
  return {
    ok: [...one, ...many].every((r) => r.ok),
    runs,
    startup_ms: median(one.map((r) => r.ms)),
    events_one_step: median(one.map((r) => r.events)),
    events_many_steps: median(many.map((r) => r.events)),
    steps,
    per_message_us: median(many.map((r) => r.perEventUs))
  }
}))
rmSync(dir, { recursive: true, force: true })
process.stdout.write(`${JSON.stringify(result)}\n`)
