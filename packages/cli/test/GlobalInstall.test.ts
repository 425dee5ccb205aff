// The README's install lines, run as written (into a temporary prefix, with no network), and
// the installed `fibril` on a real model: the OpenAI-compatible FakeOpenAiServer through the
// real `openai` SDK. A global install once gave every @fibril package its own `effect`, so an
// API key wrapped by one copy's `Redacted` could not be read by another: every real-model
// command died at start while scripted runs passed. Here the key must reach the server.
//
// One pack and one install (beforeAll) serve every case. The registry is local-registry.ts:
// the packuments from the repository's lock, the tarballs from npm's cache.
import { NodeServices } from "@effect/platform-node"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { FakeOpenAiServer } from "@fibril/testkit"
import type { ScriptedModel } from "@fibril/testkit"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { Effect, Exit, Scope } from "effect"
import { spawn } from "node:child_process"
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import * as LocalRegistry from "./local-registry.ts"
import { repoRoot } from "./run.ts"

const key = "sk-global-install-7f3a"
const readme = "# Tide tables\n\nA small tool that prints the tides for a harbour.\n"
const script: ScriptedModel.ScriptInput = {
  rules: [
    {
      match: { role: "explore" },
      turns: [
        { tool_calls: [{ name: "read_file", args: { path: "README.md" } }] },
        { text: "SUMMARY:\nA tide-table tool.\n\nCHANGES:\nnone\n\nEVIDENCE:\nREADME.md\n\nRISKS:\nnone" }
      ]
    },
    {
      match: { depth: 0 },
      turns: [
        {
          tool_calls: [{
            name: "task",
            args: { description: "read the readme", prompt: "What is this?", subagent_type: "explore" }
          }]
        },
        { text: "It prints tides." }
      ]
    }
  ]
}

