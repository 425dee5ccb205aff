// The packages as a user gets them: `npm pack` each one (its `prepack` builds `dist/`),
// install the four tarballs into an empty project with `npm install --offline`, and run the
// installed `fibril` there — `demo`, `run` on a scripted model, `agents transcript`, and
// `mcp` answering tools/list to the MCP SDK client — on that project's own files. A
// TypeScript consumer type-checks against the shipped declarations.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { Effect, FileSystem, Path, Stream } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import * as nodePath from "node:path"
import { offlineLock } from "./offline-lock.ts"
import { repoRoot } from "./run.ts"

const packages = ["testkit", "core", "openai", "cluster", "cli"] as const

const text = (stream: Stream.Stream<Uint8Array, unknown>) => stream.pipe(Stream.decodeText(), Stream.mkString)

const exec = Effect.fn("test.exec")(function*(
  command: string,
  args: ReadonlyArray<string>,
  options: { readonly cwd: string; readonly env?: Record<string, string | undefined> }
) {
  const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
  const handle = yield* spawner.spawn(ChildProcess.make(command, [...args], {
    cwd: options.cwd,
    env: options.env ?? {},
    extendEnv: options.env === undefined
  }))
  const [stdout, stderr, exitCode] = yield* Effect.all([text(handle.stdout), text(handle.stderr), handle.exitCode], {
    concurrency: "unbounded"
  })
  return { stdout, stderr, exitCode: Number(exitCode) }
}, Effect.scoped)

/**
 * The environment of a user's shell on a fresh machine: Node >= 22.19 on PATH (this test's
 * own Node 24), an empty home (no ~/.fibril), no key, and none of the repository's test
 * settings (NODE_OPTIONS selects the sources inside the repository).
 */
const userEnv = (home: string): Record<string, string> => ({
  PATH: `${nodePath.dirname(process.execPath)}:${process.env["PATH"] ?? "/usr/bin:/bin"}`,
  HOME: home,
  LANG: "C.UTF-8"
})

const readme = "# Tide tables\n\nA small tool that prints the tides for a harbour.\n"

const script = {
  rules: [
    {
      match: { role: "explore" },
      turns: [
        { tool_calls: [{ name: "read_file", args: { path: "README.md" } }] },
        {
          text:
            "SUMMARY:\nA tide-table tool.\n\nCHANGES:\nnone\n\nEVIDENCE:\nREADME.md\n\nRISKS:\nnone\n\nBLOCKERS:\nnone"
        }
      ]
    },
    {
      match: { depth: 0 },
      turns: [
        {
          tool_calls: [{ name: "list_dir", args: {} }, {
            name: "task",
            args: { description: "read the readme", prompt: "What is this?", subagent_type: "explore" }
          }]
        },
        { text: "It prints tides." }
      ]
    }
  ]
}

