// `fibril doctor` on a healthy setup (a real endpoint, the store shared with a live `fibril
// run`), then on each failure it reports: an old Node, a wrong config file, no key, a refused
// key, an unreachable endpoint, an unlisted model, a broken script, no sandbox, a store that
// cannot be created or opened, a missing --cwd. The key is never printed.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import * as Trust from "@fibril/core/Trust"
import { FakeOpenAiServer } from "@fibril/testkit"
import { Effect, FileSystem, Path } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import * as Net from "node:net"
import { DatabaseSync } from "node:sqlite"
import * as Doctor from "../src/Doctor.ts"
import { bin, fibril, sourceCondition } from "./run.ts"

const key = "sk-doctor-SECRET-1234"
const script = { rules: [{ turns: [{ text: "hello" }] }] }

/** A project with `.git/`, a valid config file, and a home of its own. */
const project = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const dir = yield* fs.makeTempDirectoryScoped()
  const home = yield* fs.makeTempDirectoryScoped()
  yield* fs.makeDirectory(path.join(dir, ".git"))
  yield* fs.makeDirectory(path.join(dir, ".fibril"))
  yield* fs.writeFileString(path.join(dir, ".fibril", "config.toml"), "[subagents]\nmax_concurrent = 4\n")
  return { dir, home, fs, path }
})

const closedPort = Effect.promise(() =>
  new Promise<number>((resolve) => {
    const server = Net.createServer()
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as Net.AddressInfo).port
      server.close(() => resolve(port))
    })
  })
)

/** The doctor's checks by name: the mark and the detail (continuation lines joined with a space). */
const lines = (stdout: string) => {
  const checks: Record<string, string> = {}
  let last: string | undefined
  for (const line of stdout.split("\n")) {
    const match = /^([✓!✗-]) (\w+) +(.*)$/.exec(line)
    if (match !== null) {
      last = match[2]!
      checks[last] = `${match[1]} ${match[3]}`
    } else if (last !== undefined && line.startsWith("            ")) {
      checks[last] += ` ${line.trim()}`
    } else {
      last = undefined
    }
  }
  return checks
}

