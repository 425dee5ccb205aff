/**
 * A spawn request checked as the embedded engine checks it (core's SpawnCheck and SpawnPlan),
 * in cluster mode: the one call site of spawn validation there (ClusterSubAgents re-exports it).
 */
import type * as AgentDefinitions from "@fibril/core/AgentDefinitions"
import * as McpNarrowing from "@fibril/core/McpNarrowing"
import type * as Models from "@fibril/core/Models"
import * as OutputSchema from "@fibril/core/OutputSchema"
import * as Permission from "@fibril/core/Permission"
import * as SpawnCheck from "@fibril/core/SpawnCheck"
import * as SpawnPlan from "@fibril/core/SpawnPlan"
import * as SubAgentManager from "@fibril/core/SubAgentManager"
import type * as ToolRegistry from "@fibril/core/ToolRegistry"
import * as Effect from "effect/Effect"

/**
 * `isolation` in cluster mode: refused. A cluster agent runs on whichever worker claims it, so
 * a worktree would have to live on that worker's own clone of the repository, and its branch
 * be fetched back by the parent's worker to merge; the cluster does not manage clones, and a
 * process per agent is what a worker already is.
 */
const isolationRefused = (mode: SubAgentManager.Isolation) =>
  new SubAgentManager.IsolationUnavailable({
    mode,
    reason: mode === "worktree"
      ? "in cluster mode an agent runs on whichever worker claims it, and a worktree would live on that worker's own clone, which the cluster does not manage (run embedded, without --cluster, for worktrees)"
      // A child of the cluster is a workflow any worker may run, resume or take over: there is
      // no one parent process to own its OS process (docs/subagents.md, "Process isolation").
      : "in cluster mode a child is a workflow that any worker may run and take over, not a process of its parent (and every agent already runs in a worker process)",
    accepted: []
  })

/** What a worker (or a client) checks a spawn request against; absent: not checked here. */
export interface SpawnChecks {
  readonly registry?: ToolRegistry.ToolRegistry["Service"] | undefined
  readonly models?: Models.Models["Service"] | undefined
  readonly callerModel?: string | undefined // a child may name its caller's model
  /** The caller's rules: a child's MCP servers must be among those it may use (absent: any there are). */
  readonly rules?: Permission.Rules | undefined
  /** MCP servers per role (`[roles.<role>] mcp_servers`). */
  readonly roleMcpServers?: Readonly<Record<string, ReadonlyArray<string>>> | undefined
  /** The workspace's agent definitions a role may name (AgentWorkflow's `agents`). */
  readonly agents?: ReadonlyArray<AgentDefinitions.AgentDefinition> | undefined
}

/**
 * A child's MCP servers: its definition's, its role's (configured) and the request's, met (as
 * SpawnPlan does embedded); undefined: its parent's.
 */
const serversOf = (
  request: SubAgentManager.SpawnRequest,
  resolved: Pick<SpawnPlan.ResolvedRole, "role" | "mcpServers">,
  checks: SpawnChecks
) => [resolved.mcpServers, checks.roleMcpServers?.[resolved.role.name.toLowerCase()], request.mcpServers] as const

/**
 * A spawn request's role and model, or why it is refused: the bounds of its texts, the role
 * (`custom` needs `allowed_tools`), `allowed_tools` naming tools that exist, a model the
 * runtime serves. The one call site of spawn validation in cluster mode.
 */
export const checkSpawn = (request: SubAgentManager.SpawnRequest, checks: SpawnChecks) =>
  Effect.gen(function*() {
    // Core's checks (SpawnPlan), each the embedded engine's own: the texts' bounds, the role,
    // `allowed_tools` naming tools that exist, a model the runtime serves.
    const tooLong = SpawnCheck.checkText(request)
    if (tooLong !== undefined) return yield* tooLong
    if (request.isolation !== undefined) return yield* isolationRefused(request.isolation)
    const resolved = yield* SpawnPlan.resolveRole(checks.agents ?? [], request.role ?? "general", request.allowedTools)
    const role = resolved.role
    if (checks.registry !== undefined) {
      yield* SpawnPlan.checkAllowedTools(checks.registry, role.name, request.allowedTools)
      yield* SpawnPlan.checkAskTools(checks.registry, role.name, request.askTools)
      // Its MCP servers: among the caller's, and servers this worker has (McpNarrowing).
      const servers = serversOf(request, resolved, checks)
      const named = McpNarrowing.named(...servers)
      if (named.length > 0) {
        const universe = checks.registry.mcpServers()
        yield* McpNarrowing.grant(
          role.name,
          checks.rules ?? Permission.allowAll,
          universe,
          McpNarrowing.meet(...servers),
          named
        )
      }
    }
    const models = checks.models
    // A schema outside the supported subset is refused here, as SpawnPlan refuses it.
    if (request.outputSchema !== undefined) yield* Effect.fromResult(OutputSchema.compile(request.outputSchema))
    if (models !== undefined && request.model !== undefined) {
      const unknown = models.available === undefined
        ? SpawnCheck.checkModel(request.model, [models.defaultModel, checks.callerModel])
        : undefined
      if (unknown !== undefined) return yield* unknown
      yield* models.resolve(request.model)
    }
    return resolved
  })

/** The MCP servers a checked spawn's child gets (undefined: its parent's). */
export const mcpServersOf = (
  request: SubAgentManager.SpawnRequest,
  resolved: Pick<SpawnPlan.ResolvedRole, "role" | "mcpServers">,
  checks: SpawnChecks
) => McpNarrowing.meet(...serversOf(request, resolved, checks))
