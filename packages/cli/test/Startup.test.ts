// What `fibril mcp` spends before its first answer (docs/performance.md, start-up): a client
// (Claude Code, opencode, Cursor) starts it with every session and waits for `tools/list`. One
// real server process, on a real model id whose endpoint is never called: it answers the tool
// list without loading the openai SDK (its first task would), and it leaves Node's compile cache
// behind for the next process (bin.ts enables it before the CLI is imported) in the user's own
// cache directory, not in the shared temp directory, Node's default, where another user could
// plant code for it to run. The same again for the command as installed (bin/fibril.js: the
// bundle, scripts/bundle.ts): it loads its few bundled files, nothing from dist/ or node_modules.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { Effect, FileSystem, Path } from "effect"
import { execFileSync, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { bin, sourceBin, sourceCondition, until } from "./run.ts"

// Appends every module URL the process loads to $FIBRIL_TEST_MODULE_LOG.
const recordModules = `
import { registerHooks } from "node:module"
import { appendFileSync } from "node:fs"
registerHooks({
  load(url, context, next) {
    appendFileSync(process.env.FIBRIL_TEST_MODULE_LOG, url + "\\n")
    return next(url, context)
  }
})
`

/**
 * Starts `node <args> mcp` with a fresh HOME and TMPDIR, lists its tools through the MCP SDK's
 * client, and returns them with the module URLs the process loaded.
 */
const listTools = (entry: ReadonlyArray<string>, nodeOptions: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const dir = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
    const tmp = path.join(dir, "tmp")
    yield* fs.makeDirectory(tmp)
    const hook = path.join(dir, "record-modules.mjs")
    yield* fs.writeFileString(hook, recordModules)
    const moduleLog = path.join(dir, "modules.log")
    const tools = yield* Effect.acquireUseRelease(
      Effect.promise(async () => {
        const client = new Client({ name: "fibril-startup-test", version: "0.0.0" })
        await client.connect(
          new StdioClientTransport({
            command: process.execPath,
            // Port 9 (discard): nothing answers there, and nothing may be asked before a task.
            args: [...entry, "mcp", "--model", "fake-model", "--base-url", "http://127.0.0.1:9/v1"],
            cwd: dir,
            env: {
              PATH: process.env["PATH"] ?? "",
              HOME: dir,
              // Node's default place for its compile cache is os.tmpdir(): it must stay empty.
              TMPDIR: tmp,
              OPENAI_API_KEY: "sk-startup-test",
              FIBRIL_TEST_MODULE_LOG: moduleLog,
              NODE_OPTIONS: `${nodeOptions} --import ${hook}`
            },
            stderr: "pipe"
          })
        )
        return client
      }),
      (client) => Effect.promise(() => client.listTools()),
      (client) => Effect.promise(() => client.close())
    )
    const modules = (yield* fs.readFileString(moduleLog)).split("\n").filter((url) => url !== "")
    return { dir, tmp, tools: tools.tools.map((tool) => tool.name), modules }
  })

