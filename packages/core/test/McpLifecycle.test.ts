// When an MCP server runs: not when Fibril starts, but when an agent that may use it is about
// to make a model request (its tools must be in that request); one process shared by the
// agents; stopped with the runtime; never started for a run whose agents may not use it.
// Against the real @modelcontextprotocol/server-everything over stdio, found by a marker
// argument in its command line.
import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Effect } from "effect"
import type * as Prompt from "effect/ai/Prompt"
import { unknownTools } from "../src/internal/configFile.ts"
import type * as McpServers from "../src/McpServers.ts"
import * as McpTools from "../src/McpTools.ts"
import * as Permission from "../src/Permission.ts"
import { Session } from "../src/Session.ts"
import { everything, running } from "./everything.ts"
import { provideNode, report, setup } from "./support.ts"

const serverNamed = (name: string): McpServers.StdioServer =>
  everything(name, { marker: `fibril-mcp-lazy-${name}-${process.pid}` })

/** Polls (bounded, 5 s) until `server` has no process left: a killed process takes a moment to go. */
const gone = (server: McpServers.StdioServer) =>
  Effect.promise(async () => {
    for (let i = 0; i < 100 && running(server).length > 0; i++) await new Promise((r) => setTimeout(r, 50))
    return running(server)
  })

const toolResults = (messages: ReadonlyArray<Prompt.Message>) =>
  messages.flatMap((message) =>
    message.role === "tool" ? message.content.filter((part) => part.type === "tool-result") : []
  )

/** A root that delegates to two general children, each calling the server's echo. */
const delegating = (server: string, offered: Record<string, ReadonlyArray<string>>): ScriptedModel.ScriptInput => ({
  rules: [
    {
      match: { depth: 0 },
      respond: (conversation) => {
        if (conversation.turn === 0) offered.root = conversation.tools.filter((name) => name.startsWith("mcp__"))
        const task = (word: string) => ({
          name: "task",
          args: { description: word, prompt: word, subagent_type: "general" }
        })
        return conversation.turn === 0 ? { tool_calls: [task("a"), task("b")] } : { text: "done" }
      }
    },
    {
      respond: (conversation) => {
        offered[conversation.prompt] = conversation.tools.filter((name) => name.startsWith("mcp__"))
        return conversation.turn === 0
          ? conversation.tools.includes(`mcp__${server}__echo`)
            ? { tool_calls: [{ name: `mcp__${server}__echo`, args: { message: conversation.prompt } }] }
            : { text: report("no echo offered") }
          : { text: report(conversation.toolResults.map((result) => String(result.result)).join(" | ")) }
      }
    }
  ]
})

describe("MCP servers start on first use", () => {
  it.live(
    "not with the runtime: at the first model request of an agent that may use it, one process for all, stopped at the end",
    () =>
      Effect.gen(function*() {
        const server = serverNamed("lazy")
        const offered: Record<string, ReadonlyArray<string>> = {}
        const seen = yield* Effect.scoped(Effect.gen(function*() {
          const { get } = yield* setup(delegating("lazy", offered), {}, { mcpServers: [server] })
          const session = get(Session)
          const root = yield* session.create()
          // The runtime is up and a session exists: no model request yet, so no server.
          assert.deepStrictEqual(running(server), [])
          yield* session.prompt(root.id, "go")
          const during = running(server)
          const results = toolResults(yield* session.transcript(root.id)).map((part) => JSON.stringify(part.result))
          return { during, results }
        }))
        // Listed before the root's first request was built: the tools were offered to it.
        assert.include(offered.root!, "mcp__lazy__echo")
        // The root and both children: one server process.
        assert.lengthOf(seen.during, 1)
        assert.include(seen.results[0]!, "Echo: a")
        assert.include(seen.results[1]!, "Echo: b")
        // The runtime's scope closed: the server (and its process group) ended with it.
        assert.deepStrictEqual(yield* gone(server), [])
      }).pipe(provideNode),
    30_000
  )

  it.live(
    "a run whose agents may not use a server (denied as mcp__<server>) starts none and is offered none of its tools",
    () =>
      Effect.gen(function*() {
        const server = serverNamed("unused")
        const offered: Record<string, ReadonlyArray<string>> = {}
        const seen = yield* Effect.scoped(Effect.gen(function*() {
          const { get } = yield* setup(delegating("unused", offered), {}, {
            mcpServers: [server],
            deny: ["mcp__unused"]
          })
          const session = get(Session)
          const root = yield* session.create()
          yield* session.prompt(root.id, "go")
          return {
            during: running(server),
            results: toolResults(yield* session.transcript(root.id)).map((part) => JSON.stringify(part.result))
          }
        }))
        assert.deepStrictEqual(seen.during, [])
        assert.deepStrictEqual(offered.root, [])
        assert.deepStrictEqual(offered.a, [])
        assert.include(seen.results[0]!, "no echo offered")
      }).pipe(provideNode),
    30_000
  )
})

describe("permission entries naming MCP servers", () => {
  const rules = (
    entries: { allow?: ReadonlyArray<string>; deny?: ReadonlyArray<string>; ask?: ReadonlyArray<string> }
  ) => Permission.derive(Permission.allowAll, { ...entries, label: "test agent" })

  it("mcp__<server> and mcp__<server>__* name every tool of that server, and no other", () => {
    for (const entry of ["mcp__git", "mcp__git__*"]) {
      const denied = rules({ deny: [entry] })
      assert.isFalse(Permission.allowsTool(denied, "mcp__git__push", "write"))
      assert.isFalse(Permission.decideTool(denied, "mcp__git__status", "read").allowed)
      assert.isTrue(Permission.allowsTool(denied, "mcp__github__push", "write"))
      assert.isTrue(Permission.allowsTool(denied, "read", "read"))
      const allowed = rules({ allow: [entry] })
      assert.isTrue(Permission.allowsTool(allowed, "mcp__git__status", "read"))
      assert.isFalse(Permission.allowsTool(allowed, "mcp__gitlab__status", "read"))
      assert.strictEqual(Permission.judge(rules({ ask: [entry] }), "mcp__git__push", "write", []).outcome, "ask")
      // Whether an agent with these rules starts the server at all.
      assert.isFalse(McpTools.usedBy(denied, "git"))
      assert.isTrue(McpTools.usedBy(allowed, "git"))
      assert.isFalse(McpTools.usedBy(allowed, "gitlab"))
    }
    // One tool denied: the server still starts for its other tools.
    assert.isTrue(McpTools.usedBy(rules({ deny: ["mcp__git__push"] }), "git"))
    // `[permissions]` may name them: a server's tools are not known when the config is read.
    assert.deepStrictEqual(unknownTools(["mcp__git", "mcp__git__*", "mcp__git__push", "shel"], ["shell"]), [
      { name: "shel", suggestion: "shell" }
    ])
    // A `*` is a pattern only in an MCP entry: "rea*" names no built-in tool.
    assert.isTrue(Permission.allowsTool(rules({ deny: ["rea*"] }), "read", "read"))
  })
})
