/**
 * The agent runtime every command that runs agents in this process builds (`run`, `mcp`,
 * `agents resume`): the core services over the workspace's file store, configured from the
 * settings, on the model the command's flags select. One function, so that what `fibril
 * doctor` checks (ModelSelection.probe builds the same model layer) is what runs, and so that
 * the commands wire it the same way.
 */
import * as Approvals from "@fibril/core/Approvals"
import * as Fibril from "@fibril/core/Fibril"
import type * as FibrilConfig from "@fibril/core/FibrilConfig"
import * as McpServers from "@fibril/core/McpServers"
import * as ProcessIsolation from "@fibril/core/ProcessIsolation"
import * as RateLimiter from "@fibril/core/RateLimiter"
import * as Session from "@fibril/core/Session"
import * as SubAgentManager from "@fibril/core/SubAgentManager"
import type * as SubAgentStore from "@fibril/core/SubAgentStore"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as ChildHost from "./ChildHost.ts"
import type { Environment } from "./CliEnvironment.ts"
import * as ModelSelection from "./ModelSelection.ts"
import * as RunRecords from "./RunRecords.ts"

export interface Options {
  readonly cwd: string
  readonly settings: FibrilConfig.Settings
  readonly selection: ModelSelection.Selection
  /** `--max-concurrent`, over the settings' cap. */
  readonly maxConcurrent?: number | undefined
  /** The store's lease and limits (`FIBRIL_STORE_LEASE_MS`); default the store's own. */
  readonly storeLimits?: SubAgentStore.Limits | undefined
  /** Stream each model answer (`fibril run`; `--no-stream` turns it off). Default off. */
  readonly stream?: boolean | undefined
  /** How `ask` questions are decided (`fibril run --approve`); default deny, with a reason. */
  readonly approve?: Approvals.ApproveMode | undefined
  /** Replaces the policy of `approve` (`fibril mcp`: questions of a call whose client elicits wait for it). */
  readonly approvePolicy?: Approvals.Options["policy"] | undefined
  /** MCP servers whose tools the agents may use (`[mcp_servers.*]`, `.mcp.json`). */
  readonly mcpServers?: ReadonlyArray<McpServers.Server> | undefined
}

export const layer = (options: Options) => {
  const settings = SubAgentManager.optionsFrom(options.settings)
  // `isolation: "process"`: a child runs ChildHost on this Node, on the model this command selected.
  const subagents: SubAgentManager.Options = {
    ...settings,
    processIsolation: {
      ...ProcessIsolation.defaults,
      ...settings.processIsolation,
      host: ChildHost.host(
        ChildHost.modelOf(options.selection),
        options.selection.kind === "openai" ? options.selection.baseURL : undefined
      )
    }
  }
  return Fibril.layerWithModels({
    cwd: options.cwd,
    store: "file",
    storeLimits: options.storeLimits,
    session: { ...Session.optionsFrom(options.settings), stream: options.stream ?? false },
    subagents: options.maxConcurrent === undefined ? subagents : { ...subagents, maxConcurrent: options.maxConcurrent },
    tools: options.settings.tools,
    deny: options.settings.permissions.deny,
    ask: options.settings.permissions.ask,
    sandbox: options.settings.sandbox,
    mcpServers: options.mcpServers
  }).pipe(
    Layer.provideMerge(
      // One rate limiter for the process's model calls, as `[rate_limit]` says.
      ModelSelection.layer(options.selection).pipe(
        Layer.provide(RateLimiter.layer(RateLimiter.optionsFrom(options.settings)))
      )
    ),
    // One approver for the process's agents: its manager answers other processes' requests with it.
    Layer.provideMerge(Approvals.layer({
      timeout: `${options.settings.permissions.askTimeoutSecs ?? 300} seconds`,
      policy: options.approvePolicy ?? Approvals.policyOf(options.approve ?? "deny"),
      allow: options.settings.permissions.allow,
      fanOut: {
        maxAgents: options.settings.permissions.fanOutMaxAgents,
        maxUsd: options.settings.permissions.fanOutMaxUsd,
        usdPerMtok: options.settings.permissions.usdPerMtok,
        tokensPerAgent: options.settings.subagents.maxTokens,
        treeMaxTokens: options.settings.subagents.treeMaxTokens
      }
    }))
  )
}

export type ModelFlags = ModelSelection.ModelFlags

/** The model a command on the workspace `cwd` runs on: its flags, the environment, the settings. */
export const select = ModelSelection.fromFlags

export interface Flags extends ModelFlags {
  /** `--max-concurrent`. */
  readonly maxConcurrent?: Option.Option<number> | undefined
  /** `--stream` / `--no-stream` (`fibril run`). */
  readonly stream?: boolean | undefined
  /** `--approve` (`fibril run`). */
  readonly approve?: Approvals.ApproveMode | undefined
  /** Replaces `approve`'s policy (see `Options.approvePolicy`). */
  readonly approvePolicy?: Approvals.Options["policy"] | undefined
}

/**
 * The runtime of a command from what it was given: the model its flags select (or `selection`,
 * made already), the store's limits from the environment (`FIBRIL_STORE_LEASE_MS`), and
 * {@link layer} built from them. The selection comes back too, for the command to describe.
 */
export const make = Effect.fn("fibril.runtime.make")(function*(
  environment: Environment,
  cwd: string,
  settings: FibrilConfig.Settings,
  flags: Flags,
  selected?: ModelSelection.Selection
) {
  const selection = selected ?? (yield* select(environment, cwd, settings, flags))
  const storeLimits = yield* RunRecords.storeLimits(environment.env)
  const mcpServers = yield* McpServers.forProcess({ cwd, home: environment.home, env: environment.env })
  return {
    selection,
    layer: layer({
      cwd,
      settings,
      selection,
      maxConcurrent: Option.getOrUndefined(flags.maxConcurrent ?? Option.none()),
      storeLimits,
      stream: flags.stream,
      approve: flags.approve,
      approvePolicy: flags.approvePolicy,
      mcpServers
    })
  }
})
