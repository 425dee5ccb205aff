/**
 * The `fibril` command (effect/cli). The entry-point wiring lives here: configuration from
 * files and environment (read once), the model selection, the core layers on the file
 * store, tracing, and the Node platform services.
 *
 * Exit codes: 0 success; 1 the root agent failed or was cancelled (Ctrl-C); 2 a usage or
 * configuration error (the message says what to change).
 */
import { NodeServices } from "@effect/platform-node"
import * as Fibril from "@fibril/core/Fibril"
import * as Sandbox from "@fibril/core/Sandbox"
import { redactText } from "@fibril/core/Secrets"
import * as Session from "@fibril/core/Session"
import * as SubAgentManager from "@fibril/core/SubAgentManager"
import { ScriptedModel } from "@fibril/testkit"
import { Console, Context, Effect, Layer, Logger, Option, Ref, Schema } from "effect"
import { Argument, CliError, Command, Flag } from "effect/cli"
import { FetchHttpClient } from "effect/http"
import { OtlpSerialization, OtlpTracer } from "effect/observability"
import { readFileSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as AgentsCommand from "./AgentsCommand.ts"
import * as ConfigFlags from "./ConfigFlags.ts"
import * as ConfigCommand from "./ConfigCommand.ts"
import * as Demo from "./Demo.ts"
import * as DemoScript from "./DemoScript.ts"
import * as McpCommand from "./McpCommand.ts"
import * as ModelSelection from "./ModelSelection.ts"
import * as Output from "./Output.ts"
import * as Run from "./Run.ts"

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
}
export class ProcessEnvironment extends Context.Service<ProcessEnvironment, Environment>()("@fibril/cli/Environment") {}

const cwdFlag = Flag.String("cwd").pipe(Flag.withDescription("Workspace directory (default: the current one)"), Flag.optional)
const jsonFlag = Flag.Boolean("json").pipe(Flag.withDescription("One JSON object per line"), Flag.withDefault(false))

const resolveCwd = (flag: Option.Option<string>) =>
  ProcessEnvironment.use((e) => Effect.succeed(path.resolve(e.cwd, Option.getOrElse(flag, () => "."))))

const loadConfig = (cwd: string) => ProcessEnvironment.use((e) => ConfigFlags.load(e, cwd))

const stateDir = (cwd: string) => path.join(cwd, ".fibril", "state")

const tracing = (url: Option.Option<string>) =>
  Option.match(url, {
    onNone: () => Layer.empty,
    onSome: (endpoint) =>
      OtlpTracer.layer({ url: endpoint, resource: { serviceName: "fibril" } }).pipe(
        Layer.provide(OtlpSerialization.layerJson),
        Layer.provide(FetchHttpClient.layer)
      )
  })

