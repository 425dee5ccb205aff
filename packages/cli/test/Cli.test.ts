import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { FakeOpenAiServer, OtlpReceiver, type ScriptedModel } from "@fibril/testkit"
import { Deferred, Effect, FileSystem, Path, Stream } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import * as Http from "node:http"
import * as Output from "../src/Output.ts"
import { bin, fibril, sourceCondition } from "./run.ts"

const report = (summary: string) =>
  `SUMMARY:\n${summary}\n\nCHANGES:\nnone\n\nEVIDENCE:\nlisted\n\nRISKS:\nnone\n\nBLOCKERS:\nnone`

const fanOut: ScriptedModel.ScriptInput = {
  rules: [
    {
      match: { role: "explore" },
      turns: [{ tool_calls: [{ name: "list_dir", args: {} }] }, { text: report("listed the workspace") }]
    },
    {
      match: { depth: 0 },
      turns: [
        {
          tool_calls: [
            { name: "task", args: { description: "left", prompt: "look left", subagent_type: "explore" } },
            { name: "task", args: { description: "right", prompt: "look right", subagent_type: "explorer" } }
          ]
        },
        { text: "Both sides explored." }
      ]
    }
  ]
}

/** A temp workspace holding `script.json`. */
const workspace = (script: unknown) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const dir = yield* fs.makeTempDirectoryScoped()
    yield* fs.writeFileString(path.join(dir, "script.json"), JSON.stringify(script))
    yield* fs.writeFileString(path.join(dir, "notes.txt"), "hello\n")
    return { dir, fs, path }
  })

