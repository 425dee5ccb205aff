/**
 * Cluster mode on the command line: `fibril worker`, `fibril cluster migrate|prune|status|
 * cancel|input|resume`, and `fibril run --cluster`. The cluster code (effect/cluster,
 * @effect/sql-pg) is imported only when one of these runs, so the CLI's cold start does not
 * grow.
 *
 * The database: `--cluster <postgres-url | sqlite:file>`, else FIBRIL_CLUSTER_URL. Unreachable: exit 2
 * naming the host (password masked) and what to check; tables missing or of another version:
 * exit 2 naming `fibril cluster migrate`.
 */
import type * as ClusterNode from "@fibril/cluster/Node"
import * as AgentSteps from "@fibril/core/AgentSteps"
import * as Fibril from "@fibril/core/Fibril"
import type * as McpServers from "@fibril/core/McpServers"
import * as RateLimiter from "@fibril/core/RateLimiter"
import { redactUrl } from "@fibril/core/Secrets"
import * as Session from "@fibril/core/Session"
import * as Cause from "effect/Cause"
import { Argument, Flag } from "effect/cli"
import * as Clock from "effect/Clock"
import * as Console from "effect/Console"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as ModelSelection from "./ModelSelection.ts"
import * as Output from "./Output.ts"
import * as Shutdown from "./Shutdown.ts"
import * as TreeView from "./TreeView.ts"

export const clusterFlag = Flag.String("cluster").pipe(
  Flag.withDescription("The cluster's Postgres URL (default FIBRIL_CLUSTER_URL): run as a client of the cluster"),
  Flag.optional
)

/**
 * The cluster URL: `--cluster`, else FIBRIL_CLUSTER_URL, else `[cluster] url` of the config
 * files (`configured`); none: the embedded runtime.
 */
export const clusterUrl = (
  flag: Option.Option<string>,
  env: Readonly<Record<string, string | undefined>>,
  configured?: string | undefined
): string | undefined => {
  if (Option.isSome(flag) && flag.value !== "") return flag.value
  const fromEnv = env["FIBRIL_CLUSTER_URL"]
  if (fromEnv !== undefined && fromEnv !== "") return fromEnv
  return configured === undefined || configured === "" ? undefined : configured
}

const requireUrl = (
  flag: Option.Option<string>,
  env: Readonly<Record<string, string | undefined>>,
  configured?: string | undefined
) => {
  const url = clusterUrl(flag, env, configured)
  return url === undefined
    ? Effect.fail(
      new ModelSelection.UsageError({
        problem:
          "no cluster database: give --cluster postgres://user@host:5432/db (or sqlite:<file> on one machine), set FIBRIL_CLUSTER_URL, or url in [cluster] of .fibril/config.toml"
      })
    )
    : Effect.succeed(url)
}

const loadNode = Effect.promise(() => import("@fibril/cluster/Node"))
const loadClient = Effect.promise(() => import("@fibril/cluster/ClusterClient"))

/** The cluster errors that are the user's to fix: exit 2. */
export const usageErrors: ReadonlyArray<string> = ["ClusterUnreachable", "SchemaMismatch", "NotResumable"]

/** Runs `body` with the database (checked, schema verified unless `migrating`) in context. */
const withDatabase = <A, E, R>(
  url: string,
  body: (node: typeof ClusterNode) => Effect.Effect<A, E, R>,
  migrating = false
) =>
  Effect.gen(function*() {
    const node = yield* loadNode
    return yield* Effect.gen(function*() {
      if (!migrating) yield* node.checkSchema
      return yield* body(node)
    }).pipe(Effect.provide(node.database(url)))
  })

/** A client of the cluster in context: the engine and the store (no agents hosted here). */
export const asClient = <A, E, R>(url: string, body: Effect.Effect<A, E, R>) =>
  withDatabase(url, (node) => Effect.provide(body, node.client))

