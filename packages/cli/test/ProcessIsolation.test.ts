// isolation: "process" for real: a parent (core Fibril.layer on the ScriptedModel) spawns
// children that run in their own OS processes (ChildHost.ts on this Node, on a script file, with
// the fixture tools of fixtures/processTools.ts). Real processes, real time (`it.live`); each
// poll is bounded.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { AgentEvents, Fibril, type Session, SubAgentManager, ToolRegistry } from "@fibril/core"
import { ScriptedModel } from "@fibril/testkit"
import { Context, Effect, Fiber, FileSystem, Layer, Path, PubSub, type Scope } from "effect"
import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import * as AgentsCommand from "../src/AgentsCommand.ts"
import * as ChildHost from "../src/ChildHost.ts"
import * as ProcessTools from "./fixtures/processTools.ts"
import { until } from "./run.ts"

/** What the busy child runs with (undefined: a fiber of the parent, the code before isolation). */
const busyIsolation: "process" | undefined = "process"

const toolsModule = fileURLToPath(new URL("./fixtures/processTools.ts", import.meta.url))
const counterMcp = fileURLToPath(new URL("./fixtures/counterMcp.ts", import.meta.url))

/** The children's script (the file a child process plays), by the prompts the parent gives. */
const childScript = (pidFile: string): ScriptedModel.ScriptInput => ({
  rules: [
    { match: { prompt: "allocate please" }, turns: [{ tool_calls: [{ name: "allocate" }] }, { text: "never" }] },
    {
      match: { prompt: "sibling work" },
      turns: [
        { tool_calls: [{ name: "write_file", args: { path: "sibling.txt", content: "by the sibling\n" } }] },
        { text: "sibling done" }
      ]
    },
    {
      match: { prompt: "busy work" },
      turns: [{ tool_calls: [{ name: "busy", args: { ms: 2500 } }] }, { text: "busy done" }]
    },
    // Tree budget: the first child spends 600 tokens, the second 150 in its first step.
    { match: { prompt: "spend please" }, turns: [{ text: "spent", usage: { input: 400, output: 200 } }] },
    {
      match: { prompt: "spend more" },
      turns: [{ tool_calls: [{ name: "todoread" }], usage: { input: 100, output: 50 } }, {
        text: "spent more",
        usage: { input: 1, output: 1 }
      }]
    },
    // A workspace MCP server's tool, called in the child's own process.
    {
      match: { prompt: "count please" },
      turns: [{ tool_calls: [{ name: "mcp__counter__count" }] }, { text: "counted" }]
    },
    {
      match: { prompt: "pids please" },
      turns: [{ tool_calls: [{ name: "pids", args: { path: pidFile } }] }, { hang: true }]
    }
  ]
})

const spawnCall = (prompt: string, isolation: "process" | undefined) => ({
  name: "agent_spawn",
  args: { prompt, description: prompt, ...(isolation === undefined ? {} : { isolation }) }
})

/** A parent whose script spawns `children` then waits for all of them. */
const parentScript = (
  children: readonly [ReturnType<typeof spawnCall>, ...Array<ReturnType<typeof spawnCall>>]
): ScriptedModel.ScriptInput => ({
  rules: [
    // Five steps, a fifth of a second each: progress events a stalled event loop would hold back.
    {
      match: { prompt: "steady work" },
      turns: [
        ...Array.from({ length: 5 }, () => ({ tool_calls: [{ name: "todoread" }] as const, delay_ms: 200 })),
        { text: "steady done" }
      ]
    },
    // A child run as a fiber here (no isolation) plays the same rules as in its own process.
    ...childScript("unused").rules,
    {
      match: { depth: 0 },
      turns: [
        { tool_calls: children },
        { tool_calls: [{ name: "agent_wait", args: { wait_mode: "all" } }] },
        { text: "parent done" }
      ]
    }
  ]
})

