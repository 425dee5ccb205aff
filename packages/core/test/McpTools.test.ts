// MCP servers as Fibril tools, against a real server from npm (@modelcontextprotocol/server-everything
// over stdio), started ONCE for the file: its tools listed and registered, their postures from the
// annotations, arguments checked, results rendered, a hanging call bounded, and a scripted parent
// delegating to children that call the tools.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it as test, layer } from "@effect/vitest"
import { Context, Effect, Fiber, FileSystem, Layer, Stream } from "effect"
import * as FetchHttpClient from "effect/http/FetchHttpClient"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { TestClock } from "effect/testing"
import { spawnSync } from "node:child_process"
import * as net from "node:net"
import * as FibrilConfig from "../src/FibrilConfig.ts"
import * as McpServers from "../src/McpServers.ts"
import * as McpTools from "../src/McpTools.ts"
import { Session } from "../src/Session.ts"
import * as ToolRegistry from "../src/ToolRegistry.ts"
import { everything, serverBin } from "./everything.ts"
import { provideNode, report, setup } from "./support.ts"

const crashMarker = `fibril-mcp-test-${process.pid}`

// The extra argument (ignored by the server) finds its process for the crash case.
const everythingServer = everything("everything", { marker: crashMarker, env: { FIBRIL_MCP_TEST: "passed-through" } })

/** The started server's tools, shared by every test of the file (one process). */
class Everything extends Context.Service<Everything, {
  readonly tools: ReadonlyArray<ToolRegistry.ToolDefinition>
  readonly slow: ToolRegistry.ToolDefinition
  readonly overHttp: ReadonlyArray<ToolRegistry.ToolDefinition>
}>()("test/Everything") {}

const EverythingLayer = Layer.effect(
  Everything,
  Effect.gen(function*() {
    const started = yield* McpTools.start(everythingServer)
    // A tool of the same server with a 2 s bound, for the hanging-call case.
    const slow = McpTools.definition(
      started.connection,
      started.tools.find((tool) => tool.name === "trigger-long-running-operation")!,
      McpTools.defaults,
      2
    )
    // The same server over streamable HTTP on 127.0.0.1, on a port the OS chose free.
    const port = yield* Effect.promise(() =>
      new Promise<number>((resolve) => {
        const probe = net.createServer().listen(0, "127.0.0.1", () => {
          const address = probe.address() as net.AddressInfo
          probe.close(() => resolve(address.port))
        })
      })
    )
    const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
    const http = yield* spawner.spawn(
      ChildProcess.make(process.execPath, [serverBin, "streamableHttp"], {
        env: { PORT: String(port) },
        extendEnv: true
      })
    )
    // Ready when it says it listens (bounded: a server that never does fails the file).
    yield* http.stderr.pipe(
      Stream.decodeText(),
      Stream.takeUntil((text) => text.includes("listening")),
      Stream.runDrain,
      Effect.timeout("20 seconds")
    )
    const overHttp = yield* McpTools.start({
      transport: "http",
      name: "remote",
      source: "test",
      timeoutSecs: 30,
      url: `http://127.0.0.1:${port}/mcp`,
      headers: {}
    })
    return { tools: started.definitions, slow, overHttp: overHttp.definitions }
  })
).pipe(Layer.provide([NodeServices.layer, FetchHttpClient.layer]))

/** The pids of the shared stdio server's processes. */
const serverPids = (): Array<number> => {
  const found = spawnSync("pgrep", ["-f", crashMarker], { encoding: "utf8" }).stdout
  return found.split("\n").filter((line) => line !== "").map(Number)
}

const toolResults = (messages: ReadonlyArray<{ readonly role: string; readonly content: unknown }>) =>
  messages.flatMap((message) =>
    message.role === "tool" && Array.isArray(message.content)
      ? message.content.filter((part: { type: string }) => part.type === "tool-result") as Array<
        { readonly name: string; readonly result: unknown; readonly isFailure: boolean }
      >
      : []
  )

