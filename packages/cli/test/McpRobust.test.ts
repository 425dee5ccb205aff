// `fibril mcp` as a real subprocess, fed raw bytes on stdin: what a JSON-RPC server must
// answer (a malformed line, a line over 16 MiB, JSON nested 100,000 deep) is answered, the
// other requests of the same read are served, and the server stays up.
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { bin, sourceCondition } from "./run.ts"

type Message = { readonly id?: unknown; readonly result?: any; readonly error?: { code: number; message: string } }

/** `fibril mcp` on a scripted model in a temp workspace; every stdout line parsed. */
const server = Effect.acquireRelease(
  Effect.sync(() => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "fibril-mcp-robust-"))
    fs.writeFileSync(path.join(dir, "script.json"), JSON.stringify({ rules: [{ turns: [{ text: "ok" }] }] }))
    const child = spawn(process.execPath, [sourceCondition, bin, "mcp", "--model", "scripted:script.json"], {
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
    const send = (text: string) =>
      Effect.promise(() => new Promise<void>((resolve) => child.stdin.write(text, () => resolve())))
    /** The first message `test` accepts, polled for at most `ms` (a real process). */
    const waitFor = (test: (message: Message) => boolean, what: string, ms = 30_000) =>
      Effect.promise(() =>
        new Promise<Message>((resolve, reject) => {
          const started = Date.now()
          const poll = () => {
            const found = received.find(test)
            if (found !== undefined) return resolve(found)
            if (Date.now() - started > ms || child.exitCode !== null) {
              return reject(new Error(`no ${what} within ${ms} ms; got ${JSON.stringify(received)}; stderr ${stderr}`))
            }
            setTimeout(poll, 20)
          }
          poll()
        })
      ).pipe(Effect.orDie)
    return { child, dir, send, waitFor, received }
  }),
  ({ child, dir }) =>
    Effect.sync(() => {
      child.kill("SIGKILL")
      fs.rmSync(dir, { recursive: true, force: true })
    })
)

const request = (id: number, method: string, params: unknown = {}) =>
  `${JSON.stringify({ jsonrpc: "2.0", id, method, params })}\n`

const initialize = (s: Effect.Success<typeof server>) =>
  Effect.gen(function*() {
    yield* s.send(request(1, "initialize", {
      protocolVersion: "2025-06-18",
      capabilities: {},
      clientInfo: { name: "robust", version: "0" }
    }))
    yield* s.waitFor((m) => m.id === 1 && m.result !== undefined, "initialize response", 60_000)
    yield* s.send(`${JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" })}\n`)
  })

const toolsListed = (id: number) => (m: Message) => m.id === id && Array.isArray(m.result?.tools)

describe("fibril mcp answers everything it can", () => {
  it.live(
    "a malformed line and a valid request in one write: -32700 (id null) and the valid response",
    () =>
      Effect.gen(function*() {
        const s = yield* server
        yield* initialize(s)
        yield* s.send(`{"jsonrpc":"2.0","id":2,"method":\n${request(3, "tools/list")}`)
        const parseError = yield* s.waitFor((m) => m.error?.code === -32700, "-32700")
        assert.isNull(parseError.id)
        const listed = yield* s.waitFor(toolsListed(3), "tools/list response")
        assert.include(listed.result.tools.map((tool: { name: string }) => tool.name), "task")
      }).pipe(Effect.scoped),
    90_000
  )

  it.live("a line over 16 MiB: -32600; the server answers the next request", () =>
    Effect.gen(function*() {
      const s = yield* server
      yield* initialize(s)
      const huge = JSON.stringify({
        jsonrpc: "2.0",
        id: 4,
        method: "tools/call",
        params: { name: "task", arguments: { description: "x", prompt: "a".repeat(17 * 1024 * 1024) } }
      })
      yield* s.send(`${huge}\n`)
      const tooLarge = yield* s.waitFor((m) => m.error?.code === -32600, "-32600")
      assert.isNull(tooLarge.id)
      assert.include(tooLarge.error?.message, "16777216")
      yield* s.send(request(5, "tools/list"))
      yield* s.waitFor(toolsListed(5), "tools/list after the oversized line")
    }).pipe(Effect.scoped), 90_000)

  it.live(
    "100,000-deep JSON with a readable id: an error with that id; the server answers the next request",
    () =>
      Effect.gen(function*() {
        const s = yield* server
        yield* initialize(s)
        const deep = "[".repeat(100_000) + "]".repeat(100_000)
        yield* s.send(`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"task","arguments":${deep}}}\n`)
        const tooDeep = yield* s.waitFor((m) => m.id === 6, "an answer to id 6")
        assert.strictEqual(tooDeep.error?.code, -32600)
        yield* s.send(request(7, "tools/list"))
        yield* s.waitFor(toolsListed(7), "tools/list after the deep line")
        assert.isNull(s.child.exitCode)
      }).pipe(Effect.scoped),
    90_000
  )
})
