/**
 * Where a durable step's time goes on PostgreSQL: one agent with N tool calls on one in-process
 * worker, every statement logged by the server with its duration (log_min_duration_statement=0);
 * prints statements per step grouped by kind, the server time, and the wall time per step.
 * `NODE_OPTIONS=--conditions=@fibril/source node bench/cluster-profile.ts [N]`.
 */
import * as NodeServices from "@effect/platform-node/NodeServices"
import * as ClusterClient from "@fibril/cluster/ClusterClient"
import * as Node from "@fibril/cluster/Node"
import { AgentSteps, Fibril, Session } from "@fibril/core"
import { ScriptedModel } from "@fibril/testkit"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Pg from "../packages/cluster/test/postgres.ts"

const toolCalls = Number(process.argv[2] ?? 50)
/** `fan K`: a root that starts K children of 5 steps each with `task`, as bench/cluster.ts's fan-out. */
const fan = process.argv[2] === "fan"
const K = Number(process.argv[3] ?? 100)
const script: ScriptedModel.ScriptInput = fan
  ? {
    rules: [
      {
        match: { depth: 1 },
        turns: [
          { tool_calls: [{ name: "list_dir", args: {} }] },
          { tool_calls: [{ name: "list_dir", args: {} }] },
          { text: "child ok" }
        ]
      },
      {
        match: { depth: 0 },
        turns: [
          {
            tool_calls: Array.from(
              { length: K },
              (_, i) => ({ name: "task", args: { description: `part ${i}`, prompt: `part ${i}` } })
            ) as never
          },
          { text: "root ok" }
        ]
      }
    ]
  }
  : {
    rules: [{
      respond: (c) => c.turn < toolCalls ? { tool_calls: [{ name: "list_dir", args: {} }] } : { text: `done ${c.turn}` }
    }]
  }
const ws = mkdtempSync(path.join(os.tmpdir(), "fibril-profile-"))
const core = AgentSteps.layer(Session.defaults).pipe(
  Layer.provideMerge(Fibril.layer({ cwd: ws }).pipe(Layer.provide(ScriptedModel.layer(script)))),
  Layer.provide(NodeServices.layer)
)
const logging = process.env["PROFILE_LOG"] !== "0"
const pg = await Pg.start({
  fsync: true,
  settings: logging ? ["log_min_duration_statement=0", "log_line_prefix='%m %p '"] : []
})
pg.createDatabase("prof")
const url = pg.url("prof")
try {
  await Effect.runPromise(Effect.provide(Node.migrate, Node.database(url)))
  const marks: Array<number> = []
  const mark = (label: string) => Effect.sync(() => marks.push(readFileSync(pg.log, "utf8").length) && label)
  const ms = await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    const port = yield* Effect.orDie(Node.freePort("127.0.0.1"))
    const live = Node.workerAndClient({ host: "127.0.0.1", port, maxConcurrent: 0, maxSteps: 1000 }, core).pipe(
      Layer.provideMerge(Node.database(url))
    )
    return yield* Effect.provide(
      Effect.gen(function*() {
        yield* ClusterClient.run({ prompt: "warm", workspace: ws })
        yield* Effect.sleep("500 millis")
        yield* mark("start")
        const cpu0 = process.cpuUsage()
        const pg0 = pg.cpuSeconds()
        const t0 = performance.now()
        const h0 = process.hrtime.bigint()
        if (process.env["PROFILE_IDLE"] !== undefined) yield* Effect.sleep("3 seconds")
        const outcome = yield* ClusterClient.run({ prompt: "profile", workspace: ws })
        const elapsed = performance.now() - t0
        // The measured window on the monotonic clock, for slicing a --cpu-prof profile.
        if (process.env["PROFILE_MARKS"] !== undefined) {
          console.log(`marks us ${h0 / 1000n} ${process.hrtime.bigint() / 1000n}`)
        }
        const cpu = process.cpuUsage(cpu0)
        const pgSecs = pg.cpuSeconds() - pg0
        yield* mark("end")
        return {
          elapsed,
          steps: outcome.steps + outcome.toolCalls + 2,
          nodeMs: (cpu.user + cpu.system) / 1000,
          pgMs: pgSecs * 1000
        }
      }),
      live
    )
  })))
  const log = readFileSync(pg.log, "utf8").slice(marks[0], marks[1])
  if (process.env["PROFILE_DUMP"] !== undefined) writeFileSync(process.env["PROFILE_DUMP"], log)
  const kinds = new Map<string, { n: number; ms: number }>()
  let total = 0
  let serverMs = 0
  for (const line of log.split("\n")) {
    const m = /duration: ([\d.]+) ms\s+(?:statement|execute [^:]*|parse [^:]*|bind [^:]*): (.*)$/.exec(line)
    if (m === null) continue
    if (/duration: [\d.]+ ms\s+(parse|bind) /.test(line)) continue
    const text = m[2]!.replace(/\$\d+/g, "?").replace(/\s+/g, " ").slice(0, 110)
    const k = kinds.get(text) ?? { n: 0, ms: 0 }
    k.n++
    k.ms += Number(m[1])
    kinds.set(text, k)
    total++
    serverMs += Number(m[1])
  }
  console.log(
    `node cpu=${ms.nodeMs.toFixed(0)} ms (${(ms.nodeMs / ms.steps).toFixed(2)} ms/step) postgres cpu=${
      ms.pgMs.toFixed(0)
    } ms (${(ms.pgMs / ms.steps).toFixed(2)} ms/step)`
  )
  console.log(
    `steps=${ms.steps} wall=${ms.elapsed.toFixed(0)} ms (${
      (ms.elapsed / ms.steps).toFixed(2)
    } ms/step) statements=${total} (${(total / ms.steps).toFixed(1)}/step) server=${serverMs.toFixed(0)} ms`
  )
  // Row updates of the agents' table, and how many were HOT (no index entry written).
  await new Promise((resolve) => setTimeout(resolve, 1500))
  console.log(
    `fibril_agents updates (hot): ${
      pg.psql(
        "prof",
        "SELECT n_tup_upd || ' (' || n_tup_hot_upd || ')' FROM pg_stat_user_tables WHERE relname = 'fibril_agents'"
      )
    }`
  )
  for (const [text, k] of [...kinds].sort((a, b) => b[1].n - a[1].n).slice(0, 40)) {
    console.log(`${(k.n / ms.steps).toFixed(2).padStart(6)}/step ${k.ms.toFixed(1).padStart(8)} ms  ${text}`)
  }
} finally {
  pg.stop()
  rmSync(ws, { recursive: true, force: true })
}
process.exit(0)