export interface RunOnCluster {
  readonly url: string
  readonly prompt: string
  readonly cwd: string
  readonly role: string | undefined
  readonly model: string | undefined
  readonly json: boolean
  /**
   * Show each answer's text (`text` events with `--json`) as `fibril run` streams it (default);
   * false with `--no-stream`. The cluster does not stream: an answer's text comes whole, at its step.
   */
  readonly stream?: boolean | undefined
  /** Where the tree of agents is drawn (live on a terminal) or logged, as `fibril run` does. */
  readonly output: Output.Output
}

/**
 * `fibril run --cluster`: starts the root agent on the workers, follows its tree (the steps
 * any worker journals reach the live tree, or one JSON event per line with `--json`), waits,
 * prints its answer.
 */
export const run = (options: RunOnCluster) =>
  Effect.gen(function*() {
    const client = yield* loadClient
    const events = yield* Effect.promise(() => import("./ClusterEvents.ts"))
    return yield* asClient(
      options.url,
      Effect.gen(function*() {
        const agentId = yield* client.start({
          prompt: options.prompt,
          workspace: options.cwd,
          role: options.role,
          model: options.model
        })
        const started = yield* Clock.currentTimeMillis
        yield* options.json
          ? options.output.line(Output.rootJson(agentId))
          : Console.error(`fibril: agent ${agentId} started on the cluster at ${redactUrl(options.url)}`)
        const tree = Output.follower(options.output, options.json)
        TreeView.label(tree.view, agentId, options.prompt.split("\n")[0]!.slice(0, 60))
        const follower = yield* events.follow(agentId, tree.show, 100, { text: options.stream ?? true })
        const ticker = options.output.terminal !== undefined && !options.json
          ? yield* Effect.forkChild(Output.ticker(tree))
          : undefined
        const exit = yield* Effect.exit(
          client.await_(agentId).pipe(
            Effect.onInterrupt(() => Effect.ignore(client.cancel(agentId, "cancelled by the client (fibril run)")))
          )
        )
        yield* follower.drain
        yield* follower.stop
        if (ticker !== undefined) yield* Fiber.interrupt(ticker)
        yield* tree.finish("agents:")
        const reason = exit._tag === "Success" ? undefined : exit.cause.reasons.map((r) =>
          r._tag === "Fail"
            ? (r.error as { message: string }).message
            : r._tag === "Die"
            ? String(r.defect)
            : "cancelled"
        ).join("; ")
        if (options.json) {
          // The same closing line as the embedded engine's; the tree's tokens as its events say.
          const root = tree.view.nodes.get(agentId)
          yield* options.output.line(Output.finalJson({
            agentId,
            status: exit._tag === "Success"
              ? "completed"
              : Cause.hasInterruptsOnly(exit.cause)
              ? "cancelled"
              : "failed",
            text: exit._tag === "Success" ? exit.value.text : reason!,
            totals: Output.totalsOf(tree.view, {
              tokens: root?.tokens ?? { input: 0, output: 0, cached: 0 },
              durationMs: (yield* Clock.currentTimeMillis) - started,
              model: root?.model ?? options.model ?? "default"
            }),
            stopped: []
          }))
        } else if (exit._tag === "Success") yield* Console.log(exit.value.text)
        else yield* Console.error(`fibril: ${reason}`)
        return exit._tag === "Success" ? 0 : 1
      })
    )
  })

const urlFlag = clusterFlag
const agentIdArgument = Argument.String("agent-id").pipe(Argument.withDescription("The agent's id"))