const harness = <A>(
  script: ScriptedModel.ScriptInput,
  use: (parts: {
    readonly manager: SubAgentManager.SubAgentManager["Service"]
    readonly events: AgentEvents.AgentEvents["Service"]
    readonly start: Effect.Effect<Fiber.Fiber<unknown, unknown>>
    readonly pidFile: string
    readonly cwd: string
  }) => Effect.Effect<A, never, Scope.Scope>,
  options: {
    readonly maxOldSpaceMb?: number
    /** The parent's store: "file" (SQLite in the workspace, as the CLI has it) or in memory. */
    readonly store?: "file" | "memory"
    /** The fixture tools in the parent too (a child without isolation runs them there). */
    readonly parentTools?: boolean
    /** The sub-agents' budgets (`[subagents]`). */
    readonly budgets?: Partial<Session.Budgets>
    /** The workspace's `.fibril/config.toml`. */
    readonly config?: (cwd: string) => string
  } = {}
) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const cwd = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
    const pidFile = path.join(cwd, "pids.json")
    const scriptFile = path.join(cwd, "children.json")
    yield* fs.writeFileString(scriptFile, JSON.stringify(childScript(pidFile)))
    if (options.config !== undefined) {
      yield* fs.makeDirectory(path.join(cwd, ".fibril"), { recursive: true })
      yield* fs.writeFileString(path.join(cwd, ".fibril", "config.toml"), options.config(cwd))
    }
    const context = yield* Layer.build(
      Fibril.layer({
        cwd,
        store: options.store ?? "memory",
        subagents: {
          ...(options.budgets === undefined ? {} : { budgets: options.budgets }),
          processIsolation: {
            host: ChildHost.host(`scripted:${scriptFile}`, undefined, [toolsModule]),
            maxOldSpaceMb: options.maxOldSpaceMb ?? 256,
            roleMaxOldSpaceMb: {},
            nestedDepth: 0
          }
        }
      }).pipe(Layer.provide(ScriptedModel.layer(script)))
    )
    if (options.parentTools === true) {
      const registry = Context.get(context, ToolRegistry.ToolRegistry)
      for (const tool of ProcessTools.tools) yield* Effect.orDie(registry.register(tool))
    }
    const roots = Context.get(context, SubAgentManager.Embedded)
    return yield* use({
      manager: Context.get(context, SubAgentManager.SubAgentManager),
      events: Context.get(context, AgentEvents.AgentEvents),
      start: Effect.map(Effect.orDie(roots.startRoot({ prompt: "go" })), ({ fiber }) => fiber),
      pidFile,
      cwd
    })
  }).pipe(Effect.scoped, Effect.provide(NodeServices.layer))

const childrenOf = (manager: SubAgentManager.SubAgentManager["Service"]) =>
  Effect.map(manager.list({ includeArchived: true }), (agents) => agents.filter((agent) => agent.depth === 1))

/**
 * Is `pid` a running process? A killed one that nobody has reaped yet (a zombie: the
 * grandchild, whose parent died with it, waits for init to reap it) is not running.
 */
const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
  } catch {
    return false
  }
  try {
    // /proc/<pid>/stat: "pid (comm) S …"; the state follows the last ")".
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z"
  } catch {
    return false
  }
}

