/**
 * The persistent store's floor (one fresh process, `node bench/sqlite-floor.ts [K]`, one JSON
 * line): what writing a W1 run's rows costs with nothing of Fibril around the writes.
 *
 * A W1 run (K sub-agents, M = 3, uncapped) goes through Fibril on the SQLite store first, not
 * timed; its rows are then read back: every agent's record and every transcript message. Timed:
 * the same rows written into a new database made by the store itself (the same schema), through
 * the store's own connection settings (`internal/sqlite.ts`: WAL, `synchronous = NORMAL`), with
 * the statements the store uses for a new agent — its row inserted, then replaced whole, and its
 * messages 32 to a multi-row insert — each value encoded with `JSON.stringify` as the store does,
 * in 7 transactions (what such a run commits, whatever K). Nothing else: no queue, no wait for a commit, no
 * Effect. The record is written twice at its final size (the store's first write is of the
 * running record, a little smaller), so the floor is, if anything, a little high.
 *
 * `json_us_per_agent` is the encoding alone, timed separately in the same process.
 */
import * as NodeServices from "@effect/platform-node/NodeServices"
import * as Fibril from "@fibril/core/Fibril"
import * as SqliteSubAgentStore from "@fibril/core/SqliteSubAgentStore"
import * as LanguageModel from "effect/ai/LanguageModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ManagedRuntime from "effect/ManagedRuntime"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { performance } from "node:perf_hooks"
import * as Sqlite from "../packages/core/src/internal/sqlite.ts"
import { lookupTool, parentRun, scriptModel } from "./peer-adapter.ts"
import { makeScript } from "./script.ts"

const K = Number(process.argv[2] ?? 1000)
const M = 3
const linesPerInsert = 32
const root = mkdtempSync(join(tmpdir(), "fibril-sqlite-floor-"))

interface Agent {
  readonly columns: ReadonlyArray<Sqlite.Value>
  readonly record: unknown
  readonly handle: string
  readonly messages: Array<unknown>
}

try {
  // 1. A W1 run on the SQLite store (not timed).
  const cwd = join(root, "run")
  const s = makeScript({ K, M, blocking: false })
  const runtime = ManagedRuntime.make(
    lookupTool(s).pipe(
      Layer.provideMerge(Fibril.layer({
        cwd,
        store: "file",
        subagents: { maxConcurrent: 1_000_000, admission: "queue" },
        session: { maxSteps: 1000 }
      })),
      Layer.provide(Layer.succeed(LanguageModel.LanguageModel, scriptModel(s))),
      Layer.provide(NodeServices.layer)
    )
  )
  const { final } = await runtime.runPromise(parentRun)
  await runtime.dispose()
  if (final !== `final: received ${K} summaries`) throw new Error(`the W1 run did not finish: ${final}`)

  // 2. Its rows, read back (the root agent is the session itself: no record).
  const written = Sqlite.open(join(cwd, ".fibril", "state", SqliteSubAgentStore.databaseFileName))
  const agents: Array<Agent> = []
  const byHandle = new Map<string, Agent>()
  for (
    const row of written.all(
      "SELECT agent_id, parent_id, status, owner_boot, handle, created_at, finished_at, record FROM fibril_agents"
    )
  ) {
    const agent: Agent = {
      columns: [
        row["agent_id"] as string,
        row["parent_id"] as string | null,
        row["status"] as string,
        row["owner_boot"] as string,
        row["handle"] as string,
        Number(row["created_at"]),
        row["finished_at"] === null ? null : Number(row["finished_at"])
      ],
      record: JSON.parse(String(row["record"])),
      handle: String(row["handle"]),
      messages: []
    }
    agents.push(agent)
    byHandle.set(agent.handle, agent)
  }
  for (const row of written.all("SELECT handle, message FROM fibril_transcripts ORDER BY id")) {
    byHandle.get(String(row["handle"]))?.messages.push(JSON.parse(String(row["message"])))
  }
  written.close()
  // What a W1 run commits, whatever K: one transaction per event-loop turn with writes, 6 or 7
  // (counted by instrumenting the store).
  const transactions = 7

  // 3. A new database with the store's schema (made by the store, then closed).
  const dir = join(root, "floor")
  await Effect.runPromise(
    Effect.scoped(SqliteSubAgentStore.makeSqlite({ dir })).pipe(Effect.provide(NodeServices.layer))
  )
  const db = Sqlite.open(join(dir, SqliteSubAgentStore.databaseFileName))

  const insertNew = `INSERT OR IGNORE INTO fibril_agents
    (agent_id, parent_id, status, owner_boot, handle, created_at, finished_at, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
  const replaceOwn =
    "UPDATE fibril_agents SET status = ?, finished_at = ?, record = ? WHERE agent_id = ? AND owner_boot = ?"
  const insertLines = (rows: number) =>
    `INSERT INTO fibril_transcripts (handle, message) VALUES ${Array.from({ length: rows }, () => "(?, ?)").join(", ")}`

  const cpu = () => {
    const u = process.cpuUsage()
    return (u.user + u.system) / 1000
  }

  // The encoding alone.
  const json0 = performance.now()
  let bytes = 0
  for (const agent of agents) {
    bytes += 2 * JSON.stringify(agent.record).length
    for (const message of agent.messages) bytes += JSON.stringify(message).length
  }
  const jsonMs = performance.now() - json0

  // The writes: each transaction inserts its share of the agents, replaces their rows and writes
  // their messages.
  const cpu0 = cpu()
  const t0 = performance.now()
  const perTransaction = Math.ceil(agents.length / transactions)
  for (let at = 0; at < agents.length; at += perTransaction) {
    const batch = agents.slice(at, at + perTransaction)
    db.transaction(() => {
      const values: Array<Sqlite.Value> = []
      for (const agent of batch) {
        db.run(insertNew, ...agent.columns, JSON.stringify(agent.record))
        db.run(
          replaceOwn,
          agent.columns[2]!,
          agent.columns[6]!,
          JSON.stringify(agent.record),
          agent.columns[0]!,
          agent.columns[3]!
        )
        for (const message of agent.messages) values.push(agent.handle, JSON.stringify(message))
      }
      for (let i = 0; i < values.length; i += 2 * linesPerInsert) {
        const chunk = values.slice(i, i + 2 * linesPerInsert)
        db.run(insertLines(chunk.length / 2), ...chunk)
      }
    })
  }
  const wallMs = performance.now() - t0
  const cpuMs = cpu() - cpu0
  // Everything read back was written again.
  const count = (table: string) => Number(db.get(`SELECT COUNT(*) AS n FROM ${table}`)?.["n"])
  const rowsWritten = { agents: count("fibril_agents"), messages: count("fibril_transcripts") }
  db.close()

  const messages = agents.reduce((n, agent) => n + agent.messages.length, 0)
  console.log(JSON.stringify({
    ok: agents.length === K && messages === K * (2 * M + 3) && rowsWritten.agents === agents.length &&
      rowsWritten.messages === messages,
    K,
    agents: agents.length,
    messages_per_agent: messages / agents.length,
    json_bytes_per_agent: bytes / agents.length,
    transactions,
    us_per_agent: (wallMs * 1000) / agents.length,
    cpu_us_per_agent: (cpuMs * 1000) / agents.length,
    json_us_per_agent: (jsonMs * 1000) / agents.length
  }))
} finally {
  rmSync(root, { recursive: true, force: true })
}
