// No tool blocks the event loop that serves `fibril mcp`: while an agent greps a large tree
// with a pattern that makes a backtracking engine run for minutes, agent_list still answers
// within a second, and the grep ends.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { Effect, FileSystem, Path } from "effect"
import { bin } from "./run.ts"

const report = (summary: string) =>
  `SUMMARY:\n${summary}\n\nCHANGES:\nnone\n\nEVIDENCE:\nscripted\n\nRISKS:\nnone\n\nBLOCKERS:\nnone`

const script: ScriptedModel.ScriptInput = {
  rules: [
    {
      name: "grep with a catastrophic pattern",
      match: { prompt: "grep" },
      turns: [
        { tool_calls: [{ name: "grep", args: { pattern: "(a+)+$", path: "big" } }] },
        { text: report("grep finished") }
      ]
    }
  ]
}

const files = 4
/** ~4 MiB per file of lines on which `(a+)+$` backtracks 2^34 ways in JavaScript's RegExp. */
const content = `${"a".repeat(34)}b\n`.repeat(120_000)

type Agent = { readonly agent_id: string; readonly status: string; readonly tool_calls: number }

describe("fibril mcp stays responsive", () => {
  it.live(
    "agent_list answers within 1 s while an agent greps 16 MiB with (a+)+$, and the grep ends",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* fs.makeTempDirectoryScoped()
        yield* fs.writeFileString(path.join(dir, "script.json"), JSON.stringify(script))
        yield* fs.makeDirectory(path.join(dir, "big"))
        for (let i = 0; i < files; i++) yield* fs.writeFileString(path.join(dir, "big", `f${i}.txt`), content)

        const client = yield* Effect.acquireRelease(
          Effect.promise(async () => {
            const transport = new StdioClientTransport({
              command: process.execPath,
              args: [bin, "mcp", "--model", "scripted:script.json"],
              cwd: dir,
              // No key or user config from the developer's machine; NODE_OPTIONS carries the test
              // run's module conditions.
              env: { PATH: process.env["PATH"] ?? "", HOME: dir, NODE_OPTIONS: process.env["NODE_OPTIONS"] ?? "" },
              stderr: "pipe"
            })
            const connected = new Client({ name: "fibril-test", version: "0.0.0" })
            await connected.connect(transport)
            return connected
          }),
          (opened) => Effect.promise(() => opened.close())
        )
        const call = (name: string, args: Record<string, unknown>) =>
          Effect.promise(() => client.callTool({ name, arguments: args })).pipe(
            Effect.map((result) => result.structuredContent as Record<string, any>)
          )
        /** agent_list, and how long it took to answer. */
        const list = Effect.gen(function*() {
          const started = Date.now()
          const listed = yield* call("agent_list", {})
          return { agents: listed["agents"] as Array<Agent>, ms: Date.now() - started }
        })

        const spawned = yield* call("agent_spawn", { prompt: "grep", description: "greps", subagent_type: "explore" })
        const id = String(spawned["agent_id"])
        const timings: Array<number> = []
        let whileGrepping = 0
        for (let i = 0; i < 400; i++) {
          const { agents, ms } = yield* list
          timings.push(ms)
          const agent = agents.find((a) => a.agent_id === id)
          if (agent?.status === "running" && agent.tool_calls === 1) whileGrepping++
          if (agent?.status !== "running") break
          yield* Effect.sleep("20 millis")
        }

        assert.isAbove(whileGrepping, 0, "agent_list never ran while the grep did")
        assert.isBelow(Math.max(...timings), 1_000, `agent_list took ${Math.max(...timings)} ms`)

        const waited = yield* call("agent_wait", { ids: [id], wait_mode: "all", timeout_ms: 30_000 })
        assert.strictEqual(waited["timed_out"], false)
        const result = yield* call("agent_result", { agent_id: id })
        assert.strictEqual(result["status"], "completed")
        assert.strictEqual(result["summary"], "grep finished")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    60_000
  )
})