describe("fibril run", () => {
  it.live("without a key or a scripted model: exit 2 and says exactly what to set", () =>
    Effect.gen(function*() {
      const { dir } = yield* workspace(fanOut)
      const { exitCode, stderr } = yield* fibril(["run", "hello"], { cwd: dir })
      assert.strictEqual(exitCode, 2)
      assert.include(stderr, "OPENAI_API_KEY is not set")
      assert.include(stderr, "--model scripted:<script.json>")
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("a scripted fan-out of task calls, end to end: tree, answer, totals, exit 0", () =>
    Effect.gen(function*() {
      const { dir } = yield* workspace(fanOut)
      const { exitCode, stdout, stderr } = yield* fibril([
        "run",
        "explore both sides",
        "--model",
        "scripted:script.json"
      ], {
        cwd: dir
      })
      assert.strictEqual(exitCode, 0, stderr)
      assert.match(stdout, /✓ explore "left" completed \d+\.\ds {2}steps 2 {2}tools 1 {2}tokens \d+ {2}\[agent_\w+\]/)
      assert.match(stdout, /✓ explore "right" completed .*\[agent_\w+\]/)
      // the final tree, once: the root's row with its own and its tree's tokens
      assert.match(
        stdout,
        /\nAgents\n✓ general "explore both sides" completed .* tokens [\d.k]+ own, [\d.k]+ tree {2}\[agent_\w+\]\n├─ ✓ explore "left"/
      )
      assert.include(stdout, "Answer\n  Both sides explored.")
      assert.match(stdout, /Totals: 3 agents, 4 tool calls/)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("--json: one parseable event per line, children carry their parent's id, then the final line", () =>
    Effect.gen(function*() {
      const { dir } = yield* workspace(fanOut)
      const { exitCode, stdout } = yield* fibril(["run", "go", "--model", "scripted:script.json", "--json"], {
        cwd: dir
      })
      assert.strictEqual(exitCode, 0)
      const events = stdout.trim().split("\n").map((line) => JSON.parse(line) as Record<string, unknown>)
      const final = events.at(-1)!
      assert.strictEqual(final["type"], "final")
      assert.strictEqual(final["status"], "completed")
      assert.strictEqual(final["text"], "Both sides explored.")
      const root = final["agent_id"]
      // The root's events describe it too: its prompt's first line.
      const rootSpawned = events.find((e) => e["type"] === "spawned" && e["agent_id"] === root)
      assert.strictEqual(rootSpawned?.["description"], "go")
      const children = events.filter((e) => e["type"] === "spawned" && e["depth"] === 1)
      assert.strictEqual(children.length, 2)
      for (const child of children) assert.strictEqual(child["parent_id"], root)
      assert.isTrue(events.some((e) => e["type"] === "tool_call" && e["tool"] === "list_dir"))
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("a root agent that fails: exit 1 and the reason", () =>
    Effect.gen(function*() {
      const { dir } = yield* workspace({ rules: [{ turns: [{ error: { kind: "fatal", message: "model refused" } }] }] })
      const { exitCode, stdout } = yield* fibril(["run", "go", "--model", "scripted:script.json"], { cwd: dir })
      assert.strictEqual(exitCode, 1)
      assert.include(stdout, "The root agent failed:")
      assert.include(stdout, "model refused")
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("usage errors exit 2: a bad flag value, an unknown role, a missing script", () =>
    Effect.gen(function*() {
      const { dir } = yield* workspace(fanOut)
      const cap = yield* fibril(["run", "go", "--model", "scripted:script.json", "--max-concurrent", "99"], {
        cwd: dir
      })
      assert.strictEqual(cap.exitCode, 2)
      const role = yield* fibril(["run", "go", "--model", "scripted:script.json", "--role", "wizard"], { cwd: dir })
      assert.strictEqual(role.exitCode, 2)
      assert.include(role.stderr, "unknown sub-agent type \"wizard\"")
      const missing = yield* fibril(["run", "go", "--model", "scripted:nope.json"], { cwd: dir })
      assert.strictEqual(missing.exitCode, 2)
      assert.include(missing.stderr, "nope.json")
      // A cluster's questions are not this process's to decide (checked before any connection).
      const approve = yield* fibril(["run", "go", "--cluster", "sqlite:c.db", "--approve", "allow"], { cwd: dir })
      assert.strictEqual(approve.exitCode, 2)
      assert.include(approve.stderr, "a cluster's questions wait for any process")
    }).pipe(Effect.provide(NodeServices.layer)))
})

describe("fibril agents and config", () => {
  it.live("after a run, agents list --all / show / transcript read the persisted records", () =>
    Effect.gen(function*() {
      const { dir, fs, path } = yield* workspace(fanOut)
      yield* fibril(["run", "go", "--model", "scripted:script.json"], { cwd: dir })
      const running = yield* fibril(["agents", "list"], { cwd: dir })
      assert.include(running.stdout, "No agent is running")
      // The root of the run is recorded too; its two explorers are its children in the tree.
      type Node = { agent_id: string; status: string; role: string; depth: number; children: Array<Node> }
      const all = yield* fibril(["agents", "list", "--all", "--json"], { cwd: dir })
      const trees = JSON.parse(all.stdout) as Array<Node>
      assert.deepStrictEqual(trees.map((r) => [r.status, r.role, r.depth]), [["completed", "general", 0]])
      const records = trees[0]!.children
      assert.deepStrictEqual(records.map((r) => [r.status, r.role, r.depth]), [["completed", "explore", 1], [
        "completed",
        "explore",
        1
      ]])
      const text = yield* fibril(["agents", "list", "--all"], { cwd: dir })
      const lines = text.stdout.trimEnd().split("\n")
      assert.strictEqual(lines.length, 3)
      assert.match(lines[0]!, new RegExp(`^${trees[0]!.agent_id}  completed +general`))
      assert.match(lines[1]!, new RegExp(`^├─ ${records[0]!.agent_id}  completed +explore`))
      assert.match(lines[2]!, new RegExp(`^└─ ${records[1]!.agent_id}  completed +explore`))
      assert.include(lines[1]!, " → ")
      const shown = yield* fibril(["agents", "show", records[0]!.agent_id], { cwd: dir })
      assert.include(shown.stdout, "\"summary\": \"listed the workspace\"")
      const transcript = yield* fibril(["agents", "transcript", records[0]!.agent_id], { cwd: dir })
      assert.include(transcript.stdout, "[system]")
      assert.include(transcript.stdout, "→ list_dir")
      assert.include(transcript.stdout, "notes.txt")
      const unknown = yield* fibril(["agents", "show", "agent_nope"], { cwd: dir })
      assert.strictEqual(unknown.exitCode, 2)

      // A resume that fails exits 1 and keeps how the earlier run ended in the record's runs.
      yield* fs.writeFileString(
        path.join(dir, "fail.json"),
        JSON.stringify({ rules: [{ turns: [{ error: { kind: "fatal", message: "the model refused" } }] }] })
      )
      const resumed = yield* fibril(["agents", "resume", records[0]!.agent_id], {
        cwd: dir,
        env: { FIBRIL_MODEL: "scripted:fail.json" }
      })
      assert.strictEqual(resumed.exitCode, 1, resumed.stderr)
      assert.include(resumed.stdout, "failed")
      const after = JSON.parse((yield* fibril(["agents", "show", records[0]!.agent_id], { cwd: dir })).stdout) as {
        status: string
        runs: Array<{ status: string; summary?: string }>
      }
      assert.strictEqual(after.status, "failed")
      assert.deepStrictEqual(after.runs.map((run) => [run.status, run.summary]), [
        ["completed", "listed the workspace"],
        ["failed", undefined]
      ])
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live("config prints the effective values, marks clamped ones, and never the key", () =>
    Effect.gen(function*() {
      const { dir, fs, path } = yield* workspace(fanOut)
      yield* fs.makeDirectory(path.join(dir, ".fibril"))
      yield* fs.writeFileString(path.join(dir, ".fibril", "config.toml"), "[subagents]\nmax_concurrent = 50\n")
      const { exitCode, stdout } = yield* fibril(["config"], {
        cwd: dir,
        env: { OPENAI_API_KEY: "sk-very-secret", FIBRIL_AGENT_MAX_STEPS: "7" }
      })
      assert.strictEqual(exitCode, 0)
      assert.include(stdout, "max_concurrent = 20   # clamped: 50 given, 20 used")
      assert.include(stdout, "max_steps = 7")
      assert.include(stdout, "gpt-4.1-mini at https://api.openai.com/v1 (OPENAI_API_KEY set)")
      assert.notInclude(stdout, "sk-very-secret")
    }).pipe(Effect.provide(NodeServices.layer)))
})

describe("fibril run against an OpenAI-compatible endpoint (the fake server)", () => {
  it.live("--base-url: a fan-out of task calls over real HTTP, text and --json", () =>
    Effect.gen(function*() {
      const server = yield* FakeOpenAiServer.start({ script: fanOut, models: ["fake-model"] })
      const { dir } = yield* workspace(fanOut)
      const env = { OPENAI_API_KEY: "sk-test" }
      const text = yield* fibril(["run", "explore", "--model", "fake-model", "--base-url", server.url], {
        cwd: dir,
        env
      })
      assert.strictEqual(text.exitCode, 0, text.stderr)
      assert.include(text.stdout, "Answer\n  Both sides explored.")
      assert.match(text.stdout, /Totals: 3 agents, 4 tool calls, \d+ input/)
      assert.include(text.stdout, "model fake-model")
      const json = yield* fibril(["run", "explore", "--model", "fake-model", "--base-url", server.url, "--json"], {
        cwd: dir,
        env
      })
      assert.strictEqual(json.exitCode, 0, json.stderr)
      const events = json.stdout.trim().split("\n").map((line) => JSON.parse(line) as Record<string, unknown>)
      const root = events.at(-1)!["agent_id"]
      assert.deepStrictEqual(
        events.filter((e) => e["type"] === "completed" && e["depth"] === 1).map((e) => e["parent_id"]),
        [root, root]
      )
      assert.strictEqual(events.at(-1)!["text"], "Both sides explored.")
      // An id the server does not list is refused before anything runs.
      const unknown = yield* fibril(["run", "x", "--model", "gpt-imaginary", "--base-url", server.url], {
        cwd: dir,
        env
      })
      assert.strictEqual(unknown.exitCode, 2)
      assert.include(unknown.stderr, "unknown model \"gpt-imaginary\"; accepted: fake-model")
    }).pipe(Effect.provide(NodeServices.layer)))

  it.live(
    "streams the answer: the request asks for a stream and the first line is printed before the rest is sent; --no-stream asks for none",
    () =>
      Effect.gen(function*() {
        const first = "First line of the answer."
        const answer = `${first}\nSecond part, sent later.`
        const script: ScriptedModel.ScriptInput = { rules: [{ match: { depth: 0 }, turns: [{ text: answer }] }] }
        const release = yield* Deferred.make<void>()
        // Chunk 0 is the role, chunk 1 the first line (26 characters a delta): the rest waits.
        const server = yield* FakeOpenAiServer.start({
          script,
          models: ["fake-model"],
          textChunkChars: first.length + 1,
          faults: [{
            on: (request) => request.body.stream === true,
            fault: { holdAfterChunks: 2, release: Deferred.await(release) }
          }]
        })
        const { dir } = yield* workspace(script)
        const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
        const handle = yield* spawner.spawn(
          ChildProcess.make(process.execPath, [
            sourceCondition,
            bin,
            "run",
            "answer",
            "--model",
            "fake-model",
            "--base-url",
            server.url
          ], {
            cwd: dir,
            env: { OPENAI_API_KEY: "sk-test", OPENAI_BASE_URL: undefined, FIBRIL_MODEL: undefined },
            extendEnv: true
          })
        )
        let stdout = ""
        yield* Effect.forkChild(
          Stream.runForEach(Stream.decodeText(handle.stdout), (text) => Effect.sync(() => void (stdout += text)))
        )
        for (let i = 0; i < 400 && !stdout.includes(first); i++) yield* Effect.sleep("50 millis")
        assert.include(
          stdout,
          `${Output.streamedPrefix}${first}\n`,
          `the first line is printed while the stream is held:\n${stdout}`
        )
        assert.notInclude(stdout, "Second part")
        const asked = server.requests.filter((r) => r.path === "/v1/chat/completions")
        assert.deepStrictEqual(asked.map((r) => (r.body as Record<string, unknown>)["stream"]), [true])
        yield* Deferred.succeed(release, undefined)
        assert.strictEqual(Number(yield* handle.exitCode), 0)
        assert.include(stdout, `${Output.streamedPrefix}Second part, sent later.`)
        assert.include(stdout, `Answer\n  ${first}\n  Second part, sent later.`)

        const whole = yield* fibril(
          ["run", "answer", "--model", "fake-model", "--base-url", server.url, "--no-stream"],
          {
            cwd: dir,
            env: { OPENAI_API_KEY: "sk-test" }
          }
        )
        assert.strictEqual(whole.exitCode, 0, whole.stderr)
        const last = server.requests.filter((r) => r.path === "/v1/chat/completions").at(-1)!.body as Record<
          string,
          unknown
        >
        assert.notProperty(last, "stream")
        assert.notInclude(whole.stdout, Output.streamedPrefix)
        assert.include(whole.stdout, `Answer\n  ${first}\n  Second part, sent later.`)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    60_000
  )

  it.live("--otlp exports GenAI spans for agents, model calls and tool calls; [telemetry] capture_content adds the content", () =>
    Effect.gen(function*() {
      const bodies: Array<string> = []
      const collector = yield* Effect.acquireRelease(
        Effect.promise(() =>
          new Promise<Http.Server>((resolve) => {
            const server = Http.createServer((req, res) => {
              let body = ""
              req.on("data", (chunk) => (body += String(chunk)))
              req.on("end", () => {
                bodies.push(body)
                res.writeHead(200, { "content-type": "application/json" }).end("{}")
              })
            })
            server.listen(0, "127.0.0.1", () => resolve(server))
          })
        ),
        (server) => Effect.promise(() => new Promise<void>((resolve) => server.close(() => resolve())))
      )
      const port = (collector.address() as { port: number }).port
      const { dir, fs, path } = yield* workspace(fanOut)
      yield* fs.makeDirectory(path.join(dir, ".fibril"))
      yield* fs.writeFileString(path.join(dir, ".fibril", "config.toml"), "[telemetry]\ncapture_content = true\n")
      const run = yield* fibril([
        "run",
        "go",
        "--model",
        "scripted:script.json",
        "--otlp",
        `http://127.0.0.1:${port}/v1/traces`
      ], { cwd: dir })
      assert.strictEqual(run.exitCode, 0, run.stderr)
      const spans = bodies.flatMap((body) => OtlpReceiver.spansOf(body))
      const names = new Set(spans.map((s) => s.name))
      for (const name of ["fibril.run", "SubAgentManager.run", "execute_tool list_dir", "execute_tool task"]) {
        assert.isTrue(names.has(name), `span ${name} in ${[...names].join(", ")}`)
      }
      const operations = new Set(spans.map((s) => s.attributes["gen_ai.operation.name"]))
      assert.includeMembers([...operations], ["invoke_agent", "chat", "execute_tool"])
      // Streamed model calls are chat spans too; the config's capture_content puts the prompt on them.
      const chat = spans.find((s) => s.name.startsWith("chat "))!
      assert.strictEqual(chat.attributes["gen_ai.operation.name"], "chat")
      assert.include(String(chat.attributes["gen_ai.input.messages"]), "go")
    }).pipe(Effect.provide(NodeServices.layer)))
})
