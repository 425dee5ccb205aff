// How `fibril` takes its inputs, each case with its exit code and message: the workspace
// (--cwd must exist; without it the project root is found from a subdirectory, as git finds
// its repository), the prompt (argument, --prompt-file, stdin, never empty), help (`fibril
// help [command]`, examples, environment, exit codes), snake_case keys in `config --json`,
// the model flags of `agents resume`, `agents cancel` without a model, an unreachable OTLP
// endpoint (one warning, no delay), and one stderr line per log event.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Path } from "effect"
import * as Net from "node:net"
import { DatabaseSync } from "node:sqlite"
import { fibril } from "./run.ts"

const report = (summary: string) =>
  `SUMMARY:\n${summary}\n\nCHANGES:\nnone\n\nEVIDENCE:\nread\n\nRISKS:\nnone\n\nBLOCKERS:\nnone`

const script = {
  rules: [{
    match: { depth: 0 },
    turns: [{ tool_calls: [{ name: "list_dir", args: {} }] }, { text: report("Listed it.") }, {
      text: "Resumed and done."
    }]
  }]
}

/** A project: `.git/`, `.fibril/config.toml`, a script, and a nested directory `src/deep`. */
const project = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const dir = yield* fs.makeTempDirectoryScoped()
  yield* fs.makeDirectory(path.join(dir, ".git"))
  yield* fs.makeDirectory(path.join(dir, ".fibril"))
  yield* fs.writeFileString(path.join(dir, ".fibril", "config.toml"), "[subagents]\nmax_concurrent = 3\n")
  yield* fs.makeDirectory(path.join(dir, "src", "deep"), { recursive: true })
  yield* fs.writeFileString(path.join(dir, "script.json"), JSON.stringify(script))
  return { dir, fs, path }
})

/** A TCP port nothing listens on. */
const closedPort = Effect.promise(() =>
  new Promise<number>((resolve) => {
    const server = Net.createServer()
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as Net.AddressInfo).port
      server.close(() => resolve(port))
    })
  })
)

const scripted = ["--model", "scripted:script.json"]

