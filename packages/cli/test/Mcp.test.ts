// `fibril mcp` as a real subprocess, driven by the official MCP SDK client over stdio.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import type { RequestOptions } from "@modelcontextprotocol/sdk/shared/protocol.js"
import type { Progress } from "@modelcontextprotocol/sdk/types.js"
import { Effect, Exit, Fiber, FileSystem, Path } from "effect"
import { storedRecords } from "./inspect.ts"
import { bin } from "./run.ts"

const report = (summary: string) =>
  `SUMMARY:\n${summary}\n\nCHANGES:\nnone\n\nEVIDENCE:\nscripted\n\nRISKS:\nnone\n\nBLOCKERS:\nnone`

const script: ScriptedModel.ScriptInput = {
  rules: [
    {
      name: "slow",
      match: { prompt: "slow" },
      turns: [
        { delay_ms: 300, tool_calls: [{ name: "list_dir", args: {} }] },
        { delay_ms: 300, text: report("slow done") }
      ]
    },
    {
      name: "tree: spawns a grandchild, then hangs",
      match: { prompt: "tree", depth: 1 },
      turns: [
        { tool_calls: [{ name: "agent_spawn", args: { prompt: "hang below", description: "grandchild" } }] },
        { hang: true }
      ]
    },
    { name: "hang", match: { prompt: "hang" }, turns: [{ hang: true }] },
    {
      name: "background",
      match: { prompt: "background" },
      turns: [{ delay_ms: 200, text: report("background done") }]
    },
    {
      name: "typed: finishes with the final-answer tool",
      match: { prompt: "typed" },
      turns: [{ tool_calls: [{ name: "final_answer", args: { files: ["a.ts"], count: 1 } }] }]
    },
    { name: "anyone else", turns: [{ text: report("all good") }], repeat_last: true }
  ]
}

/** A temp workspace holding `script.json` (and `.fibril/config.toml` when given). */
const workspace = (config?: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const dir = yield* fs.makeTempDirectoryScoped()
    yield* fs.writeFileString(path.join(dir, "script.json"), JSON.stringify(script))
    if (config !== undefined) {
      yield* fs.makeDirectory(path.join(dir, ".fibril"), { recursive: true })
      yield* fs.writeFileString(path.join(dir, ".fibril", "config.toml"), config)
    }
    // The records as the server left them in the shared store, read straight from the database.
    const records = Effect.sync(() => storedRecords(dir))
    return { dir, records }
  })

const wireOf = new WeakMap<Client, ReadonlyArray<Record<string, any>>>()

/** `fibril mcp --model scripted:script.json` in `dir`, connected; closed with the scope. */
const connect = (dir: string) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const transport = new StdioClientTransport({
        command: process.execPath,
        args: [bin, "mcp", "--model", "scripted:script.json"],
        cwd: dir,
        // No key or user config from the developer's machine; NODE_OPTIONS carries the test
        // run's @fibril/source condition, so the server runs the sources, not a stale dist/.
        env: { PATH: process.env["PATH"] ?? "", HOME: dir, NODE_OPTIONS: process.env["NODE_OPTIONS"] ?? "" },
        stderr: "pipe"
      })
      const client = new Client({ name: "fibril-test", version: "0.0.0" })
      await client.connect(transport)
      // Every message the server sends, in wire order (the SDK runs progress handlers a
      // microtask late and forgets a request's handler at its response, so a notification
      // sent just before the response can be dropped by the client; the wire shows it).
      const wire: Array<Record<string, any>> = []
      const deliver = transport.onmessage
      // The MCP SDK's transport has an `onmessage` callback, not DOM events.
      // oxlint-disable-next-line unicorn/prefer-add-event-listener
      transport.onmessage = (message) => {
        wire.push(message as Record<string, any>)
        deliver?.(message)
      }
      wireOf.set(client, wire)
      return client
    }),
    (client) => Effect.promise(() => client.close())
  )

const call = (client: Client, name: string, args: Record<string, unknown>, options?: RequestOptions) =>
  Effect.promise(() => client.callTool({ name, arguments: args }, undefined, options))

type CallResult = Effect.Success<ReturnType<typeof call>>

const textOf = (result: CallResult): string => {
  const content: unknown = result.content
  return Array.isArray(content)
    ? content.map((part: unknown) =>
      typeof part === "object" && part !== null && "text" in part && typeof part.text === "string" ? part.text : ""
    ).join("")
    : ""
}

