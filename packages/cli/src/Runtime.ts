/**
 * The agent runtime every command that runs agents builds (`run`, `mcp`, `agents resume` and
 * the other `agents` commands on the file store): the core services over the workspace's file
 * store, configured from the settings, on the selected model. One function, so that what
 * `fibril doctor` checks (ModelSelection.probe builds the same model layer) is what runs.
 */
import * as Fibril from "@fibril/core/Fibril"
import type * as FibrilConfig from "@fibril/core/FibrilConfig"
import * as Session from "@fibril/core/Session"
import * as SubAgentManager from "@fibril/core/SubAgentManager"
import type * as SubAgentStore from "@fibril/core/SubAgentStore"
import * as Layer from "effect/Layer"
import * as ModelSelection from "./ModelSelection.ts"

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
}

export const layer = (options: Options) => {
  const subagents = SubAgentManager.optionsFrom(options.settings)
  return Fibril.layerWithModels({
    cwd: options.cwd,
    store: "file",
    storeLimits: options.storeLimits,
    session: { ...Session.optionsFrom(options.settings), stream: options.stream ?? false },
    subagents: options.maxConcurrent === undefined ? subagents : { ...subagents, maxConcurrent: options.maxConcurrent },
    tools: options.settings.tools,
    deny: options.settings.permissions.deny,
    sandbox: options.settings.sandbox
  }).pipe(Layer.provideMerge(ModelSelection.layer(options.selection)))
}