// The server's process lives on the real clock; each test still runs on its own TestClock.
layer(EverythingLayer, { timeout: 30_000, excludeTestServices: true })("MCP tools from a real server", (it) => {
  it.effect("lists its tools as mcp__<server>__<tool>, read posture only for readOnlyHint", () =>
    Effect.gen(function*() {
      const { tools } = yield* Everything
      const byName = new Map(tools.map((tool) => [tool.name, tool]))
      assert.strictEqual(byName.get("mcp__everything__echo")?.posture, "read")
      assert.strictEqual(byName.get("mcp__everything__get-sum")?.posture, "read")
      assert.strictEqual(byName.get("mcp__everything__toggle-simulated-logging")?.posture, "write")
      assert.include(byName.get("mcp__everything__echo")!.description, "MCP server everything")
    }))

  it.effect("decodes arguments by the server's JSON Schema and renders every kind of content", () =>
    Effect.gen(function*() {
      const { tools } = yield* Everything
      const registry = yield* ToolRegistry.make
      for (const tool of tools) yield* registry.register(tool)
      const call = (name: string, input: unknown) =>
        Effect.gen(function*() {
          const tool = (yield* registry.list).find((candidate) => candidate.name === `mcp__everything__${name}`)!
          const params = yield* tool.decode(input)
          return yield* tool.handler(params, { sessionId: undefined, callId: "c", role: "general", depth: 0 })
        })
      assert.strictEqual(yield* call("echo", { message: "hi" }), "Echo: hi")
      // A wrong type and a missing argument are refused before the server sees the call.
      const wrongType = yield* Effect.flip(call("echo", { message: 42 }))
      assert.strictEqual(wrongType._tag, "SchemaError")
      const missing = yield* Effect.flip(call("get-sum", { a: 1 }))
      assert.strictEqual(missing._tag, "SchemaError")
      assert.include(String(yield* call("get-sum", { a: 2, b: 3 })), "5")
      // Images are references (type and size), never bytes in the text.
      const image = String(yield* call("get-tiny-image", {}))
      assert.match(image, /\[image image\/png, \d+ bytes\]/)
      const structured = String(yield* call("get-structured-content", { location: "New York" }))
      assert.include(structured, "structuredContent: {")
      const links = String(yield* call("get-resource-links", { count: 2 }))
      assert.match(links, /\[link [^\]]+: demo:\/\//)
      // The configured env reaches the server process.
      const env = String(yield* call("get-env", {}))
      assert.include(env, "passed-through")
      // The marker that keeps a Fibril started as a server from starting its servers again.
      assert.include(env, McpTools.serverMarker)
    }))

  it.effect("a server over streamable HTTP: its tools are listed and called the same way", () =>
    Effect.gen(function*() {
      const { overHttp } = yield* Everything
      const echo = overHttp.find((tool) => tool.name === "mcp__remote__echo")!
      assert.strictEqual(echo.posture, "read")
      const result = yield* echo.handler({ message: "over http" }, {
        sessionId: undefined,
        callId: "c",
        role: "general",
        depth: 0
      })
      assert.strictEqual(result, "Echo: over http")
    }))

  it.effect("a call that does not answer ends at the server's timeout", () =>
    Effect.gen(function*() {
      const { slow } = yield* Everything
      const fiber = yield* Effect.forkChild(
        Effect.flip(
          slow.handler({ duration: 60, steps: 1 }, { sessionId: undefined, callId: "c", role: "general", depth: 0 })
        )
      )
      yield* TestClock.adjust("2 seconds")
      const error = yield* Fiber.join(fiber)
      assert.strictEqual(error._tag, "ToolFailure")
      assert.include(error.message, "no answer within 2 s")
    }).pipe(Effect.provide(TestClock.layer())))

  it.effect("the server crashes mid-call: the call fails saying so, the server restarts, the next call works", () =>
    Effect.gen(function*() {
      const { tools } = yield* Everything
      const byName = new Map(tools.map((tool) => [tool.name, tool]))
      const context = { sessionId: undefined, callId: "c", role: "general", depth: 0 }
      const long = byName.get("mcp__everything__trigger-long-running-operation")!
      const echo = byName.get("mcp__everything__echo")!
      const before = serverPids()
      assert.strictEqual(before.length, 1)
      const call = yield* Effect.forkChild(Effect.flip(long.handler({ duration: 30, steps: 30 }, context)))
      yield* Effect.yieldNow
      process.kill(before[0]!, "SIGKILL")
      const error = yield* Fiber.join(call)
      assert.include(error.message, `the MCP server "everything" stopped during the call`)
      assert.strictEqual(yield* echo.handler({ message: "after" }, context), "Echo: after")
      const after = serverPids()
      assert.strictEqual(after.length, 1)
      assert.notStrictEqual(after[0], before[0])
    }))

  it.effect("a scripted parent delegates; a general child calls the tools, an explore child gets only read tools", () =>
    Effect.gen(function*() {
      const { tools } = yield* Everything
      const offered: Record<string, ReadonlyArray<string>> = {}
      const { get } = yield* setup({
        rules: [
          {
            match: { depth: 0 },
            turns: [
              {
                tool_calls: [
                  { name: "task", args: { description: "sum", prompt: "sum it", subagent_type: "general" } },
                  { name: "task", args: { description: "look", prompt: "look", subagent_type: "explore" } }
                ]
              },
              { text: "done" }
            ]
          },
          {
            respond: (conversation) => {
              offered[conversation.role ?? "?"] = conversation.tools.filter((name) => name.startsWith("mcp__"))
              if (conversation.turn === 0) {
                return {
                  tool_calls: conversation.role === "explore"
                    ? [{ name: "mcp__everything__toggle-simulated-logging", args: {} }]
                    : [
                      { name: "mcp__everything__echo", args: { message: "from child" } },
                      { name: "mcp__everything__get-sum", args: { a: 20, b: 22 } }
                    ]
                }
              }
              const results = conversation.toolResults.map((result) =>
                String(result.isFailure ? JSON.stringify(result.result) : result.result)
              )
              return { text: report(results.join(" | ")) }
            }
          }
        ]
      })
      const registry = get(ToolRegistry.ToolRegistry)
      for (const tool of tools) yield* registry.register(tool)
      const session = get(Session)
      const root = yield* session.create()
      yield* session.prompt(root.id, "go")
      const [general, explore] = toolResults(yield* session.transcript(root.id))
      // The children's results reached the parent.
      assert.include(JSON.stringify(general!.result), "Echo: from child")
      assert.include(JSON.stringify(general!.result), "42")
      // explore (read-only) is offered the read tools only, and its call by name is denied.
      assert.include(offered.explore!, "mcp__everything__echo")
      assert.notInclude(offered.explore!, "mcp__everything__toggle-simulated-logging")
      assert.include(offered.general!, "mcp__everything__toggle-simulated-logging")
      assert.include(JSON.stringify(explore!.result), "denied")
    }).pipe(provideNode))
})

describe("an agent file's own MCP server", () => {
  test.effect(
    "a Claude Code agent file with inline mcpServers loads, and its child calls the server",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
        yield* fs.makeDirectory(`${root}/.claude/agents`, { recursive: true })
        // As Claude Code writes it: the server defined inline, its tool allowed by its MCP name.
        yield* fs.writeFileString(
          `${root}/.claude/agents/echoer.md`,
          [
            "---",
            "name: echoer",
            "description: Echoes through the everything server",
            "tools: Read, mcp__everything__echo",
            "mcpServers:",
            "  - everything:",
            `      command: ${JSON.stringify(process.execPath)}`,
            `      args: [${JSON.stringify(serverBin)}, stdio]`,
            "---",
            "Echo what you are asked to."
          ].join("\n")
        )
        const { get } = yield* setup(
          {
            rules: [
              {
                match: { depth: 0 },
                turns: [
                  {
                    tool_calls: [{
                      name: "task",
                      args: { description: "echo", prompt: "echo", subagent_type: "echoer" }
                    }]
                  },
                  { text: "done" }
                ]
              },
              {
                respond: (conversation) =>
                  conversation.turn === 0
                    ? { tool_calls: [{ name: "mcp__everything__echo", args: { message: "agent file" } }] }
                    : { text: report(String(conversation.toolResults[0]?.result)) }
              }
            ]
          },
          {},
          { root }
        )
        const session = get(Session)
        const parent = yield* session.create()
        yield* session.prompt(parent.id, "go")
        const [task] = toolResults(yield* session.transcript(parent.id))
        assert.include(JSON.stringify(task!.result), "Echo: agent file")
      }).pipe(provideNode),
    30_000
  )
})

