/**
 * ChildHost — the program an `isolation: "process"` sub-agent runs in (core
 * ProcessIsolation.ts is the parent's side and the protocol).
 *
 * It reads its spawn request (one JSON line on stdin), builds the same engine as `fibril run`
 * (core `Fibril.layerWithModels` on the model the parent's command selected, the workspace's
 * settings, a memory store: the parent keeps the record), starts the request as the root of
 * its own tree, and writes every event of that tree and then its end as JSON lines on stdout.
 * Logs go to stderr, which the parent keeps the end of (an out-of-memory report is there).
 *
 * Arguments: `--model <id | scripted:file>`, `--base-url <url>`, and `--tools <module>`
 * (repeatable): a module whose `tools` export lists ToolDefinitions to register (an embedder's
 * own tools, which a child in another process cannot get otherwise).
 */
import * as NodeServices from "@effect/platform-node/NodeServices"
import * as AgentEvents from "@fibril/core/AgentEvents"
import * as Fibril from "@fibril/core/Fibril"
import * as FibrilConfig from "@fibril/core/FibrilConfig"
import * as McpServers from "@fibril/core/McpServers"
import * as Permission from "@fibril/core/Permission"
import * as ProcessIsolation from "@fibril/core/ProcessIsolation"
import * as Session from "@fibril/core/Session"
import * as SubAgentManager from "@fibril/core/SubAgentManager"
import * as SubAgentStore from "@fibril/core/SubAgentStore"
import * as ToolRegistry from "@fibril/core/ToolRegistry"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Option from "effect/Option"
import * as PubSub from "effect/PubSub"
import * as Schema from "effect/Schema"
import { once } from "node:events"
import * as os from "node:os"
import { createInterface } from "node:readline"
import { fileURLToPath, pathToFileURL } from "node:url"
import { parseArgs } from "node:util"
import * as ModelSelection from "./ModelSelection.ts"

/** This module's own file (its source in the repository, dist/ChildHost.js when built). */
export const modulePath = fileURLToPath(import.meta.url)

/**
 * The host a parent process hands its core (SubAgentManager `processIsolation.host`): this
 * program on this Node, with the model the parent's command selected.
 */
export const host = (
  model: string | undefined,
  baseUrl?: string | undefined,
  toolModules: ReadonlyArray<string> = []
) => ({
  command: process.execPath,
  // `--conditions` (the repository runs the packages from source) must reach the child too.
  args: [
    ...conditions(process.execArgv),
    modulePath,
    ...(model === undefined ? [] : ["--model", model]),
    ...(baseUrl === undefined ? [] : ["--base-url", baseUrl]),
    ...toolModules.flatMap((module) => ["--tools", module])
  ]
})

/** The `--conditions` of this Node's flags (`--conditions=x`, or `--conditions x` / `-C x`). */
const conditions = (argv: ReadonlyArray<string>): Array<string> =>
  argv.flatMap((arg, i) =>
    arg.startsWith("--conditions=")
      ? [arg]
      : (arg === "--conditions" || arg === "-C") && argv[i + 1] !== undefined
      ? [`--conditions=${argv[i + 1]}`]
      : []
  )

/** The model id a selection names, as `--model` takes it back. */
export const modelOf = (selection: ModelSelection.Selection): string =>
  selection.kind === "scripted" ? `scripted:${selection.file}` : selection.model

const write = (line: ProcessIsolation.Line) => process.stdout.write(`${JSON.stringify(line)}\n`)

/**
 * The child's store: a memory store whose transcripts are also sent to the parent as they grow
 * (each agent's by its handle), so that the parent keeps what a child said up to the moment its
 * process died, not only the transcript of a child that ended. It says it is durable, so that
 * the engine writes each message as it is added (the records stay in memory: the parent keeps
 * the child's record; the transcripts reach the parent's store).
 */
const streamedStore = Layer.effect(
  SubAgentStore.SubAgentStore,
  Effect.map(SubAgentStore.makeMemory(), (store): SubAgentStore.SubAgentStore["Service"] => {
    const send = (handle: string, messages: ReadonlyArray<unknown>) =>
      Effect.sync(() => write({ type: "transcript", handle, messages }))
    return {
      ...store,
      durable: true,
      appendTranscript: (handle, messages) =>
        Effect.andThen(store.appendTranscript(handle, messages), send(handle, messages)),
      queueTranscript: (handle, messages) =>
        Effect.andThen(store.queueTranscript(handle, messages), send(handle, messages))
    }
  })
)

