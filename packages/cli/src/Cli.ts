/**
 * The `fibril` command (effect/cli). The entry-point wiring lives here: configuration from
 * files and environment (read once), the model selection, the core layers on the file
 * store, tracing, and the Node platform services.
 *
 * Exit codes: 0 success; 1 the root agent failed (or `doctor` found a problem); 2 a usage or
 * configuration error (the message says what to change); 3 a record could not be saved (a
 * full disk), 4 an agent's record was taken over while this process ran it (RunRecords.ts);
 * 130 cancelled by Ctrl-C (143 SIGTERM, 129 SIGHUP; bin.ts).
 */
import * as NodeServices from "@effect/platform-node/NodeServices"
import * as Fibril from "@fibril/core/Fibril"
import * as Sandbox from "@fibril/core/Sandbox"
import { redactText } from "@fibril/core/Secrets"
import { ScriptedModel } from "@fibril/testkit"
import { Argument, CliError, CliOutput, Command, Flag } from "effect/cli"
import * as Console from "effect/Console"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as Stdio from "effect/Stdio"
import * as Stream from "effect/Stream"
import { readFileSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as AgentsCommand from "./AgentsCommand.ts"
import * as ClusterCommand from "./ClusterCommand.ts"
import * as ConfigCommand from "./ConfigCommand.ts"
import * as ConfigFlags from "./ConfigFlags.ts"
import * as Demo from "./Demo.ts"
import * as DemoScript from "./DemoScript.ts"
import * as Doctor from "./Doctor.ts"
import * as Help from "./Help.ts"
import * as LabCommand from "./LabCommand.ts"
import * as Log from "./Log.ts"
import * as McpCommand from "./McpCommand.ts"
import * as ModelSelection from "./ModelSelection.ts"
import * as Output from "./Output.ts"
import * as Run from "./Run.ts"
import * as RunRecords from "./RunRecords.ts"
import * as Runtime from "./Runtime.ts"
import * as TrustCommand from "./TrustCommand.ts"
import * as Workspace from "./Workspace.ts"

/** This package's version (package.json sits one level above both src/ and dist/). */
export const version: string = (JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as {
  readonly version: string
}).version

/** The process exit code the command chose. */
export class ExitCode extends Context.Service<ExitCode, Ref.Ref<number>>()("@fibril/cli/ExitCode") {}

const setExit = (code: number) => ExitCode.use((ref) => Ref.set(ref, code))

/** What the process was started with: read once, at the edge. */
export interface Environment {
  readonly env: Readonly<Record<string, string | undefined>>
  readonly home: string
  readonly cwd: string
  readonly tty: boolean
  /** What interrupted the process, once a signal has (`Ctrl-C`, `SIGTERM`, …). */
  readonly interruptedBy?: (() => string | undefined) | undefined
}
export class ProcessEnvironment extends Context.Service<ProcessEnvironment, Environment>()("@fibril/cli/Environment") {}

const cwdFlag = Flag.String("cwd").pipe(
  Flag.withDescription(
    "The workspace, an existing directory (default: the project around the current directory: the nearest one up with .fibril/ or .git)"
  ),
  Flag.optional
)
const jsonFlag = Flag.Boolean("json").pipe(Flag.withDescription("One JSON object per line"), Flag.withDefault(false))
/** `--json` of the commands that print one JSON document. */
const jsonDocumentFlag = Flag.Boolean("json").pipe(Flag.withDescription("Print it as JSON"), Flag.withDefault(false))
const modelFlag = Flag.String("model").pipe(
  Flag.withDescription(
    "Model id (default FIBRIL_MODEL, the config's model, gpt-4.1-mini), or scripted:<file> for the ScriptedModel"
  ),
  Flag.optional
)
const baseUrlFlag = Flag.String("base-url").pipe(
  Flag.withDescription("OpenAI-compatible endpoint, …/v1 (default OPENAI_BASE_URL, else OpenAI)"),
  Flag.optional
)

const resolveCwd = (flag: Option.Option<string>) => ProcessEnvironment.use((e) => Workspace.resolve(flag, e))

const loadConfig = (cwd: string) => ProcessEnvironment.use((e) => ConfigFlags.load(e, cwd))

const stateDir = (cwd: string) => path.join(cwd, ".fibril", "state")

/**
 * `[cluster] url` of the workspace's config files (FIBRIL_CLUSTER_URL is read by the caller
 * first). A config that cannot be read gives none: the commands that only consult it (agents)
 * behave as before, and those that need it load it again and report the problem.
 */
const configuredCluster = (cwd: string) =>
  loadConfig(cwd).pipe(Effect.map((config) => config.settings.cluster.url), Effect.orElseSucceed(() => undefined))

/** The cluster URL for a command on the workspace `cwdFlag` names: flag > environment > config. */
const clusterFor = (flag: Option.Option<string>, cwdFlag: Option.Option<string>) =>
  Effect.gen(function*() {
    const environment = yield* ProcessEnvironment
    const fromFlagOrEnv = ClusterCommand.clusterUrl(flag, environment.env)
    if (fromFlagOrEnv !== undefined) return fromFlagOrEnv
    const cwd = yield* Effect.option(resolveCwd(cwdFlag))
    return Option.isNone(cwd) ? undefined : yield* configuredCluster(cwd.value)
  })

// The OTLP exporter (effect's HTTP and observability modules) is loaded only when spans go somewhere.
const tracing = (url: Option.Option<string>) =>
  Option.match(url, {
    onNone: () => Layer.empty,
    onSome: (endpoint) =>
      Layer.unwrap(Effect.map(Effect.promise(() => import("./Tracing.ts")), (Tracing) => Tracing.layer(endpoint)))
  })

/**
 * The prompt of `fibril run`: the argument, `-` (stdin) or `--prompt-file FILE` (`-`: stdin),
 * exactly one of them, not empty. A file or stdin has no size limit (an argument does).
 */
const readPrompt = Effect.fn("fibril.run.prompt")(function*(
  argument: Option.Option<string>,
  file: Option.Option<string>,
  /** Where the command was typed: the file is relative to it. */
  invocationDir: string
) {
  const fail = (problem: string) => Effect.fail(new ModelSelection.UsageError({ problem }))
  if (Option.isSome(argument) && Option.isSome(file)) {
    return yield* fail("Give the prompt either as an argument or with --prompt-file, not both.")
  }
  const source = Option.isSome(file) ? file.value : Option.getOrUndefined(argument)
  if (source === undefined) {
    return yield* fail(
      "No prompt. Give it as an argument (fibril run \"…\"), in a file (--prompt-file FILE), or on stdin (fibril run - < prompt.md)."
    )
  }
  const fromStdin = source === "-"
  const text = fromStdin
    ? yield* Effect.flatMap(Stdio.Stdio, (stdio) => stdio.stdin.pipe(Stream.decodeText(), Stream.mkString)).pipe(
      Effect.catch((error) => fail(`cannot read the prompt from stdin: ${error.message}`))
    )
    : Option.isSome(file)
    ? yield* Effect.flatMap(FileSystem.FileSystem, (fs) => fs.readFileString(path.resolve(invocationDir, source))).pipe(
      Effect.catch((error) => fail(`--prompt-file ${source}: cannot read it (${error.message})`))
    )
    : source
  if (text.trim() === "") {
    return yield* fail(
      `The prompt is empty${
        fromStdin ? " (nothing on stdin)" : Option.isSome(file) ? ` (${source})` : ""
      }: say what the agent should do.`
    )
  }
  return text
})

export const run = Command.make(
  "run",
  {
    prompt: Argument.String("prompt").pipe(
      Argument.withDescription("What the root agent should do; - reads it from stdin"),
      Argument.optional
    ),
    promptFile: Flag.String("prompt-file").pipe(
      Flag.withDescription("Read the prompt from this file (- for stdin), instead of the argument"),
      Flag.optional
    ),
    model: modelFlag,
    baseUrl: baseUrlFlag,
    role: Flag.String("role").pipe(Flag.withDescription("Role of the root agent (default general)"), Flag.optional),
    maxConcurrent: Flag.Int("max-concurrent").pipe(
      Flag.withSchema(Schema.Int.pipe(Schema.check(Schema.isBetween({ minimum: 1, maximum: 20 })))),
      Flag.withDescription("Sub-agent concurrency cap, 1..20"),
      Flag.optional
    ),
    cwd: cwdFlag,
    json: jsonFlag,
    waitDetached: Flag.Boolean("wait-detached").pipe(
      Flag.withDescription("When the root agent is done, wait for detached agents still running (default: stop them)"),
      Flag.withDefault(false)
    ),
    otlp: Flag.String("otlp").pipe(
      Flag.withDescription("Export traces to this OTLP/HTTP endpoint (…/v1/traces)"),
      Flag.optional
    ),
    stream: Flag.Boolean("stream").pipe(
      Flag.withDescription("Stream each model answer as it arrives (--no-stream: ask for whole answers)"),
      Flag.withDefault(true)
    ),
    cluster: ClusterCommand.clusterFlag
  },
  Effect.fn("fibril.run.command")(function*(flags) {
    const environment = yield* ProcessEnvironment
    const cwd = yield* resolveCwd(flags.cwd)
    const prompt = yield* readPrompt(flags.prompt, flags.promptFile, environment.cwd)
    const config = yield* loadConfig(cwd)
    const clusterUrl = ClusterCommand.clusterUrl(flags.cluster, environment.env, config.settings.cluster.url)
    if (clusterUrl !== undefined) {
      return yield* setExit(
        yield* ClusterCommand.run({
          url: clusterUrl,
          prompt,
          cwd,
          role: Option.getOrUndefined(flags.role),
          model: Option.getOrUndefined(flags.model),
          json: flags.json,
          stream: flags.stream,
          output: Output.console(environment.tty && !flags.json)
        })
      )
    }
    const selection = yield* ModelSelection.select({
      model: Option.getOrUndefined(flags.model),
      baseUrl: Option.getOrUndefined(flags.baseUrl),
      env: environment.env,
      settings: config.settings,
      cwd,
      invocationDir: environment.cwd
    })
    const core = Runtime.layer({
      cwd,
      settings: config.settings,
      selection,
      maxConcurrent: Option.getOrUndefined(flags.maxConcurrent),
      storeLimits: yield* RunRecords.storeLimits(environment.env),
      stream: flags.stream
    })
    const code = yield* Run.run(
      {
        prompt,
        role: Option.getOrUndefined(flags.role),
        json: flags.json,
        waitDetached: flags.waitDetached,
        interruptedBy: environment.interruptedBy
      },
      Output.console(environment.tty && !flags.json)
    ).pipe(
      // Its records committed (or a clear error naming the one that is not), before the exit code.
      Effect.flatMap((code) => RunRecords.settle(code, true)),
      Effect.provide(Layer.mergeAll(
        core,
        // The flag, or the standard OpenTelemetry variable.
        tracing(
          Option.orElse(flags.otlp, () => Option.fromNullishOr(environment.env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]))
        )
      ))
    )
    yield* setExit(code)
  })
).pipe(
  Command.withDescription("Run one agent (and its sub-agents) on a prompt, drawing the tree of agents as they work"),
  Command.withExamples([
    {
      command: "fibril run \"Find the HTTP routes and summarise them\" --model deepseek-chat",
      description: "On a real model (OPENAI_API_KEY, OPENAI_BASE_URL)"
    },
    { command: "fibril run --prompt-file task.md", description: "A long prompt from a file" },
    { command: "git diff | fibril run - --role review", description: "The prompt from stdin" },
    {
      command: "fibril run \"Explore\" --model scripted:script.json --json",
      description: "Offline on a scripted model, one JSON event per line"
    }
  ])
)

