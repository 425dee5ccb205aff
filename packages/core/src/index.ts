/**
 * @fibril/core — an Effect-native sub-agent runtime.
 *
 * Services (one module each): Session, ToolRegistry, Permission, Workspace, AgentEvents,
 * FibrilConfig; the built-in tools and `task`; roles and the output contract. `Fibril.layer`
 * composes them; an application adds a `LanguageModel` and the platform services.
 */
export * as AgentDefinitions from "./AgentDefinitions.ts"
export * as AgentEvents from "./AgentEvents.ts"
export * as AgentLoop from "./AgentLoop.ts"
export * as AgentStatus from "./AgentStatus.ts"
export * as AgentSteps from "./AgentSteps.ts"
export * as BuiltinTools from "./BuiltinTools.ts"
export * as DirectModel from "./DirectModel.ts"
export * as Fibril from "./Fibril.ts"
export * as FibrilConfig from "./FibrilConfig.ts"
export * as Heartbeat from "./Heartbeat.ts"
export * as Memory from "./Memory.ts"
export * as Models from "./Models.ts"
export * as OutputContract from "./OutputContract.ts"
export * as Permission from "./Permission.ts"
export * as Roles from "./Roles.ts"
export * as Sandbox from "./Sandbox.ts"
export * as Secrets from "./Secrets.ts"
export * as Session from "./Session.ts"
export * as SpawnPlan from "./SpawnPlan.ts"
export * as SqliteSubAgentStore from "./SqliteSubAgentStore.ts"
export * as SubAgentErrors from "./SubAgentErrors.ts"
export * as SubAgentManager from "./SubAgentManager.ts"
export * as SubAgentRecord from "./SubAgentRecord.ts"
export * as SubAgentStore from "./SubAgentStore.ts"
export * as TaskToolkit from "./TaskToolkit.ts"
export * as ToolRegistry from "./ToolRegistry.ts"
export * as AgentTools from "./tools/Agents.ts"
export * as TaskTool from "./tools/Task.ts"
export * as Usage from "./Usage.ts"
export * as Workspace from "./Workspace.ts"
export * as Worktrees from "./Worktrees.ts"
