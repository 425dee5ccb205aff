// Cluster mode on a real PostgreSQL (started by the test on 127.0.0.1, see postgres.ts) with
// real `fibril worker` processes and clients: kill -9 and restart, failover, the cluster-wide
// cap, cancellation from a third process, agent_send_input across a restart.
//
// Needs PostgreSQL's server binaries (Debian: apt-get install -y postgresql; .ci/run installs
// them). Without them these tests are skipped, and the skip names the reason.
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Duration, Effect } from "effect"
import type { SqlClient } from "effect/sql"
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Node from "../src/Node.ts"
import * as Pg from "./postgres.ts"
import {
  agentIdOf,
  askScript,
  bin,
  crashScript,
  fibril,
  killAll,
  type Proc,
  sleep,
  stepOfRow,
  steps,
  until
} from "./processes.ts"

const reason = Pg.skipReason()

let pg: Pg.Postgres | undefined
let dbs = 0
const tmp = mkdtempSync(path.join(os.tmpdir(), "fibril-cluster-it-"))

interface Setup {
  readonly url: string
  readonly ws: string
  readonly log: string
  readonly psql: (q: string) => string
  readonly worker: (extra?: ReadonlyArray<string>, env?: Record<string, string>) => Promise<Proc>
}

const setup = async (script: unknown, migrateWith: "cli" | "library" = "library"): Promise<Setup> => {
  const db = `it${++dbs}`
  pg!.createDatabase(db)
  const url = pg!.url(db)
  const ws = path.join(tmp, db)
  mkdirSync(path.join(ws, ".fibril"), { recursive: true })
  writeFileSync(path.join(ws, "script.json"), JSON.stringify(script))
  writeFileSync(path.join(ws, "a.txt"), "hello")
  const log = path.join(ws, "steps.log")
  appendFileSync(log, "")
  if (migrateWith === "cli") {
    const migrated = fibril(["cluster", "migrate", "--cluster", url])
    assert.strictEqual(await migrated.done, 0, migrated.out.stderr)
  } else {
    await Effect.runPromise(Effect.provide(Node.migrate, Node.database(url)))
  }
  const worker = async (extra: ReadonlyArray<string> = [], env: Record<string, string> = {}) => {
    const proc = fibril(
      ["worker", "--cluster", url, "--cwd", ws, "--model", `scripted:${path.join(ws, "script.json")}`, ...extra],
      { FIBRIL_CLUSTER_STEP_LOG: log, ...env }
    )
    await until(() => proc.out.stderr.includes("fibril worker: pid"), `worker up (${proc.out.stderr})`)
    return proc
  }
  return { url, ws, log, psql: (q) => pg!.psql(db, q), worker }
}

const ports = async () => [await Pg.freePort(), await Pg.freePort()] as const