describe("isolation: process", () => {
  it.live(
    "a child past its heap cap ends failed (out of memory); its sibling completes; the parent gets both",
    () =>
      harness(
        parentScript([spawnCall("allocate please", "process"), spawnCall("sibling work", "process")]),
        ({ cwd, manager, start }) =>
          Effect.gen(function*() {
            const root = yield* start
            yield* Fiber.await(root)
            const children = yield* childrenOf(manager)
            const allocating = children.find((agent) => agent.description === "allocate please")
            const sibling = children.find((agent) => agent.description === "sibling work")
            assert.strictEqual(allocating?.status, "failed")
            assert.match(
              allocating?.reason ?? "",
              /out of memory \(its heap cap is 96 MB; exit (signal SIGABRT|code \d+)\)/
            )
            assert.strictEqual(sibling?.status, "completed")
            assert.strictEqual(sibling?.outcome?.summary, "sibling done")
            // The child that died keeps its transcript up to the call that killed it.
            const died = JSON.stringify(yield* Effect.orDie(manager.readTranscript(allocating!.transcript_handle, {})))
            assert.include(died, "allocate please")
            assert.include(died, "allocate")
            const parent = (yield* manager.list({ includeArchived: true })).find((agent) => agent.depth === 0)
            assert.strictEqual(parent?.status, "completed")
            // `fibril agents show` / `transcript` on the parent's store: the process child's
            // receipt (its tool call, the file it wrote) and its transcript, as a fiber child's.
            const lines: Array<string> = []
            const output = { line: (text: string) => Effect.sync(() => void lines.push(text)) }
            yield* Effect.orDie(AgentsCommand.show(`${cwd}/.fibril/state`, sibling!.agent_id, output))
            const shown = JSON.parse(lines.join("\n")) as {
              events: ReadonlyArray<{ type: string; tool?: string }>
              artifacts: ReadonlyArray<{ kind: string; ref: string }>
            }
            assert.deepInclude(shown.events.map((event) => [event.type, event.tool]), ["tool_call", "write_file"])
            assert.deepInclude(shown.artifacts.map((a) => [a.kind, a.ref]), ["file", "sibling.txt"])
            lines.length = 0
            yield* Effect.orDie(AgentsCommand.transcript(`${cwd}/.fibril/state`, sibling!.agent_id, output))
            const text = lines.join("\n")
            assert.include(text, "sibling work")
            assert.include(text, "write_file")
            assert.include(text, "sibling done")
          }).pipe(Effect.provide(NodeServices.layer)),
        { maxOldSpaceMb: 96, store: "file" }
      ),
    60_000
  )

  it.live("a child that blocks its event loop does not stall its sibling's progress events", () =>
    harness(
      parentScript([spawnCall("steady work", undefined), spawnCall("busy work", busyIsolation)]),
      ({ events, manager, start }) =>
        Effect.gen(function*() {
          const subscription = yield* events.subscribe
          yield* Fiber.await(yield* start)
          // Every event of the run, read once it has ended (a consumer fiber could still be behind).
          const seen = (yield* PubSub.takeAll(subscription)).map((event) => ({
            type: event.type,
            description: event.agent.description,
            at: event.at
          }))
          const children = yield* childrenOf(manager)
          assert.deepStrictEqual(children.map((agent) => agent.status), ["completed", "completed"])
          // An in-memory store keeps the process child's transcript too (agent_eval, handle_read).
          const busy = children.find((agent) => agent.description === "busy work")!
          const page = yield* Effect.orDie(manager.readTranscript(busy.transcript_handle, {}))
          assert.include(JSON.stringify(page), "busy done")
          const steady = seen.filter((event) => event.description === "steady work")
          const busyEnd = seen.findIndex((event) => event.description === "busy work" && event.type === "tool_result")
          const steadyEnd = seen.findIndex((event) => event.description === "steady work" && event.type === "completed")
          assert.isAbove(busyEnd, -1)
          // The sibling finished while the busy tool still held its own process's event loop...
          assert.isBelow(steadyEnd, busyEnd, JSON.stringify(seen))
          // ...and none of its events waited on it (a step takes 200 ms).
          const gaps = steady.slice(1).map((event, i) => event.at - steady[i]!.at)
          assert.isBelow(Math.max(...gaps), 1500, JSON.stringify(gaps))
        }),
      { parentTools: true }
    ), 60_000)

  it.live(
    "a process child's tokens count in its tree: the tree budget stops a later sibling, as for fiber children",
    () => {
      const task = (prompt: string): ScriptedModel.Turn => ({
        tool_calls: [{ name: "task", args: { prompt, description: prompt, isolation: "process" } }],
        usage: { input: 1, output: 1 }
      })
      return harness(
        {
          rules: [{ match: { depth: 0 }, turns: [task("spend please"), task("spend more"), { text: "parent done" }] }]
        },
        ({ manager, start }) =>
          Effect.gen(function*() {
            yield* Fiber.await(yield* start)
            const [first, second] = yield* childrenOf(manager)
            assert.deepStrictEqual([first?.status, first?.tokens], ["completed", {
              input: 400,
              output: 200,
              cached: 0
            }])
            // 700 - 600 (the first) - 4 (the parent's two steps) = 96 left: its first step (150) is over.
            assert.strictEqual(second?.status, "failed")
            assert.include(second?.reason ?? "", "tree_max_tokens")
            // A failed process child's record counts what it spent too.
            assert.deepStrictEqual(second?.tokens, { input: 100, output: 50, cached: 0 })
          }),
        { budgets: { treeMaxTokens: 700 } }
      )
    },
    60_000
  )

  it.live("a process child uses the workspace's MCP servers, started in its own process", () =>
    harness(
      parentScript([spawnCall("count please", "process")]),
      ({ cwd, manager, start }) =>
        Effect.gen(function*() {
          yield* Fiber.await(yield* start)
          const [child] = yield* childrenOf(manager)
          assert.strictEqual(child?.status, "completed", child?.reason)
          assert.strictEqual(child?.tool_calls, 1)
          // The server counted one call, made by a process other than this one.
          const calls = readFileSync(`${cwd}/count.txt`, "utf8").split("\n").filter((line) => line !== "")
          assert.strictEqual(calls.length, 1)
          assert.notStrictEqual(calls[0], String(process.pid))
        }),
      {
        config: (cwd) =>
          `[mcp_servers.counter]\ncommand = ${JSON.stringify(process.execPath)}\nargs = ${
            JSON.stringify([counterMcp, `${cwd}/count.txt`])
          }\n`
      }
    ), 60_000)

  it.live("cancel kills the child's process group (the child and what its tools started)", () =>
    harness(
      parentScript([spawnCall("pids please", "process")]),
      ({ manager, pidFile, start }) =>
        Effect.gen(function*() {
          const fs = yield* FileSystem.FileSystem
          const root = yield* start
          // The child wrote its pid and its grandchild's, then hangs on its next model call.
          assert.isTrue(yield* until(fs.exists(pidFile).pipe(Effect.orElseSucceed(() => false)), 600))
          const pids = JSON.parse(yield* Effect.orDie(fs.readFileString(pidFile))) as {
            readonly pid: number
            readonly grandchild: number
          }
          assert.isTrue(alive(pids.pid) && alive(pids.grandchild))
          const [child] = yield* childrenOf(manager)
          const cancelled = yield* Effect.orDie(manager.cancel(child!.agent_id, "test cancel"))
          yield* Fiber.await(root)
          assert.isTrue(yield* until(Effect.sync(() => !alive(pids.pid) && !alive(pids.grandchild)), 100))
          const [after] = yield* childrenOf(manager)
          assert.strictEqual(after?.status, "cancelled")
          assert.strictEqual(cancelled.agent_id, child!.agent_id)
          // Its process was killed (SIGKILL to the group) in its second model call: what it had
          // said and done until then is in the parent's store all the same.
          const page = JSON.stringify(yield* Effect.orDie(manager.readTranscript(after!.transcript_handle, {})))
          assert.include(page, "pids please")
          assert.include(page, "written")
        }).pipe(Effect.provide(NodeServices.layer))
    ), 60_000)
})
