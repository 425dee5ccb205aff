// The two engines of the sub-agent contract behind one small interface, for the contract suite
// (SubAgentContract.test.ts): a root agent runs a script whose model issues the sub-agent tool
// calls, and the engine hands back what the ROOT model read for each of its tool calls, in
// order, and the records of the tree.
//
// - embedded: core `Fibril.layer` over the ScriptedModel; the root is started with
//   `SubAgentManager.startRoot` (as `fibril run` does) and time is the TestClock, moved a tenth
//   of a second at a time while the root runs (the suite's embedded tests are `it.effect`).
// - cluster: the cluster on TestRunner (support.ts `setup`: `AgentWorkflow.memoryRunner`, the
//   in-memory store); the root is started with `ClusterClient` and time is real (the runner
//   polls every 200 ms, so these tests are `it.live`).
//
// Only what legitimately differs between two engines is normalised here: the JSON a model reads
// (a key whose value is undefined is not in it), ids and the status names of the records.
import { NodeServices } from "@effect/platform-node"
import { AgentDefinitions, Fibril, Roles, Session, SubAgentManager, SubAgentStore, ToolRegistry } from "@fibril/core"
import { ScriptedModel } from "@fibril/testkit"
import { Context, Effect, Exit, Fiber, FileSystem, Layer, Schema } from "effect"
import { Prompt } from "effect/ai"
import { TestClock } from "effect/testing"
import { dirname, join } from "node:path"
import { inject } from "vitest"
import * as ClusterClient from "../src/ClusterClient.ts"
import { get, setup } from "./support.ts"

/** The settings a test may change; each engine maps them to its own options. */
export interface Settings {
  readonly maxConcurrent?: number
  readonly admission?: "reject" | "queue"
  readonly maxDepth?: number
  readonly childMaxSteps?: number
  readonly childMaxTokens?: number
  /** Seconds without progress before a sub-agent is cancelled (0: no heartbeat). */
  readonly heartbeatSecs?: number
  /** `[permissions] ask`: tool names and postures whose calls wait for a person. */
  readonly ask?: ReadonlyArray<string>
  /** `[roles.<role>] mcp_servers`: the MCP servers of a role's agents. */
  readonly roleMcpServers?: Readonly<Record<string, ReadonlyArray<string>>>
  /** Agent definitions of the workspace: file name (`careful.md`) -> its text, Fibril's format. */
  readonly agentFiles?: Readonly<Record<string, string>>
}

/** A tool result as the model reads it (JSON: keys whose value is undefined are absent). */
export interface ToolResult {
  readonly name: string
  readonly isFailure: boolean
  readonly result: unknown
}

/** One agent of the tree, as the engine's records hold it. */
export interface Agent {
  readonly agentId: string
  readonly parentId: string | undefined
  readonly depth: number
  readonly status: string
  readonly reason: string | undefined
  /** Input plus output tokens of this agent alone. */
  readonly tokens: number
}

export interface Outcome {
  /** The root's final answer, or undefined when the root did not complete. */
  readonly text: string | undefined
  /** What the root's model read back for each of its tool calls, in order. */
  readonly toolResults: ReadonlyArray<ToolResult>
  /** Every agent of the tree, the root included. */
  readonly agents: ReadonlyArray<Agent>
  /** Each agent's transcript as its engine keeps it, by agent id. */
  readonly transcripts: Readonly<Record<string, ReadonlyArray<Prompt.Message>>>
}

export interface Engine {
  readonly name: "embedded" | "cluster" | "process"
  /** Does it run on real time (`it.live`) or on the TestClock (`it.effect`)? */
  readonly live: boolean
  /** The cases (by title) it runs, when not all apply to it (see `processIsolation`). */
  readonly runs?: (title: string) => boolean
  /** Runs a root agent with `prompt` over `script`; `tools` are registered first. */
  readonly run: (
    script: ScriptedModel.ScriptInput,
    options?: {
      readonly settings?: Settings
      readonly tools?: ReadonlyArray<ToolRegistry.ToolDefinition<any, never>>
      readonly prompt?: string
    }
  ) => Effect.Effect<Outcome>
}

