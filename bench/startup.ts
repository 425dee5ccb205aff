/**
 * `node bench/startup.ts [N]` (also the last part of `npm run bench`): what a user waits for
 * when `fibril` starts, from a project install of the packed tarballs (bench/installs.ts), medians
 * of N fresh processes (default 5):
 *
 * - `fibril mcp`: spawn to the answer to the first `tools/list` (after `initialize`), as an MCP
 *   client (Claude Code, opencode, Cursor) meets it at the start of every session; goal 300 ms;
 * - `fibril --help`: spawn to exit; goal 200 ms;
 *
 * beside the floor on the same machine in the same rounds: a bare `node -e ""`, Node
 * importing `effect/Effect` alone (what no Effect program starts without), the floor of any
 * `fibril --help`: a one-command `effect/cli` program run by the Node platform layer, bundled the
 * way the CLI is (esbuild, compile cache on), printing its help, and the floor of any `fibril
 * mcp`: an `effect/cli` command serving one tool with Effect's McpServer, bundled the same way,
 * to its `tools/list` answer. Each figure is also
 * given as a ratio to the node floor, which is what compares across machines and loads. Both
 * commands are measured again with Node's compile cache turned off (NODE_DISABLE_COMPILE_CACHE=1):
 * what the first start after an install or an upgrade costs, and what the cache saves. And both
 * once more from the package's unbundled `dist/bin.js` (what `bin/fibril.js` ran before the
 * bundle, scripts/bundle.ts): what the bundle saves, in the same rounds.
 */