const readStart = Effect.flatMap(
  Effect.promise(async () => {
    const lines = createInterface({ input: process.stdin })
    const [line] = (await once(lines, "line")) as [string]
    lines.close()
    return line
  }),
  Schema.decodeUnknownEffect(Schema.fromJsonString(ProcessIsolation.Start))
)

const isToolModule = (
  value: unknown
): value is { readonly tools: ReadonlyArray<ToolRegistry.ToolDefinition<any, never>> } =>
  typeof value === "object" && value !== null && "tools" in value && Array.isArray(value.tools)

const main = Effect.gen(function*() {
  const { values } = parseArgs({
    options: {
      model: { type: "string" },
      "base-url": { type: "string" },
      tools: { type: "string", multiple: true }
    }
  })
  const start = yield* readStart
  const resolved = yield* FibrilConfig.load({ cwd: start.cwd, home: os.homedir(), env: process.env })
  const settings = resolved.settings
  const selection = yield* ModelSelection.select({
    model: values.model,
    baseUrl: values["base-url"],
    env: process.env,
    settings,
    cwd: start.cwd
  })
  // The workspace's MCP servers, as its parent's process has them (started on first use here:
  // the child's rules, its parent's ceiling, say which it may use).
  const mcpServers = yield* McpServers.forProcess({ cwd: start.cwd, home: os.homedir(), env: process.env })
  const context = yield* Layer.build(
    Fibril.layerWithModels({
      cwd: start.cwd,
      mcpServers,
      layers: { store: streamedStore },
      session: { ...Session.optionsFrom(settings), maxDepth: start.maxDepth },
      subagents: SubAgentManager.optionsFrom(settings),
      tools: settings.tools,
      deny: settings.permissions.deny,
      ask: settings.permissions.ask,
      sandbox: settings.sandbox
    }).pipe(Layer.provideMerge(ModelSelection.layer(selection)))
  )
  const registry = Context.get(context, ToolRegistry.ToolRegistry)
  for (const module of values.tools ?? []) {
    const loaded: unknown = yield* Effect.promise(() => import(pathToFileURL(module).href))
    if (isToolModule(loaded)) { for (const tool of loaded.tools) yield* registry.register(tool) }
  }
  const events = Context.get(context, AgentEvents.AgentEvents)
  const subscription = yield* events.subscribe
  const forward = yield* Effect.forkChild(
    Effect.forever(Effect.map(PubSub.take(subscription), (event) => write({ type: "event", event })))
  )
  const roots = Context.get(context, SubAgentManager.Embedded)
  const { agent, fiber } = yield* roots.startRoot({
    prompt: start.prompt,
    role: start.role,
    model: start.model,
    description: start.description,
    allowedTools: start.allowedTools,
    outputSchema: start.outputSchema
  }, {
    ceiling: start.rules === undefined ? undefined : Permission.ceilingFromJson(start.rules),
    budgets: start.budgets
  })
  const exit = yield* Fiber.await(fiber)
  yield* Fiber.interrupt(forward)
  for (const event of yield* PubSub.takeAll(subscription)) write({ type: "event", event })
  const session = Context.get(context, Session.Session)
  const info = yield* session.info(agent.agent_id)
  const recorded = yield* Effect.option(
    Context.get(context, SubAgentManager.SubAgentManager).result(agent.agent_id, { block: false })
  )
  const counts: ProcessIsolation.RunCounts = {
    model: info.model,
    steps: info.steps,
    toolCalls: info.toolCalls,
    lastTool: info.lastTool,
    treeUsage: info.treeUsage,
    usageSteps: info.usageSteps,
    // Checked here, where the conversation is: the parent's record takes them as they are.
    claims: Option.getOrUndefined(recorded)?.outcome?.claims
  }
  if (Exit.isSuccess(exit)) {
    const { output, text } = exit.value
    write(output === undefined ? { type: "end", text, counts } : { type: "end", text, output, counts })
  } else write({ type: "error", reason: Session.describeFailure(exit.cause), counts })
}).pipe(
  Effect.scoped,
  Effect.catchCause((cause) => Effect.sync(() => write({ type: "error", reason: Session.describeFailure(cause) }))),
  Effect.provide(NodeServices.layer),
  Effect.provide(Logger.layer([Logger.consolePretty()])),
  Effect.provideService(Logger.LogToStderr, true)
)

if (import.meta.main) {
  await Effect.runPromise(main)
  // The end is written: nothing more to do (a tool's leftover timer must not keep the child).
  process.stdout.write("", () => process.exit(0))
}
