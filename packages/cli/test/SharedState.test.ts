// Several real `fibril` processes on one workspace: the shared store keeps every record
// true, and a process killed with SIGKILL leaves its agents `interrupted` (owner gone)
// without touching those of a process that is still alive.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Deferred, Effect, FileSystem, Path, Stream } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { storedRecords } from "./inspect.ts"
import { bin, fibril } from "./run.ts"

const report = (summary: string) =>
  `SUMMARY:\n${summary}\n\nCHANGES:\nnone\n\nEVIDENCE:\nlisted\n\nRISKS:\nnone\n\nBLOCKERS:\nnone`

const children = 9

/** The root fans out to 9 explorers at once; each lists the workspace (a little slowly) and reports. */
const fanOut = {
  rules: [
    {
      match: { role: "explore" },
      turns: [
        { tool_calls: [{ name: "list_dir", args: {} }], delay_ms: 20 },
        { text: report("listed the workspace"), delay_ms: 20 }
      ]
    },
    {
      match: { depth: 0 },
      turns: [
        {
          tool_calls: Array.from({ length: children }, (_, i) => ({
            name: "task",
            args: { description: `part ${i}`, prompt: `look at part ${i}`, subagent_type: "explore" }
          }))
        },
        { text: "All parts explored." }
      ]
    }
  ]
}

interface Row {
  readonly agent_id: string
  readonly parent_id: string | null
  readonly status: string
  readonly reason?: string
  readonly depth: number
}

const records = (dir: string) => storedRecords<Row>(dir)

const workspace = (script: unknown) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const dir = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
    yield* fs.writeFileString(path.join(dir, "script.json"), JSON.stringify(script))
    yield* fs.writeFileString(path.join(dir, "notes.txt"), "hello\n")
    return { dir, fs, path }
  })

describe("one workspace, several processes", () => {
  it.live(
    "two fibril run at once, 10 times, 9 children each: every record present with its true terminal state",
    () =>
      Effect.gen(function*() {
        const { dir } = yield* workspace(fanOut)
        const rounds = 10
        for (let round = 0; round < rounds; round++) {
          const [a, b] = yield* Effect.all(
            [0, 1].map(() =>
              fibril(["run", "explore every part", "--model", "scripted:script.json", "--json"], { cwd: dir })
            ),
            { concurrency: "unbounded" }
          )
          for (const run of [a!, b!]) {
            assert.strictEqual(run.exitCode, 0, `round ${round}: ${run.stderr}\n${run.stdout.slice(-2000)}`)
          }
        }
        const all = records(dir)
        const roots = all.filter((r) => r.depth === 0)
        const kids = all.filter((r) => r.depth === 1)
        assert.strictEqual(roots.length, 2 * rounds)
        assert.strictEqual(kids.length, 2 * rounds * children)
        assert.deepStrictEqual(
          [...new Set(all.map((r) => r.status))],
          ["completed"],
          JSON.stringify(all.filter((r) => r.status !== "completed"))
        )
        // Each root has exactly its own 9 children.
        for (const root of roots) assert.strictEqual(kids.filter((k) => k.parent_id === root.agent_id).length, children)
      }).pipe(Effect.provide(NodeServices.layer)),
    120_000
  )

  it.live(
    "kill -9 of fibril run during a hanging child: the child reads interrupted (owner gone); another live process's agents still read running",
    () =>
      Effect.gen(function*() {
        const hanging: ScriptedModel.ScriptInput = {
          rules: [
            { match: { role: "explore" }, turns: [{ hang: true }] },
            {
              match: { depth: 0 },
              turns: [{
                tool_calls: [{
                  name: "task",
                  args: { description: "stuck", prompt: "wait forever", subagent_type: "explore" }
                }]
              }, { text: "done" }]
            }
          ]
        }
        const { dir } = yield* workspace(hanging)
        const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
        /** A `fibril run` that hangs in its child; resolves once its child is recorded running. */
        const start = Effect.gen(function*() {
          const handle = yield* spawner.spawn(
            ChildProcess.make(process.execPath, [bin, "run", "wait", "--model", "scripted:script.json", "--json"], {
              cwd: dir,
              env: { OPENAI_API_KEY: undefined },
              extendEnv: true
            })
          )
          // Its stdout is read to the end: a reader that stopped early would close the pipe, and
          // the process would die of EPIPE at its next event instead of by the test's signal.
          const started = yield* Deferred.make<string>()
          yield* Effect.forkScoped(
            handle.stdout.pipe(
              Stream.decodeText(),
              Stream.splitLines,
              Stream.runForEach((line) => {
                const event = JSON.parse(line) as { type: string; depth?: number; agent_id?: string }
                return event.type === "started" && event.depth === 1
                  ? Deferred.succeed(started, event.agent_id!)
                  : Effect.void
              }),
              Effect.ignore
            )
          )
          const childId = yield* Deferred.await(started).pipe(Effect.timeout("30 seconds"))
          return { handle, childId }
        })
        yield* Effect.scoped(Effect.gen(function*() {
          const doomed = yield* start
          const survivor = yield* start
          yield* doomed.handle.kill({ killSignal: "SIGKILL" })
          yield* doomed.handle.exitCode.pipe(Effect.ignore)

          const listed = yield* fibril(["agents", "list", "--all", "--json"], { cwd: dir })
          assert.strictEqual(listed.exitCode, 0, listed.stderr)
          type Node = {
            agent_id: string
            status: string
            reason?: string
            owner: { state: string; pid: number }
            children: Array<Node>
          }
          const flat = (nodes: ReadonlyArray<Node>): Array<Node> => nodes.flatMap((n) => [n, ...flat(n.children)])
          const agents = flat(JSON.parse(listed.stdout) as Array<Node>)
          const killedChild = agents.find((a) => a.agent_id === doomed.childId)!
          assert.strictEqual(killedChild.status, "interrupted")
          assert.include(killedChild.reason, `pid ${doomed.handle.pid}`)
          assert.strictEqual(killedChild.owner.state, "gone")
          const liveChild = agents.find((a) => a.agent_id === survivor.childId)!
          assert.strictEqual(liveChild.status, "running")
          assert.strictEqual(liveChild.owner.state, "alive")

          // The text view says the same, as a tree.
          const text = yield* fibril(["agents", "list"], { cwd: dir })
          assert.include(text.stdout, `${survivor.childId}  running`)
          assert.include(text.stdout, "another live process")
          assert.notInclude(text.stdout, doomed.childId)

          // Cancelling the survivor's child from here: its process acts on the request.
          const cancelled = yield* fibril(["agents", "cancel", survivor.childId], { cwd: dir })
          assert.strictEqual(cancelled.exitCode, 0, cancelled.stderr)
          assert.include(cancelled.stdout, `${survivor.childId}  cancelled`)
          assert.include(cancelled.stdout, "Cancelled from the command line")
          // The survivor's root gets its child's cancellation as the task result and finishes.
          assert.strictEqual(Number(yield* survivor.handle.exitCode.pipe(Effect.timeout("30 seconds"))), 0)
        }))
      }).pipe(Effect.provide(NodeServices.layer)),
    90_000
  )
})