import type * as Esbuild from "esbuild"
import { spawn, spawnSync } from "node:child_process"
import { writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { loadavg } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { type Installs, median, withInstalls } from "./installs.ts"

const root = fileURLToPath(new URL("..", import.meta.url))

/** Bundles the floor program `source` (TypeScript) as the CLI is bundled; returns its path. */
const bundleFloor = (installs: Installs, name: string, source: string) => {
  const entry = join(installs.work, `${name}.ts`)
  writeFileSync(entry, source)
  const out = join(installs.project, `${name}.mjs`)
  // esbuild is the CLI package's build dependency (scripts/bundle.ts).
  const esbuild = createRequire(join(root, "packages", "cli", "package.json"))("esbuild") as typeof Esbuild
  esbuild.buildSync({
    entryPoints: [entry],
    outfile: out,
    bundle: true,
    format: "esm",
    platform: "node",
    target: "node22",
    nodePaths: [join(root, "node_modules")],
    logLevel: "warning"
  })
  return out
}

/**
 * The floor of `fibril --help`: what it cannot start without (effect/cli parsing one command and
 * printing its help, the Node platform layer, runMain), bundled as the CLI is, with the compile
 * cache on as `bin.ts` has it.
 */
const cliFloor = (installs: Installs) =>
  bundleFloor(
    installs,
    "cli-floor",
    `import * as NodeModule from "node:module"
import { join } from "node:path"
NodeModule.enableCompileCache?.(join(process.env.HOME ?? "", ".cache", "cli-floor"))
const [Effect, { Command, Flag }, NodeServices, NodeRuntime] = await Promise.all([
  import("effect/Effect"),
  import("effect/cli"),
  import("@effect/platform-node/NodeServices"),
  import("@effect/platform-node/NodeRuntime")
])
const command = Command.make("floor", { name: Flag.String("name").pipe(Flag.withDescription("A flag")) }, () => Effect.void)
NodeRuntime.runMain(Command.runWith(command, { version: "0" })(process.argv.slice(2)).pipe(Effect.provide(NodeServices.layer)))
`
  )

/**
 * The floor of `fibril mcp`: an \`mcp\` command of effect/cli (taking the flags the bench
 * passes) serving one tool with Effect's McpServer on stdio, bundled and cached as above: what any
 * MCP server built on effect/cli and effect/ai spends before it answers \`tools/list\`.
 */
const mcpFloor = (installs: Installs) =>
  bundleFloor(
    installs,
    "mcp-floor",
    `import * as NodeModule from "node:module"
import { join } from "node:path"
NodeModule.enableCompileCache?.(join(process.env.HOME ?? "", ".cache", "mcp-floor"))
const [Effect, Layer, Logger, Schema, { Command, Flag }, McpProtocol, McpServer, Tool, Toolkit, NodeServices, NodeRuntime, NodeStdio] =
  await Promise.all([
    import("effect/Effect"),
    import("effect/Layer"),
    import("effect/Logger"),
    import("effect/Schema"),
    import("effect/cli"),
    import("effect/ai/McpProtocol"),
    import("effect/ai/McpServer"),
    import("effect/ai/Tool"),
    import("effect/ai/Toolkit"),
    import("@effect/platform-node/NodeServices"),
    import("@effect/platform-node/NodeRuntime"),
    import("@effect/platform-node/NodeStdio")
  ])
const echo = Tool.make("echo", {
  description: "Echoes its text",
  parameters: Schema.Struct({ text: Schema.String }),
  success: Schema.String
})
const toolkit = Toolkit.make(echo)
const server = McpServer.layerStdio({
  name: "floor",
  version: "0",
  protocols: [McpProtocol.v2025_06_18],
  registrations: McpServer.toolkit(toolkit).pipe(Layer.provide(toolkit.toLayer({ echo: ({ text }) => Effect.succeed(text) })))
}).pipe(Layer.provide(NodeStdio.layer))
const mcp = Command.make(
  "mcp",
  { model: Flag.String("model"), baseUrl: Flag.String("base-url") },
  () => Layer.launch(server).pipe(Effect.provideService(Logger.LogToStderr, true))
)
const command = Command.make("floor").pipe(Command.withSubcommands([mcp]))
NodeRuntime.runMain(Command.runWith(command, { version: "0" })(process.argv.slice(2)).pipe(Effect.provide(NodeServices.layer)))
`
  )

const runs = Number(process.argv[2] ?? 5)
const goals = { mcp: 300, help: 200 }

const elapsedMs = (started: bigint) => Number(process.hrtime.bigint() - started) / 1e6

/** Spawn to exit of `command args` in the project (a failure stops the benchmark). */
const timeExit = (installs: Installs, env: Record<string, string>, command: string, args: ReadonlyArray<string>) => {
  const started = process.hrtime.bigint()
  const result = spawnSync(command, [...args], { cwd: installs.project, env, stdio: "ignore" })
  if (result.status !== 0) throw new Error(`${command} ${args.join(" ")}: exit ${result.status}`)
  return elapsedMs(started)
}

/**
 * Spawn to the `tools/list` answer of `fibril mcp` on a real model id (its endpoint, port 9, is
 * never called: nothing is asked of the model before a task). JSON-RPC lines on stdio, as the
 * MCP SDK's client sends them; stdin is closed after the answer, which ends the server.
 */
const timeMcp = (installs: Installs, env: Record<string, string>, entry: ReadonlyArray<string>) =>
  new Promise<number>((resolve, reject) => {
    const started = process.hrtime.bigint()
    const child = spawn(
      entry[0]!,
      [...entry.slice(1), "mcp", "--model", "fake-model", "--base-url", "http://127.0.0.1:9/v1"],
      { cwd: installs.project, env: { ...env, OPENAI_API_KEY: "sk-bench" }, stdio: ["pipe", "pipe", "ignore"] }
    )
    const send = (message: object) => child.stdin.write(`${JSON.stringify(message)}\n`)
    let answered: number | undefined
    let pending = ""
    child.stdout.setEncoding("utf8")
    child.stdout.on("data", (chunk: string) => {
      pending += chunk
      const lines = pending.split("\n")
      pending = lines.pop() ?? ""
      for (const line of lines) {
        const message = JSON.parse(line) as { id?: number; result?: { tools?: ReadonlyArray<unknown> } }
        if (message.id === 1) {
          send({ jsonrpc: "2.0", method: "notifications/initialized" })
          send({ jsonrpc: "2.0", id: 2, method: "tools/list" })
        } else if (message.id === 2) {
          answered = elapsedMs(started)
          if ((message.result?.tools?.length ?? 0) === 0) reject(new Error(`tools/list answered no tools: ${line}`))
          child.stdin.end()
        }
      }
    })
    child.on("close", (code) =>
      answered === undefined
        ? reject(new Error(`fibril mcp exited (${code}) before answering tools/list`))
        : resolve(answered))
    send({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "bench", version: "0" } }
    })
  })