export const commands = <R, R2>(
  environment: Effect.Effect<{ readonly env: Readonly<Record<string, string | undefined>> }, never, R>,
  /** `[cluster] url` of the config files (of the current directory's project), if any. */
  configured: Effect.Effect<string | undefined, never, R2>
) => {
  const target = (flag: Option.Option<string>) =>
    Effect.gen(function*() {
      const { env } = yield* environment
      return yield* requireUrl(flag, env, yield* configured)
    })
  const migrate = {
    name: "migrate",
    description: "Create or update the cluster's tables (effect/cluster's cluster_* and Fibril's fibril_*)",
    run: (flags: { readonly cluster: Option.Option<string> }) =>
      Effect.gen(function*() {
        const url = yield* target(flags.cluster)
        yield* withDatabase(url, (node) => node.migrate, true)
        yield* Console.log(`fibril: the cluster database at ${redactUrl(url)} is ready`)
        return 0
      })
  }
  const prune = {
    run: (flags: { readonly cluster: Option.Option<string>; readonly olderThan: string }) =>
      Effect.gen(function*() {
        const url = yield* target(flags.cluster)
        const duration = Duration.fromInput(flags.olderThan as Duration.Input)
        if (Option.isNone(duration)) {
          return yield* new ModelSelection.UsageError({
            problem: `--older-than ${flags.olderThan}: not a duration; write e.g. "7 days", "12 hours", "30 minutes"`
          })
        }
        const gone = yield* withDatabase(url, (node) => node.prune(duration.value))
        yield* Console.log(
          `fibril: pruned ${gone.agents} finished agents older than ${flags.olderThan} and ${gone.messages} journal messages`
        )
        return 0
      })
  }
  const status = (flags: { readonly cluster: Option.Option<string>; readonly agentId: string }) =>
    Effect.gen(function*() {
      const client = yield* loadClient
      const rows = yield* asClient(yield* target(flags.cluster), client.tree(flags.agentId))
      if (rows.length === 0) return yield* new client.AgentNotFound({ agentId: flags.agentId })
      for (const row of rows) {
        yield* Console.log(JSON.stringify({
          agent_id: row.agentId,
          parent_id: row.parentId,
          depth: row.depth,
          role: row.role,
          status: row.status,
          run: row.run,
          steps: row.steps,
          detached: row.detached,
          ...(row.reason === null ? {} : { reason: row.reason }),
          ...(row.text === null ? {} : { text: row.text })
        }))
      }
      return 0
    })
  const cancel = (flags: { readonly cluster: Option.Option<string>; readonly agentId: string }) =>
    Effect.gen(function*() {
      const client = yield* loadClient
      yield* asClient(
        yield* target(flags.cluster),
        client.cancel(flags.agentId, "cancelled (fibril cluster cancel)")
      )
      yield* Console.log(`fibril: cancelled ${flags.agentId} and its non-detached descendants`)
      return 0
    })
  const input = (
    flags: { readonly cluster: Option.Option<string>; readonly agentId: string; readonly message: string }
  ) =>
    Effect.gen(function*() {
      const client = yield* loadClient
      const sent = yield* asClient(
        yield* target(flags.cluster),
        client.sendInput(flags.agentId, flags.message)
      )
      yield* Console.log(JSON.stringify({ agent_id: flags.agentId, delivered: sent.delivered, status: sent.status }))
      return sent.delivered ? 0 : 1
    })
  const resume = (
    flags: { readonly cluster: Option.Option<string>; readonly agentId: string; readonly message: string }
  ) =>
    Effect.gen(function*() {
      const client = yield* loadClient
      const outcome = yield* asClient(
        yield* target(flags.cluster),
        Effect.andThen(client.resume(flags.agentId, flags.message), client.await_(flags.agentId))
      )
      yield* Console.log(outcome.text)
      return 0
    })
  return { migrate, prune, status, cancel, input, resume, agentIdArgument, url: urlFlag }
}

