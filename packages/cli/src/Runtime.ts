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
import * as Layer from "effect/Layer"
import * as ModelSelection from "./ModelSelection.ts"

export interface Options {
  readonly cwd: string
  readonly settings: FibrilConfig.Settings
  readonly selection: ModelSelection.Selection
  /** `--max-concurrent`, over the settings' cap. */
  readonly maxConcurrent?: number | undefined
}

export const layer = (options: Options) => {
  const subagents = SubAgentManager.optionsFrom(options.settings)
  return Fibril.layerWithModels({
    cwd: options.cwd,
    store: "file",
    session: Session.optionsFrom(options.settings),
    subagents: options.maxConcurrent === undefined ? subagents : { ...subagents, maxConcurrent: options.maxConcurrent },
    tools: options.settings.tools,
    deny: options.settings.permissions.deny,
    sandbox: options.settings.sandbox
  }).pipe(Layer.provideMerge(ModelSelection.layer(options.selection)))
}