describe("fibril inputs", () => {
  it.live("--cwd: a missing directory or a file is exit 2, and nothing is created", () =>
    Effect.gen(function*() {
      const { dir, fs, path } = yield* project
      const missing = path.join(dir, "nope")
      const [run, mcp, file] = yield* Effect.all([
        fibril(["run", "hi", ...scripted, "--cwd", missing], { cwd: dir }),
        fibril(["mcp", ...scripted, "--cwd", missing], { cwd: dir }),
        fibril(["agents", "list", "--cwd", "script.json"], { cwd: dir })
      ], { concurrency: "unbounded" })
      for (const result of [run, mcp]) {
        assert.strictEqual(result.exitCode, 2, result.stderr)
        assert.include(result.stderr, `fibril: --cwd ${missing}: no such directory`)
      }
      assert.strictEqual(file.exitCode, 2)
      assert.include(file.stderr, `--cwd ${path.join(dir, "script.json")} is not a directory`)
      assert.isFalse(yield* fs.exists(missing))
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.live("the prompt: empty, missing, twice, an unreadable file: exit 2 each, saying what to do", () =>
    Effect.gen(function*() {
      const { dir, fs, path } = yield* project
      yield* fs.writeFileString(path.join(dir, "blank.md"), "  \n\n")
      const cases = [
        { args: ["run", "", ...scripted], says: "The prompt is empty: say what the agent should do." },
        { args: ["run", "  \n ", ...scripted], says: "The prompt is empty" },
        { args: ["run", ...scripted], says: "No prompt. Give it as an argument" },
        {
          args: ["run", "hi", "--prompt-file", "blank.md", ...scripted],
          says: "either as an argument or with --prompt-file, not both"
        },
        { args: ["run", "--prompt-file", "missing.md", ...scripted], says: "--prompt-file missing.md: cannot read it" },
        { args: ["run", "--prompt-file", "blank.md", ...scripted], says: "The prompt is empty (blank.md)" }
      ]
      const results = yield* Effect.forEach(cases, (c) => fibril(c.args, { cwd: dir }), { concurrency: 3 })
      results.forEach((result, i) => {
        assert.strictEqual(result.exitCode, 2, `${cases[i]!.args.join(" ")}: ${result.stderr}`)
        assert.include(result.stderr, cases[i]!.says)
      })
      const empty = yield* fibril(["run", "-", ...scripted], { cwd: dir, stdin: "" })
      assert.strictEqual(empty.exitCode, 2)
      assert.include(empty.stderr, "The prompt is empty (nothing on stdin)")
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.live("a prompt from a file (200 KiB, more than an argument may hold) or from stdin", () =>
    Effect.gen(function*() {
      const { dir, fs, path } = yield* project
      const big = `Review everything below.\n${"x".repeat(200 * 1024)}\n`
      yield* fs.writeFileString(path.join(dir, "task.md"), big)
      const [fromFile, fromStdin] = yield* Effect.all([
        fibril(["run", "--prompt-file", "task.md", ...scripted, "--json"], { cwd: dir }),
        fibril(["run", "-", ...scripted, "--json"], { cwd: dir, stdin: "Summarise the listing.\n" })
      ], { concurrency: "unbounded" })
      assert.strictEqual(fromFile.exitCode, 0, fromFile.stderr)
      assert.strictEqual(fromStdin.exitCode, 0, fromStdin.stderr)
      const rootOf = (stdout: string) => (JSON.parse(stdout.split("\n")[0]!) as { agent_id: string }).agent_id
      // The root agents' records, as the runs left them in the store.
      const db = new DatabaseSync(path.join(dir, ".fibril", "state", "fibril.db"))
      const objective = (id: string) =>
        (JSON.parse(String(db.prepare("SELECT record FROM fibril_agents WHERE agent_id = ?").get(id)!["record"])) as {
          objective: string
        }).objective
      try {
        assert.strictEqual(objective(rootOf(fromFile.stdout)), big)
        assert.strictEqual(objective(rootOf(fromStdin.stdout)), "Summarise the listing.\n")
      } finally {
        db.close()
      }
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.live("from a subdirectory: the project root is found (its config read, its store used), as git finds its repository", () =>
    Effect.gen(function*() {
      const { dir, fs, path } = yield* project
      const deep = path.join(dir, "src", "deep")
      const [config, run] = yield* Effect.all([
        fibril(["config", "--json"], { cwd: deep }),
        fibril(["run", "list it", "--model", "scripted:../../script.json"], { cwd: deep })
      ], { concurrency: "unbounded" })
      assert.strictEqual(config.exitCode, 0, config.stderr)
      const parsed = JSON.parse(config.stdout) as {
        sources: Array<string>
        settings: { subagents: { max_concurrent: number } }
      }
      assert.deepStrictEqual(parsed.sources.slice(0, 1), [path.join(dir, ".fibril", "config.toml")])
      assert.strictEqual(parsed.settings.subagents.max_concurrent, 3)
      assert.strictEqual(run.exitCode, 0, run.stderr)
      assert.isTrue(yield* fs.exists(path.join(dir, ".fibril", "state", "fibril.db")), "the project's store")
      assert.isFalse(yield* fs.exists(path.join(deep, ".fibril")), "nothing created in the subdirectory")
      // The tools are rooted at the project: list_dir of "." shows the project's entries.
      assert.include(run.stdout, "Listed it.")
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.live("fibril help [command]: usage, flags, examples, environment, exit codes; an unknown command is exit 2", () =>
    Effect.gen(function*() {
      const { dir } = yield* project
      const [top, run, resume, viaFlag, unknown] = yield* Effect.all([
        fibril(["help"], { cwd: dir }),
        fibril(["help", "run"], { cwd: dir }),
        fibril(["help", "agents", "resume"], { cwd: dir }),
        fibril(["run", "--help"], { cwd: dir }),
        fibril(["help", "frobnicate"], { cwd: dir })
      ], { concurrency: 3 })
      assert.strictEqual(top.exitCode, 0)
      for (const section of ["SUBCOMMANDS", "EXAMPLES", "ENVIRONMENT", "EXIT CODES"]) {
        assert.include(top.stdout, section)
      }
      assert.match(top.stdout, /^ {2}help {2,}Help on fibril/m)
      assert.strictEqual(run.exitCode, 0)
      assert.strictEqual(run.stdout, viaFlag.stdout)
      for (
        const text of [
          "--prompt-file string",
          "git diff | fibril run - --role review",
          "OPENAI_API_KEY",
          "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
          "130    cancelled by Ctrl-C"
        ]
      ) {
        assert.include(run.stdout, text)
      }
      assert.strictEqual(resume.exitCode, 0)
      assert.include(resume.stdout, "--model string")
      assert.include(resume.stdout, "1      it did not")
      assert.strictEqual(unknown.exitCode, 2)
      assert.include(
        unknown.stderr,
        `fibril: unknown command "frobnicate"; the commands are: run, demo, agents, config, trust, mcp, doctor, worker, cluster, lab, help`
      )
      // Every flag says what it does.
      for (const result of [top, run, resume]) assert.notMatch(result.stdout, /^ {2}--[\w-]+( \w+)?\s*$/m)
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.live("config --json: snake_case keys, like the TOML and the environment variables", () =>
    Effect.gen(function*() {
      const { dir, fs, path } = yield* project
      yield* fs.writeFileString(
        path.join(dir, ".fibril", "config.toml"),
        "[subagents]\nmax_concurrent = 50\n[subagents.models]\nmyReviewer = \"m1\"\n[sandbox.roles.verifier]\nmode = \"off\"\n"
      )
      const { exitCode, stdout, stderr } = yield* fibril(["config", "--json"], { cwd: dir })
      assert.strictEqual(exitCode, 0, stderr)
      const keys: Array<string> = []
      const walk = (value: unknown, named: boolean) => {
        if (typeof value !== "object" || value === null) return
        for (const [key, v] of Object.entries(value)) {
          if (!named && !Array.isArray(value)) keys.push(key)
          // `origins` is keyed by dotted config paths, role names under [subagents.models] as written.
          walk(v, key === "models" || key === "roles" || key === "sandbox_roles" || key === "origins")
        }
      }
      walk(JSON.parse(stdout), false)
      assert.deepStrictEqual(keys.filter((key) => /[A-Z]/.test(key)), [])
      for (
        const key of ["max_concurrent", "api_timeout_secs", "writable_paths", "sandbox_status", "model_selection"]
      ) assert.include(keys, key)
      // Names under a table keyed by role or agent stay as written.
      assert.include(stdout, `"models":{"myReviewer":"m1"}`)
      assert.include(stdout, `"clamped":[{"key":"subagents.max_concurrent","given":50,"used":20}]`)
      assert.include(stdout, `"subagents.models.myReviewer":"${dir}/.fibril/config.toml, line 4"`)
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.live("agents resume takes --model; agents cancel needs no model, not even for a finished agent", () =>
    Effect.gen(function*() {
      const { dir } = yield* project
      const run = yield* fibril(["run", "list it", ...scripted, "--json"], { cwd: dir })
      assert.strictEqual(run.exitCode, 0, run.stderr)
      const id = (JSON.parse(run.stdout.split("\n")[0]!) as { agent_id: string }).agent_id
      const noKey = yield* fibril(["agents", "resume", id, "more"], { cwd: dir })
      assert.strictEqual(noKey.exitCode, 2)
      assert.include(noKey.stderr, "OPENAI_API_KEY is not set")
      const resumed = yield* fibril(["agents", "resume", id, "more", ...scripted], { cwd: dir })
      assert.strictEqual(resumed.exitCode, 0, resumed.stderr)
      assert.include(resumed.stdout, "Resumed and done.")
      const cancelled = yield* fibril(["agents", "cancel", id], { cwd: dir })
      assert.strictEqual(cancelled.exitCode, 0, cancelled.stderr)
      assert.match(cancelled.stdout, new RegExp(`${id} +completed`))
      assert.notInclude(cancelled.stderr, "OPENAI_API_KEY")
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.live("an unreachable OTLP endpoint: one warning, no delay, the run goes on", () =>
    Effect.gen(function*() {
      const { dir } = yield* project
      const port = yield* closedPort
      const started = Date.now()
      const run = yield* fibril([
        "run",
        "list it",
        ...scripted,
        "--otlp",
        `http://user:secret@127.0.0.1:${port}/v1/traces`
      ], { cwd: dir })
      const took = Date.now() - started
      assert.strictEqual(run.exitCode, 0, run.stderr)
      const warnings = run.stderr.split("\n").filter((line) => line.includes("traces cannot be exported"))
      assert.strictEqual(warnings.length, 1, run.stderr)
      assert.match(
        warnings[0]!,
        new RegExp(
          `WARN traces cannot be exported to http://\\*\\*\\*@127\\.0\\.0\\.1:${port}/v1/traces \\(unreachable\\); the run goes on without them`
        )
      )
      assert.notInclude(run.stderr, "secret")
      // The exporter's retries (about 1 s each, also at exit) are not waited for.
      assert.isBelow(took, 15_000)
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.live("a provider error over several lines is one log line on stderr", () =>
    Effect.gen(function*() {
      const { dir } = yield* project
      const port = yield* closedPort
      const run = yield* fibril(["run", "hi"], {
        cwd: dir,
        env: {
          OPENAI_API_KEY: "sk-test",
          OPENAI_BASE_URL: `http://127.0.0.1:${port}/v1`,
          FIBRIL_AGENT_MAX_RETRIES: "0"
        }
      })
      assert.strictEqual(run.exitCode, 1, run.stderr)
      const lines = run.stderr.trim().split("\n")
      const warning = lines.find((line) => line.includes("cannot list the models"))
      assert.isDefined(warning, run.stderr)
      assert.match(
        warning!,
        /^\[\d\d:\d\d:\d\d\.\d{3}\] WARN cannot list the models .*\(reason: NetworkError, message: .* ⏎ /
      )
      // Every stderr line is a log event or the error: none continues the one before.
      for (const line of lines) assert.match(line, /^(\[\d\d:\d\d:\d\d\.\d{3}\] [A-Z]+ |fibril: )/, line)
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
})