export interface WorkerFlags {
  readonly url: string
  readonly cwd: string
  readonly settings: Parameters<typeof Session.optionsFrom>[0]
  readonly selection: ModelSelection.Selection
  /** The MCP servers whose tools its agents get (Runtime.mcpServersOf). */
  readonly mcpServers: ReadonlyArray<McpServers.Server>
  readonly maxConcurrent: number | undefined
  readonly shutdownTimeoutSecs: number
  readonly host: string
  readonly port: number | undefined
  readonly lockExpirationSecs: number | undefined
  /** The worker's database connections at most: also how many steps it runs at once. */
  readonly dbConnections: number
  /** FIBRIL_CLUSTER_STEP_LOG: a file each step's start and end are appended to (the tests count them). */
  readonly stepLog: string | undefined
}

/**
 * `fibril worker`: runs agents of the cluster for this workspace until stopped. A stop
 * (SIGTERM, Ctrl-C) is graceful — shards are handed back, steps in flight finish — and turns
 * hard after `--shutdown-timeout` seconds (the unfinished steps then run again elsewhere).
 */
export const worker = (flags: WorkerFlags) =>
  Effect.gen(function*() {
    const node = yield* loadNode
    const settings = flags.settings
    const session = { ...Session.defaults, ...Session.optionsFrom(settings) }
    const core = Layer.merge(
      AgentSteps.layer(session),
      Layer.empty
    ).pipe(
      Layer.provideMerge(
        Fibril.layerWithModels({
          cwd: flags.cwd,
          store: "memory",
          session,
          tools: settings.tools,
          deny: settings.permissions.deny,
          ask: settings.permissions.ask,
          sandbox: settings.sandbox,
          mcpServers: flags.mcpServers
        })
      ),
      Layer.provideMerge(ModelSelection.layer(flags.selection))
    )
    const port = flags.port ?? (yield* Effect.orDie(node.freePort(flags.host)))
    const stepLog = flags.stepLog
    const options: ClusterNode.WorkerOptions = {
      host: flags.host,
      port,
      maxDepth: settings.subagents.maxDepth,
      maxSteps: settings.agent.maxSteps,
      childMaxSteps: settings.subagents.maxSteps ?? settings.agent.maxSteps,
      childMaxTokens: settings.subagents.maxTokens,
      maxWallSecs: settings.subagents.maxWallSecs,
      treeMaxTokens: settings.subagents.treeMaxTokens,
      heartbeatSecs: settings.subagents.heartbeatTimeoutSecs,
      askTimeoutSecs: settings.permissions.askTimeoutSecs,
      // A role may name one of the workspace's agent definitions, as embedded.
      agents: yield* Fibril.loadAgents(flags.cwd),
      maxConcurrent: flags.maxConcurrent ?? settings.subagents.maxConcurrent,
      admission: settings.subagents.admission,
      rateLimit: RateLimiter.optionsFrom(settings),
      ...(flags.lockExpirationSecs === undefined
        ? {}
        : {
          lockExpiration: Duration.seconds(flags.lockExpirationSecs),
          lockRefresh: Duration.seconds(Math.max(1, flags.lockExpirationSecs / 3))
        }),
      ...(stepLog === undefined || stepLog === "" ? {} : { stepLog })
    }
    // The stop turns hard after --shutdown-timeout (Shutdown.ts starts the timer on the signal).
    Shutdown.setGrace(flags.shutdownTimeoutSecs * 1000, {
      message: `fibril worker: not stopped after ${flags.shutdownTimeoutSecs} s; stopping now\n`,
      code: 143
    })
    return yield* Effect.gen(function*() {
      yield* node.checkSchema
      yield* Effect.scoped(Effect.gen(function*() {
        yield* Layer.build(node.worker(options, core))
        yield* Console.error(
          `fibril worker: pid ${process.pid}, workspace ${flags.cwd}, runner ${flags.host}:${port}, cluster ${
            redactUrl(flags.url)
          }, max_concurrent ${options.maxConcurrent}, db_connections ${flags.dbConnections}`
        )
        return yield* Effect.never
      }))
    }).pipe(Effect.provide(node.database(flags.url, { maxConnections: flags.dbConnections })))
  })