export const demo = Command.make(
  "demo",
  { cwd: cwdFlag },
  Effect.fn("fibril.demo.command")(function*(flags) {
    const environment = yield* ProcessEnvironment
    const cwd = yield* resolveCwd(flags.cwd)
    const config = yield* loadConfig(cwd)
    // Paced like a real model on a terminal, so the tree is seen growing; at once otherwise.
    const script = DemoScript.script({ paced: environment.tty })
    yield* Demo.run(Output.console(environment.tty), cwd).pipe(
      Effect.provide(Fibril.layerFromSettings(cwd, config.settings).pipe(Layer.provide(ScriptedModel.layer(script))))
    )
  })
).pipe(
  Command.withDescription("A scripted scenario (ScriptedModel, no key, no network) with real tools on this project"),
  Command.withExamples([{
    command: "fibril demo",
    description: "Three explorers in parallel, then a reviewer, on this project's files"
  }])
)

const agentId = Argument.String("id").pipe(Argument.withDescription("The agent id, its session name or a run id"))
const nonNegative = Schema.Int.pipe(Schema.check(Schema.isGreaterThanOrEqualTo(0)))

/** The manager over the file store, for the commands that act on agents. */
const managed = <A, E, R>(
  cwd: string,
  effect: Effect.Effect<A, E, R>,
  flags: { readonly model: Option.Option<string>; readonly baseUrl: Option.Option<string> }
) =>
  Effect.gen(function*() {
    const environment = yield* ProcessEnvironment
    const config = yield* loadConfig(cwd)
    const selection = yield* ModelSelection.select({
      model: Option.getOrUndefined(flags.model),
      baseUrl: Option.getOrUndefined(flags.baseUrl),
      env: environment.env,
      settings: config.settings,
      cwd,
      invocationDir: environment.cwd
    })
    return yield* effect.pipe(Effect.provide(Runtime.layer({ cwd, settings: config.settings, selection })))
  })

