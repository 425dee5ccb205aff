/**
 * The `fibril` command (effect/cli): the root command and its tree, `help`, and `main`, which
 * runs it with the Node platform services, the process environment (CliEnvironment.ts) and the
 * exit code. `run`, `demo` (RunCommand.ts), `agents` (AgentsCommand.ts), `mcp` (McpCommand.ts)
 * and `lab` (LabCommand.ts) are whole in their modules; the commands declared here (`config`,
 * `trust`, `doctor`, `worker`, `cluster`) do their work in ConfigCommand.ts, TrustCommand.ts,
 * Doctor.ts and ClusterCommand.ts.
 *
 * Exit codes: 0 success; 1 the root agent failed (or `doctor` found a problem); 2 a usage or
 * configuration error (the message says what to change); 3 a record could not be saved (a
 * full disk), 4 an agent's record was taken over while this process ran it (RunRecords.ts);
 * 130 cancelled by Ctrl-C (143 SIGTERM, 129 SIGHUP; bin.ts).
 */
import * as NodeServices from "@effect/platform-node/NodeServices"
import { redactText } from "@fibril/core/Secrets"
import { Argument, CliError, CliOutput, Command, Flag } from "effect/cli"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import { readFileSync } from "node:fs"
import * as AgentsCli from "./AgentsCli.ts"
import {
  configuredCluster,
  type Environment,
  ExitCode,
  loadConfig,
  ProcessEnvironment,
  resolveCwd,
  setExit
} from "./CliEnvironment.ts"
import * as CliFlags from "./CliFlags.ts"
import * as ClusterCommand from "./ClusterCommand.ts"
import * as ConfigFlags from "./ConfigFlags.ts"
import * as Help from "./Help.ts"
import * as LabCommand from "./LabCommand.ts"
import * as Log from "./Log.ts"
import * as McpCommand from "./McpCommand.ts"
import * as Output from "./Output.ts"
import * as RunCommand from "./RunCommand.ts"
import * as TracingFlag from "./TracingFlag.ts"
import * as UiCommand from "./UiCommand.ts"
import { UsageError } from "./UsageError.ts"

/** This package's version (package.json sits one level above both src/ and dist/). */
export const version: string = (JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as {
  readonly version: string
}).version

// What the process was started with, and the commands defined in their own modules.
export { command as agents } from "./AgentsCli.ts"
export { type Environment, ExitCode, ProcessEnvironment, processEnvironment } from "./CliEnvironment.ts"
export { demo, run } from "./RunCommand.ts"

const out = Output.console(false)

export const config = Command.make(
  "config",
  {
    json: CliFlags.jsonDocument,
    cwd: CliFlags.cwd,
    model: Flag.String("model").pipe(Flag.withDescription("Show the model selection for this model id"), Flag.optional)
  },
  Effect.fn("fibril.config.command")(function*(flags) {
    // Each handler imports what it runs when its command starts: parsing and help load the
    // definitions only (docs/performance.md, start-up).
    const [Runtime, ModelSelection, Sandbox, McpServers, ConfigCommand] = yield* Effect.promise(() =>
      Promise.all([
        import("./Runtime.ts"),
        import("./ModelSelection.ts"),
        import("@fibril/core/Sandbox"),
        import("@fibril/core/McpServers"),
        import("./ConfigCommand.ts")
      ])
    )
    const environment = yield* ProcessEnvironment
    const cwd = yield* resolveCwd(flags.cwd)
    const resolved = yield* loadConfig(cwd)
    const selection = yield* Effect.result(
      Runtime.select(environment, cwd, resolved.settings, { model: flags.model, baseUrl: Option.none() })
    )
    const model = selection._tag === "Success"
      ? ModelSelection.describe(selection.success)
      : "none (set OPENAI_API_KEY, or --model scripted:<file>)"
    const sandbox = yield* Effect.flatMap(Sandbox.currentHost, (host) => Sandbox.probe(resolved.settings.sandbox, host))
    const mcpServers = yield* McpServers.load({ cwd, home: environment.home })
    yield* ConfigCommand.show(resolved, model, flags.json, out, sandbox, mcpServers)
  })
).pipe(
  Command.withDescription("The effective configuration (files, environment, defaults), with clamped values marked"),
  Command.withExamples([
    { command: "fibril config", description: "As TOML, with the sources and the shell sandbox of each role" },
    { command: "fibril config --json", description: "As JSON (snake_case keys, like the TOML)" }
  ])
)

