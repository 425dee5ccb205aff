// The command lines of docs/cli.md and docs/mcp.md, run as written. Every `sh` block is run
// line by line in a project of its own (with `fibril` the command built from these sources
// on PATH, a fake OpenAI-compatible server behind OPENAI_BASE_URL); a `fibril mcp` line, and
// each MCP client entry of the JSON blocks (Claude Code's .mcp.json, opencode, Cursor), is
// started the way a client starts it and must answer tools/list. A block that cannot run
// here says so right before it: `<!-- untested: why -->`.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { FakeOpenAiServer, type ScriptedModel } from "@fibril/testkit"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { Effect, FileSystem, Path, Stream } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { readFileSync } from "node:fs"
import * as nodePath from "node:path"
import { bin, repoRoot, sourceCondition } from "./run.ts"

interface Block {
  readonly file: string
  readonly lang: string
  readonly text: string
  readonly untested: string | undefined
}

/** The fenced blocks of a markdown file, with the `<!-- untested: … -->` line before each, if any. */
export const blocks = (file: string): Array<Block> => {
  const lines = readFileSync(nodePath.join(repoRoot, file), "utf8").split("\n")
  const out: Array<Block> = []
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)```(\w*)\s*$/.exec(lines[i]!)
    if (open === null) continue
    const indent = open[1]!.length
    const body: Array<string> = []
    let j = i + 1
    for (; j < lines.length && !/^\s*```\s*$/.test(lines[j]!); j++) body.push(lines[j]!.slice(indent))
    const before = lines.slice(0, i).reverse().find((line) => line.trim() !== "")
    const untested = before === undefined ? undefined : /^\s*<!-- untested: (.*) -->\s*$/.exec(before)?.[1]
    out.push({ file, lang: open[2]!, text: body.join("\n"), untested })
    i = j
  }
  return out
}

/** The commands of a `sh` block: continuation lines joined, comments and blank lines left out. */
export const commands = (text: string): Array<string> =>
  text.replace(/\\\n\s*/g, " ").split("\n").map((line) => line.trim()).filter((line) =>
    line !== "" && !line.startsWith("#")
  )

const docs = ["docs/cli.md", "docs/mcp.md"]
const all = docs.flatMap(blocks)
const key = "sk-docs-test"

const script: ScriptedModel.ScriptInput = {
  rules: [
    {
      match: { role: "explore" },
      turns: [{ tool_calls: [{ name: "list_dir", args: {} }] }, {
        text: "SUMMARY:\nlisted\n\nCHANGES:\nnone\n\nEVIDENCE:\nlist_dir\n\nRISKS:\nnone\n\nBLOCKERS:\nnone"
      }]
    },
    {
      turns: [{ tool_calls: [{ name: "list_dir", args: {} }] }, { text: "The project holds a README and a task." }],
      repeat_last: true
    }
  ]
}

/** A project the documented commands run in, and the environment of a user's shell there. */
const project = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const dir = yield* fs.makeTempDirectoryScoped({ prefix: "fibril-docs-" })
  const home = yield* fs.makeTempDirectoryScoped({ prefix: "fibril-docs-home-" })
  const shims = yield* fs.makeTempDirectoryScoped({ prefix: "fibril-docs-bin-" })
  yield* fs.makeDirectory(path.join(dir, ".git"))
  yield* fs.writeFileString(path.join(dir, "README.md"), "# Tide tables\n\nPrints the tides of a harbour.\n")
  yield* fs.writeFileString(path.join(dir, "task.md"), "List the files of this project and say what they are for.\n")
  yield* fs.writeFileString(path.join(dir, "script.json"), JSON.stringify(script))
  // `fibril` as installed, but running these sources.
  yield* fs.writeFileString(
    path.join(shims, "fibril"),
    `#!/bin/sh\nexec "${process.execPath}" ${sourceCondition} "${bin}" "$@"\n`
  )
  yield* fs.chmod(path.join(shims, "fibril"), 0o755)
  const server = yield* FakeOpenAiServer.start({ script, models: ["gpt-4.1-mini", "deepseek-chat"], apiKey: key })
  const env: Record<string, string> = {
    PATH: `${shims}:${nodePath.dirname(process.execPath)}:${process.env["PATH"] ?? "/usr/bin:/bin"}`,
    HOME: home,
    OPENAI_API_KEY: key,
    OPENAI_BASE_URL: server.url,
    LANG: "C.UTF-8"
  }
  const resolve = (command: string) =>
    command.replaceAll("/opt/fibril", repoRoot.replace(/\/$/, "")).replaceAll("/path/to/project", dir)
  return { dir, env, resolve }
})

const sh = (command: string, cwd: string, env: Record<string, string>) =>
  Effect.gen(function*() {
    const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
    const handle = yield* spawner.spawn(ChildProcess.make("sh", ["-c", command], { cwd, env, extendEnv: false }))
    const text = (stream: Stream.Stream<Uint8Array, unknown>) => stream.pipe(Stream.decodeText(), Stream.mkString)
    const [stdout, stderr, exitCode] = yield* Effect.all([text(handle.stdout), text(handle.stderr), handle.exitCode], {
      concurrency: "unbounded"
    })
    return { stdout, stderr, exitCode: Number(exitCode) }
  }).pipe(Effect.scoped)

