// `fibril mcp` as real clients meet it: the id parameters are `required` in tools/list (and
// the `id` alias still works); a burst of agent_spawn calls past the cap is refused with the
// right running count; a client that goes away mid-call (stdin closed, a `task` in flight)
// leaves every agent with the one documented shutdown reason.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { Effect, FileSystem, Path, Stream } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { DatabaseSync } from "node:sqlite"
import { bin, sourceCondition } from "./run.ts"

const report = "SUMMARY:\ndone\n\nCHANGES:\nnone\n\nEVIDENCE:\nx\n\nRISKS:\nnone\n\nBLOCKERS:\nnone"

const script = {
  rules: [
    { match: { prompt: "hang" }, turns: [{ hang: true }] },
    { turns: [{ text: report }], repeat_last: true }
  ]
}

const workspace = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const dir = yield* fs.makeTempDirectoryScoped()
  yield* fs.writeFileString(path.join(dir, "script.json"), JSON.stringify(script))
  const records = () => {
    const db = new DatabaseSync(path.join(dir, ".fibril", "state", "fibril.db"))
    try {
      return db.prepare("SELECT record FROM fibril_agents").all().map((row) =>
        JSON.parse(String(row["record"])) as { agent_id: string; status: string; reason?: string; detached: boolean }
      )
    } finally {
      db.close()
    }
  }
  return { dir, records }
})

const connect = (dir: string, args: ReadonlyArray<string> = []) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const transport = new StdioClientTransport({
        command: process.execPath,
        args: [sourceCondition, bin, "mcp", "--model", "scripted:script.json", ...args],
        cwd: dir,
        env: { PATH: process.env["PATH"] ?? "", HOME: dir },
        stderr: "pipe"
      })
      const client = new Client({ name: "fibril-clients-test", version: "0.0.0" })
      await client.connect(transport)
      return client
    }),
    (client) => Effect.promise(() => client.close())
  )

const call = (client: Client, name: string, args: Record<string, unknown>) =>
  Effect.promise(() => client.callTool({ name, arguments: args }))

const text = (result: Effect.Success<ReturnType<typeof call>>) =>
  (result.content as Array<{ text?: string }>).map((part) => part.text ?? "").join("")

describe("fibril mcp and its clients", () => {
  it.live(
    "tools/list: the agent id is required where a tool acts on one; the id alias is still accepted",
    () =>
      Effect.gen(function*() {
        const { dir } = yield* workspace
        const client = yield* connect(dir)
        const { tools } = yield* Effect.promise(() => client.listTools())
        const required: Record<string, ReadonlyArray<string>> = Object.fromEntries(
          tools.map((tool) => [tool.name, tool.inputSchema.required ?? []])
        )
        for (
          const name of [
            "agent_result",
            "agent_cancel",
            "agent_send_input",
            "agent_resume",
            "agent_eval",
            "agent_close"
          ]
        ) {
          assert.include([...required[name] ?? []], "agent_id", name)
        }
        assert.deepStrictEqual(required["task"], ["description", "prompt"])
        const spawned = yield* call(client, "agent_spawn", { prompt: "say done", description: "quick" })
        const id = (spawned.structuredContent as { agent_id: string }).agent_id
        const byAlias = yield* call(client, "agent_result", { id, block: true, timeout_ms: 10_000 })
        assert.isNotTrue(byAlias.isError, text(byAlias))
        assert.strictEqual((byAlias.structuredContent as { status: string }).status, "completed")
        // Neither name: a tool error saying which parameter is missing.
        const neither = yield* call(client, "agent_result", {})
        assert.isTrue(neither.isError)
        assert.include(text(neither), `"agent_id" is required (also accepted as id)`)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    30_000
  )

  it.live(
    "a burst of agent_spawn past the cap: each refusal names the cap and the agents holding it",
    () =>
      Effect.gen(function*() {
        const { dir } = yield* workspace
        const client = yield* connect(dir, ["--max-concurrent", "3"])
        const results = yield* Effect.forEach(
          Array.from({ length: 12 }, (_, i) => i),
          (i) => call(client, "agent_spawn", { prompt: "hang", description: `burst ${i}` }),
          { concurrency: "unbounded" }
        )
        const refused = results.filter((r) => r.isError === true).map(text)
        assert.strictEqual(results.length - refused.length, 3)
        assert.strictEqual(refused.length, 9)
        for (const message of refused) {
          assert.include(message, "sub-agent cap reached (max 3, running 3): nothing was spawned.")
        }
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    30_000
  )

  it.live(
    "a client that goes away with calls in flight: every agent ends with the one shutdown reason",
    () =>
      Effect.gen(function*() {
        const { dir, records } = yield* workspace
        const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
        // The client speaks JSON-RPC on the server's stdin, then disappears (its end of the pipe closes).
        const messages = [
          {
            jsonrpc: "2.0",
            id: 0,
            method: "initialize",
            params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "crash", version: "0" } }
          },
          { jsonrpc: "2.0", method: "notifications/initialized" },
          {
            jsonrpc: "2.0",
            id: 1,
            method: "tools/call",
            params: { name: "agent_spawn", arguments: { prompt: "hang", description: "background" } }
          },
          ...[2, 3, 4].map((id) => ({
            jsonrpc: "2.0",
            id,
            method: "tools/call",
            params: { name: "task", arguments: { description: `in flight ${id}`, prompt: "hang" } }
          }))
        ]
        const input = Stream.concat(
          Stream.fromIterable(messages.map((m) => new TextEncoder().encode(`${JSON.stringify(m)}\n`))),
          // Once the four agents run (their model never answers), stdin ends.
          Stream.fromEffect(Effect.gen(function*() {
            const running = () => {
              try {
                return records().filter((r) => r.status === "running").length
              } catch {
                return 0
              }
            }
            for (let i = 0; i < 400 && running() < 4; i++) yield* Effect.sleep("50 millis")
            return new Uint8Array(0)
          }))
        )
        const handle = yield* spawner.spawn(
          ChildProcess.make(process.execPath, [sourceCondition, bin, "mcp", "--model", "scripted:script.json"], {
            cwd: dir,
            env: { HOME: dir },
            extendEnv: true,
            stdin: input
          })
        )
        const [exitCode] = yield* Effect.all([
          handle.exitCode,
          Stream.runDrain(handle.stdout),
          Stream.runDrain(handle.stderr)
        ], {
          concurrency: "unbounded"
        })
        assert.strictEqual(Number(exitCode), 0)
        const stored = records()
        assert.strictEqual(stored.length, 4)
        for (const record of stored) {
          assert.strictEqual(record.status, "cancelled", JSON.stringify(record))
          assert.strictEqual(record.reason, "Cancelled: the fibril mcp server shut down")
        }
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    30_000
  )
})