export const run = Command.make(
  "run",
  {
    prompt: Argument.String("prompt").pipe(Argument.withDescription("What the root agent should do")),
    model: Flag.String("model").pipe(
      Flag.withDescription("Model id, or scripted:<file> for the ScriptedModel"),
      Flag.optional
    ),
    baseUrl: Flag.String("base-url").pipe(Flag.withDescription("OpenAI-compatible endpoint (…/v1)"), Flag.optional),
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
    otlp: Flag.String("otlp").pipe(Flag.withDescription("Export traces to this OTLP/HTTP endpoint (…/v1/traces)"), Flag.optional)
  },
  Effect.fn("fibril.run.command")(function*(flags) {
    const environment = yield* ProcessEnvironment
    const cwd = yield* resolveCwd(flags.cwd)
    const config = yield* loadConfig(cwd)
    const selection = yield* ModelSelection.select({
      model: Option.getOrUndefined(flags.model),
      baseUrl: Option.getOrUndefined(flags.baseUrl),
      env: environment.env,
      settings: config.settings,
      cwd
    })
    const subagents = SubAgentManager.optionsFrom(config.settings)
    const core = Fibril.layerWithModels({
      cwd,
      store: "file",
      session: Session.optionsFrom(config.settings),
      subagents: Option.match(flags.maxConcurrent, {
        onNone: () => subagents,
        onSome: (maxConcurrent) => ({ ...subagents, maxConcurrent })
      }),
      tools: config.settings.tools,
      deny: config.settings.permissions.deny,
      sandbox: config.settings.sandbox
    }).pipe(Layer.provideMerge(ModelSelection.layer(selection)))
    const code = yield* Run.run(
      {
        prompt: flags.prompt,
        role: Option.getOrUndefined(flags.role),
        json: flags.json,
        waitDetached: flags.waitDetached
      },
      Output.console(environment.tty && !flags.json)
    ).pipe(Effect.provide(Layer.mergeAll(
      core,
      // The flag, or the standard OpenTelemetry variable.
      tracing(Option.orElse(flags.otlp, () => Option.fromNullishOr(environment.env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"])))
    )))
    yield* setExit(code)
  })
).pipe(Command.withDescription("Run one agent (and its sub-agents) on a prompt"))

export const demo = Command.make(
  "demo",
  { cwd: cwdFlag },
  Effect.fn("fibril.demo.command")(function*(flags) {
    const environment = yield* ProcessEnvironment
    const cwd = yield* resolveCwd(flags.cwd)
    const config = yield* loadConfig(cwd)
    yield* Demo.run(Output.console(environment.tty), cwd).pipe(
      Effect.provide(
        Fibril.layerFromSettings(cwd, config.settings).pipe(Layer.provide(ScriptedModel.layer(DemoScript.script)))
      )
    )
  })
).pipe(Command.withDescription("A scripted scenario (ScriptedModel) with real tools on the current directory"))

const agentId = Argument.String("id").pipe(Argument.withDescription("The agent id, its session name or a run id"))
const nonNegative = Schema.Int.pipe(Schema.check(Schema.isGreaterThanOrEqualTo(0)))

/** The manager over the file store, for the commands that act on agents. */
const managed = <A, E, R>(cwd: string, effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const environment = yield* ProcessEnvironment
    const config = yield* loadConfig(cwd)
    const selection = yield* ModelSelection.select({ env: environment.env, settings: config.settings, cwd })
    return yield* effect.pipe(
      Effect.provide(
        Fibril.layerWithModels({
          cwd,
          store: "file",
          session: Session.optionsFrom(config.settings),
          subagents: SubAgentManager.optionsFrom(config.settings),
          sandbox: config.settings.sandbox
        }).pipe(Layer.provideMerge(ModelSelection.layer(selection)))
      )
    )
  })

const out = Output.console(false)

export const agents = Command.make("agents").pipe(
  Command.withDescription("Recorded sub-agents (.fibril/state)"),
  Command.withSubcommands([
    Command.make(
      "list",
      {
        all: Flag.Boolean("all").pipe(
          Flag.withDescription("Every recorded tree, finished ones included"),
          Flag.withDefault(false)
        ),
        json: jsonFlag,
        cwd: cwdFlag
      },
      (flags) =>
        Effect.flatMap(resolveCwd(flags.cwd), (cwd) => AgentsCommand.list(stateDir(cwd), flags.all, flags.json, out))
    ).pipe(Command.withDescription("Agent trees with a running agent (any process), times and owners; --all for every one")),
    Command.make(
      "show",
      { id: agentId, cwd: cwdFlag },
      (flags) => Effect.flatMap(resolveCwd(flags.cwd), (cwd) => AgentsCommand.show(stateDir(cwd), flags.id, out))
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
        cwd: cwdFlag
      },
      (flags) =>
        Effect.flatMap(resolveCwd(flags.cwd), (cwd) =>
          AgentsCommand.transcript(stateDir(cwd), flags.id, out, {
            offset: Option.getOrUndefined(flags.offset),
            limit: Option.getOrUndefined(flags.limit)
          }))
    ).pipe(Command.withDescription("One agent's transcript (also by its transcript handle); --offset / --limit for a page")),
    Command.make(
      "cancel",
      { id: agentId, cwd: cwdFlag },
      (flags) => Effect.flatMap(resolveCwd(flags.cwd), (cwd) => AgentsCommand.cancel(stateDir(cwd), flags.id, out))
    ).pipe(Command.withDescription("Cancel an agent, in whichever process runs it (that process acts within a second)")),
    Command.make(
      "resume",
      {
        id: agentId,
        message: Argument.String("message").pipe(Argument.optional),
        cwd: cwdFlag
      },
      (flags) =>
        Effect.flatMap(resolveCwd(flags.cwd), (cwd) =>
          managed(cwd, AgentsCommand.resume(flags.id, Option.getOrUndefined(flags.message), out))).pipe(
            Effect.flatMap(setExit)
          )
    ).pipe(Command.withDescription("Continue a finished agent from its transcript, and wait for it (exit 1 unless it completes)"))
  ])
)

export const config = Command.make(
  "config",
  { json: jsonFlag, cwd: cwdFlag, model: Flag.String("model").pipe(Flag.optional) },
  Effect.fn("fibril.config.command")(function*(flags) {
    const environment = yield* ProcessEnvironment
    const cwd = yield* resolveCwd(flags.cwd)
    const resolved = yield* loadConfig(cwd)
    const selection = yield* Effect.result(ModelSelection.select({
      model: Option.getOrUndefined(flags.model),
      env: environment.env,
      settings: resolved.settings,
      cwd
    }))
    const model = selection._tag === "Success"
      ? ModelSelection.describe(selection.success)
      : "none (set OPENAI_API_KEY, or --model scripted:<file>)"
    const sandbox = yield* Effect.flatMap(Sandbox.currentHost, (host) => Sandbox.probe(resolved.settings.sandbox, host))
    yield* ConfigCommand.show(resolved, model, flags.json, out, sandbox)
  })
).pipe(Command.withDescription("The effective configuration, with clamped values marked"))

export const fibril = Command.make("fibril").pipe(
  Command.withDescription("Fibril: an Effect-native sub-agent runtime"),
  Command.withSubcommands([run, demo, agents, config, McpCommand.make(ProcessEnvironment, version)]),
  Command.withGlobalFlags([ConfigFlags.Strict])
)

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
  "AgentNotFound",
  "NotResumable"
])

/** Runs the CLI on `argv` (without the node and script paths); resolves to the exit code. */
export const main = (argv: ReadonlyArray<string>, environment: Environment) =>
  Effect.gen(function*() {
    const code = yield* Ref.make(0)
    const outcome = yield* Effect.result(
      Command.runWith(fibril, { version })(argv).pipe(Effect.provideService(ExitCode, code))
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
    // stdout carries answers, JSON events and (for `mcp`) JSON-RPC: logs go to stderr.
    Effect.provideService(Logger.LogToStderr, true),
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