describe("fibril mcp start-up", () => {
  it.live(
    "answers tools/list without the openai SDK, and leaves the compile cache in the user's cache directory",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const { dir, modules, tmp, tools } = yield* listTools([sourceBin], process.env["NODE_OPTIONS"] ?? "")
        assert.includeMembers(tools, ["task", "agent_spawn", "agent_wait"])

        // The CLI and the MCP server were loaded (the log is real), the SDK was not.
        assert.isTrue(modules.some((url) => /\/cli\/(src|dist)\/Mcp\.(ts|js)$/.test(url)), "Mcp module not loaded?")
        const sdk = modules.filter((url) => url.includes("/node_modules/openai/"))
        // The error classes only (openai/core/error and what it imports), not the client.
        assert.isBelow(sdk.length, 10, sdk.join("\n"))
        assert.isFalse(sdk.some((url) => url.endsWith("/openai/client.mjs")), sdk.join("\n"))
        // Nor the agent runtime: it is built at the first call (McpRuntime), and there was none.
        const runtime = modules.filter((url) =>
          /\/(core\/(src|dist)\/(Fibril|internal\/manager\/embedded)|cli\/(src|dist)\/Runtime)\.(ts|js)$/.test(url)
        )
        assert.deepStrictEqual(runtime, [], "the runtime was loaded before any call")

        assert.deepStrictEqual(yield* fs.readDirectory(tmp), [], "written to the shared temp directory")
        const cache = path.join(dir, ".cache", "fibril", "node-compile-cache")
        assert.isTrue(yield* fs.exists(cache), "no compile cache under ~/.cache/fibril")
        const [version] = yield* fs.readDirectory(cache)
        assert.isDefined(version)
        // One entry per compiled module: hundreds, the CLI's whole import graph.
        assert.isAbove((yield* fs.readDirectory(path.join(cache, version!))).length, 100)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    60_000
  )

  it.live(
    "a runtime that cannot be built ends the server at the first call: exit 2, the reason on stderr",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
        yield* fs.writeFileString(path.join(dir, "script.json"), JSON.stringify({ steps: [] }))
        const child = spawn(process.execPath, [sourceCondition, bin, "mcp", "--model", "scripted:script.json"], {
          cwd: dir,
          env: { PATH: process.env["PATH"] ?? "", HOME: dir },
          stdio: ["pipe", "pipe", "pipe"]
        })
        let stdout = ""
        let stderr = ""
        child.stdout.on("data", (data: Buffer) => (stdout += data.toString()))
        child.stderr.on("data", (data: Buffer) => (stderr += data.toString()))
        const exited = new Promise<number | null>((resolve) => child.on("close", resolve))
        yield* Effect.addFinalizer(() => Effect.promise(() => (child.kill("SIGKILL"), exited)))
        const send = (message: object) => child.stdin.write(`${JSON.stringify(message)}\n`)
        const answered = (id: number) =>
          Effect.flatMap(
            until(Effect.sync(() => stdout.split("\n").some((line) => line.includes(`"id":${id}`))), 600),
            (seen) => seen ? Effect.void : Effect.sync(() => assert.fail(`no answer to ${id}; stderr: ${stderr}`))
          )
        send({
          jsonrpc: "2.0",
          id: 1,
          method: "initialize",
          params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "t", version: "0" } }
        })
        yield* answered(1)
        send({ jsonrpc: "2.0", method: "notifications/initialized" })
        send({ jsonrpc: "2.0", id: 2, method: "tools/list" })
        yield* answered(2)
        assert.isNull(child.exitCode, "exited before its first call")
        send({
          jsonrpc: "2.0",
          id: 3,
          method: "tools/call",
          params: { name: "task", arguments: { description: "d", prompt: "p" } }
        })
        assert.strictEqual(yield* Effect.promise(() => exited), 2, stderr)
        assert.include(stderr, "cannot load the model script")
        // stdout stayed JSON-RPC only.
        for (const line of stdout.split("\n").filter((l) => l !== "")) JSON.parse(line)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    60_000
  )

  it.live(
    "as installed, runs the bundle: a few files of its own, the openai SDK's chunk not among them",
    () =>
      Effect.gen(function*() {
        const root = fileURLToPath(new URL("../../../", import.meta.url))
        // Up to date after any test run that built; otherwise this builds (and bundles).
        execFileSync(process.execPath, [`${root}scripts/build.ts`], { stdio: "ignore" })
        const bundle = `${root}packages/cli/bundle/`
        // As a user's shell starts it: no @fibril/source condition.
        const { modules, tools } = yield* listTools([`${root}packages/cli/bin/fibril.js`], "")
        assert.includeMembers(tools, ["task", "agent_spawn", "agent_wait"])
        const files = modules.filter((url) => url.startsWith("file:"))
        const outside = files.filter((url) => !url.startsWith(`file://${bundle}`) && !url.endsWith("/bin/fibril.js"))
        assert.deepStrictEqual(outside, [], "loaded from outside the bundle")
        // The bundle (not a few stray files) answered: the entry and its chunks (each command's
        // handler is imported when it runs, so the code it shares with others is split into
        // chunks: about a hundred files, against the ~450 modules of dist/).
        assert.include(files, `file://${bundle}bin.js`)
        assert.isBelow(files.length, 150, files.join("\n"))
        // The SDK is a chunk of its own, loaded by a client's first request only.
        assert.isFalse(files.some((url) => /\/openai-[A-Z0-9]+\.js$/.test(url)), files.join("\n"))
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    60_000
  )
})
