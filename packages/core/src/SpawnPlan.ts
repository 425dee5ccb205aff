/**
 * SpawnPlan — a spawn request checked and resolved once, for every engine.
 *
 * `resolve` turns a request into a {@link Plan}: its texts within their bounds (SpawnCheck),
 * its role (a built-in role, or an agent defined in markdown), its `allowed_tools` naming only
 * tools that exist, and its model chosen and resolved — once: the embedded SubAgentManager
 * hands the resolved model to the session it creates. It needs only the model catalog, the
 * tool registry and the settings, so the cluster's workflow can call it as well.
 *
 * Model choice: the request's model, else the definition's, else the role's (`[subagents]
 * *_model`), else the sub-agents' default; with none of those, the parent's (the `model` of the
 * plan is then undefined and the child runs on its parent's model, resolved already).
 */
import type * as LanguageModel from "effect/ai/LanguageModel"
import * as Effect from "effect/Effect"
import * as AgentDefinitions from "./AgentDefinitions.ts"
import * as RulePatterns from "./internal/rulePatterns.ts"
import * as McpNarrowing from "./McpNarrowing.ts"
import type { Models, UnknownModel } from "./Models.ts"
import * as OutputSchema from "./OutputSchema.ts"
import * as Permission from "./Permission.ts"
import * as Roles from "./Roles.ts"
import * as SpawnCheck from "./SpawnCheck.ts"
import type { ToolRegistry } from "./ToolRegistry.ts"

/** A request as a spawn plan reads it (SubAgentManager.SpawnRequest is one). */
export interface Request {
  readonly prompt: string
  readonly description?: string | undefined
  readonly role?: string | undefined
  readonly model?: string | undefined
  readonly allowedTools?: ReadonlyArray<string> | undefined
  /** `ask_tools`: tool names and postures whose calls wait for a person (Permission rule 5). */
  readonly askTools?: ReadonlyArray<string> | undefined
  /** `output_schema`: the JSON Schema the result must match (a definition's, when absent). */
  readonly outputSchema?: OutputSchema.JsonSchema | undefined
  /** `mcp_servers`: the MCP servers it may use, within its parent's (McpNarrowing). */
  readonly mcpServers?: ReadonlyArray<string> | undefined
}

/** A role as a request resolves it: a built-in one, or a markdown definition over its base role. */
export interface ResolvedRole {
  readonly role: Roles.RoleSpec
  /** The caller's `allowed_tools`: a ceiling of their own, met with the definition's tools. */
  readonly allowedTools: ReadonlyArray<string> | undefined
  /** A markdown definition's tools and denials, as a ceiling. */
  readonly definition: Permission.Ceiling | undefined
  /** A markdown definition's model and step budget. */
  readonly model: string | undefined
  readonly maxSteps: number | undefined
  /** A markdown definition's `output_schema`. */
  readonly outputSchema?: OutputSchema.JsonSchema | undefined
  /** A markdown definition's `isolation` (a request's own wins). */
  readonly isolation?: "worktree" | "process" | undefined
  /** A markdown definition's `mcpServers` names (its inline servers' included). */
  readonly mcpServers?: ReadonlyArray<string> | undefined
}

/** Everything a spawn needs, checked. */
export interface Plan extends ResolvedRole {
  /** The model id the agent runs on; undefined: its parent's. */
  readonly model: string | undefined
  /** `model`, resolved (undefined with `model`). */
  readonly languageModel: LanguageModel.LanguageModel | undefined
  /** The request's (or the definition's) output schema, checked against the subset and compiled. */
  readonly output: OutputSchema.Compiled | undefined
  /** The caller's `ask_tools`, checked: a ceiling that only adds asks. */
  readonly askTools: ReadonlyArray<string> | undefined
  /**
   * The MCP servers it may use: the meet of its definition's, its role's (`[roles.<name>]
   * mcp_servers`) and the request's; undefined: its parent's. Checked against the parent's
   * when its session is created (McpNarrowing).
   */
  readonly mcpServers: ReadonlyArray<string> | undefined
  /** Every server name those sources gave: each must be one the parent may use. */
  readonly mcpServersNamed: ReadonlyArray<string>
}

