/**
 * An agent's role and rules in cluster mode, from its payload's chain of grants: the embedded
 * runtime's derivation (core's SpawnPlan.resolveRole, Permission.grantFor and effective), so a
 * role that names an agent definition gets its prompt, tools, denials and asks on either engine.
 */
import type { AgentDefinitions } from "@fibril/core"
import * as McpNarrowing from "@fibril/core/McpNarrowing"
import * as Permission from "@fibril/core/Permission"
import * as Roles from "@fibril/core/Roles"
import * as SpawnPlan from "@fibril/core/SpawnPlan"
import * as Effect from "effect/Effect"
import type { Grant } from "../ClusterStore.ts"

/**
 * A role as a spawn resolved it (checkSpawn): a built-in one, or an agent definition over its
 * base role, with the definition's tools, denials and asks (core's SpawnPlan.resolveRole, the
 * embedded runtime's).
 */
export const resolveRole = (agents: ReadonlyArray<AgentDefinitions.AgentDefinition>, name: string) =>
  Roles.resolve(name).pipe(
    Effect.map((role): Pick<SpawnPlan.ResolvedRole, "role" | "definition"> => ({ role, definition: undefined })),
    Effect.catchTag("UnknownRole", () => SpawnPlan.resolveRole(agents, name, undefined))
  )

/**
 * An agent's rules: its chain's grants applied in turn to the root rules (Permission, rule 1),
 * each with its role's definition when it names one, as the embedded runtime derives a child's
 * rules from its parent's. A grant's MCP servers deny every other server of `mcpServers` (the
 * servers this worker has: McpNarrowing).
 */
export const rulesFor = (
  root: Permission.Rules,
  maxDepth: number,
  grants: ReadonlyArray<Grant>,
  agents: ReadonlyArray<AgentDefinitions.AgentDefinition> = [],
  mcpServers: ReadonlyArray<string> = []
) =>
  Effect.orDie(Effect.gen(function*() {
    let rules = root
    for (const grant of grants) {
      const { definition, role } = yield* resolveRole(agents, grant.role)
      rules = Permission.effective(
        rules,
        Permission.grantFor(grant.depth, maxDepth, role, {
          allowedTools: grant.allowedTools,
          askTools: grant.askTools,
          definition,
          servers: McpNarrowing.ceiling(grant.mcpServers, mcpServers)
        })
      )
    }
    return rules
  }))