const line = (label: string, ms: number, floor: number, goal?: number) =>
  `  ${label.padEnd(42)} ${ms.toFixed(0).padStart(5)} ms  ${(ms / floor).toFixed(1).padStart(5)}x floor` +
  (goal === undefined ? "" : `  goal <= ${goal} ms  ${ms <= goal ? "met" : "MISSED"}`)

export const measure = () =>
  withInstalls({ global: false }, async (installs) => {
    // fibril keeps its compile cache in ~/.cache/fibril, and HOME is the fresh scratch directory:
    // the first start is cold.
    const env = installs.env
    const node = () => timeExit(installs, env, process.execPath, ["-e", ""])
    // Resolved from the project's node_modules, as the CLI resolves it.
    const effect = () =>
      timeExit(installs, env, process.execPath, ["--input-type=module", "-e", "await import('effect/Effect')"])
    const floorScript = cliFloor(installs)
    const cliFloorHelp = () => timeExit(installs, env, process.execPath, [floorScript, "--help"])
    const mcpFloorScript = mcpFloor(installs)
    const mcpFloorList = () => timeMcp(installs, env, [process.execPath, mcpFloorScript])
    const noCache = { ...env, NODE_DISABLE_COMPILE_CACHE: "1" }
    const help = (cache = env) => timeExit(installs, cache, installs.projectBin, ["--help"])
    const mcp = (cache = env) => timeMcp(installs, cache, [installs.projectBin])
    const dist = join(installs.project, "node_modules", "@fibril", "cli", "dist", "bin.js")
    const helpDist = () => timeExit(installs, env, process.execPath, [dist, "--help"])
    const mcpDist = () => timeMcp(installs, env, [process.execPath, dist])
    // The first processes read the files from disk and fill the compile cache.
    node()
    cliFloorHelp()
    await mcpFloorList()
    help()
    await mcp()
    helpDist()
    await mcpDist()
    const samples = {
      node: [] as Array<number>,
      effect: [] as Array<number>,
      cliFloor: [] as Array<number>,
      mcpFloor: [] as Array<number>,
      help: [] as Array<number>,
      mcp: [] as Array<number>,
      helpNoCache: [] as Array<number>,
      mcpNoCache: [] as Array<number>,
      helpDist: [] as Array<number>,
      mcpDist: [] as Array<number>
    }
    // Interleaved rounds, so that a machine whose load changes slows every figure alike.
    for (let i = 0; i < runs; i++) {
      samples.node.push(node())
      samples.effect.push(effect())
      samples.cliFloor.push(cliFloorHelp())
      samples.mcpFloor.push(await mcpFloorList())
      samples.help.push(help())
      samples.mcp.push(await mcp())
      samples.helpNoCache.push(help(noCache))
      samples.mcpNoCache.push(await mcp(noCache))
      samples.helpDist.push(helpDist())
      samples.mcpDist.push(await mcpDist())
    }
    const figures = {
      node: median(samples.node),
      effect: median(samples.effect),
      cliFloor: median(samples.cliFloor),
      mcpFloor: median(samples.mcpFloor),
      help: median(samples.help),
      mcp: median(samples.mcp),
      helpNoCache: median(samples.helpNoCache),
      mcpNoCache: median(samples.mcpNoCache),
      helpDist: median(samples.helpDist),
      mcpDist: median(samples.mcpDist)
    }
    console.log(
      `Start-up from a project install, medians of ${runs} fresh processes (node ${process.version}; load average ${
        loadavg().map((load) => load.toFixed(2)).join(" ")
      })`
    )
    console.log(line(`node -e "" (the floor)`, figures.node, figures.node))
    console.log(line("node, import effect/Effect", figures.effect, figures.node))
    console.log(line("effect/cli --help of one command, bundled", figures.cliFloor, figures.node))
    console.log(line("McpServer of one tool: tools/list, bundled", figures.mcpFloor, figures.node))
    console.log(line("fibril mcp: spawn -> first tools/list", figures.mcp, figures.node, goals.mcp))
    console.log(line("  the same without the compile cache", figures.mcpNoCache, figures.node))
    console.log(line("  the same from the unbundled dist/", figures.mcpDist, figures.node))
    console.log(line("fibril --help: spawn -> exit", figures.help, figures.node, goals.help))
    console.log(line("  the same without the compile cache", figures.helpNoCache, figures.node))
    console.log(line("  the same from the unbundled dist/", figures.helpDist, figures.node))
    return { ...figures, runs }
  })

if (import.meta.main) await measure()