export const trust = Command.make(
  "trust",
  {
    path: Argument.String("path").pipe(
      Argument.withDescription("The workspace (default: the project around the current directory)"),
      Argument.optional
    ),
    revoke: Flag.Boolean("revoke").pipe(Flag.withDescription("Stop trusting it"), Flag.withDefault(false)),
    list: Flag.Boolean("list").pipe(Flag.withDescription("List the trusted workspaces"), Flag.withDefault(false))
  },
  Effect.fn("fibril.trust.command")(function*(flags) {
    const TrustCommand = yield* Effect.promise(() => import("./TrustCommand.ts"))
    const environment = yield* ProcessEnvironment
    if (flags.list) return yield* TrustCommand.list(environment, out)
    if (flags.revoke) return yield* TrustCommand.revoke(flags.path, environment, out)
    yield* TrustCommand.trust(flags.path, environment, out)
  })
).pipe(
  Command.withDescription(
    "Let a workspace's own .fibril/config.toml widen the sandbox (mode off, network, writable paths, bwrap_path); " +
      "untrusted, those settings are ignored"
  ),
  Command.withExamples([
    {
      command: "fibril trust",
      description: "Trust the project around the current directory, with its config as it is"
    },
    { command: "fibril trust --list", description: "The trusted workspaces, and whether their config changed since" },
    { command: "fibril trust --revoke ~/src/app" }
  ])
)

export const doctor = Command.make(
  "doctor",
  { model: CliFlags.model, baseUrl: CliFlags.baseUrl, cwd: CliFlags.cwd, json: CliFlags.jsonDocument },
  Effect.fn("fibril.doctor.command")(function*(flags) {
    const Doctor = yield* Effect.promise(() => import("./Doctor.ts"))
    const environment = yield* ProcessEnvironment
    const checks = yield* Doctor.run({
      environment,
      cwdFlag: flags.cwd,
      model: Option.getOrUndefined(flags.model),
      baseUrl: Option.getOrUndefined(flags.baseUrl),
      strict: yield* ConfigFlags.Strict,
      nodeVersion: process.version
    })
    yield* setExit(yield* Doctor.report(checks, flags.json, out))
  })
).pipe(
  Command.withDescription(
    "Check what fibril needs here: Node, config files, the model (key present, endpoint reachable), the shell sandbox, the store"
  ),
  Command.withExamples([
    { command: "fibril doctor", description: "Every check, with what to do about a failure" },
    {
      command: "fibril doctor --model deepseek-chat --base-url https://api.deepseek.com/v1",
      description: "For another model"
    },
    { command: "fibril doctor --json" }
  ])
)

export const lab = LabCommand.make<ProcessEnvironment | ExitCode>({
  cwd: ProcessEnvironment.use((e) => Effect.succeed(e.cwd)),
  tty: ProcessEnvironment.use((e) => Effect.succeed(e.tty)),
  setExit: (code) => setExit(code)
})

// ---------------------------------------------------------------------------
// Cluster mode (the work is in ClusterCommand.ts)
// ---------------------------------------------------------------------------

const clusterCommands = ClusterCommand.commands(
  ProcessEnvironment.use((e) => Effect.succeed(e)),
  Effect.flatMap(
    Effect.option(resolveCwd(Option.none())),
    (cwd) => Option.isNone(cwd) ? Effect.succeed(undefined) : configuredCluster(cwd.value)
  )
)

