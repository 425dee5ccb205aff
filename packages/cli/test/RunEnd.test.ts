// How `fibril run` ends: detached agents still running are stopped (with the command that
// resumes them) or waited for; SIGHUP (a closed terminal) stops the tree like SIGTERM (exit 129).
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, FileSystem, Stream } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { pidsWith, storedRecords } from "./inspect.ts"
import { bin, fibril, scriptedWorkspace, sourceCondition } from "./run.ts"

const report = (summary: string) =>
  `SUMMARY:\n${summary}\n\nCHANGES:\nnone\n\nEVIDENCE:\nnone\n\nRISKS:\nnone\n\nBLOCKERS:\nnone`

interface Row {
  readonly agent_id: string
  readonly status: string
  readonly reason?: string
  readonly detached: boolean
  readonly depth: number
}

const records = (dir: string) => storedRecords<Row>(dir)

/** The root starts one detached background agent, then answers at once. */
const detachedScript = (child: unknown) => ({
  rules: [
    { match: { role: "explore" }, turns: [child] },
    {
      match: { depth: 0 },
      turns: [
        {
          tool_calls: [{
            name: "agent_spawn",
            args: { prompt: "keep watching", description: "watcher", subagent_type: "explore", detached: true }
          }]
        },
        { text: "Started a watcher." }
      ]
    }
  ]
})