const asJson = (value: unknown): unknown => value === undefined ? undefined : JSON.parse(JSON.stringify(value))

/** The tool results of a transcript, in order, as JSON. */
/** Messages as a store keeps them (the `effect/ai` prompt message's encoding). */
const decodeMessages = Schema.decodeUnknownEffect(Schema.Array(Prompt.Message))

export const toolResultsOf = (messages: ReadonlyArray<Prompt.Message>): ReadonlyArray<ToolResult> =>
  messages.flatMap((message) =>
    message.role === "tool"
      ? message.content.flatMap((part) =>
        part.type === "tool-result" ? [{ name: part.name, isFailure: part.isFailure, result: asJson(part.result) }] : []
      )
      : []
  )

/**
 * What an engine that runs its root in this process reports once the root has ended: the
 * records of the manager in `context` and its agents' transcripts — this process's sessions',
 * or (`stored`: a process-isolated child's session lives in its own process) those its store
 * keeps, for the agents it keeps one of.
 */
const outcomeOf = (
  context: Context.Context<SubAgentManager.SubAgentManager | Session.Session | SubAgentStore.SubAgentStore>,
  rootId: string,
  exit: Exit.Exit<{ readonly text: string }, unknown>,
  stored = false
) =>
  Effect.gen(function*() {
    const session = Context.get(context, Session.Session)
    const store = Context.get(context, SubAgentStore.SubAgentStore)
    const agents = yield* Context.get(context, SubAgentManager.SubAgentManager).list({ includeArchived: true })
    const transcriptOf = (agent: SubAgentManager.AgentView) =>
      Effect.gen(function*() {
        const kept = stored && agent.transcript_handle !== undefined
          ? yield* Effect.flatMap(store.readTranscript(agent.transcript_handle), decodeMessages)
          : []
        return kept.length > 0 ? kept : yield* Effect.orElseSucceed(session.transcript(agent.agent_id), () => [])
      })
    const transcripts = Object.fromEntries(
      yield* Effect.forEach(agents, (agent) =>
        Effect.map(transcriptOf(agent), (messages) => [agent.agent_id, messages] as const))
    )
    return {
      transcripts,
      text: Exit.isSuccess(exit) ? exit.value.text : undefined,
      toolResults: toolResultsOf(yield* session.transcript(rootId)),
      agents: agents.map((agent) => ({
        agentId: agent.agent_id,
        parentId: agent.parent_id,
        depth: agent.depth,
        status: agent.status,
        reason: agent.reason,
        tokens: agent.tokens.input + agent.tokens.output
      }))
    }
  })

/** The settings as the embedded engine's options (the process engine's parent is one too). */
const embeddedOptions = (cwd: string, settings: Settings) => ({
  cwd,
  ...(settings.ask === undefined ? {} : { ask: settings.ask }),
  session: {
    maxDepth: settings.maxDepth ?? 1,
    ...(settings.childMaxSteps === undefined ? {} : { childMaxSteps: settings.childMaxSteps })
  },
  subagents: {
    ...(settings.maxConcurrent === undefined ? {} : { maxConcurrent: settings.maxConcurrent }),
    ...(settings.admission === undefined ? {} : { admission: settings.admission }),
    ...(settings.heartbeatSecs === undefined ? {} : { heartbeatTimeoutSecs: settings.heartbeatSecs }),
    ...(settings.roleMcpServers === undefined ? {} : { roleMcpServers: settings.roleMcpServers }),
    budgets: settings.childMaxTokens === undefined ? {} : { maxTokens: settings.childMaxTokens }
  }
})