export const worker = Command.make(
  "worker",
  {
    cluster: ClusterCommand.clusterFlag,
    cwd: CliFlags.cwd,
    model: CliFlags.model,
    baseUrl: CliFlags.baseUrl,
    maxConcurrent: Flag.Int("max-concurrent").pipe(
      Flag.withSchema(Schema.Int.pipe(Schema.check(Schema.isBetween({ minimum: 0, maximum: 10_000 })))),
      Flag.withDescription(
        "Running sub-agents across the whole cluster (default [subagents] max_concurrent); 0: no cap. Give every worker the same value"
      ),
      Flag.optional
    ),
    shutdownTimeout: Flag.Int("shutdown-timeout").pipe(
      Flag.withSchema(Schema.Int.pipe(Schema.check(Schema.isBetween({ minimum: 0, maximum: 3600 })))),
      Flag.withDescription("Seconds a stop waits for steps in flight before it exits anyway (default 30)"),
      Flag.withDefault(30)
    ),
    host: Flag.String("host").pipe(
      Flag.withDescription("The address other workers and clients reach this worker at (default 127.0.0.1)"),
      Flag.withDefault("127.0.0.1")
    ),
    port: Flag.Int("port").pipe(Flag.withDescription("Its port (default: a free one)"), Flag.optional),
    lockExpiration: Flag.Int("lock-expiration").pipe(
      Flag.withDescription(
        "Seconds before a dead worker's agents move to the others (default 35; lower is faster failover, more database traffic)"
      ),
      Flag.optional
    ),
    dbConnections: Flag.Int("db-connections").pipe(
      Flag.withSchema(Schema.Int.pipe(Schema.check(Schema.isBetween({ minimum: 1, maximum: 10_000 })))),
      Flag.withDescription(
        "Database connections this worker opens at most (default 20; one is held for its shard locks). A step holds one only for its reads and its commit, not during its model or tool call; the server's max_connections must cover every worker's (plus 2 each) and the clients'"
      ),
      Flag.withDefault(20)
    ),
    otlp: TracingFlag.otlp
  },
  Effect.fn("fibril.worker.command")(function*(flags) {
    const [Runtime, ClusterWorker, McpServers] = yield* Effect.promise(() =>
      Promise.all([import("./Runtime.ts"), import("./ClusterWorker.ts"), import("@fibril/core/McpServers")])
    )
    const environment = yield* ProcessEnvironment
    const cwd = yield* resolveCwd(flags.cwd)
    const loaded = yield* loadConfig(cwd)
    const url = ClusterCommand.clusterUrl(flags.cluster, environment.env, loaded.settings.cluster.url)
    if (url === undefined) {
      return yield* new UsageError({
        problem:
          "fibril worker needs the cluster database: --cluster postgres://user@host:5432/db (or sqlite:<file> on one machine), FIBRIL_CLUSTER_URL, or url in [cluster] of .fibril/config.toml"
      })
    }
    const selection = yield* Runtime.select(environment, cwd, loaded.settings, flags)
    yield* ClusterWorker.worker({
      url,
      cwd,
      settings: loaded.settings,
      selection,
      // Each worker starts its own servers, from its own workspace's configuration.
      mcpServers: yield* McpServers.forProcess({ cwd, home: environment.home, env: environment.env }),
      maxConcurrent: Option.getOrUndefined(flags.maxConcurrent),
      shutdownTimeoutSecs: flags.shutdownTimeout,
      host: flags.host,
      port: Option.getOrUndefined(flags.port),
      lockExpirationSecs: Option.getOrUndefined(flags.lockExpiration),
      dbConnections: flags.dbConnections,
      stepLog: environment.env["FIBRIL_CLUSTER_STEP_LOG"]
    }).pipe(
      // Its agents' spans to `--otlp` (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT): each run under its starter's (GenAiTrace).
      Effect.provide(TracingFlag.layer(flags.otlp, environment.env, loaded.settings))
    )
  })
).pipe(
  Command.withDescription(
    "Run the cluster's agents for this workspace (durable: a step journaled before a crash never runs again)"
  ),
  Command.withExamples([
    {
      command: "fibril worker --cluster postgres://fibril@db:5432/fibril --max-concurrent 10",
      description: "One of several workers sharing the cluster (see docs/cluster.md)"
    }
  ])
)