/** What a plan is resolved against: the catalog, the tools, the sub-agent settings. */
export interface Context {
  readonly models: Models["Service"]
  readonly registry: ToolRegistry["Service"]
  /** Agent types defined in markdown files, usable as `subagent_type`. */
  readonly agents: ReadonlyArray<AgentDefinitions.AgentDefinition>
  /** Model per role (`[subagents] *_model`, `[subagents.models]`). */
  readonly roleModels: Readonly<Record<string, string>>
  /** `[subagents] default_model`. */
  readonly defaultModel: string | undefined
  /** MCP servers per role (`[roles.<name>] mcp_servers`). */
  readonly roleMcpServers?: Readonly<Record<string, ReadonlyArray<string>>> | undefined
}

export interface ResolveOptions {
  /**
   * The root of a tree (`fibril run`'s agent): its prompt is the user's own and so not
   * bounded, and its model falls back to the catalog's default rather than a parent's.
   */
  readonly root?: boolean | undefined
  /**
   * The parent's model: a model named at spawn may be the parent's. Asked only when a named
   * model is none of the configured ones.
   */
  readonly parentModel?: Effect.Effect<string | undefined> | undefined
}

export type PlanError =
  | OutputSchema.UnsupportedOutputSchema
  | SpawnCheck.SpawnTextTooLong
  | Roles.UnknownRole
  | Roles.InvalidRoleRequest
  | UnknownModel

/**
 * A built-in role, or an agent defined in markdown (its base role's posture, its own prompt,
 * its tools as a ceiling of their own). The caller's `allowed_tools` stay a separate
 * ceiling: they narrow a definition's tools, never replace them. Eager forms: a role is
 * decided at once, so the spawn path reads the result as an Exit, at no step of its own.
 */
export const resolveRole = (
  agents: ReadonlyArray<AgentDefinitions.AgentDefinition>,
  name: string,
  allowedTools: ReadonlyArray<string> | undefined
): Effect.Effect<ResolvedRole, Roles.UnknownRole | Roles.InvalidRoleRequest> =>
  Effect.catchEager(
    Effect.mapEager(Roles.forRequest(name, allowedTools), (role): ResolvedRole => ({
      role,
      allowedTools,
      definition: undefined,
      model: undefined,
      maxSteps: undefined
    })),
    (error): Effect.Effect<ResolvedRole, Roles.UnknownRole | Roles.InvalidRoleRequest> => {
      if (error._tag !== "UnknownRole") return Effect.fail(error)
      const definition = AgentDefinitions.find(agents, name)
      if (definition === undefined) {
        const custom = agents.filter((d) => d.usableAsSubagent).map((d) => d.name)
        return Effect.fail(new Roles.UnknownRole({ name, accepted: error.accepted, custom }))
      }
      const base = Roles.roles[definition.baseRole]
      const role: Roles.RoleSpec = {
        ...base,
        name: definition.name,
        description: definition.description,
        needsAllowedTools: false,
        prompt: `${definition.prompt}\n\n${Roles.outputContract}`
      }
      return Effect.succeed({
        role,
        allowedTools,
        definition: { allow: definition.allowedTools, deny: definition.deniedTools, ask: definition.askTools },
        model: definition.model,
        maxSteps: definition.maxSteps,
        ...(definition.outputSchema === undefined ? {} : { outputSchema: definition.outputSchema }),
        isolation: definition.isolation,
        ...(definition.mcpServers === undefined ? {} : { mcpServers: definition.mcpServers.names })
      })
    }
  )

/**
 * `allowed_tools` may name only tools that exist: a misspelt name would otherwise leave the
 * agent silently without that tool. (A tool that exists but the caller may not use is not an
 * error: permissions only narrow, and the ceiling simply does not give it.)
 */
/**
 * `ask_tools` may name only tools that exist or postures: an entry that matches nothing would
 * silently ask nothing, the opposite of what the caller meant.
 */
