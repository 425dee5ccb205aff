// `fibril mcp` as a 2026-07-28 client with the Tasks extension sees it (raw JSON-RPC lines over
// stdio, exactly as SEP-2663 writes them): server/discover
// lists the revision and the extension; a `task` call is answered with a task before its
// child finishes; tasks/get goes working → completed with the plain call's result; tasks/cancel
// cancels the agent; a question in the tree is input_required, answered by tasks/update; a
// client without the extension gets a plain result; a new server
// process on the same workspace answers tasks/get for the old task.
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFileSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { bin, sourceCondition } from "./run.ts"

type Message = { readonly id?: unknown; readonly result?: any; readonly error?: { code: number; message: string } }

const report = (summary: string) =>
  `SUMMARY:\n${summary}\n\nCHANGES:\nnone\n\nEVIDENCE:\nnone\n\nRISKS:\nnone\n\nBLOCKERS:\nnone`

const script = {
  rules: [
    { match: { prompt: "slow" }, turns: [{ delay_ms: 1500, text: report("slow done") }] },
    { match: { prompt: "stuck" }, turns: [{ hang: true }] },
    { match: { prompt: "quick" }, turns: [{ text: report("quick done") }] },
    {
      match: { prompt: "write" },
      turns: [
        { tool_calls: [{ name: "write_file", args: { path: "approved.txt", content: "yes\n" } }] },
        { text: report("wrote") }
      ]
    }
  ]
}

/** `fibril mcp` on the scripted model in `dir`; every stdout line parsed. */
const server = (dir: string) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const child = spawn(process.execPath, [
        sourceCondition,
        bin,
        "mcp",
        "--model",
        "scripted:script.json",
        "--approve",
        "wait"
      ], {
        cwd: dir,
        env: { PATH: process.env["PATH"] ?? "", HOME: dir },
        stdio: ["pipe", "pipe", "pipe"]
      })
      const received: Array<Message> = []
      let pending = ""
      let stderr = ""
      child.stderr.on("data", (data: Buffer) => (stderr += data.toString()))
      child.stdout.on("data", (data: Buffer) => {
        pending += data.toString()
        let newline = pending.indexOf("\n")
        while (newline !== -1) {
          received.push(JSON.parse(pending.slice(0, newline)) as Message)
          pending = pending.slice(newline + 1)
          newline = pending.indexOf("\n")
        }
      })
      let next = 1
      /** Sends a request and waits (real process: polled, bounded) for its answer. */
      const call = (method: string, params: Record<string, unknown>, ms = 30_000) => {
        const id = next++
        child.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", id, method, params })}\n`)
        return Effect.promise(() =>
          new Promise<Message>((resolve, reject) => {
            const started = Date.now()
            const poll = () => {
              const found = received.find((m) => m.id === id)
              if (found !== undefined) return resolve(found)
              if (Date.now() - started > ms || child.exitCode !== null) {
                return reject(new Error(`no answer to ${method} within ${ms} ms; stderr ${stderr}`))
              }
              setTimeout(poll, 10)
            }
            poll()
          })
        ).pipe(Effect.orDie)
      }
      return { child, call }
    }),
    ({ child }) => Effect.sync(() => child.kill("SIGKILL"))
  )

const meta = (tasks: boolean) => ({
  "io.modelcontextprotocol/protocolVersion": "2026-07-28",
  "io.modelcontextprotocol/clientInfo": { name: "tasks-test", version: "0" },
  "io.modelcontextprotocol/clientCapabilities": tasks ? { extensions: { "io.modelcontextprotocol/tasks": {} } } : {}
})

const taskCall = (prompt: string, tasks = true) => ({
  name: "task",
  arguments: { description: prompt, prompt },
  _meta: meta(tasks)
})

/** tasks/get until `done` holds (real process: bounded). */
const pollUntil = (
  call: (method: string, params: Record<string, unknown>) => Effect.Effect<Message>,
  taskId: string,
  done: (result: any) => boolean
) =>
  Effect.gen(function*() {
    const seen: Array<any> = []
    for (let i = 0; i < 600; i++) {
      const got = yield* call("tasks/get", { taskId, _meta: meta(true) })
      seen.push(got.result ?? got.error)
      if (got.result !== undefined && done(got.result)) return { last: got.result, seen }
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 50)))
    }
    return assert.fail(`task ${taskId} never got there: ${JSON.stringify(seen.at(-1))}`)
  })

const strip = (result: any) => {
  const { agent_id: _a, duration_ms: _d, transcript_handle: _t, session_name: _s, ...rest } = result.structuredContent
  return rest
}

