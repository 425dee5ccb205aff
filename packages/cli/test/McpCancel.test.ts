// Cancelling an agent whose MCP call is in flight sends the server `notifications/cancelled` for
// that call (issue 34). A real stdio MCP server written with the MCP SDK (fixtures/counterMcp.ts)
// whose `wait` tool writes `started`, then `cancelled` when the SDK aborts the call on that
// notification; a scripted parent's child calls it through Fibril.layer and is cancelled.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Fibril, type McpServers, SubAgentManager } from "@fibril/core"
import { ScriptedModel } from "@fibril/testkit"
import { Context, Effect, Fiber, FileSystem, Layer, Path } from "effect"
import { fileURLToPath } from "node:url"
import { until } from "./run.ts"

const counter = fileURLToPath(new URL("./fixtures/counterMcp.ts", import.meta.url))

describe("MCP calls and cancel", () => {
  it.live(
    "cancelling an agent whose MCP call is in flight sends the server notifications/cancelled",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const cwd = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
        const log = path.join(cwd, "server.log")
        const server: McpServers.Server = {
          transport: "stdio",
          name: "counter",
          source: "test",
          timeoutSecs: 60,
          command: process.execPath,
          args: [counter, log],
          env: {}
        }
        const script: ScriptedModel.ScriptInput = {
          rules: [
            {
              match: { depth: 1 },
              turns: [{ tool_calls: [{ name: "mcp__counter__wait", args: {} }] }, { text: "never" }]
            },
            {
              match: { depth: 0 },
              turns: [{ tool_calls: [{ name: "agent_spawn", args: { description: "waiter", prompt: "wait" } }] }, {
                tool_calls: [{ name: "agent_wait", args: { wait_mode: "all" } }]
              }, { text: "parent done" }]
            }
          ]
        }
        const context = yield* Layer.build(
          Fibril.layer({ cwd, mcpServers: [server] }).pipe(Layer.provide(ScriptedModel.layer(script)))
        )
        const manager = Context.get(context, SubAgentManager.SubAgentManager)
        const { fiber } = yield* Effect.orDie(
          Context.get(context, SubAgentManager.Embedded).startRoot({ prompt: "go" })
        )
        const lines = fs.readFileString(log).pipe(
          Effect.map((text) => text.split("\n").filter((line) => line !== "")),
          Effect.orElseSucceed((): ReadonlyArray<string> => [])
        )
        assert.isTrue(yield* until(Effect.map(lines, (seen) => seen.includes("started"))), "the call never started")
        const [child] = (yield* manager.list({ includeArchived: true })).filter((agent) => agent.depth === 1)
        yield* Effect.orDie(manager.cancel(child!.agent_id, "no longer needed"))
        // The server saw the cancel of its call (the SDK aborted it), while the server still runs.
        assert.isTrue(
          yield* until(Effect.map(lines, (seen) => seen.includes("cancelled"))),
          "no notifications/cancelled"
        )
        yield* Fiber.await(fiber)
        const [after] = (yield* manager.list({ includeArchived: true })).filter((agent) => agent.depth === 1)
        assert.strictEqual(after?.status, "cancelled")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    60_000
  )
})