export const checkAskTools = (
  registry: ToolRegistry["Service"],
  role: string,
  askTools: ReadonlyArray<string> | undefined
): Effect.Effect<void, Roles.InvalidRoleRequest> => {
  // A `tool(pattern)` entry (`shell(git push *)`) must name a tool that exists.
  const unknown = askTools?.filter((entry) => {
    const name = RulePatterns.toolOf(entry)
    return !(Permission.postures as ReadonlyArray<string>).includes(name) && !registry.known(name)
  }) ?? []
  if (unknown.length === 0) return Effect.void
  return Effect.flatMap(registry.list, (tools) =>
    Effect.fail(
      new Roles.InvalidRoleRequest({
        role,
        reason: `ask_tools names ${
          unknown.length === 1 ? "a tool or posture that does" : "tools or postures that do"
        } not exist: ${unknown.map((name) => JSON.stringify(name)).join(", ")}; accepted: the postures ${
          Permission.postures.join(", ")
        } and the tools ${tools.map((tool) => tool.name).join(", ")}`
      })
    ))
}

export const checkAllowedTools = (
  registry: ToolRegistry["Service"],
  role: string,
  allowedTools: ReadonlyArray<string> | undefined
): Effect.Effect<void, Roles.InvalidRoleRequest> => {
  const unknown = allowedTools?.filter((name) => !registry.known(name)) ?? []
  if (unknown.length === 0) return Effect.void
  return Effect.flatMap(registry.list, (tools) =>
    Effect.fail(
      new Roles.InvalidRoleRequest({
        role,
        reason: `allowed_tools names ${unknown.length === 1 ? "a tool that does" : "tools that do"} not exist: ${
          unknown.map((name) => JSON.stringify(name)).join(", ")
        }; the tools are: ${tools.map((tool) => tool.name).join(", ")}`
      })
    ))
}

/** The model a plan names before the parent's is considered (undefined: the parent's). */
const chosenModel = (context: Context, role: ResolvedRole, requested: string | undefined): string | undefined =>
  requested ?? role.model ?? context.roleModels[role.role.name] ?? context.defaultModel

/** A request checked, its role resolved and its model resolved (once). */
export const resolve = Effect.fnUntraced(function*(
  request: Request,
  context: Context,
  options: ResolveOptions = {}
) {
  const root = options.root === true
  const tooLong = root ? undefined : SpawnCheck.checkText(request)
  if (tooLong !== undefined) return yield* tooLong
  const resolved = yield* resolveRole(context.agents, request.role ?? "general", request.allowedTools)
  // A schema outside the subset is refused here, before anything starts (OutputSchema.ts).
  const outputSchema = request.outputSchema ?? resolved.outputSchema
  const output = outputSchema === undefined ? undefined : yield* Effect.fromResult(OutputSchema.compile(outputSchema))
  yield* checkAllowedTools(context.registry, resolved.role.name, resolved.allowedTools)
  yield* checkAskTools(context.registry, resolved.role.name, request.askTools)
  const models = context.models
  // A catalog that lists its models checks the id itself (resolve); one LanguageModel serves
  // any id, so a named one must be a model configured here (or the parent's).
  if (models.available === undefined && request.model !== undefined) {
    const accepted = (parentModel: string | undefined) => [
      models.defaultModel,
      context.defaultModel,
      parentModel,
      ...Object.values(context.roleModels),
      ...context.agents.map((definition) => definition.model)
    ]
    if (SpawnCheck.checkModel(request.model, accepted(undefined)) !== undefined) {
      const unknown = SpawnCheck.checkModel(
        request.model,
        accepted(root || options.parentModel === undefined ? undefined : yield* options.parentModel)
      )
      if (unknown !== undefined) return yield* unknown
    }
  }
  const chosen = chosenModel(context, resolved, request.model)
  const model = chosen ?? (root ? models.defaultModel : undefined)
  const languageModel = model === undefined ? undefined : yield* models.resolve(model)
  const servers = [resolved.mcpServers, context.roleMcpServers?.[resolved.role.name.toLowerCase()], request.mcpServers]
  return {
    ...resolved,
    model,
    languageModel,
    output,
    askTools: request.askTools,
    mcpServers: McpNarrowing.meet(...servers),
    mcpServersNamed: McpNarrowing.named(...servers)
  } satisfies Plan
})