describe("fibril mcp: sub-agents as MCP tasks (2026-07-28, Tasks extension)", () => {
  it.live(
    "discover, a task before its child ends, working → completed with the plain result, cancel, a new process",
    () =>
      Effect.gen(function*() {
        const dir = fs.mkdtempSync(path.join(os.tmpdir(), "fibril-mcp-tasks-"))
        fs.writeFileSync(path.join(dir, "script.json"), JSON.stringify(script))
        // write_file waits for a person (the answer comes through tasks/update).
        fs.mkdirSync(path.join(dir, ".fibril"))
        fs.writeFileSync(path.join(dir, ".fibril", "config.toml"), "[permissions]\nask = [\"write_file\"]\n")
        const slowId = yield* Effect.scoped(Effect.gen(function*() {
          const { call } = yield* server(dir)
          const discovered = yield* call("server/discover", { _meta: meta(true) }, 60_000)
          assert.include(discovered.result.supportedVersions, "2026-07-28", JSON.stringify(discovered))
          assert.deepStrictEqual(discovered.result.capabilities.extensions, { "io.modelcontextprotocol/tasks": {} })

          // A task, answered well before the scripted child's 1.5 s answer.
          const started = Date.now()
          const created = yield* call("tools/call", taskCall("slow"))
          const answeredIn = Date.now() - started
          assert.strictEqual(created.result.resultType, "task", JSON.stringify(created))
          assert.isBelow(answeredIn, 1500, `the task came after ${answeredIn} ms`)
          assert.strictEqual(created.result.status, "working")
          assert.match(created.result.statusMessage, /general "slow"/)
          assert.strictEqual(created.result.pollIntervalMs, 1000)
          const taskId: string = created.result.taskId
          const { last, seen } = yield* pollUntil(call, taskId, (r) => r.status !== "working")
          assert.isTrue(seen.some((r) => r.status === "working"), "never seen working")
          assert.strictEqual(last.status, "completed")
          assert.strictEqual(last.resultType, "complete")

          // The same result a plain call returns (a client without the extension gets that).
          const plain = yield* call("tools/call", taskCall("slow", false))
          assert.strictEqual(plain.result.resultType, "complete", JSON.stringify(plain.result))
          // The envelope of a 2026-07-28 answer (resultType, the server's _meta) is the poll's own.
          const { resultType: _r, _meta: _m, ...plainResult } = plain.result
          assert.deepStrictEqual(Object.keys(last.result).sort(), Object.keys(plainResult).sort())
          assert.deepStrictEqual(strip(last.result), strip(plain.result))
          assert.strictEqual(last.result.structuredContent.summary, "slow done")
          assert.deepStrictEqual(JSON.parse(last.result.content[0].text), last.result.structuredContent)

          // Cancelled through tasks/cancel: the agent ends cancelled.
          const stuck = yield* call("tools/call", taskCall("stuck"))
          const stuckId: string = stuck.result.taskId
          const ack = yield* call("tasks/cancel", { taskId: stuckId, _meta: meta(true) })
          assert.deepStrictEqual(ack.result, { resultType: "complete" })
          const cancelled = yield* pollUntil(call, stuckId, (r) => r.status !== "working")
          assert.strictEqual(cancelled.last.status, "cancelled")
          const listed = JSON.parse(
            execFileSync(process.execPath, [sourceCondition, bin, "agents", "list", "--all", "--json"], {
              cwd: dir,
              env: { PATH: process.env["PATH"] ?? "", HOME: dir },
              encoding: "utf8"
            })
          ) as ReadonlyArray<{ agent_id: string; status: string }>
          assert.strictEqual(listed.find((a) => a.agent_id === stuckId)?.status, "cancelled")

          // What the extension does not cover, or a client that did not declare it.
          const unknown = yield* call("tasks/get", { taskId: "ag_nope", _meta: meta(true) })
          assert.strictEqual(unknown.error?.code, -32602)
          const undeclared = yield* call("tasks/get", { taskId, _meta: meta(false) })
          assert.strictEqual(undeclared.error?.code, -32021)
          const removed = yield* call("tasks/list", { _meta: meta(true) })
          assert.strictEqual(removed.error?.code, -32601)
          // A question in the task's tree: input_required with an elicitation, answered by tasks/update.
          const writer = yield* call("tools/call", taskCall("write"))
          const writerId: string = writer.result.taskId
          const asking = yield* pollUntil(call, writerId, (r) => r.status === "input_required")
          const [key, request] = Object.entries(asking.last.inputRequests)[0] as [string, any]
          assert.strictEqual(request.method, "elicitation/create")
          assert.include(request.params.message, "write_file")
          assert.deepStrictEqual(request.params.requestedSchema.properties.decision.enum, ["allow", "deny"])
          assert.isFalse(fs.existsSync(path.join(dir, "approved.txt")), "written before the answer")
          const updated = yield* call("tasks/update", {
            taskId: writerId,
            inputResponses: { [key]: { action: "accept", content: { decision: "allow" } } },
            _meta: meta(true)
          })
          assert.deepStrictEqual(updated.result, { resultType: "complete" })
          const written = yield* pollUntil(
            call,
            writerId,
            (r) => r.status !== "working" && r.status !== "input_required"
          )
          assert.strictEqual(written.last.status, "completed")
          assert.strictEqual(written.last.result.structuredContent.summary, "wrote")
          assert.strictEqual(fs.readFileSync(path.join(dir, "approved.txt"), "utf8"), "yes\n")

          return taskId
        }))

        // The client is gone and so is its server: a new one on the workspace answers the old task.
        yield* Effect.scoped(Effect.gen(function*() {
          const { call } = yield* server(dir)
          const again = yield* call("tasks/get", { taskId: slowId, _meta: meta(true) }, 60_000)
          assert.strictEqual(again.result.status, "completed", JSON.stringify(again))
          assert.strictEqual(again.result.result.structuredContent.summary, "slow done")
          // A 2025-11-25 client still initializes, and its task call is a plain result.
          const init = yield* call("initialize", {
            protocolVersion: "2025-11-25",
            capabilities: {},
            clientInfo: { name: "old", version: "0" }
          })
          assert.strictEqual(init.result.protocolVersion, "2025-11-25")
          const old = yield* call("tools/call", { name: "task", arguments: { description: "quick", prompt: "quick" } })
          assert.strictEqual(old.result.structuredContent.summary, "quick done")
        }))
        fs.rmSync(dir, { recursive: true, force: true })
      }),
    120_000
  )
})