/** The README's shell lines that install from a clone (after `cd fibril && npm install`). */
export const readmeInstallLines = (text: string): ReadonlyArray<string> => {
  const from = text.indexOf("Until then, from a clone")
  const block = /```sh\n([\s\S]*?)```/.exec(text.slice(from))
  assert.isTrue(from !== -1 && block !== null, "the README's install block")
  return block![1]!.split("\n").map((line) => line.replace(/\s+#.*$/, "").trim())
    .filter((line) => line !== "" && !line.startsWith("cd "))
}

/** Every `package.json` of `effect` under `dir`. */
const effectCopies = (dir: string): Array<string> => {
  const found: Array<string> = []
  const walk = (at: string) => {
    for (const entry of readdirSync(at, { withFileTypes: true })) {
      const full = join(at, entry.name)
      if (!entry.isDirectory()) continue
      if (entry.name === "effect" && at.endsWith("node_modules")) {
        if (statSync(join(full, "package.json"), { throwIfNoEntry: false }) !== undefined) found.push(full)
      }
      walk(full)
    }
  }
  walk(dir)
  return found
}

/** A user's shell: this test's Node first on PATH, an empty home, no repository settings. */
const userEnv = (home: string): Record<string, string> => ({
  PATH: `${dirname(process.execPath)}:${process.env["PATH"] ?? "/usr/bin:/bin"}`,
  HOME: home,
  LANG: "C.UTF-8"
})

let work = ""
let prefix = ""
let packages = ""
let fibril = ""
let registryUrl = ""
const scope = Effect.runSync(Scope.make())
/** No network: the local registry, and a cache of the test's own. */
const npmFlags = (cache: string) => ["--registry", registryUrl, "--cache", cache, "--no-audit", "--no-fund"]

/**
 * A process, awaited without blocking this one: the registry and the model server answer it
 * from this process's event loop (a spawnSync would deadlock on them).
 */
const exec = (command: string, args: ReadonlyArray<string>, options: { cwd: string; env: NodeJS.ProcessEnv }) =>
  new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(command, [...args], { ...options, stdio: ["ignore", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (chunk) => (stdout += String(chunk)))
    child.stderr.on("data", (chunk) => (stderr += String(chunk)))
    child.on("close", (status) => resolve({ status, stdout, stderr }))
  })

const sh = async (line: string) => {
  const result = await exec("sh", ["-c", line], { cwd: repoRoot, env: process.env })
  assert.strictEqual(result.status, 0, `${line}\n${result.stdout}\n${result.stderr}`)
}

const project = (name: string) => {
  const dir = join(work, name)
  mkdirSync(join(dir, ".git"), { recursive: true })
  writeFileSync(join(dir, "README.md"), readme)
  return dir
}

const run = (args: ReadonlyArray<string>, cwd: string, env: Record<string, string> = {}) =>
  Effect.promise(() => exec(fibril, args, { cwd, env: { ...userEnv(join(work, "home")), ...env } }))

describe("the README's global install", () => {
  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), "fibril-global-"))
    prefix = join(work, "prefix")
    packages = join(work, "packages")
    mkdirSync(join(work, "home"))
    mkdirSync(packages)
    const registry = await Effect.runPromise(
      Scope.provide(
        LocalRegistry.start({
          lock: JSON.parse(readFileSync(join(repoRoot, "package-lock.json"), "utf8")),
          published: []
        }),
        scope
      )
    )
    registryUrl = registry.url
    for (const line of readmeInstallLines(readFileSync(join(repoRoot, "README.md"), "utf8"))) {
      const here = line.replaceAll("/tmp/fibril-packages", packages)
      await sh(
        here.startsWith("npm install -g")
          ? `${here} --prefix ${prefix} ${npmFlags(join(work, "npm-cache")).join(" ")}`
          : here
      )
    }
    fibril = join(prefix, "bin", "fibril")
  }, 400_000)
  afterAll(async () => {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    if (work !== "") rmSync(work, { recursive: true, force: true })
  }, 60_000)

  it("packs every workspace package, and the install holds one effect", () => {
    const workspaces = readdirSync(join(repoRoot, "packages")).map((name) =>
      JSON.parse(readFileSync(join(repoRoot, "packages", name, "package.json"), "utf8")).name as string
    )
    const tarballs = readdirSync(packages).sort()
    assert.deepStrictEqual(
      tarballs,
      workspaces.map((name) => `${name.replace("@", "").replace("/", "-")}-0.1.0.tgz`).sort()
    )
    assert.deepStrictEqual(
      effectCopies(prefix).map((dir) => dir.slice(prefix.length)),
      ["/lib/node_modules/@fibril/cli/node_modules/effect"]
    )
  })

  it.live(
    "fibril run on an OpenAI-compatible server: parent → task → child, with the key",
    () =>
      Effect.gen(function*() {
        const server = yield* FakeOpenAiServer.start({ script, models: ["fake-model"], apiKey: key })
        const dir = project("run")
        const result = yield* run(["run", "What is this project?", "--model", "fake-model"], dir, {
          OPENAI_API_KEY: key,
          OPENAI_BASE_URL: server.url
        })
        assert.strictEqual(result.status, 0, result.stdout + result.stderr)
        assert.include(result.stdout, "It prints tides.")
        assert.match(result.stdout, /Totals: 2 agents, 2 tool calls/)
        const chats = server.requests.filter((r) => r.path.endsWith("/chat/completions"))
        assert.strictEqual(chats.length, 4)
        for (const request of chats) assert.strictEqual(request.headers["authorization"], `Bearer ${key}`)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    60_000
  )

  it.live(
    "fibril mcp on a real model: tools/list and a task call through the MCP SDK client",
    () =>
      Effect.gen(function*() {
        const server = yield* FakeOpenAiServer.start({ script, models: ["fake-model"], apiKey: key })
        const dir = project("mcp")
        const client = new Client({ name: "global-install-test", version: "1.0.0" })
        const transport = new StdioClientTransport({
          command: fibril,
          args: ["mcp", "--model", "fake-model", "--base-url", server.url],
          cwd: dir,
          env: { ...userEnv(join(work, "home")), OPENAI_API_KEY: key },
          stderr: "pipe"
        })
        yield* Effect.acquireRelease(
          Effect.promise(() => client.connect(transport)),
          () => Effect.promise(() => client.close())
        )
        const tools = yield* Effect.promise(() => client.listTools())
        assert.includeMembers(tools.tools.map((t) => t.name), ["task", "agent_spawn", "agent_wait", "agent_result"])
        const answer = yield* Effect.promise(() =>
          client.callTool({
            name: "task",
            arguments: { description: "read the readme", prompt: "What is this?", subagent_type: "explore" }
          })
        )
        assert.isNotTrue(answer.isError, JSON.stringify(answer))
        assert.include(JSON.stringify(answer.content), "A tide-table tool.")
        const chats = server.requests.filter((r) => r.path.endsWith("/chat/completions"))
        assert.strictEqual(chats.length, 2)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    60_000
  )

  it("fibril lab run --runs 200 passes", async () => {
    const result = await Effect.runPromise(run(["lab", "run", "--runs", "200", "--seed", "1"], project("lab")))
    assert.strictEqual(result.status, 0, result.stdout + result.stderr)
  }, 200_000)

  it("npx of the CLI's tarball holds one effect too", async () => {
    const cache = join(work, "npx-cache")
    const result = await exec(
      "npm",
      [
        "exec",
        "--yes",
        ...npmFlags(cache),
        "--package",
        join(packages, "fibril-cli-0.1.0.tgz"),
        "--",
        "fibril",
        "--help"
      ],
      { cwd: project("npx"), env: userEnv(join(work, "home")) }
    )
    assert.strictEqual(result.status, 0, result.stdout + result.stderr)
    assert.include(result.stdout, "fibril run")
    assert.lengthOf(effectCopies(join(cache, "_npx")), 1)
  }, 200_000)
})
