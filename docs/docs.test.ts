// Every TypeScript block of README.md and docs/*.md says what it is, on the line before it:
//
//   <!-- runs -->       a complete program: this suite type-checks it (tsc, the repository's
//                       settings) and runs it (node; a block that imports @effect/vitest runs
//                       under vitest); a failure, a type error or a failed assertion fails here
//   <!-- fragment -->   a piece of a program, shown and not run
//
// An unmarked block fails the first test, so a new example has to choose. Blocks run from a
// directory inside the repository (so `@fibril/*` resolve to these sources), each in a fresh
// project directory of its own as cwd, with OPENAI_API_KEY and OPENAI_BASE_URL pointing at a
// FakeOpenAiServer (the real `openai` SDK path, no network).
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { FakeOpenAiServer, type ScriptedModel } from "@fibril/testkit"
import { Effect, FileSystem, Path, Stream } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { readdirSync, readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"

const repoRoot = fileURLToPath(new URL("..", import.meta.url))

interface Block {
  readonly file: string
  /** 1-based among the file's TypeScript blocks. */
  readonly index: number
  readonly line: number
  readonly text: string
  readonly mark: "runs" | "fragment" | undefined
}

/** The TypeScript blocks of a markdown file, with the marker on the line before each. */
export const tsBlocks = (file: string): Array<Block> => {
  const lines = readFileSync(`${repoRoot}${file}`, "utf8").split("\n")
  const out: Array<Block> = []
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)```\s*(\S*)/.exec(lines[i]!)
    if (open === null) continue
    const indent = open[1]!.length
    const body: Array<string> = []
    let j = i + 1
    for (; j < lines.length && !/^\s*```\s*$/.test(lines[j]!); j++) body.push(lines[j]!.slice(indent))
    if (open[2] === "ts" || open[2] === "typescript") {
      const before = lines.slice(0, i).reverse().find((line) => line.trim() !== "")?.trim()
      const mark = before === "<!-- runs -->"
        ? "runs"
        : /^<!-- fragment(:.*)? -->$/.test(before ?? "")
        ? "fragment"
        : undefined
      out.push({ file, index: out.length + 1, line: i + 1, text: body.join("\n"), mark })
    }
    i = j
  }
  return out
}

const pages = [
  "README.md",
  ...readdirSync(`${repoRoot}docs`).filter((name) => name.endsWith(".md")).map((name) => `docs/${name}`)
]
const all = pages.flatMap(tsBlocks)
const runnable = all.filter((block) => block.mark === "runs")
const nameOf = (block: Block) => `${block.file}#${block.index}`
const isVitest = (block: Block) => /from "@effect\/vitest"/.test(block.text)
const fileNameOf = (block: Block) =>
  `${block.file.replace(/\.md$/, "").replace(/[^A-Za-z0-9]+/g, "_")}_${block.index}${
    isVitest(block) ? ".test.ts" : ".ts"
  }`

/** The blocks this suite runs: a marker taken away (or a block lost) shows here. */
const expected = [
  "README.md#1",
  "docs/agents.md#1",
  "docs/embedding.md#1",
  "docs/embedding.md#2",
  "docs/embedding.md#3",
  "docs/embedding.md#4",
  "docs/embedding.md#5",
  "docs/embedding.md#6",
  "docs/script-format.md#2",
  "docs/testing.md#1",
  "docs/tools.md#1"
]

const exec = (command: string, args: ReadonlyArray<string>, cwd: string, env: Record<string, string | undefined>) =>
  Effect.gen(function*() {
    const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
    const handle = yield* spawner.spawn(ChildProcess.make(command, [...args], { cwd, env, extendEnv: true }))
    const text = (stream: Stream.Stream<Uint8Array, unknown>) => stream.pipe(Stream.decodeText(), Stream.mkString)
    const [stdout, stderr, exitCode] = yield* Effect.all([text(handle.stdout), text(handle.stderr), handle.exitCode], {
      concurrency: "unbounded"
    })
    return { stdout, stderr, exitCode: Number(exitCode) }
  }).pipe(Effect.scoped)