describe("the end of fibril run", () => {
  it.live(
    "a detached agent still running is stopped, recorded so, and the resume command is printed",
    () =>
      Effect.gen(function*() {
        const dir = yield* scriptedWorkspace(detachedScript({ hang: true }))
        const run = yield* fibril(["run", "watch", "--model", "scripted:script.json"], { cwd: dir })
        assert.strictEqual(run.exitCode, 0, run.stderr)
        const watcher = records(dir).find((r) => r.detached)!
        assert.strictEqual(watcher.status, "cancelled")
        assert.include(watcher.reason, `fibril agents resume ${watcher.agent_id}`)
        assert.include(run.stdout, "Stopped 1 detached agent(s) still running when the run ended; resume with:")
        assert.include(run.stdout, `fibril agents resume ${watcher.agent_id}`)
        // The last line of the log about it says it was cancelled, not running.
        const about = run.stdout.split("\n").filter((line) => line.includes(`[${watcher.agent_id}]`))
        assert.include(about.at(-1), "cancelled")
      }).pipe(Effect.provide(NodeServices.layer)),
    60_000
  )

  it.live("--wait-detached waits for it to finish", () =>
    Effect.gen(function*() {
      const dir = yield* scriptedWorkspace(detachedScript({ text: report("watched"), delay_ms: 300 }))
      const run = yield* fibril(["run", "watch", "--model", "scripted:script.json", "--wait-detached", "--json"], {
        cwd: dir
      })
      assert.strictEqual(run.exitCode, 0, run.stderr)
      const watcher = records(dir).find((r) => r.detached)!
      assert.strictEqual(watcher.status, "completed")
      const final = JSON.parse(run.stdout.trimEnd().split("\n").at(-1)!) as { type: string; stopped: Array<string> }
      assert.strictEqual(final.type, "final")
      assert.deepStrictEqual(final.stopped, [])
    }).pipe(Effect.provide(NodeServices.layer)), 60_000)

  it.live(
    "Ctrl-C on a fan-out: every agent's record says cancelled, task children and background ones at every depth",
    () =>
      Effect.gen(function*() {
        // The root runs a `task` child and spawns a background one; each spawns a background
        // grandchild; the grandchildren wait in a shell `sleep`, the children in the model.
        const marker = String(500_000 + Math.floor(Math.random() * 100_000))
        const spawnOne = (description: string) => ({
          name: "agent_spawn",
          args: { description, prompt: description, subagent_type: "implementer" }
        })
        const dir = yield* scriptedWorkspace({
          rules: [
            {
              match: { depth: 2 },
              turns: [{ tool_calls: [{ name: "shell", args: { command: `exec sleep ${marker}` } }] }, { text: "never" }]
            },
            { match: { prompt: "fg" }, turns: [{ tool_calls: [spawnOne("fg's child")] }, { hang: true }] },
            { match: { prompt: "bg" }, turns: [{ tool_calls: [spawnOne("bg's child")] }, { hang: true }] },
            {
              match: { depth: 0 },
              turns: [{
                tool_calls: [
                  { name: "task", args: { description: "fg", prompt: "fg", subagent_type: "general" } },
                  { name: "agent_spawn", args: { description: "bg", prompt: "bg", subagent_type: "general" } }
                ]
              }, { text: "never" }]
            }
          ]
        })
        const fs = yield* FileSystem.FileSystem
        yield* fs.makeDirectory(`${dir}/.fibril`)
        yield* fs.writeFileString(`${dir}/.fibril/config.toml`, "[subagents]\nmax_depth = 3\n")
        const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
        const handle = yield* spawner.spawn(
          ChildProcess.make(process.execPath, [sourceCondition, bin, "run", "go", "--model", "scripted:script.json"], {
            cwd: dir,
            env: { OPENAI_API_KEY: undefined },
            extendEnv: true
          })
        )
        const stdout = yield* Effect.forkChild(handle.stdout.pipe(Stream.decodeText(), Stream.mkString))
        for (let i = 0; i < 400 && pidsWith(marker).length < 2; i++) yield* Effect.sleep("50 millis")
        assert.strictEqual(pidsWith(marker).length, 2, "both grandchildren's shell commands started")
        yield* handle.kill({ killSignal: "SIGINT" })
        assert.strictEqual(Number(yield* handle.exitCode), 130, "128 + SIGINT")
        const rows = records(dir)
        assert.strictEqual(rows.length, 5)
        const root = rows.find((r) => r.depth === 0)!
        for (const row of rows) {
          assert.deepStrictEqual(
            [row.status, row.reason],
            [
              "cancelled",
              row.depth === 0 ? "Cancelled by Ctrl-C" : `Cancelled because its parent ${root.agent_id} was cancelled`
            ],
            `agent ${row.agent_id} at depth ${row.depth}`
          )
        }
        assert.include(yield* Fiber.join(stdout), "Cancelled 5 agent(s):")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    60_000
  )

  it.live("SIGHUP (a closed terminal) cancels the tree and kills its shell processes", () =>
    Effect.gen(function*() {
      const marker = String(400_000 + Math.floor(Math.random() * 100_000))
      const dir = yield* scriptedWorkspace({
        rules: [
          {
            match: { role: "implementer" },
            turns: [{ tool_calls: [{ name: "shell", args: { command: `exec sleep ${marker}` } }] }, { text: "never" }]
          },
          {
            match: { depth: 0 },
            turns: [{
              tool_calls: [{
                name: "task",
                args: { description: "slow", prompt: "run it", subagent_type: "implementer" }
              }]
            }, { text: "never" }]
          }
        ]
      })
      const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
      const handle = yield* spawner.spawn(
        ChildProcess.make(process.execPath, [bin, "run", "go", "--model", "scripted:script.json"], {
          cwd: dir,
          env: { OPENAI_API_KEY: undefined },
          extendEnv: true
        })
      )
      let pids: Array<number> = []
      for (let i = 0; i < 400 && pids.length === 0; i++) {
        pids = pidsWith(marker)
        if (pids.length === 0) yield* Effect.sleep("50 millis")
      }
      assert.isAbove(pids.length, 0, "the shell command started")
      yield* handle.kill({ killSignal: "SIGHUP" })
      const code = yield* handle.exitCode
      assert.strictEqual(Number(code), 129, "128 + SIGHUP")
      assert.deepStrictEqual(pidsWith(marker), [], "the shell's process group was killed")
      for (const row of records(dir)) assert.notInclude(["running", "pending"], row.status)
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 60_000)
})