const out = Output.console(false)

const loadClusterAgents = Effect.promise(() => import("./ClusterAgents.ts"))

/**
 * An `agents` command as a client of the cluster when a cluster URL is given (flag >
 * FIBRIL_CLUSTER_URL > `[cluster] url`), else on the workspace's store as before. The cluster
 * commands exit with their code.
 */
const onCluster = <A, E, R, E2, R2>(
  flags: { readonly cluster: Option.Option<string>; readonly cwd: Option.Option<string> },
  cluster: (url: string) => Effect.Effect<number, E2, R2>,
  local: Effect.Effect<A, E, R>
) =>
  Effect.flatMap(
    clusterFor(flags.cluster, flags.cwd),
    (url): Effect.Effect<A | void, E | E2, R | R2 | ProcessEnvironment | ExitCode> =>
      url === undefined ? local : Effect.flatMap(cluster(url), setExit)
  )

export const agents = Command.make("agents").pipe(
  Command.withDescription("The agents recorded in this workspace's store (.fibril/state), in any process"),
  Command.withExamples([
    { command: "fibril agents list --all", description: "Every recorded tree of agents" },
    { command: "fibril agents show agent_x1k1" },
    { command: "fibril agents transcript agent_x1k1" },
    { command: "fibril agents cancel agent_x1k1", description: "Wherever it runs; no model or key needed" },
    { command: "fibril agents resume agent_x1k1 \"Also check the tests\" --model deepseek-chat" }
  ]),
  Command.withSubcommands([
    Command.make(
      "list",
      {
        all: Flag.Boolean("all").pipe(
          Flag.withDescription("Every recorded tree, finished ones included"),
          Flag.withDefault(false)
        ),
        json: jsonDocumentFlag,
        cwd: cwdFlag,
        cluster: ClusterCommand.clusterFlag
      },
      (flags) =>
        onCluster(
          flags,
          (url) => Effect.flatMap(loadClusterAgents, (c) => c.list(url, flags.all, flags.json)),
          Effect.flatMap(resolveCwd(flags.cwd), (cwd) => AgentsCommand.list(stateDir(cwd), flags.all, flags.json, out))
        )
    ).pipe(
      Command.withDescription("Agent trees with a running agent (any process), times and owners; --all for every one")
    ),
    Command.make(
      "show",
      { id: agentId, cwd: cwdFlag, cluster: ClusterCommand.clusterFlag },
      (flags) =>
        onCluster(
          flags,
          (url) => Effect.flatMap(loadClusterAgents, (c) => c.show(url, flags.id)),
          Effect.flatMap(resolveCwd(flags.cwd), (cwd) => AgentsCommand.show(stateDir(cwd), flags.id, out))
        )
    ).pipe(Command.withDescription("One agent's record: its run receipt, with follow-up and takeover")),
    Command.make(
      "transcript",
      {
        id: agentId,
        offset: Flag.Int("offset").pipe(
          Flag.withSchema(nonNegative),
          Flag.withDescription("The first message of a page (0 = the system prompt)"),
          Flag.optional
        ),
        limit: Flag.Int("limit").pipe(
          Flag.withSchema(nonNegative),
          Flag.withDescription("Messages on a page (at most 100)"),
          Flag.optional
        ),
        cwd: cwdFlag,
        cluster: ClusterCommand.clusterFlag
      },
      (flags) => {
        const page = { offset: Option.getOrUndefined(flags.offset), limit: Option.getOrUndefined(flags.limit) }
        return onCluster(
          flags,
          (url) => Effect.flatMap(loadClusterAgents, (c) => c.transcript(url, flags.id, page)),
          Effect.flatMap(resolveCwd(flags.cwd), (cwd) => AgentsCommand.transcript(stateDir(cwd), flags.id, out, page))
        )
      }
    ).pipe(
      Command.withDescription("One agent's transcript (also by its transcript handle); --offset / --limit for a page")
    ),
    Command.make(
      "cancel",
      { id: agentId, cwd: cwdFlag, cluster: ClusterCommand.clusterFlag },
      (flags) =>
        onCluster(
          flags,
          (url) => Effect.flatMap(loadClusterAgents, (c) => c.cancel(url, flags.id)),
          Effect.flatMap(resolveCwd(flags.cwd), (cwd) => AgentsCommand.cancel(stateDir(cwd), flags.id, out))
        )
    ).pipe(
      Command.withDescription("Cancel an agent, in whichever process runs it (that process acts within a second)")
    ),
    Command.make(
      "resume",
      {
        id: agentId,
        message: Argument.String("message").pipe(
          Argument.withDescription("A message for the agent, added to its conversation before it goes on"),
          Argument.optional
        ),
        model: modelFlag,
        baseUrl: baseUrlFlag,
        cwd: cwdFlag,
        cluster: ClusterCommand.clusterFlag
      },
      (flags) =>
        onCluster(
          flags,
          (url) =>
            Effect.flatMap(loadClusterAgents, (c) => c.resume(url, flags.id, Option.getOrUndefined(flags.message))),
          Effect.flatMap(
            resolveCwd(flags.cwd),
            (cwd) => managed(cwd, AgentsCommand.resume(flags.id, Option.getOrUndefined(flags.message), out), flags)
          ).pipe(Effect.flatMap(setExit))
        )
    ).pipe(
      Command.withDescription(
        "Continue a finished agent from its transcript, and wait for it (exit 1 unless it completes)"
      )
    )
  ])
)

