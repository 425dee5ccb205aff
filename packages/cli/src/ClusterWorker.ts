/**
 * `fibril worker`: runs the cluster's agents for this workspace (the engine, the tools and the
 * model of an embedded run, on effect/cluster). A module of its own, imported when the command
 * runs: parsing and help do not load the runtime (docs/performance.md, start-up).
 */
import type * as ClusterNode from "@fibril/cluster/Node"
import * as AgentSteps from "@fibril/core/AgentSteps"
import * as Fibril from "@fibril/core/Fibril"
import type * as McpServers from "@fibril/core/McpServers"
import * as RateLimiter from "@fibril/core/RateLimiter"
import { redactUrl } from "@fibril/core/Secrets"
import * as Session from "@fibril/core/Session"
import * as SubAgentManager from "@fibril/core/SubAgentManager"
import * as Console from "effect/Console"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { loadNode } from "./ClusterCommand.ts"
import * as ModelSelection from "./ModelSelection.ts"
import * as Shutdown from "./Shutdown.ts"

export interface WorkerFlags {
  readonly url: string
  readonly cwd: string
  readonly settings: Parameters<typeof Session.optionsFrom>[0]
  readonly selection: ModelSelection.Selection
  /** The MCP servers whose tools its agents get (McpServers.forProcess). */
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
      askAllow: settings.permissions.allow,
      // A role may name one of the workspace's agent definitions, as embedded.
      agents: yield* Fibril.loadAgents(flags.cwd),
      maxConcurrent: flags.maxConcurrent ?? settings.subagents.maxConcurrent,
      admission: settings.subagents.admission,
      roleMcpServers: SubAgentManager.optionsFrom(settings).roleMcpServers,
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