describe("fibril doctor", () => {
  it("the Node check: >= 22.19", () => {
    assert.strictEqual(Doctor.nodeCheck("v24.21.0").status, "ok")
    assert.strictEqual(Doctor.nodeCheck("v22.19.0").status, "ok")
    assert.deepStrictEqual(Doctor.nodeCheck("v20.20.2"), {
      name: "node",
      status: "fail",
      detail: "v20.20.2 is too old: fibril needs Node >= 22.19; install a newer Node"
    })
  })

  it.live(
    "healthy: every check passes, the store shared with a live fibril run, exit 0, the key not shown",
    () =>
      Effect.gen(function*() {
        const { dir, home, fs, path } = yield* project
        const server = yield* FakeOpenAiServer.start({ script, models: ["gpt-4.1-mini", "other"], apiKey: key })
        const env = { OPENAI_API_KEY: key, OPENAI_BASE_URL: server.url, HOME: home }
        // Another process running an agent on the store: a fibril run whose model never answers.
        yield* fs.writeFileString(path.join(dir, "hang.json"), JSON.stringify({ rules: [{ turns: [{ hang: true }] }] }))
        const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
        yield* spawner.spawn(
          ChildProcess.make(process.execPath, [sourceCondition, bin, "run", "wait", "--model", "scripted:hang.json"], {
            cwd: dir,
            env,
            extendEnv: true
          })
        )
        const database = path.join(dir, ".fibril", "state", "fibril.db")
        const owners = () => {
          try {
            const db = new DatabaseSync(database, { readOnly: true })
            try {
              return db.prepare("SELECT count(*) AS n FROM fibril_owners").get()!["n"]
            } finally {
              db.close()
            }
          } catch {
            return 0
          }
        }
        for (let i = 0; i < 300 && owners() === 0; i++) yield* Effect.sleep("50 millis")
        yield* fs.makeDirectory(path.join(dir, "src"))
        const { stdout, stderr, exitCode } = yield* fibril(["doctor"], { cwd: path.join(dir, "src"), env })
        assert.strictEqual(exitCode, 0, stdout + stderr)
        const checks = lines(stdout)
        assert.match(checks["node"]!, /^✓ v\d+\.\d+\.\d+ \(fibril needs >= 22\.19\)$/)
        assert.strictEqual(checks["workspace"], `✓ ${dir} (it holds .fibril)`, "found from src/")
        assert.strictEqual(checks["config"], `✓ ${path.join(dir, ".fibril", "config.toml")}`)
        assert.strictEqual(checks["model"], "✓ gpt-4.1-mini; OPENAI_API_KEY is set (not shown)")
        assert.strictEqual(checks["endpoint"], `✓ ${server.url} is reachable and lists gpt-4.1-mini`)
        assert.match(checks["sandbox"]!, /^[✓!] /)
        const sandboxed = checks["sandbox"]!.startsWith("✓")
        // The defaults of [sandbox]'s bounds, with how each is enforced here.
        if (sandboxed) assert.match(checks["bounds"]!, /^[✓!] \/tmp and \/dev\/shm 256 MiB each, \/dev read-only; /)
        assert.match(
          checks["store"]!,
          new RegExp(
            `^✓ ${dir}/\\.fibril/state/fibril\\.db is writable; shared with 1 other live process running agents: pid \\d+@`
          )
        )
        assert.strictEqual(
          checks["cluster"],
          "- not configured (agents run in this process; --cluster, FIBRIL_CLUSTER_URL or [cluster] url for cluster mode: docs/cluster.md)"
        )
        assert.match(stdout, /No problem found/)
        assert.notInclude(stdout + stderr, key)
        const json = yield* fibril(["doctor", "--json"], { cwd: dir, env })
        const parsed = JSON.parse(json.stdout) as { ok: boolean; checks: Array<{ name: string; status: string }> }
        assert.isTrue(parsed.ok)
        assert.deepStrictEqual(parsed.checks.map((c) => c.name), [
          "node",
          "workspace",
          "config",
          "model",
          "endpoint",
          "sandbox",
          ...(sandboxed ? ["bounds"] : []),
          "store",
          "cluster"
        ])
        assert.notInclude(json.stdout, key)
        // A configured cluster is named, its password masked (doctor does not connect to it).
        const clustered = yield* fibril(["doctor"], {
          cwd: dir,
          env: { ...env, FIBRIL_CLUSTER_URL: "postgres://fibril:hunter2@db-host:5432/fibril" }
        })
        assert.match(
          lines(clustered.stdout)["cluster"]!,
          /^- postgres:\/\/\*\*\*@db-host:5432\/fibril \(not connected to/
        )
        assert.notInclude(clustered.stdout + clustered.stderr, "hunter2")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    60_000
  )

  it.live("each failure it reports, with what to do: exit 1 (warnings alone: exit 0)", () =>
    Effect.gen(function*() {
      const { dir, home, fs, path } = yield* project
      const refusing = yield* FakeOpenAiServer.start({ script, apiKey: "another-key" })
      const listing = yield* FakeOpenAiServer.start({ script, models: ["other"] })
      const port = yield* closedPort
      const withKey = (url: string) => ({ OPENAI_API_KEY: key, OPENAI_BASE_URL: url, HOME: home })
      yield* fs.writeFileString(path.join(dir, "broken.json"), "{ not json")
      // A project whose config has an unknown key, one with `.fibril/state` taken by a file,
      // one whose database is not SQLite, one whose sandbox cannot start.
      const make = (name: string, files: Record<string, string>) =>
        Effect.gen(function*() {
          const at = path.join(dir, name)
          yield* fs.makeDirectory(path.join(at, ".fibril"), { recursive: true })
          for (const [file, text] of Object.entries(files)) {
            yield* fs.makeDirectory(path.dirname(path.join(at, file)), { recursive: true })
            yield* fs.writeFileString(path.join(at, file), text)
          }
          return at
        })
      const badConfig = yield* make("bad-config", { ".fibril/config.toml": "[subagents]\nmax_concurent = 4\n" })
      const stateFile = yield* make("state-file", { ".fibril/state": "not a directory" })
      const corrupt = yield* make("corrupt", { ".fibril/state/fibril.db": "this is not a database" })
      const noSandbox = yield* make("no-sandbox", {
        ".fibril/config.toml": "[sandbox]\nbwrap_path = \"/nonexistent/bwrap\"\n"
      })
      const cases = [
        {
          cwd: badConfig,
          env: withKey(listing.url),
          args: [],
          check: "config",
          says: /^✗ .*max_concurent.*max_concurrent/
        },
        {
          cwd: dir,
          env: { HOME: home },
          args: [],
          check: "model",
          says: /^✗ No model to run on: OPENAI_API_KEY is not set\. Set OPENAI_API_KEY/
        },
        {
          cwd: dir,
          env: withKey(refusing.url),
          args: [],
          check: "endpoint",
          says: /^✗ http:\/\/.* refused the key \(HTTP 401\): check OPENAI_API_KEY$/
        },
        {
          cwd: dir,
          env: withKey(`http://127.0.0.1:${port}/v1`),
          args: [],
          check: "endpoint",
          says: /^✗ http:\/\/127\.0\.0\.1:\d+\/v1: unreachable\. Check OPENAI_BASE_URL/
        },
        {
          cwd: dir,
          env: { HOME: home },
          args: ["--model", "scripted:broken.json"],
          check: "model",
          says: /^✗ cannot load the model script .*broken\.json: invalid JSON/
        },
        {
          cwd: stateFile,
          env: withKey(listing.url),
          args: [],
          check: "store",
          says: /state cannot be created: .*state is not a directory$/
        },
        {
          cwd: dir,
          env: { HOME: home },
          args: ["--cwd", "missing"],
          check: "workspace",
          says: /^✗ --cwd .*missing: no such directory/
        }
      ]
      const results = yield* Effect.forEach(cases, (c) => fibril(["doctor", ...c.args], { cwd: c.cwd, env: c.env }), {
        concurrency: 3
      })
      results.forEach((result, i) => {
        const c = cases[i]!
        assert.strictEqual(result.exitCode, 1, `${c.check}: ${result.stdout}${result.stderr}`)
        assert.match(lines(result.stdout)[c.check] ?? "", c.says, result.stdout)
        assert.match(result.stdout, /\d+ problems? found/)
        assert.notInclude(result.stdout + result.stderr, key)
      })
      // Warnings only: no sandbox, a store that was not a database (the store moves it aside
      // and starts a new one, as any run would). Exit 0.
      yield* fs.writeFileString(path.join(noSandbox, "script.json"), JSON.stringify(script))
      // Its own bwrap_path widens the sandbox (a program run outside it): it applies once trusted.
      yield* Trust.trust({ workspace: noSandbox, home, now: new Date(0) })
      const [sandbox, replaced] = yield* Effect.all([
        fibril(["doctor", "--model", "scripted:script.json"], { cwd: noSandbox, env: { HOME: home } }),
        fibril(["doctor", "--model", "other"], { cwd: corrupt, env: withKey(listing.url) })
      ], { concurrency: "unbounded" })
      assert.strictEqual(sandbox.exitCode, 0, sandbox.stdout)
      assert.strictEqual(replaced.exitCode, 0, replaced.stdout)
      assert.match(
        lines(replaced.stdout)["store"]!,
        /^! .*fibril\.db is writable; .*is not a readable database .*moved it aside/
      )
      assert.match(
        lines(sandbox.stdout)["sandbox"]!,
        /^! none \(.*\/nonexistent\/bwrap.*\): read-only roles get no shell.*Install bubblewrap/
      )
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 90_000)

  it.live(
    "what stops fibril run at start fails the doctor first, with the same message (exit 1; run: exit 2)",
    () =>
      Effect.gen(function*() {
        const { dir, home } = yield* project
        const listing = yield* FakeOpenAiServer.start({ script, models: ["other"], apiKey: key })
        // Before, the doctor said "No problem found" to both of these, and the run stopped.
        const broken = [
          // The endpoint does not list the model the run starts on.
          {
            env: { OPENAI_API_KEY: key, OPENAI_BASE_URL: listing.url, HOME: home },
            says: /^unknown model "gpt-4\.1-mini"; accepted: other$/
          },
          // A base URL that is not a URL (the run failed at its first model call).
          {
            env: { OPENAI_API_KEY: key, OPENAI_BASE_URL: "api.deepseek.com/v1", HOME: home },
            says: /^The base URL api\.deepseek\.com\/v1 is not an http\(s\) URL\./
          }
        ]
        for (const { env, says } of broken) {
          const [doctor, run] = yield* Effect.all([
            fibril(["doctor"], { cwd: dir, env }),
            fibril(["run", "hello"], { cwd: dir, env })
          ], { concurrency: "unbounded" })
          assert.strictEqual(run.exitCode, 2, run.stdout + run.stderr)
          const runSays = /^fibril: (.*)$/m.exec(run.stderr)?.[1]
          assert.isDefined(runSays, run.stderr)
          assert.match(runSays!, says)
          assert.strictEqual(doctor.exitCode, 1, doctor.stdout)
          const model = lines(doctor.stdout)["model"]!
          assert.strictEqual(model.slice(0, 2), "✗ ")
          assert.strictEqual(model, `✗ ${runSays}`, `${doctor.stdout}\n${run.stderr}`)
          assert.notInclude(doctor.stdout + run.stderr, key)
        }
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    60_000
  )
})
