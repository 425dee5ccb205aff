/**
 * `fibril ui`: the live web page of the workspace's agents (every process on the workspace),
 * or with `--cluster <url>` of a cluster's; and `fibril run --ui`, the same page for the run it
 * starts, with the run's AG-UI events at `/agui`. The server is UiServer.ts, the data UiData.ts.
 */
import { Command } from "effect/cli"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import { loadConfig, ProcessEnvironment, resolveCwd, stateDir as stateDirOf } from "./CliEnvironment.ts"
import * as CliFlags from "./CliFlags.ts"
import * as ClusterCommand from "./ClusterCommand.ts"

// Loaded when used: the HTTP server, the page's data and AG-UI are not part of every command's start-up.
const loadServer = Effect.promise(() => Promise.all([import("./UiServer.ts"), import("./UiData.ts")]))
const loadAgUi = Effect.promise(() => import("./AgUi.ts"))
const loadUiCluster = Effect.promise(() => import("./UiCluster.ts"))
// The store's service, imported when the page is served (parsing and help do not load the store).
const loadStore = Effect.promise(() => import("@fibril/core/SubAgentStore"))

/**
 * The page for the run this process is about to start (`fibril run --ui`): the workspace's
 * store as every process writes it, and this run's events as AG-UI. Call it before the root
 * starts, in the scope the server should live in.
 */
export const forRun = Effect.fn("fibril.ui.forRun")(function*(options: {
  readonly stateDir: string
  readonly cap: number | undefined
  readonly prices?: Readonly<Record<string, number>> | undefined
}) {
  const SubAgentStore = yield* loadStore
  const store = yield* SubAgentStore.SubAgentStore
  const [UiServer, UiData] = yield* loadServer
  const agui = yield* Effect.flatMap(loadAgUi, (module) => module.record)
  const serving = yield* UiServer.serve({ data: UiData.fromStore(store, options), agui })
  yield* UiServer.announce(serving)
  return serving
})

/**
 * `fibril run --agui`: this run's events as AG-UI JSON lines on stdout, until its root ends.
 * Call it before the root starts; join the fiber it returns after the run.
 */
export const printAgUi = Effect.gen(function*() {
  const events = yield* Effect.flatMap(loadAgUi, (module) => module.record)
  return yield* Stream.runForEach(events, (event) => Console.log(JSON.stringify(event))).pipe(Effect.forkScoped)
})

export const command = Command.make(
  "ui",
  { cwd: CliFlags.cwd, cluster: ClusterCommand.clusterFlag },
  Effect.fn("fibril.ui.command")(function*(flags) {
    const environment = yield* ProcessEnvironment
    const cwd = yield* resolveCwd(flags.cwd)
    const config = yield* loadConfig(cwd)
    const cap = config.settings.subagents.maxConcurrent
    const prices = config.settings.permissions.usdPerMtok
    const clusterUrl = ClusterCommand.clusterUrl(flags.cluster, environment.env, config.settings.cluster.url)
    if (clusterUrl !== undefined) {
      return yield* Effect.flatMap(loadUiCluster, (module) => module.serve(clusterUrl, cap, prices))
    }
    const stateDir = stateDirOf(cwd)
    const SqliteSubAgentStore = yield* Effect.promise(() => import("@fibril/core/SqliteSubAgentStore"))
    const SubAgentStore = yield* loadStore
    return yield* Effect.scoped(Effect.gen(function*() {
      const store = yield* SubAgentStore.SubAgentStore
      const [UiServer, UiData] = yield* loadServer
      yield* UiServer.announce(yield* UiServer.serve({ data: UiData.fromStore(store, { stateDir, cap, prices }) }))
      return yield* Effect.never
    })).pipe(Effect.provide(SqliteSubAgentStore.layerSqlite({ dir: stateDir })))
  })
).pipe(
  Command.withDescription(
    "A live web page of this workspace's agents (every process; --cluster for a cluster's), on 127.0.0.1 with a token"
  ),
  Command.withExamples([
    { command: "fibril ui", description: "Prints the URL (random port and token); Ctrl-C stops it" },
    { command: "fibril run \"Explore\" --ui", description: "The same page for one run, plus its AG-UI events at /agui" }
  ])
)