export const cluster = Command.make("cluster").pipe(
  Command.withDescription("Cluster mode's database and agents (docs/cluster.md)"),
  Command.withSubcommands([
    Command.make(
      "migrate",
      { cluster: ClusterCommand.clusterFlag },
      (flags) => Effect.flatMap(clusterCommands.migrate.run(flags), setExit)
    ).pipe(Command.withDescription(clusterCommands.migrate.description)),
    Command.make(
      "prune",
      {
        cluster: ClusterCommand.clusterFlag,
        olderThan: Flag.String("older-than").pipe(Flag.withDescription("e.g. \"7 days\", \"12 hours\""))
      },
      (flags) => Effect.flatMap(clusterCommands.prune.run(flags), setExit)
    ).pipe(
      Command.withDescription(
        "Delete finished agents older than a duration, their transcripts and their workflow journal"
      )
    ),
    Command.make(
      "status",
      { cluster: ClusterCommand.clusterFlag, agentId: clusterCommands.agentIdArgument },
      (flags) => Effect.flatMap(clusterCommands.status(flags), setExit)
    ).pipe(Command.withDescription("An agent and its descendants, one JSON line each")),
    Command.make(
      "cancel",
      { cluster: ClusterCommand.clusterFlag, agentId: clusterCommands.agentIdArgument },
      (flags) => Effect.flatMap(clusterCommands.cancel(flags), setExit)
    ).pipe(Command.withDescription("Cancel an agent and its non-detached descendants, on whichever workers run them")),
    Command.make(
      "input",
      {
        cluster: ClusterCommand.clusterFlag,
        agentId: clusterCommands.agentIdArgument,
        message: Argument.String("message")
      },
      (flags) => Effect.flatMap(clusterCommands.input(flags), setExit)
    ).pipe(Command.withDescription("Queue a message for a running agent's next model step (agent_send_input)")),
    Command.make(
      "resume",
      {
        cluster: ClusterCommand.clusterFlag,
        agentId: clusterCommands.agentIdArgument,
        message: Argument.String("message")
      },
      (flags) => Effect.flatMap(clusterCommands.resume(flags), setExit)
    ).pipe(Command.withDescription("A new run of a finished agent from its transcript; waits and prints its answer"))
  ])
)

// ---------------------------------------------------------------------------
// The root command, help and main
// ---------------------------------------------------------------------------

/**
 * `fibril help [command…]` is `fibril [command…] --help`: `main` rewrites it before parsing
 * (`rewriteHelp`). The command exists so that help lists it and accepts its arguments.
 */
export const help = Command.make(
  "help",
  {
    command: Argument.String("command").pipe(
      Argument.withDescription("The command to explain, e.g. run or agents resume"),
      Argument.variadic()
    )
  },
  () => Effect.void
).pipe(
  Command.withDescription("Help on fibril or on one command (the same as --help)"),
  Command.withExamples([{ command: "fibril help run" }, { command: "fibril help agents resume" }])
)

export const fibril = Command.make("fibril").pipe(
  Command.withDescription(
    "Fibril: an Effect-native sub-agent runtime. A root agent hands focused tasks to sub-agents that work in " +
      "clean contexts and return structured results; fibril runs them on this project's files."
  ),
  Command.withSubcommands([
    RunCommand.run,
    RunCommand.demo,
    AgentsCli.command,
    UiCommand.command,
    config,
    trust,
    McpCommand.make(version),
    doctor,
    worker,
    cluster,
    lab,
    help
  ]),
  Command.withGlobalFlags([ConfigFlags.Strict]),
  Command.withExamples([
    { command: "fibril demo", description: "A scripted scenario: no key, no network, real tools on this project" },
    {
      command: "fibril run \"Find the HTTP routes and summarise them\" --model gpt-4.1-mini",
      description: "With OPENAI_API_KEY set"
    },
    { command: "fibril agents list --all", description: "What ran here" },
    { command: "fibril mcp", description: "Sub-agents for Claude Code, opencode, Cursor (see docs/mcp.md)" },
    { command: "fibril help run" }
  ])
)