/** The marked blocks as files in a directory inside the repository, with a tsconfig and a vitest config. */
const extracted = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const dir = yield* fs.makeTempDirectoryScoped({ directory: repoRoot, prefix: ".docs-blocks-" })
  for (const block of runnable) yield* fs.writeFileString(path.join(dir, fileNameOf(block)), `${block.text}\n`)
  yield* fs.writeFileString(
    path.join(dir, "tsconfig.json"),
    JSON.stringify({ extends: "../tsconfig.json", include: ["*.ts"] })
  )
  const conditions = JSON.stringify(["@fibril/source", "module", "node", "development|production"])
  yield* fs.writeFileString(
    path.join(dir, "vitest.config.ts"),
    `import { defineConfig } from "vitest/config"\n` +
      `export default defineConfig({ resolve: { conditions: ${conditions} }, ssr: { resolve: { conditions: ${conditions} } }, ` +
      `test: { include: ["*.test.ts"], testTimeout: 60_000 } })\n`
  )
  return dir
})

// What the fake server answers: an explorer's report, and one line for everyone else.
const script: ScriptedModel.ScriptInput = {
  rules: [
    {
      match: { role: "explore" },
      turns: [{
        text:
          "SUMMARY:\nA tide-table project.\n\nCHANGES:\nnone\n\nEVIDENCE:\nREADME.md\n\nRISKS:\nnone\n\nBLOCKERS:\nnone"
      }]
    },
    { turns: [{ text: "Hello from an OpenAI-compatible server, streamed in small pieces." }], repeat_last: true }
  ]
}

/** A user's project as the blocks' cwd: a README and a `.git`. */
const project = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const dir = yield* fs.makeTempDirectoryScoped({ prefix: "fibril-docs-project-" })
  yield* fs.makeDirectory(`${dir}/.git`)
  yield* fs.writeFileString(`${dir}/README.md`, "# Tide tables\n\nPrints the tides of a harbour.\n")
  return dir
})

// Inherited variables of this vitest run would confuse a nested one.
const noVitest = Object.fromEntries(
  Object.keys(process.env).filter((name) => name.startsWith("VITEST")).map((
    name
  ) => [name, undefined])
)

describe("the TypeScript blocks of README.md and docs/", () => {
  it("each is marked <!-- runs --> or <!-- fragment -->", () => {
    assert.deepStrictEqual(all.filter((block) => block.mark === undefined).map((b) => `${b.file}:${b.line}`), [])
    assert.deepStrictEqual(runnable.map(nameOf), expected)
  })

  it.live("the runnable blocks type-check with the repository's settings", () =>
    Effect.gen(function*() {
      const dir = yield* extracted
      const tsc = yield* exec(process.execPath, [`${repoRoot}node_modules/typescript/bin/tsc`, "-p", dir], repoRoot, {})
      // tsc names the extracted file; the line of the block in its page is `line + 1` later.
      const located = runnable.reduce(
        (text, block) =>
          text.replaceAll(fileNameOf(block), `${fileNameOf(block)} (${block.file}, block from line ${block.line})`),
        tsc.stdout
      )
      assert.strictEqual(tsc.exitCode, 0, located)
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 120_000)

  it.live("the runnable blocks run, each in a project of its own", () =>
    Effect.gen(function*() {
      const dir = yield* extracted
      const server = yield* FakeOpenAiServer.start({ script, models: ["gpt-4.1-mini"], apiKey: "sk-docs" })
      const env = { ...noVitest, OPENAI_API_KEY: "sk-docs", OPENAI_BASE_URL: server.url, FIBRIL_MODEL: undefined }
      const results = yield* Effect.forEach(runnable, (block) =>
        Effect.gen(function*() {
          const cwd = yield* project
          const file = `${dir}/${fileNameOf(block)}`
          const result = isVitest(block)
            ? yield* exec(
              process.execPath,
              [`${repoRoot}node_modules/vitest/vitest.mjs`, "run", "--root", dir, fileNameOf(block)],
              cwd,
              env
            )
            : yield* exec(process.execPath, [file], cwd, env)
          return { name: nameOf(block), line: block.line, ...result }
        }).pipe(Effect.scoped), { concurrency: 2 })
      // The list of what ran, for the log.
      for (const result of results) {
        const shown = result.stdout.trim().split("\n").slice(0, 12).map((line) => `    ${line}`).join("\n")
        console.log(`${result.exitCode === 0 ? "ran" : "FAILED"}: ${result.name}\n${shown}`)
      }
      for (const result of results) {
        assert.strictEqual(
          result.exitCode,
          0,
          `${result.name} (from line ${result.line}):\n${result.stdout.slice(-3000)}\n${result.stderr.slice(-3000)}`
        )
      }
      assert.deepStrictEqual(results.map((result) => result.name), expected)
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 300_000)
})