export const embedded: Engine = {
  name: "embedded",
  live: false,
  run: (script, options = {}) =>
    Effect.gen(function*() {
      const settings = options.settings ?? {}
      const fs = yield* FileSystem.FileSystem
      const cwd = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      // Where the runtime loads them from, as a person keeps them.
      for (const [file, text] of Object.entries(settings.agentFiles ?? {})) {
        yield* fs.makeDirectory(`${cwd}/.fibril/agents`, { recursive: true })
        yield* fs.writeFileString(`${cwd}/.fibril/agents/${file}`, text)
      }
      const context = yield* Layer.build(
        Fibril.layer(embeddedOptions(cwd, settings)).pipe(Layer.provide(ScriptedModel.layer(script)))
      )
      const registry = Context.get(context, ToolRegistry.ToolRegistry)
      for (const tool of options.tools ?? []) yield* registry.register(tool)
      const roots = Context.get(context, SubAgentManager.Embedded)
      const { agent: root, fiber } = yield* roots.startRoot({ prompt: options.prompt ?? "go" })
      // Virtual time moves the timers (budgets, the heartbeat); real I/O (the file tools, a
      // shell) needs real time, so each turn also lets the event loop run, bounded so that a
      // hang fails. A tenth of a second a turn: a tool call in flight is not progress to the
      // heartbeat (300 s by default), so at a second a turn a loaded machine's slow shell or
      // disk could read as a stall (a CI run saw children end without their answer).
      for (let i = 0; i < 6000 && fiber.pollUnsafe() === undefined; i++) {
        yield* TestClock.adjust("100 millis")
        yield* Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, 2)))
      }
      return yield* outcomeOf(context, root.agent_id, yield* Fiber.await(fiber))
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer), Effect.orDie)
}

export const cluster: Engine = {
  name: "cluster",
  live: true,
  run: (script, options = {}) =>
    Effect.gen(function*() {
      const settings = options.settings ?? {}
      const heartbeat = settings.heartbeatSecs ?? 0
      const built = yield* setup(script, {
        maxDepth: settings.maxDepth ?? 1,
        ...(settings.maxConcurrent === undefined ? {} : { maxConcurrent: settings.maxConcurrent }),
        ...(settings.admission === undefined ? {} : { admission: settings.admission }),
        ...(settings.childMaxSteps === undefined ? {} : { childMaxSteps: settings.childMaxSteps }),
        ...(settings.childMaxTokens === undefined ? {} : { childMaxTokens: settings.childMaxTokens }),
        ...(settings.ask === undefined ? {} : { ask: settings.ask }),
        ...(settings.roleMcpServers === undefined ? {} : { roleMcpServers: settings.roleMcpServers }),
        // A worker's definitions, as `fibril worker` loads them (Fibril.loadAgents) and parses each.
        agents: yield* Effect.forEach(
          Object.entries(settings.agentFiles ?? {}),
          ([file, text]) =>
            Effect.map(
              Effect.fromResult(AgentDefinitions.parse(`.fibril/agents/${file}`, text, "fibril")),
              (parsed) => parsed.definition
            )
        ),
        // A short look interval: the suite is real time here.
        ...(heartbeat === 0 ? {} : { heartbeatSecs: heartbeat, heartbeatCheckMs: 100 }),
        waitFallbackMs: 1000
      })
      const registry = get(built, ToolRegistry.ToolRegistry)
      for (const tool of options.tools ?? []) yield* registry.register(tool)
      const rootId = yield* built.provide(
        ClusterClient.start({ prompt: options.prompt ?? "go", workspace: built.root })
      )
      const exit = yield* Effect.exit(built.provide(ClusterClient.await_(rootId)))
      const rows = yield* built.store.list
      const transcripts = Object.fromEntries(
        yield* Effect.forEach(rows, (row) =>
          Effect.map(built.store.transcript(row.agentId), (messages) => [row.agentId, messages] as const))
      )
      return {
        transcripts,
        text: Exit.isSuccess(exit) ? exit.value.text : undefined,
        toolResults: toolResultsOf(yield* built.store.transcript(rootId)),
        agents: rows.map((row) => ({
          agentId: row.agentId,
          parentId: row.parentId ?? undefined,
          depth: row.depth,
          status: row.status,
          reason: row.reason ?? undefined,
          tokens: row.tokens
        }))
      }
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer), Effect.orDie)
}