const structured = (result: CallResult): Record<string, any> => {
  assert.isNotTrue(result.isError, textOf(result))
  assert.isDefined(result.structuredContent)
  return result.structuredContent ?? {}
}

/** Collects progress notifications; `until(p)` resolves once one matches. */
const progressLog = () => {
  const seen: Array<Progress> = []
  const waiters: Array<{ readonly test: (p: Progress) => boolean; readonly resolve: () => void }> = []
  return {
    seen,
    onprogress: (p: Progress) => {
      seen.push(p)
      for (const w of waiters) if (w.test(p)) w.resolve()
    },
    until: (test: (p: Progress) => boolean) =>
      Effect.promise(() =>
        seen.some(test) ? Promise.resolve() : new Promise<void>((resolve) => void waiters.push({ test, resolve }))
      ).pipe(Effect.timeout("5 seconds"))
  }
}

const toolNames = [
  "task",
  "agent_spawn",
  "agent_open",
  "agent_wait",
  "agent_result",
  "agent_cancel",
  "agent_close",
  "agent_eval",
  "agent_assign",
  "handle_read",
  "agent_list",
  "agent_send_input",
  "agent_resume",
  "agent_merge"
]

describe("fibril mcp (MCP SDK client over stdio)", () => {
  it.live("tools/list shows the tools with input and output schemas and honest hints", () =>
    Effect.gen(function*() {
      const { dir } = yield* workspace()
      const client = yield* connect(dir)
      assert.strictEqual(client.getServerVersion()?.name, "fibril")
      const { tools } = yield* Effect.promise(() => client.listTools())
      assert.sameMembers(tools.map((t) => t.name), toolNames)
      const byName = new Map(tools.map((t) => [t.name, t]))
      const task = byName.get("task")!
      assert.sameMembers(task.inputSchema.required ?? [], ["description", "prompt"])
      assert.containsAllKeys(task.inputSchema.properties ?? {}, [
        "description",
        "prompt",
        "subagent_type",
        "allowed_tools",
        "mcp_servers"
      ])
      assert.include(JSON.stringify(task.inputSchema.properties?.["subagent_type"]), "explore")
      assert.strictEqual(task.outputSchema?.type, "object")
      assert.containsAllKeys(task.outputSchema?.properties ?? {}, [
        "agent_id",
        "status",
        "summary",
        "sections",
        "claims",
        "tokens"
      ])
      assert.containsAllKeys(byName.get("agent_result")!.outputSchema?.properties ?? {}, ["claims"])
      assert.include(task.description ?? "", "sub-agent")
      assert.containsAllKeys(byName.get("agent_spawn")!.inputSchema.properties ?? {}, [
        "prompt",
        "subagent_type",
        "detached",
        "mcp_servers"
      ])
      assert.containsAllKeys(byName.get("agent_list")!.outputSchema?.properties ?? {}, ["agents"])
      for (const name of ["agent_list", "agent_result", "agent_wait"]) {
        const hints = byName.get(name)!.annotations
        assert.strictEqual(hints?.readOnlyHint, true, name)
        assert.strictEqual(hints?.destructiveHint, false, name)
      }
      for (const name of ["task", "agent_spawn", "agent_resume", "agent_cancel", "agent_send_input"]) {
        assert.strictEqual(byName.get(name)!.annotations?.readOnlyHint, false, name)
      }
      assert.strictEqual(task.annotations?.openWorldHint, true)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("agent_open, agent_eval (the run receipt, checked against its output schema) and handle_read, by session name", () =>
    Effect.gen(function*() {
      const { dir } = yield* workspace()
      const client = yield* connect(dir)
      const { tools } = yield* Effect.promise(() => client.listTools())
      const evalTool = tools.find((t) => t.name === "agent_eval")!
      assert.containsAllKeys(evalTool.outputSchema?.properties ?? {}, [
        "run_id",
        "session_name",
        "events",
        "artifacts",
        "inputs",
        "follow_up",
        "takeover",
        "usage",
        "verification",
        "worker_record"
      ])
      const opened = structured(yield* call(client, "agent_open", { prompt: "background work", description: "bg" }))
      const name = String(opened["session_name"])
      assert.match(name, /^[a-z]+-[a-z]+$/)
      assert.strictEqual(opened["run_id"], `${opened["agent_id"]}-r1`)
      // The SDK client validates structured content against the tool's output schema.
      const done = structured(yield* call(client, "agent_eval", { agent_id: name, block: true, timeout_ms: 10_000 }))
      assert.strictEqual(done["status"], "completed")
      assert.strictEqual(done["agent_id"], opened["agent_id"])
      assert.strictEqual(done["follow_up"]["tool"], "agent_resume")
      assert.isTrue(done["takeover"]["available"])
      assert.strictEqual(done["takeover"]["command"], `fibril agents resume ${opened["agent_id"]} --cwd ${dir}`)
      assert.strictEqual(done["usage"]["status"], "reported")
      assert.strictEqual(done["verification"]["status"], "self_report")
      assert.deepStrictEqual(done["worker_record"]["follow_up"], done["follow_up"])
      assert.deepStrictEqual(
        (done["events"] as Array<{ type: string }>).map((e) => e.type),
        ["spawned", "started", "completed"]
      )
      const late = structured(yield* call(client, "agent_eval", { agent_id: name, message: "one more thing" }))
      assert.isFalse(late["delivered"])
      assert.include(late["delivery_reason"], "is completed")
      assert.strictEqual(late["inputs"][0]["preview"], "one more thing")
      const page = structured(yield* call(client, "handle_read", { handle: done["transcript_handle"], limit: 1 }))
      assert.strictEqual(page["messages"].length, 1)
      assert.strictEqual(page["messages"][0]["role"], "system")
      assert.strictEqual(page["next_offset"], 1)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("tools/call task runs a sub-agent and returns its structured result (typed with output_schema)", () =>
    Effect.gen(function*() {
      const { dir } = yield* workspace()
      const client = yield* connect(dir)
      const result = yield* call(client, "task", { description: "say hi", prompt: "Say hi", subagent_type: "explore" })
      const value = structured(result)
      assert.strictEqual(value["status"], "completed")
      assert.strictEqual(value["summary"], "all good")
      // The summary comes once, as `summary`; the sections carry the other four.
      assert.deepStrictEqual(value["sections"], {
        changes: "none",
        evidence: "scripted",
        risks: "none",
        blockers: "none"
      })
      // Its EVIDENCE cites nothing checkable: no claims, none unverified (validated against the output schema).
      assert.deepStrictEqual(value["claims"], { checked: 0, verified: 0, unverified: [] })
      assert.strictEqual(value["model"], "scripted:script.json")
      assert.match(String(value["agent_id"]), /^agent_/)
      assert.deepStrictEqual(JSON.parse(textOf(result)), value)

      // With output_schema (the same server): tools/list shows it, structuredContent carries the typed output.
      const { tools } = yield* Effect.promise(() => client.listTools())
      const task = tools.find((tool) => tool.name === "task")
      assert.property(task?.inputSchema.properties, "output_schema")
      assert.property(task?.outputSchema?.properties, "output")
      const outputSchema = {
        type: "object",
        properties: { files: { type: "array", items: { type: "string" } }, count: { type: "integer" } },
        required: ["files", "count"],
        additionalProperties: false
      }
      // The SDK client checks structuredContent against the tool's outputSchema (listed above).
      const typed = yield* call(client, "task", { description: "typed", prompt: "typed", output_schema: outputSchema })
      const typedValue = structured(typed)
      assert.strictEqual(typedValue["status"], "completed")
      assert.deepStrictEqual(typedValue["output"], { files: ["a.ts"], count: 1 })
      // The typed value is the result: no text sections beside it.
      assert.notProperty(typedValue, "sections")
      assert.deepStrictEqual(JSON.parse(textOf(typed)), typedValue)
      const refused = yield* call(client, "task", {
        description: "typed",
        prompt: "typed",
        output_schema: { type: "object", properties: { a: { oneOf: [] } } }
      })
      assert.isTrue(refused.isError)
      assert.include(textOf(refused), "oneOf")
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("agent_spawn, then agent_wait, then agent_result collect a background agent", () =>
    Effect.gen(function*() {
      const { dir } = yield* workspace()
      const client = yield* connect(dir)
      const spawned = structured(yield* call(client, "agent_spawn", { prompt: "background work", description: "bg" }))
      assert.strictEqual(spawned["status"], "running")
      assert.strictEqual(spawned["detached"], false)
      const id = String(spawned["agent_id"])
      const waited = structured(yield* call(client, "agent_wait", { ids: [id], wait_mode: "all", timeout_ms: 5000 }))
      assert.strictEqual(waited["timed_out"], false)
      assert.deepStrictEqual(waited["still_running"], [])
      assert.deepStrictEqual(waited["completed"].map((a: { agent_id: string }) => a.agent_id), [id])
      const result = structured(yield* call(client, "agent_result", { agent_id: id }))
      assert.strictEqual(result["status"], "completed")
      assert.strictEqual(result["summary"], "background done")
      const listed = structured(yield* call(client, "agent_list", {}))
      assert.deepStrictEqual(
        listed["agents"].map((a: { agent_id: string; status: string }) => [a.agent_id, a.status]),
        [[
          id,
          "completed"
        ]]
      )
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("a bad subagent_type is a tool error that lists the accepted roles; nothing is spawned", () =>
    Effect.gen(function*() {
      const { dir } = yield* workspace()
      const client = yield* connect(dir)
      const result = yield* call(client, "task", { description: "x", prompt: "x", subagent_type: "wizard" })
      assert.isTrue(result.isError)
      const text = textOf(result)
      assert.include(text, "unknown sub-agent type \"wizard\"")
      for (const role of ["general", "explore", "plan", "review", "implementer", "verifier"]) assert.include(text, role)
      const spawn = yield* call(client, "agent_spawn", { prompt: "x", type: "wizard" })
      assert.isTrue(spawn.isError)
      assert.include(textOf(spawn), "Accepted (case-insensitive)")
      assert.deepStrictEqual(structured(yield* call(client, "agent_list", {}))["agents"], [])
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("a wrongly typed argument is a tool error naming each bad parameter (docs/mcp.md), not invalid params", () =>
    Effect.gen(function*() {
      const { dir } = yield* workspace()
      const client = yield* connect(dir)
      const result = yield* call(client, "task", { description: 5, prompt: ["x"] })
      assert.isTrue(result.isError)
      assert.strictEqual(
        textOf(result),
        "Invalid parameters for tool 'task': Expected string\n  at [\"description\"]\nExpected string\n  at [\"prompt\"]"
      )
      assert.deepStrictEqual(structured(yield* call(client, "agent_list", {}))["agents"], [])
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("the concurrency cap is a tool error saying the cap (config max_concurrent = 1)", () =>
    Effect.gen(function*() {
      const { dir } = yield* workspace("[subagents]\nmax_concurrent = 1\n")
      const client = yield* connect(dir)
      const hanging = structured(yield* call(client, "agent_spawn", { prompt: "hang", description: "holds the slot" }))
      const refused = yield* call(client, "task", { description: "one more", prompt: "hi" })
      assert.isTrue(refused.isError)
      assert.include(textOf(refused), "sub-agent cap reached (max 1, running 1): nothing was spawned")
      // Cancelling the holder frees the slot.
      const cancelled = structured(yield* call(client, "agent_cancel", { id: hanging["agent_id"] }))
      assert.strictEqual(cancelled["status"], "cancelled")
      assert.strictEqual(
        structured(yield* call(client, "task", { description: "now", prompt: "hi" }))["status"],
        "completed"
      )
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("cancelling a running task from the client cancels its agent and descendants; the server stays healthy", () =>
    Effect.gen(function*() {
      const { dir, records } = yield* workspace("[subagents]\nmax_depth = 2\n")
      const client = yield* connect(dir)
      const progress = progressLog()
      const abort = new AbortController()
      const pending = yield* Effect.forkChild(
        call(client, "task", { description: "long tree", prompt: "tree" }, {
          signal: abort.signal,
          onprogress: progress.onprogress
        })
      )
      // The grandchild exists once its spawn is reported.
      yield* progress.until((p) => p.message?.includes("grandchild") === true && p.message.includes("spawned"))
      abort.abort("the user pressed Esc")
      const exit = yield* Fiber.await(pending)
      assert.isTrue(Exit.isFailure(exit)) // the SDK rejects the aborted call
      // The server noticed: both agents end cancelled, with the reasons recorded.
      const agents = yield* Effect.gen(function*() {
        for (let i = 0; i < 50; i++) {
          const listed = structured(yield* call(client, "agent_list", {}))["agents"] as Array<Record<string, string>>
          if (listed.length === 2 && listed.every((a) => a["status"] === "cancelled")) return listed
          yield* Effect.sleep("50 millis")
        }
        return structured(yield* call(client, "agent_list", {}))["agents"] as Array<Record<string, string>>
      })
      const root = agents.find((a) => a["description"] === "long tree")
      const grandchild = agents.find((a) => a["description"] === "grandchild")
      assert.strictEqual(root?.["status"], "cancelled")
      assert.strictEqual(root?.["reason"], "Cancelled by the MCP client")
      assert.strictEqual(grandchild?.["status"], "cancelled")
      assert.include(grandchild?.["reason"] ?? "", `its parent ${root?.["agent_id"]} was cancelled`)
      // Still healthy: the next call works.
      assert.strictEqual(
        structured(yield* call(client, "task", { description: "next", prompt: "hi" }))["status"],
        "completed"
      )
      // And the persisted record says cancelled too.
      yield* Effect.promise(() => client.close())
      const stored = (yield* records).find((r) => r["agent_id"] === root?.["agent_id"])
      assert.strictEqual(stored?.["status"], "cancelled")
      assert.strictEqual(stored?.["reason"], "Cancelled by the MCP client")
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("progress notifications arrive while a task runs (when the client sends a progress token)", () =>
    Effect.gen(function*() {
      const { dir } = yield* workspace()
      const client = yield* connect(dir)
      const progress = progressLog()
      const result = yield* call(client, "task", { description: "slow one", prompt: "slow" }, {
        onprogress: progress.onprogress
      })
      assert.strictEqual(structured(result)["summary"], "slow done")
      // On the wire, the agent's end is the last progress notification, sent before the response.
      const wire = wireOf.get(client) ?? []
      const response = wire.findIndex((m) =>
        m["id"] !== undefined && m["result"]?.structuredContent?.summary === "slow done"
      )
      const sent = wire.slice(0, response).filter((m) => m["method"] === "notifications/progress")
        .map((m) => {
          const { progressToken: _, ...rest } = m["params"] as Progress & { progressToken: unknown }
          return rest
        })
      assert.isAbove(response, 0)
      const messages = sent.map((p) => p.message ?? "")
      assert.isAtLeast(messages.length, 4, messages.join("\n"))
      const values = sent.map((p) => p.progress)
      assert.deepStrictEqual(values, [...values].sort((a, b) => a - b))
      assert.strictEqual(new Set(values).size, values.length)
      assert.isTrue(messages.some((m) => m.includes("→ list_dir")), messages.join("\n"))
      assert.isTrue(messages.some((m) => m.includes("step 2")), messages.join("\n"))
      assert.match(messages.at(-1) ?? "", /completed$/, messages.join("\n"))
      assert.isEmpty(wire.slice(response).filter((m) => m["method"] === "notifications/progress"))
      // What the client handed to `onprogress` is what was sent, while the task ran: a prefix.
      // The SDK runs progress handlers a microtask late, so the ones that arrive together with
      // the response (the run's last steps, under load several) can be dropped on its side.
      assert.isAtLeast(progress.seen.length, 1)
      assert.deepStrictEqual(progress.seen, sent.slice(0, progress.seen.length))
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("closing stdin shuts the server down and cancels its running agents (detached ones excepted)", () =>
    Effect.gen(function*() {
      const { dir, records } = yield* workspace()
      const client = yield* connect(dir)
      const attached = structured(yield* call(client, "agent_spawn", { prompt: "hang", description: "attached" }))
      const detached = structured(
        yield* call(client, "agent_spawn", { prompt: "hang", description: "detached", detached: true })
      )
      yield* Effect.promise(() => client.close())
      const stored = yield* records
      const byId = new Map(stored.map((r) => [r["agent_id"], r]))
      assert.strictEqual(byId.get(attached["agent_id"])?.["status"], "cancelled")
      assert.include(String(byId.get(attached["agent_id"])?.["reason"]), "fibril mcp server shut down")
      assert.strictEqual(byId.get(detached["agent_id"])?.["status"], "interrupted")
    }).pipe(Effect.provide(NodeServices.layer)))
})
