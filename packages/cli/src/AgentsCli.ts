/**
 * `fibril agents list | show | transcript | cancel | questions | answer | resume`: the command
 * tree (flags, descriptions, the cluster or the workspace's store). The work is in
 * AgentsCommand.ts (QuestionsCommand.ts, ClusterAgents.ts on a cluster), imported when a
 * subcommand runs: parsing and help load this module only (docs/performance.md, start-up).
 */
import { Argument, Command, Flag } from "effect/cli"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import {
  configuredCluster,
  type ExitCode,
  loadConfig,
  ProcessEnvironment,
  resolveCwd,
  setExit,
  stateDir as stateDirOf
} from "./CliEnvironment.ts"
import * as CliFlags from "./CliFlags.ts"
import * as ClusterCommand from "./ClusterCommand.ts"
import * as Output from "./Output.ts"
import * as QuestionsCommand from "./QuestionsCommand.ts"
import type * as Runtime from "./Runtime.ts"

const loadAgents = Effect.promise(() => import("./AgentsCommand.ts"))

/** Where the commands print: the console, as plain lines. */
const plainOutput = Output.console(false)

/** The cluster URL for a command on the workspace `cwdFlag` names: flag > environment > config. */
const clusterFor = (flag: Option.Option<string>, cwdFlag: Option.Option<string>) =>
  Effect.gen(function*() {
    const environment = yield* ProcessEnvironment
    const fromFlagOrEnv = ClusterCommand.clusterUrl(flag, environment.env)
    if (fromFlagOrEnv !== undefined) return fromFlagOrEnv
    const cwd = yield* Effect.option(resolveCwd(cwdFlag))
    return Option.isNone(cwd) ? undefined : yield* configuredCluster(cwd.value)
  })

const agentId = Argument.String("id").pipe(Argument.withDescription("The agent id, its session name or a run id"))
const nonNegative = Schema.Int.pipe(Schema.check(Schema.isGreaterThanOrEqualTo(0)))

/** The manager over the file store (Runtime.ts), for the commands that run agents here. */
const managed = <A, E, R>(cwd: string, effect: Effect.Effect<A, E, R>, flags: Runtime.ModelFlags) =>
  Effect.gen(function*() {
    const Runtime = yield* Effect.promise(() => import("./Runtime.ts"))
    const environment = yield* ProcessEnvironment
    const config = yield* loadConfig(cwd)
    const runtime = yield* Runtime.make(environment, cwd, config.settings, flags)
    return yield* effect.pipe(Effect.provide(runtime.layer))
  })

/** What finding the cluster URL needs (the questions commands dispatch with `onCluster` too). */
type ClusterEnv = typeof clusterFor extends (...args: never) => Effect.Effect<unknown, unknown, infer R> ? R : never

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

export const command = Command.make("agents").pipe(
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
        json: CliFlags.jsonDocument,
        cwd: CliFlags.cwd,
        cluster: ClusterCommand.clusterFlag
      },
      (flags) =>
        onCluster(
          flags,
          (url) => Effect.flatMap(loadClusterAgents, (c) => c.list(url, flags.all, flags.json)),
          Effect.flatMap(resolveCwd(flags.cwd), (cwd) =>
            loadAgents.pipe(Effect.flatMap((agents) =>
              agents.list(stateDirOf(cwd), flags.all, flags.json, plainOutput)
            )))
        )
    ).pipe(
      Command.withDescription("Agent trees with a running agent (any process), times and owners; --all for every one")
    ),
    Command.make(
      "show",
      { id: agentId, cwd: CliFlags.cwd, cluster: ClusterCommand.clusterFlag },
      (flags) =>
        onCluster(
          flags,
          (url) => Effect.flatMap(loadClusterAgents, (c) => c.show(url, flags.id)),
          Effect.flatMap(resolveCwd(flags.cwd), (cwd) =>
            Effect.flatMap(loadAgents, (agents) => agents.show(stateDirOf(cwd), flags.id, plainOutput)))
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
        cwd: CliFlags.cwd,
        cluster: ClusterCommand.clusterFlag
      },
      (flags) => {
        const page = { offset: Option.getOrUndefined(flags.offset), limit: Option.getOrUndefined(flags.limit) }
        return onCluster(
          flags,
          (url) => Effect.flatMap(loadClusterAgents, (c) => c.transcript(url, flags.id, page)),
          Effect.flatMap(
            resolveCwd(flags.cwd),
            (cwd) =>
              Effect.flatMap(loadAgents, (agents) => agents.transcript(stateDirOf(cwd), flags.id, plainOutput, page))
          )
        )
      }
    ).pipe(
      Command.withDescription("One agent's transcript (also by its transcript handle); --offset / --limit for a page")
    ),
    Command.make(
      "cancel",
      { id: agentId, cwd: CliFlags.cwd, cluster: ClusterCommand.clusterFlag },
      (flags) =>
        onCluster(
          flags,
          (url) => Effect.flatMap(loadClusterAgents, (c) => c.cancel(url, flags.id)),
          Effect.flatMap(resolveCwd(flags.cwd), (cwd) =>
            Effect.flatMap(loadAgents, (agents) => agents.cancel(stateDirOf(cwd), flags.id, plainOutput)))
        )
    ).pipe(
      Command.withDescription("Cancel an agent, in whichever process runs it (that process acts within a second)")
    ),
    ...QuestionsCommand.make<ClusterEnv | ExitCode>(onCluster),
    Command.make(
      "resume",
      {
        id: agentId,
        message: Argument.String("message").pipe(
          Argument.withDescription("A message for the agent, added to its conversation before it goes on"),
          Argument.optional
        ),
        model: CliFlags.model,
        baseUrl: CliFlags.baseUrl,
        cwd: CliFlags.cwd,
        cluster: ClusterCommand.clusterFlag
      },
      (flags) =>
        onCluster(
          flags,
          (url) =>
            Effect.flatMap(loadClusterAgents, (c) => c.resume(url, flags.id, Option.getOrUndefined(flags.message))),
          Effect.flatMap(
            resolveCwd(flags.cwd),
            (cwd) =>
              Effect.flatMap(
                loadAgents,
                (agents) =>
                  managed(cwd, agents.resume(flags.id, Option.getOrUndefined(flags.message), plainOutput), flags)
              )
          ).pipe(Effect.flatMap(setExit))
        )
    ).pipe(
      Command.withDescription(
        "Continue a finished agent from its transcript, and wait for it (exit 1 unless it completes)"
      )
    )
  ])
)