describe("McpTools.probe (fibril doctor)", () => {
  test.effect("a server that cannot start is reported with why, not thrown", () =>
    Effect.gen(function*() {
      const probe = yield* McpTools.probe({ ...everythingServer, name: "broken", command: "/nonexistent/mcp-server" })
      assert.strictEqual(probe._tag, "Unavailable")
      if (probe._tag === "Unavailable") assert.include(probe.reason, "Cannot spawn MCP server")
    }).pipe(provideNode))
})

describe("MCP server configuration", () => {
  test.effect("reads [mcp_servers.*] and .mcp.json, names unknown keys, masks secrets", () =>
    Effect.gen(function*() {
      const { fs, path, root } = yield* setup({ rules: [] })
      yield* fs.makeDirectory(path.join(root, ".fibril"))
      yield* fs.writeFileString(
        path.join(root, ".fibril", "config.toml"),
        [
          "[mcp_servers.github]",
          `url = "https://api.example.com/mcp"`,
          `headers = { Authorization = "Bearer s3cret" }`,
          "timeout_secs = 5"
        ].join("\n")
      )
      // As Claude Code writes it; "github" here is shadowed by the project's config.toml.
      yield* fs.writeFileString(
        path.join(root, ".mcp.json"),
        JSON.stringify({
          mcpServers: {
            fs: {
              type: "stdio",
              command: "npx",
              args: ["-y", "@modelcontextprotocol/server-filesystem", "."],
              env: { TOKEN: "abc" }
            },
            github: { command: "other" }
          }
        })
      )
      const servers = yield* McpServers.load({ cwd: root, home: path.join(root, "no-home") })
      assert.deepStrictEqual(servers.map((server) => [server.name, server.transport]), [["github", "http"], [
        "fs",
        "stdio"
      ]])
      assert.strictEqual(servers[0]!.timeoutSecs, 5)
      assert.strictEqual(servers[1]!.source, path.join(root, ".mcp.json"))
      // A process's servers: the same, except in a Fibril started as a server by Fibril (none).
      const home = path.join(root, "no-home")
      assert.strictEqual((yield* McpServers.forProcess({ cwd: root, home, env: {} })).length, 2)
      assert.deepStrictEqual(
        yield* McpServers.forProcess({ cwd: root, home, env: { [McpTools.serverMarker]: "1" } }),
        []
      )
      const shown = servers.map(McpServers.describe).join("\n")
      assert.notInclude(shown, "s3cret")
      assert.notInclude(shown, "abc")
      assert.include(shown, "Authorization")
      assert.include(shown, `(${path.join(root, ".fibril", "config.toml")})`)
      const bad = yield* Effect.flip(McpServers.fromEntry("x", { command: "a", cmd: "b" }, "f"))
      assert.strictEqual(bad._tag, "McpServerInvalid")
      assert.include(bad.message, "unknown key cmd")
      const both = yield* Effect.flip(McpServers.fromEntry("x", { command: "a", url: "http://h" }, "f"))
      assert.include(both.message, "both command and url")
      // The main configuration accepts the table, and names a key it does not know.
      const loaded = yield* FibrilConfig.load({ cwd: root, home: path.join(root, "no-home"), env: {} })
      assert.deepStrictEqual(loaded.warnings, [])
      yield* fs.writeFileString(path.join(root, ".fibril", "config.toml"), "[mcp_servers.x]\ncomand = \"a\"\n")
      const unknown = yield* Effect.flip(FibrilConfig.load({ cwd: root, home: path.join(root, "no-home"), env: {} }))
      assert.include(unknown.message, "unknown key mcp_servers.x.comand; did you mean mcp_servers.x.command?")
    }).pipe(provideNode))
})
