// `fibril mcp` asks its client: a question of an `ask` rule raised in a plain `task` call's tree
// goes to the MCP client as an elicitation (the MCP SDK client, which declares elicitation and
// answers from a handler); allow runs the call, deny refuses it, and the disk says which. A
// client without elicitation is never kept waiting: `--approve` decides, and the `task` result
// says what needed approval (agent, path, tool) and how to grant it.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js"
import { Effect, FileSystem, Path } from "effect"
import { bin } from "./run.ts"

const report = (summary: string) =>
  `SUMMARY:\n${summary}\n\nCHANGES:\nnone\n\nEVIDENCE:\nnone\n\nRISKS:\nnone\n\nBLOCKERS:\nnone`

const writer = (file: string) => ({
  match: { prompt: `write ${file}` },
  turns: [
    { tool_calls: [{ name: "write_file", args: { path: file, content: "approved\n" } }] },
    { text: report(`asked to write ${file}`) }
  ]
})

/** A `task` agent that sends an asker and a worker (a sibling that keeps working) and waits for both. */
const delegate = {
  match: { prompt: "delegate" },
  turns: [
    {
      tool_calls: [
        { name: "agent_spawn", args: { description: "asker", prompt: "write c.txt" } },
        { name: "agent_spawn", args: { description: "worker", prompt: "list the files" } }
      ]
    },
    { tool_calls: [{ name: "agent_wait", args: { wait_mode: "all" } }] },
    { text: report("delegated") }
  ]
}

const lister = {
  match: { prompt: "list the files" },
  turns: [{ tool_calls: [{ name: "list_dir", args: {} }] }, { text: report("listed") }]
}

const script = { rules: [writer("a.txt"), writer("b.txt"), writer("c.txt"), delegate, lister] }

describe("fibril mcp: approval questions as elicitations", () => {
  it.live(
    "a client that elicits answers its call's questions: allow writes, deny does not",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* fs.makeTempDirectoryScoped()
        yield* fs.writeFileString(path.join(dir, "script.json"), JSON.stringify(script))
        yield* fs.makeDirectory(path.join(dir, ".fibril"))
        yield* fs.writeFileString(path.join(dir, ".fibril", "config.toml"), "[permissions]\nask = [\"write_file\"]\n")
        const asked: Array<string> = []
        let answer: { decision: string; reason?: string } = { decision: "allow" }
        const client = yield* Effect.acquireRelease(
          Effect.promise(async () => {
            const transport = new StdioClientTransport({
              command: process.execPath,
              // The default --approve (deny) decides every question no client is asked.
              args: [bin, "mcp", "--model", "scripted:script.json"],
              cwd: dir,
              env: { PATH: process.env["PATH"] ?? "", HOME: dir, NODE_OPTIONS: process.env["NODE_OPTIONS"] ?? "" },
              stderr: "pipe"
            })
            const connected = new Client({ name: "elicits", version: "0" }, { capabilities: { elicitation: {} } })
            connected.setRequestHandler(ElicitRequestSchema, (request) => {
              asked.push(request.params.message)
              return Promise.resolve({ action: "accept" as const, content: answer })
            })
            await connected.connect(transport)
            return connected
          }),
          (opened) => Effect.promise(() => opened.close())
        )
        const task = (prompt: string) =>
          Effect.promise(() =>
            client.callTool({ name: "task", arguments: { description: prompt, prompt } }, undefined, {
              timeout: 60_000
            })
          )

        const allowed = yield* task("write a.txt")
        assert.strictEqual((allowed.structuredContent as { status: string }).status, "completed")
        assert.strictEqual(asked.length, 1)
        assert.include(asked[0], "Allow write_file")
        assert.include(asked[0], "a.txt")
        assert.strictEqual(yield* fs.readFileString(path.join(dir, "a.txt")), "approved\n")

        answer = { decision: "deny", reason: "not in this repository" }
        yield* task("write b.txt")
        assert.strictEqual(asked.length, 2)
        assert.isFalse(yield* fs.exists(path.join(dir, "b.txt")), "written though the client denied it")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    90_000
  )

  it.live(
    "a client without elicitation: the result says what needed approval and how to grant it, at once",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* fs.makeTempDirectoryScoped()
        yield* fs.writeFileString(path.join(dir, "script.json"), JSON.stringify(script))
        yield* fs.makeDirectory(path.join(dir, ".fibril"))
        yield* fs.writeFileString(
          path.join(dir, ".fibril", "config.toml"),
          "[subagents]\nmax_depth = 2\n\n[permissions]\nask = [\"write_file\"]\n"
        )
        const client = yield* Effect.acquireRelease(
          Effect.promise(async () => {
            const transport = new StdioClientTransport({
              command: process.execPath,
              args: [bin, "mcp", "--model", "scripted:script.json"],
              cwd: dir,
              env: { PATH: process.env["PATH"] ?? "", HOME: dir, NODE_OPTIONS: process.env["NODE_OPTIONS"] ?? "" },
              stderr: "pipe"
            })
            const connected = new Client({ name: "plain", version: "0" }, { capabilities: {} })
            await connected.connect(transport)
            return connected
          }),
          (opened) => Effect.promise(() => opened.close())
        )
        const started = Date.now()
        const result = yield* Effect.promise(() =>
          client.callTool({ name: "task", arguments: { description: "delegate", prompt: "delegate" } }, undefined, {
            timeout: 30_000
          })
        )
        // Never a hang: the default --approve (deny) decided the question at once.
        assert.isBelow(Date.now() - started, 15_000)
        const structured = result.structuredContent as { status: string; agent_id: string }
        assert.strictEqual(structured.status, "completed")
        const content = result.content as ReadonlyArray<{ type: string; text: string }>
        assert.strictEqual(content.length, 2, JSON.stringify(content))
        const told = content[1]!.text
        assert.include(told, "Needed approval and did not get it")
        assert.match(
          told,
          new RegExp(
            `- write_file by the general agent (agent_\\w+) \\(depth 2, path ${structured.agent_id} > \\1\\): denied by --approve=deny`
          )
        )
        assert.include(told, `Arguments: {"path":"c.txt"`)
        for (
          const way of [
            "elicitation",
            "--approve=wait",
            "fibril agents answer <question-id> allow",
            "[permissions] ask",
            "[permissions] allow"
          ]
        ) {
          assert.include(told, way)
        }
        assert.isFalse(yield* fs.exists(path.join(dir, "c.txt")))
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    60_000
  )
})