// --- The third way of running a child: `isolation: "process"` ---

/**
 * ChildHost, the program a process child runs in (a path, not an import: cli depends on
 * cluster), from the test run's bundle of the sources (scripts/test-bundle.ts): it starts in a
 * third of the time the TypeScript sources take.
 */
const childHost = join(dirname(inject("fibrilBin")), "ChildHost.js")

/**
 * The children's part of a script, as the file a child process plays: inside its process a
 * child is the root of its own tree (depth 0), so a rule for depth d >= 1 is for depth d - 1
 * there, and the root's rules (depth 0) are not its. A rule that is a function (`respond`)
 * cannot cross into another process: the cases that need one are not run on this engine.
 */
const childScript = (script: ScriptedModel.ScriptInput): ScriptedModel.ScriptInput => ({
  rules: script.rules.flatMap((rule) => {
    const depth = rule.match?.depth
    if (depth === 0) return []
    return depth === undefined ? [rule] : [{ ...rule, match: { ...rule.match, depth: depth - 1 } }]
  })
})

/**
 * The cases the process engine runs. The rest, and why they do not apply:
 * - they hold a child in the `hold` tool behind an in-memory gate the test opens (agent_open and
 *   close, send_input, resume, assign, the queue cap, the heartbeat) or script a child with a
 *   function: neither crosses into another process (a child gets tools only from a module, and
 *   its script from a file);
 * - no child runs at all (max_depth, an unknown role, bad arguments, unknown ids) or it is the
 *   refusal of isolation where it is not available: nothing of a process child to see.
 */
export const processCases = [
  "task: a completed child's result",
  "task: a child whose model fails",
  "agent_spawn, agent_wait, agent_result",
  "allowed_tools: a child may call the tools it was given",
  "agent_list: the children of the run",
  "handle_read: a child's transcript",
  "a provider that reports no usage",
  "budgets: a child over its step budget or its token budget",
  "output_schema: a repaired answer is the output"
]

/**
 * Every child in its own OS process: the embedded engine with `isolation: "process"` for every
 * role (`roleIsolation`: the scripts' spawns unchanged), children on ChildHost over their part of
 * the script. Real processes: real time (`it.live`).
 */
export const processIsolation: Engine = {
  name: "process",
  live: true,
  runs: (title) => processCases.some((prefix) => title.startsWith(prefix)),
  run: (script, options = {}) =>
    Effect.gen(function*() {
      if ((options.tools ?? []).length > 0) return yield* Effect.die("the process engine takes no in-memory tools")
      if (script.rules.some((rule) => rule.match?.depth !== 0 && "respond" in rule)) {
        return yield* Effect.die("a child's rule with `respond` (a function) cannot run in a child process")
      }
      const settings = options.settings ?? {}
      const fs = yield* FileSystem.FileSystem
      const cwd = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      const scriptFile = `${cwd}/.children.json`
      yield* fs.writeFileString(scriptFile, JSON.stringify(childScript(script)))
      const base = embeddedOptions(cwd, settings)
      const context = yield* Layer.build(
        Fibril.layer({
          ...base,
          subagents: {
            ...base.subagents,
            roleIsolation: Object.fromEntries(Roles.roleNames.map((role) => [role, "process"])),
            processIsolation: {
              host: { command: process.execPath, args: [childHost, "--model", `scripted:${scriptFile}`] },
              maxOldSpaceMb: 256,
              roleMaxOldSpaceMb: {},
              nestedDepth: 0
            }
          }
        }).pipe(Layer.provide(ScriptedModel.layer(script)))
      )
      const { agent: root, fiber } = yield* Context.get(context, SubAgentManager.Embedded).startRoot({
        prompt: options.prompt ?? "go"
      })
      return yield* outcomeOf(context, root.agent_id, yield* Fiber.await(fiber), true)
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer), Effect.orDie)
}

export const engines: ReadonlyArray<Engine> = [embedded, cluster, processIsolation]