describe("the packed packages", () => {
  it.live(
    "install from their tarballs offline into an empty project, and fibril runs there on its files",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const packs = yield* fs.makeTempDirectoryScoped({ prefix: "fibril-packs-" })
        const project = yield* fs.makeTempDirectoryScoped({ prefix: "fibril-project-" })
        const home = yield* fs.makeTempDirectoryScoped({ prefix: "fibril-home-" })

        // npm pack runs each package's prepack (the build); an up-to-date build is skipped.
        const packed = yield* exec("npm", [
          "pack",
          ...packages.flatMap((name) => ["-w", `packages/${name}`]),
          "--pack-destination",
          packs,
          "--json"
        ], { cwd: repoRoot })
        assert.strictEqual(packed.exitCode, 0, packed.stderr)
        const listed = JSON.parse(packed.stdout) as Array<
          { name: string; filename: string; files: Array<{ path: string }> }
        >
        assert.deepStrictEqual(listed.map((p) => p.name).sort(), packages.map((p) => `@fibril/${p}`).sort())
        for (const pack of listed) {
          const files = pack.files.map((f) => f.path)
          assert.isTrue(
            files.every((f) =>
              f === "package.json" || f.startsWith("dist/") || f === "bin/fibril.js" ||
              (pack.name === "@fibril/cli" && f.startsWith("bundle/"))
            ),
            `${pack.name}: ${files.join(" ")}`
          )
          assert.isFalse(
            files.some((f) => f.endsWith(".ts") && !f.endsWith(".d.ts")),
            `${pack.name} ships TypeScript sources`
          )
        }
        const core = listed.find((p) => p.name === "@fibril/core")!.files.map((f) => f.path)
        for (
          const asset of [
            "dist/roles/explore.md",
            "dist/roles/output-contract.md",
            "dist/tools/task.md",
            "dist/index.d.ts"
          ]
        ) {
          assert.include(core, asset)
        }

        // The project: its own files, the tarballs, and a lock pinned to what npm has cached.
        const tarballs = yield* Effect.forEach(listed, (pack) =>
          Effect.gen(function*() {
            const file = path.join(project, pack.filename)
            yield* fs.copyFile(path.join(packs, pack.filename), file)
            const manifest = JSON.parse(
              yield* fs.readFileString(
                path.join(repoRoot, "packages", pack.name.slice("@fibril/".length), "package.json")
              )
            )
            return { file, manifest }
          }))
        const { packageJson, lock } = offlineLock(
          "tide-tables",
          tarballs,
          JSON.parse(yield* fs.readFileString(path.join(repoRoot, "package-lock.json")))
        )
        yield* fs.writeFileString(path.join(project, "package.json"), JSON.stringify(packageJson, null, 2))
        yield* fs.writeFileString(path.join(project, "package-lock.json"), JSON.stringify(lock, null, 2))
        yield* fs.writeFileString(path.join(project, "README.md"), readme)
        yield* fs.writeFileString(path.join(project, "script.json"), JSON.stringify(script))

        const installed = yield* exec("npm", ["install", "--offline", "--no-audit", "--no-fund"], { cwd: project })
        assert.strictEqual(installed.exitCode, 0, installed.stderr)
        const fibril = path.join(project, "node_modules", ".bin", "fibril")
        const env = userEnv(home)

        const demo = yield* exec(fibril, ["demo"], { cwd: project, env })
        assert.strictEqual(demo.exitCode, 0, demo.stderr)
        assert.include(demo.stdout, `The tools are real: they run on ${project}`)
        assert.include(demo.stdout, "# Tide tables")

        const run = yield* exec(fibril, ["run", "What is this project?", "--model", "scripted:script.json"], {
          cwd: project,
          env
        })
        assert.strictEqual(run.exitCode, 0, run.stderr)
        assert.include(run.stdout, "It prints tides.")
        assert.isTrue(
          yield* fs.exists(path.join(project, ".fibril", "state", "fibril.db")),
          "the store is the project's"
        )
        const rootId = /root agent (agent_\w+)/.exec(run.stdout)?.[1]
        assert.isDefined(rootId, run.stdout)
        const transcript = yield* exec(fibril, ["agents", "transcript", rootId!], { cwd: project, env })
        assert.strictEqual(transcript.exitCode, 0, transcript.stderr)
        assert.include(transcript.stdout, "README.md")

        // The MCP server, started the way a client starts it.
        const client = new Client({ name: "pack-test", version: "1.0.0" })
        const transport = new StdioClientTransport({
          command: fibril,
          args: ["mcp", "--model", "scripted:script.json"],
          cwd: project,
          env,
          stderr: "pipe"
        })
        yield* Effect.promise(() => client.connect(transport))
        const tools = yield* Effect.promise(() => client.listTools()).pipe(
          Effect.ensuring(Effect.promise(() => client.close()))
        )
        const names = tools.tools.map((t) => t.name)
        for (
          const name of [
            "task",
            "agent_spawn",
            "agent_wait",
            "agent_result",
            "agent_cancel",
            "agent_list",
            "agent_send_input",
            "agent_resume"
          ]
        ) {
          assert.include(names, name)
        }

        // A TypeScript program uses the shipped declarations (a wrong argument must be an error).
        yield* fs.writeFileString(
          path.join(project, "consumer.ts"),
          [
            `import { Fibril, Session } from "@fibril/core"`,
            `import { OpenAiClient } from "@fibril/openai"`,
            `import { ScriptedModel } from "@fibril/testkit"`,
            `export const layer = Fibril.layer({ cwd: "." })`,
            `export const used = [Session.Session, OpenAiClient.defaultBaseURL, ScriptedModel.layer] as const`,
            `// @ts-expect-error cwd is a string`,
            `export const wrong = Fibril.layer({ cwd: 1 })`
          ].join("\n")
        )
        yield* fs.writeFileString(
          path.join(project, "tsconfig.json"),
          JSON.stringify({
            compilerOptions: {
              target: "ES2023",
              lib: ["ES2023"],
              types: [],
              module: "NodeNext",
              moduleResolution: "NodeNext",
              strict: true,
              skipLibCheck: true,
              noEmit: true
            },
            files: ["consumer.ts"]
          })
        )
        const tsc = yield* exec(process.execPath, [
          path.join(repoRoot, "node_modules", "typescript", "bin", "tsc"),
          "-p",
          "tsconfig.json"
        ], {
          cwd: project,
          env
        })
        assert.strictEqual(tsc.exitCode, 0, tsc.stdout + tsc.stderr)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    120_000
  )
})
