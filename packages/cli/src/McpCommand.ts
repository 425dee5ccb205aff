/**
 * `fibril mcp`: runs the MCP server (Mcp.ts) on stdio, with the same configuration and model
 * selection as `fibril run` (flags > environment > `.fibril/config.toml`; `--model
 * scripted:<file>` for the ScriptedModel) and the file store in `<cwd>/.fibril/state`.
 *
 * Closing stdin is the normal end (exit 0): running agents are cancelled and the records
 * flushed. Configuration and model-flag errors surface before anything is served (exit 2, like
 * `fibril run`); the agent runtime is built at the first call (McpRuntime), and one that
 * cannot be built ends the server then, with the same exit.
 */
import { redactUrl } from "@fibril/core/Secrets"
import { Command, Flag } from "effect/cli"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import { loadConfig, ProcessEnvironment, resolveCwd } from "./CliEnvironment.ts"
import * as CliFlags from "./CliFlags.ts"
import * as ClusterCommand from "./ClusterCommand.ts"
import type * as McpModule from "./Mcp.ts"
import type * as McpApprovalsModule from "./McpApprovals.ts"
import * as McpRuntime from "./McpRuntime.ts"
import type * as ModelSelectionModule from "./ModelSelection.ts"

/** The `mcp` command; `version` is the one the server tells its clients. */
export const make = (version: string) =>
  Command.make(
    "mcp",
    {
      model: CliFlags.model,
      baseUrl: CliFlags.baseUrl,
      maxConcurrent: CliFlags.maxConcurrent,
      approve: CliFlags.approve,
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
      const [Mcp, McpApprovals]: [typeof McpModule, typeof McpApprovalsModule] = yield* Effect.promise(() =>
        Promise.all([import("./Mcp.ts"), import("./McpApprovals.ts")])
      )
      const environment = yield* ProcessEnvironment
      const cwd = yield* resolveCwd(flags.cwd)
      const config = yield* loadConfig(cwd)
      const url = ClusterCommand.clusterUrl(flags.cluster, environment.env, config.settings.cluster.url)
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
      // The model flags are checked before serving, as `fibril run` checks them.
      const ModelSelection: typeof ModelSelectionModule = yield* Effect.promise(() => import("./ModelSelection.ts"))
      const selection = yield* ModelSelection.fromFlags(environment, cwd, config.settings, flags)
      // Questions of a call whose client can be elicited wait for it; the others, as --approve says.
      const registry = new Map<string, number>()
      // The runtime is loaded and built behind the server, at the first call (McpRuntime): a
      // client waits for the tool list at the start of every session, and the list needs the
      // tool definitions only.
      const runtime = Layer.unwrap(Effect.gen(function*() {
        const Runtime = yield* Effect.promise(() => import("./Runtime.ts"))
        const made = yield* Runtime.make(environment, cwd, config.settings, {
          ...flags,
          approvePolicy: McpApprovals.policy(registry, flags.approve ?? "deny")
        }, selection)
        return made.layer
      }))
      const server = Mcp.layerStdio({ version }).pipe(
        Layer.provideMerge(McpRuntime.layer(runtime)),
        Layer.provide(Layer.succeed(McpApprovals.Registry, registry))
      )
      yield* Effect.logInfo(
        `fibril mcp: serving on stdio (workspace ${cwd}, ${ModelSelection.describe(selection)})`
      )
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