describe.skipIf(reason !== undefined)(
  `cluster mode on PostgreSQL with fibril worker processes${reason === undefined ? "" : ` — skipped: ${reason}`}`,
  () => {
    beforeAll(async () => {
      pg = await Pg.start()
    }, 60_000)
    afterAll(async () => {
      await killAll()
      pg?.stop()
      rmSync(tmp, { recursive: true, force: true })
    })

    it(
      "a question pending, kill -9 of the worker, restart, answered by `fibril agents answer --cluster`: the call runs once",
      async () => {
        const s = await setup(askScript)
        writeFileSync(path.join(s.ws, ".fibril", "config.toml"), `[permissions]\nask = ["shell"]\n`)
        const [port] = await ports()
        const first = await s.worker(["--port", String(port)])
        const client = fibril(["run", "go", "--cluster", s.url, "--cwd", s.ws, "--json"])
        await until(
          () =>
            s.psql("SELECT count(*) FROM fibril_questions WHERE answer IS NULL") === "1" &&
            s.psql("SELECT count(*) FROM fibril_agents WHERE prompt = 'sibling' AND status = 'completed'") === "1",
          "asked"
        )
        const asked = s.psql("SELECT id || ' ' || asked_at FROM fibril_questions")
        first.child.kill("SIGKILL")
        await first.done
        await s.worker(["--port", String(port)])
        const id = asked.split(" ")[0]!
        const answered = fibril(["agents", "answer", id, "allow", "--cluster", s.url])
        assert.strictEqual(await answered.done, 0, answered.out.stderr + answered.out.stdout)
        assert.strictEqual(await client.done, 0, client.out.stderr)
        const last = JSON.parse(client.out.stdout.trim().split("\n").at(-1)!) as { text: string }
        assert.strictEqual(last.text, "root ok")
        // Asked once (the same row, the same time), run once (its side effect counted on disk).
        assert.strictEqual(s.psql("SELECT id || ' ' || asked_at FROM fibril_questions"), asked)
        assert.strictEqual(readFileSync(path.join(s.ws, "side-effect.txt"), "utf8"), "ran\n")
      },
      60_000
    )

    it(
      "kill -9 of both workers mid-run, restart: the run completes, no step journaled before the kill runs again, input sent meanwhile is delivered",
      async () => {
        const s = await setup(crashScript, "cli")
        // A worker restarted at its address takes its shards back at once (a new address would
        // wait for the dead one's locks to expire).
        const [portA, portB] = await ports()
        const t0 = Date.now()
        const [a, b] = await Promise.all([s.worker(["--port", String(portA)]), s.worker(["--port", String(portB)])])
        const client = fibril(["run", "go", "--cluster", s.url, "--cwd", s.ws, "--json"])
        await until(() => steps(s.log).filter((e) => e.event === "end").length >= 8, "8 steps done")
        const killed = new Set([a.child.pid!, b.child.pid!])
        a.child.kill("SIGKILL")
        b.child.kill("SIGKILL")
        await Promise.all([a.done, b.done])
        const journaled = s.psql(
          `SELECT agent_id || ' ' || run || ' ' || step || ' ' || slot FROM fibril_transcript WHERE pid IN (${
            [...killed].join(",")
          })`
        ).split("\n").filter((l) => l !== "").flatMap((l) => {
          const [agent, run, step, slot] = l.split(" ")
          const name = stepOfRow(Number(step), Number(slot))
          return name === undefined ? [] : [`${agent}#${run}:${name}`]
        })
        const journaledSteps = new Set(journaled)
        // agent_send_input while no worker runs: the root reads it at its next model step.
        const root = agentIdOf(client)!
        const input = fibril(["cluster", "input", root, "hello across the restart", "--cluster", s.url])
        assert.strictEqual(await input.done, 0, input.out.stderr + input.out.stdout)
        assert.include(input.out.stdout, "\"delivered\":true")
        const restarted = Date.now()
        await Promise.all([s.worker(["--port", String(portA)]), s.worker(["--port", String(portB)])])
        assert.strictEqual(await client.done, 0, client.out.stderr)
        const finished = Date.now()
        const last = JSON.parse(client.out.stdout.trim().split("\n").at(-1)!) as { text: string }
        assert.strictEqual(last.text, "root ok")
        assert.strictEqual(s.psql("SELECT count(*) FROM fibril_agents WHERE depth = 1 AND status = 'completed'"), "4")
        const events = steps(s.log)
        const rerun = [...journaledSteps].filter((key) =>
          events.some((e) => e.event === "start" && !killed.has(e.pid) && `${e.agentId}#${e.run}:${e.name}` === key)
        )
        assert.isAtLeast(journaledSteps.size, 4, "steps were journaled before the kill")
        assert.deepStrictEqual(rerun, [], "a step journaled before the kill ran again")
        // The input was delivered once, to the root's model step after the restart.
        assert.strictEqual(
          s.psql(
            `SELECT count(*) FROM fibril_transcript WHERE agent_id = '${root}' AND message LIKE '%hello across the restart%'`
          ),
          "1"
        )
        assert.strictEqual(s.psql("SELECT count(*) FROM fibril_inbox"), "0")
        // Exactly one transcript row per step, whatever ran twice.
        assert.strictEqual(
          s.psql(
            "SELECT count(*) FROM (SELECT agent_id, run, step, slot FROM fibril_transcript GROUP BY 1,2,3,4 HAVING count(*) > 1) d"
          ),
          "0"
        )
        console.log(
          `crash test: ${journaledSteps.size} steps journaled before the kill, 0 ran again; ${
            events.filter((e) => e.event === "start").length
          } step executions for ${
            new Set(events.map((e) => `${e.agentId}#${e.run}:${e.name}`)).size
          } steps; killed at +${restarted - t0} ms, done ${finished - restarted} ms after the restart began`
        )
      },
      60_000
    )

    it(
      "kill -9 of the worker while a shell call runs, restart: the call is not run again (its marker was committed), the model reads Interrupted, the run completes",
      async () => {
        const s = await setup({
          rules: [{
            match: { depth: 0 },
            turns: [
              { tool_calls: [{ name: "shell", args: { command: "echo ran >> shell.log; sleep 5" } }] },
              { text: "root ok" }
            ]
          }]
        })
        const port = String(await Pg.freePort())
        const a = await s.worker(["--port", port])
        const client = fibril(["run", "go", "--cluster", s.url, "--cwd", s.ws, "--json"])
        const shellLog = path.join(s.ws, "shell.log")
        const shellLines = () => {
          try {
            return readFileSync(shellLog, "utf8").split("\n").filter((l) => l !== "")
          } catch {
            return []
          }
        }
        await until(() => shellLines().length === 1, "the shell command ran")
        a.child.kill("SIGKILL")
        await a.done
        assert.strictEqual(
          s.psql("SELECT count(*) FROM fibril_tool_calls"),
          "1",
          "the marker committed before the kill"
        )
        const b = await s.worker(["--port", port])
        assert.strictEqual(await client.done, 0, client.out.stderr)
        const last = JSON.parse(client.out.stdout.trim().split("\n").at(-1)!) as { text: string }
        assert.strictEqual(last.text, "root ok")
        // The tool step ran again on the restarted worker, and did not run the command.
        const starts = steps(s.log).filter((e) => e.event === "start" && e.name === "tool/0/0")
        assert.deepStrictEqual(starts.map((e) => e.pid), [a.child.pid, b.child.pid])
        assert.deepStrictEqual(shellLines(), ["ran"])
        const row = s.psql("SELECT message FROM fibril_transcript WHERE slot = 1000")
        assert.include(row, "Interrupted")
        assert.include(row, "not run again because shell is not idempotent")
      },
      60_000
    )

    it(
      "a cancel from another process interrupts the shell command in flight on the worker: the step ends at once, its processes killed",
      async () => {
        const s = await setup({
          rules: [{
            match: { depth: 0 },
            turns: [
              {
                tool_calls: [{
                  name: "shell",
                  args: { command: "echo started > started.txt; sleep 20; echo late > late.txt" }
                }]
              },
              { text: "never" }
            ]
          }]
        })
        await s.worker()
        const client = fibril(["run", "go", "--cluster", s.url, "--cwd", s.ws, "--json"])
        await until(() => existsSync(path.join(s.ws, "started.txt")), "the shell command started")
        const root = agentIdOf(client)!
        const cancel = fibril(["cluster", "cancel", root, "--cluster", s.url])
        assert.strictEqual(await cancel.done, 0, cancel.out.stderr)
        const cancelledAt = Date.now()
        // The step's result (written in its transaction) says it was cancelled, long before the
        // command's 20 s sleep would have ended.
        await until(
          () =>
            s.psql("SELECT count(*) FROM fibril_transcript WHERE slot = 1000 AND message LIKE '%Cancelled%'") === "1",
          "the tool step ended cancelled",
          10_000
        )
        const took = Date.now() - cancelledAt
        assert.isBelow(took, 5000)
        assert.strictEqual(await client.done, 1)
        assert.strictEqual(s.psql(`SELECT status FROM fibril_agents WHERE agent_id = '${root}'`), "cancelled")
        await sleep(500)
        assert.isFalse(existsSync(path.join(s.ws, "late.txt")))
        console.log(`cancel in flight: the shell step ended ${took} ms after the cancel`)
      },
      60_000
    )

    it(
      "one worker killed and not restarted: the survivor finishes the run once the dead one's locks expire",
      async () => {
        const s = await setup({
          rules: [
            {
              match: { depth: 1 },
              turns: [
                { tool_calls: [{ name: "list_dir", args: {} }], delay_ms: 150 },
                { tool_calls: [{ name: "list_dir", args: {} }], delay_ms: 150 },
                { text: "child ok", delay_ms: 150 }
              ]
            },
            {
              match: { depth: 0 },
              turns: [
                {
                  tool_calls: [1, 2, 3, 4].map((i) => ({
                    name: "task",
                    args: { description: `part ${i}`, prompt: `part ${i}` }
                  }))
                },
                { text: "root ok" }
              ]
            }
          ]
        })
        const lock = ["--lock-expiration", "3"]
        const [a, b] = await Promise.all([s.worker(lock), s.worker(lock)])
        const client = fibril(["run", "go", "--cluster", s.url, "--cwd", s.ws, "--json"])
        // Which worker runs the agents depends on how the shards were first shared out: the
        // one killed is whichever has run steps of this run.
        let victim: typeof a | undefined
        await until(() => {
          const ended = steps(s.log).filter((e) => e.event === "end")
          victim = [a, b].find((w) => ended.filter((e) => e.pid === w.child.pid).length >= 2)
          return victim !== undefined
        }, "a worker ran steps")
        const survivor = victim === a ? b : a
        victim!.child.kill("SIGKILL")
        const killedAt = Date.now()
        assert.strictEqual(await client.done, 0, client.out.stderr)
        const last = JSON.parse(client.out.stdout.trim().split("\n").at(-1)!) as { text: string }
        assert.strictEqual(last.text, "root ok")
        const after = steps(s.log).filter((e) => e.t > killedAt)
        assert.isTrue(
          after.length > 0 && after.every((e) => e.pid === survivor.child.pid),
          "only the survivor ran steps after the kill"
        )
        console.log(`failover: done ${Date.now() - killedAt} ms after the kill (lock expiration 3 s)`)
      },
      60_000
    )

    it(
      "a database without Fibril's tables, or of another version, is refused naming fibril cluster migrate; prune deletes old finished agents",
      async () => {
        const db = `it${++dbs}`
        pg!.createDatabase(db)
        const url = pg!.url(db)
        const before = fibril(["cluster", "status", "ag_x", "--cluster", url])
        assert.strictEqual(await before.done, 2)
        assert.include(before.out.stderr, "fibril cluster migrate")
        const inDb = <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient>) =>
          Effect.runPromise(Effect.provide(effect, Node.database(url)))
        await inDb(Node.migrate)
        pg!.psql(db, "UPDATE fibril_meta SET value = '99' WHERE key = 'schema_version'")
        const other = await inDb(Effect.flip(Node.checkSchema))
        assert.include(other.message, "schema is version 99")
        assert.include(other.message, "fibril cluster migrate")
        pg!.psql(db, "UPDATE fibril_meta SET value = '1' WHERE key = 'schema_version'")
        // Two finished agents, one of them old, and a running old one.
        const insert = (id: string, status: string, age: string) =>
          pg!.psql(
            db,
            `INSERT INTO fibril_agents (agent_id, parent_id, depth, role, model, description, prompt, detached, workspace, status, run, execution_id, updated_at)
           VALUES ('${id}', NULL, 0, 'general', '', 'd', 'p', false, '/w', '${status}', 0, 'exec-${id}', now() - interval '${age}')`
          )
        insert("old", "completed", "10 days")
        insert("new", "completed", "1 hour")
        insert("busy", "running", "10 days")
        pg!.psql(
          db,
          "INSERT INTO fibril_transcript (agent_id, run, step, slot, message) VALUES ('old', 0, 0, 100, '{}')"
        )
        pg!.psql(db, "INSERT INTO fibril_tool_calls (agent_id, run, step, slot, pid) VALUES ('old', 0, 0, 1000, 1)")
        pg!.psql(
          db,
          "INSERT INTO fibril_steps (execution_id, name, agent_id, result) VALUES ('x-old', 'model/0', 'old', '{}'), ('x-busy', 'model/0', 'busy', '{}')"
        )
        const pruned = await inDb(Node.prune(Duration.days(7)))
        assert.strictEqual(pruned.agents, 1)
        assert.strictEqual(
          pg!.psql(db, "SELECT string_agg(agent_id, ',' ORDER BY agent_id) FROM fibril_agents"),
          "busy,new"
        )
        assert.strictEqual(pg!.psql(db, "SELECT count(*) FROM fibril_transcript"), "0")
        assert.strictEqual(pg!.psql(db, "SELECT count(*) FROM fibril_tool_calls"), "0")
        assert.strictEqual(pg!.psql(db, "SELECT string_agg(agent_id, ',') FROM fibril_steps"), "busy")
        const bad = fibril(["cluster", "prune", "--older-than", "a while", "--cluster", url])
        assert.strictEqual(await bad.done, 2)
        assert.include(bad.out.stderr, "not a duration")
        assert.strictEqual(pg!.psql(db, "SELECT count(*) FROM fibril_agents"), "2")
      },
      60_000
    )

    describe("two workers sharing a cap of 2 (queue), max depth 2", () => {
      let s: Setup
      const script = {
        rules: [
          {
            match: { prompt: "hello" },
            turns: [{ tool_calls: [{ name: "list_dir", args: {} }], delay_ms: 200 }, {
              text: "SUMMARY:\nhello done",
              delay_ms: 200
            }]
          },
          {
            match: { prompt: "capped" },
            turns: [{ tool_calls: [{ name: "list_dir", args: {} }], delay_ms: 200 }, { text: "done", delay_ms: 200 }]
          },
          {
            match: { prompt: "fan" },
            turns: [
              {
                tool_calls: [1, 2, 3, 4, 5, 6].map((i) => ({
                  name: "task",
                  args: { description: `capped ${i}`, prompt: `capped ${i}` }
                }))
              },
              { text: "fan ok" }
            ]
          },
          {
            match: { prompt: "leaf" },
            turns: [{ tool_calls: [{ name: "list_dir", args: {} }], delay_ms: 100 }],
            repeat_last: true
          },
          {
            match: { prompt: "branch" },
            turns: [
              { tool_calls: [{ name: "agent_spawn", args: { prompt: "leaf" } }] },
              { tool_calls: [{ name: "agent_wait", args: {} }] }
            ],
            repeat_last: true
          },
          {
            match: { prompt: "tree" },
            turns: [
              { tool_calls: [{ name: "agent_spawn", args: { prompt: "branch" } }] },
              { tool_calls: [{ name: "agent_wait", args: { wait_mode: "all" } }] }
            ],
            repeat_last: true
          }
        ]
      }
      const env = { FIBRIL_SUBAGENTS_ADMISSION: "queue", FIBRIL_SUBAGENTS_MAX_DEPTH: "2" }
      let workers: ReadonlyArray<Proc> = []
      beforeAll(async () => {
        s = await setup(script)
        const [portA, portB] = await ports()
        // The first worker with a small pool of its own (--db-connections): it serves its steps
        // with it; the second with the default.
        workers = await Promise.all([
          s.worker(["--max-concurrent", "2", "--port", String(portA), "--db-connections", "8"], env),
          s.worker(["--max-concurrent", "2", "--port", String(portB)], env)
        ])
      }, 60_000)

      it("never more than 2 sub-agents hold permits across both workers; all 6 finish", async () => {
        assert.include(workers[0]!.out.stderr, "db_connections 8")
        assert.include(workers[1]!.out.stderr, "db_connections 20")
        const client = fibril(["run", "fan", "--cluster", s.url, "--cwd", s.ws, "--json"])
        let max = 0
        const run = { going: true }
        void client.done.then(() => run.going = false)
        while (run.going) {
          max = Math.max(max, Number(s.psql("SELECT count(*) FROM fibril_permits")))
          await sleep(30)
        }
        assert.strictEqual(await client.done, 0, client.out.stderr)
        // What the store and the client saw, for the message of any assertion below.
        const seen = () =>
          `agents: ${
            s.psql("SELECT string_agg(agent_id || ' ' || status || ' ' || depth, '; ') FROM fibril_agents")
          }\nclient: ${client.out.stdout}\nclient stderr: ${client.out.stderr}`
        assert.strictEqual(
          s.psql("SELECT count(*) FROM fibril_agents WHERE prompt LIKE 'capped%' AND status = 'completed'"),
          "6",
          seen()
        )
        assert.strictEqual(max, 2, `permits held at once, at most: ${max}\n${seen()}`)
        const pids = new Set(steps(s.log).filter((e) => e.name.startsWith("model")).map((e) => e.pid))
        // The events of every agent's steps reached the client, from whichever worker ran them.
        const events = client.out.stdout.split("\n").filter((l) => l.startsWith("{")).map((l) =>
          JSON.parse(l) as { type: string; depth?: number; tool?: string }
        )
        const childEvents = events.filter((e) => e.depth === 1)
        assert.strictEqual(childEvents.filter((e) => e.type === "spawned").length, 6, seen())
        assert.strictEqual(
          childEvents.filter((e) => e.type === "tool_call" && e.tool === "list_dir").length,
          6,
          seen()
        )
        assert.strictEqual(childEvents.filter((e) => e.type === "completed").length, 6, seen())
        assert.strictEqual(events.filter((e) => e.depth === 0 && e.type === "tool_call").length, 6, seen())
        console.log(
          `cap: at most ${max} permits held at once; steps ran on ${pids.size} workers; ${events.length} events reached the client`
        )
      }, 60_000)

      it(
        "clients of the cluster: mcp task with progress, agents list/show/transcript, by [cluster] url; the flag and FIBRIL_CLUSTER_URL win over it",
        async () => {
          writeFileSync(path.join(s.ws, ".fibril", "config.toml"), `[cluster]\nurl = "${s.url}"\n`)
          const { Client } = await import("@modelcontextprotocol/sdk/client/index.js")
          const { StdioClientTransport } = await import("@modelcontextprotocol/sdk/client/stdio.js")
          const transport = new StdioClientTransport({
            command: process.execPath,
            args: ["--conditions=@fibril/source", bin, "mcp"],
            cwd: s.ws,
            env: { PATH: process.env["PATH"] ?? "", HOME: s.ws },
            stderr: "pipe"
          })
          const mcp = new Client({ name: "fibril-test", version: "0.0.0" })
          await mcp.connect(transport)
          // Every progress message on the wire (the SDK can drop one that arrives just before the
          // response: it runs progress handlers a microtask late).
          const progress: Array<string> = []
          const deliver = transport.onmessage
          // The MCP SDK's transport has an `onmessage` callback, not DOM events.
          // oxlint-disable-next-line unicorn/prefer-add-event-listener
          transport.onmessage = (message) => {
            const m = message as { method?: string; params?: { message?: string } }
            if (m.method === "notifications/progress") progress.push(m.params?.message ?? "")
            deliver?.(message)
          }
          let id: string
          try {
            const result = await mcp.callTool(
              { name: "task", arguments: { prompt: "hello", description: "say hello", allowed_tools: ["list_dir"] } },
              undefined,
              { onprogress: () => {} }
            )
            const task = result.structuredContent as {
              agent_id: string
              status: string
              summary: string
              tokens: { input: number; output: number; cached: number }
              duration_ms: number
            }
            assert.strictEqual(task.status, "completed", JSON.stringify(result))
            assert.strictEqual(task.summary, "hello done")
            id = task.agent_id
            // Tokens by kind and the run's duration, from the row the workers wrote (two model
            // calls of 200 ms each).
            assert.isAbove(task.tokens.input, 0)
            assert.isAbove(task.tokens.output, 0)
            assert.isAtLeast(task.duration_ms, 400)
            assert.isBelow(task.duration_ms, 30_000)
            assert.strictEqual(
              s.psql(`SELECT grants FROM fibril_agents WHERE agent_id = '${id}'`),
              "[{\"role\":\"general\",\"depth\":0,\"allowedTools\":[\"list_dir\"]}]"
            )
            assert.isTrue(progress.some((m) => m.includes("→ list_dir")), progress.join("\n"))
            assert.isTrue(progress.some((m) => m.includes("completed")), progress.join("\n"))
            const listed = await mcp.callTool({ name: "agent_list", arguments: { include_archived: true } })
            assert.include(JSON.stringify(listed.structuredContent), id)
          } finally {
            await mcp.close()
          }
          // No flag, no environment variable: [cluster] url of the workspace's config.
          const noUrl = {}
          const list = fibril(["agents", "list", "--all", "--cwd", s.ws], noUrl)
          assert.strictEqual(await list.done, 0, list.out.stderr)
          assert.include(list.out.stdout, id)
          const show = fibril(["agents", "show", id, "--cwd", s.ws], noUrl)
          assert.strictEqual(await show.done, 0, show.out.stderr)
          assert.include(show.out.stdout, "\"status\":\"completed\"")
          // Tokens by kind and the run's duration, as `fibril agents show` prints an embedded record's.
          const shown = JSON.parse(show.out.stdout.split("\n")[0]!) as {
            tokens: { input: number; output: number; cached: number }
            duration_ms: number
          }
          assert.deepStrictEqual(Object.keys(shown.tokens), ["input", "output", "cached"])
          assert.isAbove(shown.tokens.input + shown.tokens.output, 0)
          assert.isAtLeast(shown.duration_ms, 0)
          const transcript = fibril(["agents", "transcript", id, "--cwd", s.ws], noUrl)
          assert.strictEqual(await transcript.done, 0, transcript.out.stderr)
          assert.include(transcript.out.stdout, "hello done")
          // The flag wins over the environment, which wins over the config: both point nowhere here.
          const nowhere = `postgres://nobody@127.0.0.1:${await Pg.freePort()}/none`
          const byFlag = fibril(["agents", "list", "--cwd", s.ws, "--cluster", nowhere], noUrl)
          assert.strictEqual(await byFlag.done, 2)
          assert.include(byFlag.out.stderr, "cannot reach the cluster database")
          const byEnv = fibril(["agents", "list", "--cwd", s.ws], { FIBRIL_CLUSTER_URL: nowhere })
          assert.strictEqual(await byEnv.done, 2)
          assert.include(byEnv.out.stderr, "cannot reach the cluster database")
          // Without any of them nothing changes: the workspace's own store (none here).
          const local = fibril(["agents", "list", "--cwd", tmp], noUrl)
          assert.strictEqual(await local.done, 0, local.out.stderr)
          assert.notInclude(local.out.stdout, id)
        },
        60_000
      )

      // The tree holds both permits (branch and leaf): with a cap of 2 a third level would queue.
      it(
        "a cancel from a third process stops the root and every non-detached descendant by the next step boundary",
        async () => {
          const client = fibril(["run", "tree", "--cluster", s.url, "--cwd", s.ws, "--json"])
          await until(() => agentIdOf(client) !== undefined, "the client started the root")
          const root = agentIdOf(client)!
          await until(() => {
            const leaves = s.psql("SELECT agent_id FROM fibril_agents WHERE prompt = 'leaf'").split("\n").filter((l) =>
              l !== ""
            )
            const log = steps(s.log)
            return leaves.length === 1 &&
              leaves.every((leaf) => log.some((e) => e.agentId === leaf && e.event === "end" && e.name === "tool/0/0"))
          }, "the leaf is running")
          const cancel = fibril(["cluster", "cancel", root, "--cluster", s.url])
          assert.strictEqual(await cancel.done, 0, cancel.out.stderr)
          const cancelledAt = Date.now()
          assert.strictEqual(await client.done, 1)
          await sleep(1500)
          const tree = s.psql(
            `SELECT agent_id || ' ' || status FROM fibril_agents WHERE prompt IN ('tree', 'branch', 'leaf')`
          )
            .split("\n")
          assert.strictEqual(tree.length, 3)
          assert.isTrue(tree.every((l) => l.endsWith(" cancelled")), tree.join("; "))
          const startsAfter = new Map<string, number>()
          for (const e of steps(s.log)) {
            if (e.event === "start" && e.t > cancelledAt) {
              startsAfter.set(
                e.agentId,
                (startsAfter.get(e.agentId) ?? 0) + 1
              )
            }
          }
          assert.isTrue([...startsAfter.values()].every((n) => n <= 1), JSON.stringify([...startsAfter]))
        },
        60_000
      )
    })
  }
)

describe("cluster mode: bad input", () => {
  it("an unreachable database: exit 2, naming the host with the password masked and what to check", async () => {
    const port = await Pg.freePort()
    const proc = fibril(["run", "hello", "--cluster", `postgres://fibril:s3cret-pw@127.0.0.1:${port}/fibril`])
    assert.strictEqual(await proc.done, 2)
    assert.include(proc.out.stderr, `cannot reach the cluster database at postgres://***@127.0.0.1:${port}/fibril`)
    assert.include(proc.out.stderr, "Check that Postgres is running")
    assert.notInclude(proc.out.stderr + proc.out.stdout, "s3cret-pw")
  }, 30_000)
})
