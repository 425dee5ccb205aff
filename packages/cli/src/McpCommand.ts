/**
 * `fibril mcp`: runs the MCP server (Mcp.ts) on stdio, with the same configuration and model
 * selection as `fibril run` (flags > environment > `.fibril/config.toml`; `--model
 * scripted:<file>` for the ScriptedModel) and the file store in `<cwd>/.fibril/state`.
 *
 * Closing stdin is the normal end (exit 0): running agents are cancelled and the records
 * flushed. Configuration errors surface before anything is served (exit 2, like `fibril run`).
 *
 * Built by `make(ProcessEnvironment)` rather than importing Cli.ts, which registers it.
 */
import { redactUrl } from "@fibril/core/Secrets"
import { Command, Flag } from "effect/cli"
import type * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type { Environment } from "./Cli.ts"
import * as ClusterCommand from "./ClusterCommand.ts"
import * as ConfigFlags from "./ConfigFlags.ts"
import type * as McpModule from "./Mcp.ts"
import * as ModelSelection from "./ModelSelection.ts"
import * as RunRecords from "./RunRecords.ts"
import * as Runtime from "./Runtime.ts"
import * as Workspace from "./Workspace.ts"

export const make = <I>(environment: Context.Key<I, Environment>, version: string) =>
  Command.make(
    "mcp",
    {
      model: Flag.String("model").pipe(
        Flag.withDescription(
          "Model id (default FIBRIL_MODEL, the config's model, gpt-4.1-mini), or scripted:<file> for the ScriptedModel"
        ),
        Flag.optional
      ),
      baseUrl: Flag.String("base-url").pipe(
        Flag.withDescription("OpenAI-compatible endpoint, …/v1 (default OPENAI_BASE_URL, else OpenAI)"),
        Flag.optional
      ),
      maxConcurrent: Flag.Int("max-concurrent").pipe(
        Flag.withSchema(Schema.Int.pipe(Schema.check(Schema.isBetween({ minimum: 1, maximum: 20 })))),
        Flag.withDescription("Sub-agent concurrency cap, 1..20"),
        Flag.optional
      ),
      cwd: Flag.String("cwd").pipe(
        Flag.withDescription(
          "The workspace, an existing directory (default: the project around the directory the client starts the server in)"
        ),
        Flag.optional
      ),
      cluster: ClusterCommand.clusterFlag
    },
    Effect.fn("fibril.mcp.command")(function*(flags) {
      // The MCP server (effect's MCP, RPC and HTTP modules) is loaded by this command only.
      const Mcp: typeof McpModule = yield* Effect.promise(() => import("./Mcp.ts"))
      const env = yield* environment
      const cwd = yield* Workspace.resolve(flags.cwd, env)
      const config = yield* ConfigFlags.load(env, cwd)
      const url = ClusterCommand.clusterUrl(flags.cluster, env.env, config.settings.cluster.url)
      if (url !== undefined) {
        // A client of the cluster: the agents run on its workers (no model is needed here).
        const { layerStdio } = yield* Effect.promise(() => import("./McpCluster.ts"))
        const node = yield* Effect.promise(() => import("@fibril/cluster/Node"))
        const server = layerStdio({ version, workspace: cwd }).pipe(
          Layer.provide(node.client),
          Layer.provide(Layer.effectDiscard(node.checkSchema)),
          Layer.provide(node.database(url))
        )
        yield* Effect.logInfo(`fibril mcp: serving on stdio (workspace ${cwd}, cluster ${redactUrl(url)})`)
        return yield* Mcp.serve(server)
      }
      const selection = yield* ModelSelection.select({
        model: Option.getOrUndefined(flags.model),
        baseUrl: Option.getOrUndefined(flags.baseUrl),
        env: env.env,
        settings: config.settings,
        cwd,
        invocationDir: env.cwd
      })
      const core = Runtime.layer({
        cwd,
        settings: config.settings,
        selection,
        maxConcurrent: Option.getOrUndefined(flags.maxConcurrent),
        storeLimits: yield* RunRecords.storeLimits(env.env)
      })
      const server = Mcp.layerStdio({ version }).pipe(Layer.provide(core))
      yield* Effect.logInfo(`fibril mcp: serving on stdio (workspace ${cwd}, ${ModelSelection.describe(selection)})`)
      yield* Mcp.serve(server)
    }, Effect.provideService(Logger.LogToStderr, true))
  ).pipe(
    Command.withDescription("Serve task and the agent_* tools over MCP (stdio) for Claude Code, opencode, Cursor, ..."),
    Command.withExamples([
      {
        command: "claude mcp add fibril --transport stdio -e OPENAI_API_KEY=sk-… -- fibril mcp --model gpt-4.1-mini",
        description: "Register it with Claude Code (docs/mcp.md for opencode, Cursor, the Inspector)"
      },
      { command: "fibril mcp --model scripted:script.json", description: "Offline, on a scripted model" },
      {
        command: "fibril mcp --cluster postgres://fibril@db:5432/fibril",
        description: "The agents run durably on the cluster's workers (docs/cluster.md)"
      }
    ])
  )