/** The commands `fibril help` explains, by parent. */
const commandNames: Record<string, ReadonlyArray<string>> = {
  "": ["run", "demo", "agents", "config", "trust", "mcp", "doctor", "worker", "cluster", "lab", "help"],
  agents: ["list", "show", "transcript", "cancel", "questions", "answer", "resume"],
  cluster: ["migrate", "prune", "status", "cancel", "input", "resume"],
  lab: ["run", "replay", "report"]
}

/**
 * `help [command…]` (after any leading flags) becomes `[command…] --help`; a command that
 * does not exist is a usage error naming the ones that do.
 */
export const rewriteHelp = (
  argv: ReadonlyArray<string>
): Effect.Effect<ReadonlyArray<string>, UsageError> => {
  const at = argv.findIndex((arg) => !arg.startsWith("-"))
  if (at === -1 || argv[at] !== "help") return Effect.succeed(argv)
  const path = argv.slice(at + 1).filter((arg) => !arg.startsWith("-"))
  for (let i = 0; i < path.length; i++) {
    const known = commandNames[path.slice(0, i).join(" ")]
    if (known === undefined) break
    if (!known.includes(path[i]!)) {
      return Effect.fail(
        new UsageError({
          problem: `unknown command "${[...path.slice(0, i), path[i]].join(" ")}"; the commands are: ${
            known.map((name) => [...path.slice(0, i), name].join(" ")).join(", ")
          }`
        })
      )
    }
  }
  return Effect.succeed([...argv.slice(0, at), ...argv.slice(at + 1), "--help"])
}

const usageErrors = new Set([
  "UsageError",
  "ConfigInvalid",
  "ConfigFileError",
  "ConfigUnknownKeys",
  "ConfigUnknownTool",
  "UnknownRole",
  "InvalidRoleRequest",
  "UnknownModel",
  "ScriptFileError",
  "AgentNotRecorded",
  "StateNotDirectory",
  "AgentNotFound",
  "NotResumable",
  "NothingToTrust",
  "TrustFileError",
  ...ClusterCommand.usageErrors
])

/** Runs the CLI on `argv` (without the node and script paths); resolves to the exit code. */
export const main = (argv: ReadonlyArray<string>, environment: Environment) =>
  Effect.gen(function*() {
    const code = yield* Ref.make(0)
    const outcome = yield* Effect.result(
      Effect.flatMap(rewriteHelp(argv), Command.runWith(fibril, { version })).pipe(
        Effect.provideService(ExitCode, code)
      )
    )
    if (outcome._tag === "Success") return yield* Ref.get(code)
    const error: unknown = outcome.failure
    const tag = typeof error === "object" && error !== null && "_tag" in error ? String(error._tag) : ""
    // effect/cli has already shown its own parsing errors, with the help text.
    if (CliError.isCliError(error)) return 2
    // A URL in a message (a base URL with a key written into it) is shown without its secrets.
    yield* Console.error(`fibril: ${redactText(error instanceof Error ? error.message : String(error))}`)
    return usageErrors.has(tag) ? 2 : 1
  }).pipe(
    // stdout carries answers, JSON events and (for `mcp`) JSON-RPC: logs go to stderr, one
    // line per event.
    Effect.provide(Log.layer),
    Effect.provideService(Logger.LogToStderr, true),
    Effect.provideService(CliOutput.Formatter, Help.formatter()),
    Effect.provideService(ProcessEnvironment, environment),
    Effect.provide(NodeServices.layer),
    Effect.scoped
  )