/** Starts a server the way an MCP client does and lists its tools. */
const toolsOf = (
  server: { readonly command: string; readonly args: ReadonlyArray<string>; readonly env: Record<string, string> },
  cwd: string
) =>
  Effect.acquireUseRelease(
    Effect.sync(() =>
      new StdioClientTransport({
        command: server.command,
        args: [...server.args],
        env: server.env,
        cwd,
        stderr: "pipe"
      })
    ),
    (transport) =>
      Effect.promise(async () => {
        const client = new Client({ name: "docs-test", version: "0.0.0" })
        await client.connect(transport)
        return (await client.listTools()).tools.map((tool) => tool.name)
      }),
    (transport) => Effect.promise(() => transport.close())
  )

/** A command line that starts `fibril mcp` (served, not run to completion). */
const isServer = (command: string) =>
  /\bmcp\b/.test(command) && !/[<|;]/.test(command) && !/^(claude|npx)\b/.test(command)

describe("the command lines of docs/cli.md and docs/mcp.md", () => {
  it("every sh block is run here, or says why not", () => {
    const shBlocks = all.filter((block) => block.lang === "sh")
    assert.isAbove(shBlocks.length, 8)
    const untested = shBlocks.filter((block) => block.untested !== undefined)
    assert.deepStrictEqual(
      untested.map((block) => `${block.file}: ${commands(block.text)[0]!.split(" ").slice(0, 2).join(" ")}`),
      [
        "docs/mcp.md: claude mcp",
        "docs/mcp.md: npx @modelcontextprotocol/inspector",
        "docs/mcp.md: npx @modelcontextprotocol/inspector"
      ]
    )
    for (const block of untested) assert.match(block.untested!, /^needs /)
  })

  it.live("each tested command exits 0 in a project of its own", () =>
    Effect.gen(function*() {
      const { dir, env, resolve } = yield* project
      // The clone's command line runs the build (`npm install` makes it; here, if out of date).
      const built = yield* sh(`"${process.execPath}" scripts/build.ts`, repoRoot, { PATH: env["PATH"]! })
      assert.strictEqual(built.exitCode, 0, built.stderr)
      const lines = all.filter((block) => block.lang === "sh" && block.untested === undefined).flatMap((block) =>
        commands(block.text).map((command) => ({ file: block.file, command: resolve(command) }))
      )
      const ran = yield* Effect.forEach(lines, ({ file, command }) =>
        isServer(command)
          ? Effect.map(
            toolsOf({ command: command.split(" ")[0]!, args: command.split(" ").slice(1), env }, dir),
            (tools) => ({
              file,
              command,
              ok: tools.includes("task") && tools.includes("agent_spawn"),
              output: tools.join(" ")
            })
          )
          : Effect.map(sh(command, dir, env), (result) => ({
            file,
            command,
            ok: result.exitCode === 0,
            output: `exit ${result.exitCode}\n${result.stdout.slice(-2000)}\n${result.stderr.slice(-2000)}`
          })), { concurrency: 3 })
      for (const result of ran) assert.isTrue(result.ok, `${result.file}: ${result.command}\n${result.output}`)
      assert.isAtLeast(ran.filter((r) => isServer(r.command)).length, 2)
      // What they show: the documented outputs, on this project.
      const output = (command: string) => ran.find((r) => r.command === command)?.output ?? ""
      assert.include(output("fibril demo"), "# Tide tables")
      assert.include(output(`fibril mcp --model gpt-4.1-mini < /dev/null; echo "exit $?"`), "exit 0")
      assert.include(output("fibril doctor"), "No problem found")
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 180_000)

  it.live("each MCP client entry of docs/mcp.md starts a server that lists the tools", () =>
    Effect.gen(function*() {
      const { dir, env, resolve } = yield* project
      const entries = all.filter((block) => block.file === "docs/mcp.md" && block.lang === "json").flatMap((block) => {
        const json = JSON.parse(resolve(block.text)) as {
          mcpServers?: Record<string, { command: string; args?: Array<string>; env?: Record<string, string> }>
          mcp?: Record<string, { command: Array<string>; environment?: Record<string, string> }>
        }
        const expand = (vars: Record<string, string> | undefined) =>
          Object.fromEntries(
            Object.entries(vars ?? {}).map(([name, value]) => [name, /OPENAI_API_KEY|sk-/.test(value) ? key : value])
          )
        return [
          ...Object.values(json.mcpServers ?? {}).map((server) => ({
            command: server.command,
            args: server.args ?? [],
            vars: expand(server.env)
          })),
          ...Object.values(json.mcp ?? {}).map((server) => ({
            command: server.command[0]!,
            args: server.command.slice(1),
            vars: expand(server.environment)
          }))
        ]
      })
      // Claude Code's .mcp.json, opencode, Cursor.
      assert.strictEqual(entries.length, 3)
      for (const entry of entries) {
        assert.strictEqual(entry.vars["OPENAI_API_KEY"], key)
        const tools = yield* toolsOf({ command: entry.command, args: entry.args, env: { ...env, ...entry.vars } }, dir)
        assert.includeMembers(
          tools,
          ["task", "agent_spawn", "agent_wait", "agent_result"],
          `${entry.command} ${entry.args.join(" ")}`
        )
      }
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 60_000)
})
