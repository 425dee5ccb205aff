/**
 * Roles — the sub-agent taxonomy.
 *
 * A role fixes an agent's system prompt (a `.md` file beside this module, ending with the
 * output contract) and its posture: which kinds of tools it may use at all. Model-facing
 * names are forgiving (aliases, any case) because models and other harnesses spell them many
 * ways; an unknown name is a typed error that lists exactly what is accepted.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { text } from "./internal/resource.ts"
import type * as Permission from "./Permission.ts"
import { type Posture, postures } from "./Permission.ts"

export const RoleName = Schema.Literals([
  "general",
  "explore",
  "plan",
  "review",
  "implementer",
  "verifier",
  "tool_agent",
  "custom"
])
export type RoleName = typeof RoleName.Type
export const roleNames: ReadonlyArray<RoleName> = RoleName.literals

/** Accepted spellings besides the canonical names, matched case-insensitively. */
export const aliases: Readonly<Record<RoleName, ReadonlyArray<string>>> = {
  general: ["worker", "default", "general-purpose"],
  explore: ["explorer", "exploration"],
  plan: ["planning", "planner", "awaiter"],
  review: ["reviewer", "code-review", "code_review"],
  implementer: ["implement", "implementation", "builder"],
  verifier: ["verify", "verification", "validator", "tester"],
  tool_agent: ["tool-agent", "toolagent", "executor", "execution", "fin"],
  custom: []
}

export interface RoleSpec {
  /** A built-in role name, or the name of an agent definition (AgentDefinitions). */
  readonly name: string
  readonly description: string
  readonly postures: ReadonlySet<Posture>
  /** Workspace-relative prefixes this role may write under; absent: wherever its parent may. */
  readonly writeScope?: ReadonlyArray<string> | undefined
  /** Needs an explicit, non-empty `allowed_tools` list. */
  readonly needsAllowedTools: boolean
  /** The role's system prompt, ending with the output contract. */
  readonly prompt: string
}

export const outputContract = text("./roles/output-contract.md", import.meta.url)

/** Where the `plan` role may write its plan and todo artifacts (workspace-relative). */
export const planDirectory = ".fibril/plans"

const all = new Set(postures)
const without = (...denied: ReadonlyArray<Posture>): ReadonlySet<Posture> =>
  new Set(postures.filter((posture) => !denied.includes(posture)))

const spec = (
  name: RoleName,
  description: string,
  rolePostures: ReadonlySet<Posture>,
  extra: { readonly writeScope?: ReadonlyArray<string>; readonly needsAllowedTools?: boolean } = {}
): RoleSpec => ({
  name,
  description,
  postures: rolePostures,
  writeScope: extra.writeScope,
  needsAllowedTools: extra.needsAllowedTools ?? false,
  prompt: `${text(`./roles/${name}.md`, import.meta.url)}\n\n${outputContract}`
})

// Read-only roles have neither `write` nor `memory`: a note in memory.md reaches every later
// agent's system prompt, so leaving one is a write (Permission, rule 3).
export const roles: Readonly<Record<RoleName, RoleSpec>> = {
  general: spec("general", "General-purpose agent: reads, writes, runs commands, may delegate.", all),
  explore: spec("explore", "Read-only exploration: finds and explains code; cannot write.", without("write", "memory")),
  plan: spec(
    "plan",
    "Read-only planning: produces a plan; writes only plan and todo artifacts under .fibril/plans/.",
    without("memory"),
    { writeScope: [planDirectory] }
  ),
  review: spec(
    "review",
    "Read-only review: no writes, no shell, cannot spawn.",
    without("write", "memory", "shell", "spawn")
  ),
  implementer: spec("implementer", "Implements a change: reads, writes, runs commands.", all),
  verifier: spec("verifier", "Verifies claims by running tests and commands; no writes.", without("write", "memory")),
  tool_agent: spec("tool_agent", "Fast executor of concrete operations; cannot spawn.", without("spawn")),
  custom: spec("custom", "Restricted to an explicit, non-empty allowed_tools list.", all, { needsAllowedTools: true })
}

/** A role's ceiling on an agent's rules: its postures and write scope (Permission, rule 1). */
export const ceiling = (role: RoleSpec): Permission.Ceiling => ({
  postures: role.postures,
  writeScope: role.writeScope
})

const byAlias: ReadonlyMap<string, RoleName> = new Map(
  roleNames.flatMap((name) => [[name, name] as const, ...aliases[name].map((alias) => [alias, name] as const)])
)

/** "general (worker, default, general-purpose), explore (explorer, exploration), ..." */
export const acceptedNames: string = roleNames
  .map((name) => aliases[name].length > 0 ? `${name} (${aliases[name].join(", ")})` : name)
  .join(", ")

export class UnknownRole extends Schema.TaggedError<UnknownRole>()("UnknownRole", {
  name: Schema.String,
  accepted: Schema.Array(Schema.String),
  /** Agents defined in markdown files, also accepted. */
  custom: Schema.optionalKey(Schema.Array(Schema.String))
}) {
  override get message() {
    const custom = this.custom === undefined || this.custom.length === 0
      ? ""
      : `; agents defined in .fibril/agents, .claude/agents or .opencode/agent: ${this.custom.join(", ")}`
    return `unknown sub-agent type "${this.name}". Accepted (case-insensitive): ${acceptedNames}${custom}`
  }
}

export class InvalidRoleRequest extends Schema.TaggedError<InvalidRoleRequest>()("InvalidRoleRequest", {
  role: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `invalid request for role ${this.role}: ${this.reason}`
  }
}

/** The canonical name for `name` (any case, any alias), or undefined. */
export const canonical = (name: string): RoleName | undefined => byAlias.get(name.trim().toLowerCase())

/** Resolves a model-facing role name; unknown names fail with the accepted list. */
export const resolve = (name: string): Effect.Effect<RoleSpec, UnknownRole> => {
  const found = canonical(name)
  return found === undefined
    ? Effect.fail(new UnknownRole({ name, accepted: roleNames.flatMap((n) => [n, ...aliases[n]]) }))
    : Effect.succeed(roles[found])
}

/** Resolves a role for a spawn request; `custom` needs a non-empty `allowed_tools`. */
export const forRequest = (
  name: string,
  allowedTools: ReadonlyArray<string> | undefined
): Effect.Effect<RoleSpec, UnknownRole | InvalidRoleRequest> =>
  // Eager: both steps are decided at once, so the result is an Exit a generator reads for free.
  Effect.flatMapEager(
    resolve(name),
    (role) =>
      role.needsAllowedTools && (allowedTools === undefined || allowedTools.length === 0)
        ? Effect.fail(
          new InvalidRoleRequest({ role: role.name, reason: "custom agents need a non-empty allowed_tools list" })
        )
        : Effect.succeed(role)
  )

/** The first line of every system prompt: who the agent is (machine-readable). */
export const header = (role: string, depth: number): string => `Fibril agent: role=${role} depth=${depth}`

/** The full system prompt of an agent in `role` at `depth`. */
export const systemPrompt = (role: RoleSpec, depth: number, workspace: string): string =>
  `${header(role.name, depth)}\nWorkspace: ${workspace}\n\n${role.prompt}`