export const config = Command.make(
  "config",
  {
    json: jsonDocumentFlag,
    cwd: cwdFlag,
    model: Flag.String("model").pipe(Flag.withDescription("Show the model selection for this model id"), Flag.optional)
  },
  Effect.fn("fibril.config.command")(function*(flags) {
    const environment = yield* ProcessEnvironment
    const cwd = yield* resolveCwd(flags.cwd)
    const resolved = yield* loadConfig(cwd)
    const selection = yield* Effect.result(ModelSelection.select({
      model: Option.getOrUndefined(flags.model),
      env: environment.env,
      settings: resolved.settings,
      cwd,
      invocationDir: environment.cwd
    }))
    const model = selection._tag === "Success"
      ? ModelSelection.describe(selection.success)
      : "none (set OPENAI_API_KEY, or --model scripted:<file>)"
    const sandbox = yield* Effect.flatMap(Sandbox.currentHost, (host) => Sandbox.probe(resolved.settings.sandbox, host))
    yield* ConfigCommand.show(resolved, model, flags.json, out, sandbox)
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
  { model: modelFlag, baseUrl: baseUrlFlag, cwd: cwdFlag, json: jsonDocumentFlag },
  Effect.fn("fibril.doctor.command")(function*(flags) {
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

export const lab = LabCommand.make<ProcessEnvironment | ExitCode>({
  cwd: ProcessEnvironment.use((e) => Effect.succeed(e.cwd)),
  tty: ProcessEnvironment.use((e) => Effect.succeed(e.tty)),
  setExit: (code) => setExit(code)
})

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
    cwd: cwdFlag,
    model: modelFlag,
    baseUrl: baseUrlFlag,
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
    )
  },
  Effect.fn("fibril.worker.command")(function*(flags) {
    const environment = yield* ProcessEnvironment
    const cwd = yield* resolveCwd(flags.cwd)
    const config = yield* loadConfig(cwd)
    const url = ClusterCommand.clusterUrl(flags.cluster, environment.env, config.settings.cluster.url)
    if (url === undefined) {
      return yield* new ModelSelection.UsageError({
        problem:
          "fibril worker needs the cluster database: --cluster postgres://user@host:5432/db (or sqlite:<file> on one machine), FIBRIL_CLUSTER_URL, or url in [cluster] of .fibril/config.toml"
      })
    }
    const selection = yield* ModelSelection.select({
      model: Option.getOrUndefined(flags.model),
      baseUrl: Option.getOrUndefined(flags.baseUrl),
      env: environment.env,
      settings: config.settings,
      cwd,
      invocationDir: environment.cwd
    })
    yield* ClusterCommand.worker({
      url,
      cwd,
      settings: config.settings,
      selection,
      maxConcurrent: Option.getOrUndefined(flags.maxConcurrent),
      shutdownTimeoutSecs: flags.shutdownTimeout,
      host: flags.host,
      port: Option.getOrUndefined(flags.port),
      lockExpirationSecs: Option.getOrUndefined(flags.lockExpiration),
      dbConnections: flags.dbConnections,
      stepLog: environment.env["FIBRIL_CLUSTER_STEP_LOG"]
    })
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

export const fibril = Command.make("fibril").pipe(
  Command.withDescription(
    "Fibril: an Effect-native sub-agent runtime. A root agent hands focused tasks to sub-agents that work in " +
      "clean contexts and return structured results; fibril runs them on this project's files."
  ),
  Command.withSubcommands([
    run,
    demo,
    agents,
    config,
    trust,
    McpCommand.make(ProcessEnvironment, version),
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
  agents: ["list", "show", "transcript", "cancel", "resume"],
  cluster: ["migrate", "prune", "status", "cancel", "input", "resume"],
  lab: ["run", "replay", "report"]
}

/**
 * `help [command…]` (after any leading flags) becomes `[command…] --help`; a command that
 * does not exist is a usage error naming the ones that do.
 */
export const rewriteHelp = (
  argv: ReadonlyArray<string>
): Effect.Effect<ReadonlyArray<string>, ModelSelection.UsageError> => {
  const at = argv.findIndex((arg) => !arg.startsWith("-"))
  if (at === -1 || argv[at] !== "help") return Effect.succeed(argv)
  const path = argv.slice(at + 1).filter((arg) => !arg.startsWith("-"))
  for (let i = 0; i < path.length; i++) {
    const known = commandNames[path.slice(0, i).join(" ")]
    if (known === undefined) break
    if (!known.includes(path[i]!)) {
      return Effect.fail(
        new ModelSelection.UsageError({
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

/** The environment of this process (for bin.ts). */
export const processEnvironment = (): Environment => ({
  env: { ...process.env },
  home: os.homedir(),
  cwd: process.cwd(),
  tty: process.stdout.isTTY === true
})
