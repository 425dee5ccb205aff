/**
 * @fibril/cluster — durable sub-agents: each agent run an `effect/workflow` workflow on
 * `effect/cluster`, each model step and tool call an activity, with Postgres
 * (`@effect/sql-pg`) for the journal and the store, or `TestRunner` in memory for tests.
 */
export * as AgentWorkflow from "./AgentWorkflow.ts"
export * as ClusterClient from "./ClusterClient.ts"
export * as ClusterRateLimit from "./ClusterRateLimit.ts"
export * as ClusterStore from "./ClusterStore.ts"
export * as ClusterSubAgents from "./ClusterSubAgents.ts"
export * as PgClusterStore from "./PgClusterStore.ts"
export * as SqliteClusterStore from "./SqliteClusterStore.ts"
