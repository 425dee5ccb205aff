/**
 * Permission — what an agent may execute.
 *
 * The algebra, as written rules (docs/security.md, "Permission rules"):
 *
 * 1. An agent's effective rules are the *meet* of its ceilings: its parent's effective rules,
 *    its role's posture (and write scope), its agent definition's tools and denials, the
 *    caller's `allowed_tools`, its MCP servers (McpNarrowing: every other server denied), and
 *    the runtime's own policy (children never get `task` or `todowrite`; nobody spawns at
 *    `max_depth`). Meeting intersects every allow set, posture set and write scope and unites
 *    every deny set, so the order does not matter and the result is within every ceiling
 *    (`effective`).
 * 2. A call is allowed when its tool is not denied by name, is in the allow set, its posture
 *    is allowed, and — for a tool that writes — every path it touches lies in the write scope.
 *    A writing tool that names no path is denied under a scoped rule set.
 * 3. `memory` is a write: `remember` appends to `.fibril/memory.md`, which later sessions read
 *    in their system prompt. It needs the `write` posture as well as `memory`, and its file
 *    must be in the write scope; a read-only role can never leave a note.
 * 4. Rules only narrow during an agent's life: a reassignment meets the live rules with the new
 *    role's ceiling, and one whose ceiling grants a posture, a write path or a named tool the
 *    agent does not have is refused, with what it would add (`reassign`).
 * 5. A call has one of three outcomes, ordered allow > ask > deny (`judge`): denied by rules 1-3,
 *    else `ask` when its tool name or its posture is in the ask set, else allowed. The ask set
 *    is a ceiling like the others, met by *union*: a child can turn allow into ask (or deny),
 *    never ask into allow. A person's answer (Approvals.ts) is consulted only for `ask`: no
 *    answer, "always" for a subtree included, reaches a call its rules deny.
 *
 * `decideTool` (name and posture) is checked when a call arrives and `decide` (with paths)
 * once its arguments are decoded, both when a call is *executed*, not only when tools are
 * listed: a model that names a hidden tool gets a denial it can read, and nothing runs.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as RulePatterns from "./internal/rulePatterns.ts"
import { current as currentWorkspace, Workspace } from "./Workspace.ts"

/** What a tool may do; roles and permission rules allow or deny whole postures. */
export const Posture = Schema.Literals(["read", "write", "shell", "spawn", "plan", "memory"])
export type Posture = typeof Posture.Type
export const postures: ReadonlyArray<Posture> = Posture.literals

/** "all", or a set of names / workspace-relative path prefixes. */
export type Scope<A> = "all" | ReadonlySet<A>

export interface Rules {
  /** Who these rules are for, used in denial messages ("explore sub-agent"). */
  readonly label: string
  readonly allow: Scope<string>
  readonly deny: ReadonlySet<string>
  readonly postures: ReadonlySet<Posture>
  /** Workspace-relative prefixes that writing tools may touch. */
  readonly writeScope: Scope<string>
  /** Tool names and postures whose calls wait for a person's answer (rule 5). */
  readonly ask: ReadonlySet<string>
}

/**
 * One ceiling on an agent's rules: what a child asks for, a role's posture, a definition's
 * tools. Absent fields set no limit; anything asked beyond the rules it is applied to is
 * ignored.
 */
export interface DeriveRequest {
  readonly label?: string | undefined
  readonly allow?: Iterable<string> | undefined
  readonly deny?: Iterable<string> | undefined
  readonly postures?: Iterable<Posture> | undefined
  readonly writeScope?: Iterable<string> | undefined
  /** Tool names and postures that must ask (rule 5): added to the parent's, never removed. */
  readonly ask?: Iterable<string> | undefined
}
export type Ceiling = DeriveRequest

export class PermissionDenied extends Schema.TaggedError<PermissionDenied>()("PermissionDenied", {
  tool: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `permission denied for tool "${this.tool}": ${this.reason}. Nothing was executed.`
  }
}

/** A reassignment that would give a running agent more than it has (rule 4). */
export class PermissionWidening extends Schema.TaggedError<PermissionWidening>()("PermissionWidening", {
  agentId: Schema.String,
  /** The agent's role before, and the role asked for. */
  from: Schema.String,
  to: Schema.String,
  /** What the new role would add, one entry per posture, path or tool. */
  grants: Schema.Array(Schema.String)
}) {
  override get message() {
    return `refused: assigning agent ${this.agentId} from ${this.from} to ${this.to} would widen its permissions ` +
      `(${this.to} grants ${this.grants.join("; ")}, which it does not have). A running agent's permissions only ` +
      `narrow: assign a role at most as permissive, or spawn a new agent with role ${this.to}. Nothing was changed.`
  }
}

export type Decision = { readonly allowed: true } | { readonly allowed: false; readonly reason: string }

const allowed: Decision = { allowed: true }

/** Everything is allowed: the root of a tree before configuration narrows it. */
export const allowAll: Rules = {
  label: "agent",
  allow: "all",
  deny: new Set(),
  postures: new Set(postures),
  writeScope: "all",
  ask: new Set()
}

/** Postures whose tools change files, and so are bound by the write scope (rule 3: memory is one). */
export const writes = (posture: Posture): boolean => posture === "write" || posture === "memory"

/** The postures a call of `posture` needs: `memory` needs `write` too (rule 3). */
export const required = (posture: Posture): ReadonlyArray<Posture> =>
  posture === "memory" ? ["memory", "write"] : [posture]

export const normalizePrefix = (prefix: string): string => {
  const parts: Array<string> = []
  for (const part of prefix.split(/[\\/]+/)) {
    if (part === "" || part === ".") continue
    if (part === "..") parts.pop()
    else parts.push(part)
  }
  return parts.join("/")
}

/** Is the workspace-relative `path` inside one of the prefixes? ("" is the whole workspace.) */
export const inScope = (scope: Scope<string>, path: string): boolean => {
  if (scope === "all") return true
  const normal = normalizePrefix(path)
  for (const prefix of scope) {
    if (prefix === "" || normal === prefix || normal.startsWith(prefix + "/")) return true
  }
  return false
}

const intersectNames = (parent: Scope<string>, request: Iterable<string> | undefined): Scope<string> => {
  if (request === undefined) return parent
  const asked = new Set(request)
  return parent === "all" ? asked : new Set([...asked].filter((name) => parent.has(name)))
}

const intersectScope = (parent: Scope<string>, request: Iterable<string> | undefined): Scope<string> => {
  if (request === undefined) return parent
  const asked = [...request].map(normalizePrefix)
  if (parent === "all") return new Set(asked)
  // Keep what lies inside both: each asked prefix inside a parent prefix, and each parent
  // prefix inside an asked one.
  const out = new Set<string>()
  for (const prefix of asked) if (inScope(parent, prefix)) out.add(prefix)
  for (const prefix of parent) if (inScope(new Set(asked), prefix)) out.add(prefix)
  return out
}

/** A child's rules: never more than its parent's (the meet of `parent` and one ceiling). */
export const derive = (parent: Rules, request: DeriveRequest): Rules => ({
  label: request.label ?? parent.label,
  allow: intersectNames(parent.allow, request.allow),
  deny: request.deny === undefined ? parent.deny : new Set([...parent.deny, ...request.deny]),
  postures: request.postures === undefined
    ? parent.postures
    : new Set([...request.postures].filter((posture) => parent.postures.has(posture))),
  writeScope: intersectScope(parent.writeScope, request.writeScope),
  ask: request.ask === undefined ? parent.ask : new Set([...parent.ask, ...request.ask])
})

/** Two name lists as one ceiling: their intersection; `undefined` sets no limit. */
export const meetNames = (
  a: ReadonlyArray<string> | undefined,
  b: ReadonlyArray<string> | undefined
): ReadonlyArray<string> | undefined => a === undefined ? b : b === undefined ? a : a.filter((name) => b.includes(name))

/** `rules` as a ceiling: deriving with it from any rules meets them with `rules`. */
export const asCeiling = (rules: Rules): Ceiling => ({
  allow: rules.allow === "all" ? undefined : rules.allow,
  deny: rules.deny,
  postures: rules.postures,
  writeScope: rules.writeScope === "all" ? undefined : rules.writeScope,
  ask: rules.ask
})

/** The meet of two rule sets (the label of the first). */
export const intersect = (a: Rules, b: Rules): Rules => derive(a, asCeiling(b))

/** Everything an agent is given, one ceiling per source (rule 1). */
export interface Grant {
  /** Who the rules are for, in denial messages ("review sub-agent at depth 1"). */
  readonly label: string
  /** The role's postures and write scope. */
  readonly role: Ceiling
  /** A markdown definition's `tools` (allow) and `denied_tools` (deny). */
  readonly definition?: Ceiling | undefined
  /** The caller's `allowed_tools`. */
  readonly allowedTools?: ReadonlyArray<string> | undefined
  /** The caller's `ask_tools`: tool names and postures that ask, added to the parent's (rule 5). */
  readonly askTools?: ReadonlyArray<string> | undefined
  /** The runtime's own limits: configuration denials, sub-agent denials, no spawning at max depth. */
  readonly policy?: Ceiling | undefined
  /** The MCP servers it may use (`serversCeiling`: every other server denied whole); absent: its parent's. */
  readonly servers?: Ceiling | undefined
}

const ceilingsOf = (grant: Grant): ReadonlyArray<Ceiling> => [
  grant.role,
  grant.definition ?? {},
  { allow: grant.allowedTools, ask: grant.askTools },
  grant.policy ?? {},
  grant.servers ?? {}
]

/** An agent's effective rules under `parent`: the meet of the parent and every ceiling of `grant`. */
export const effective = (parent: Rules, grant: Grant): Rules =>
  ceilingsOf(grant).reduce(derive, { ...parent, label: grant.label })

// --- Grants: what an agent at depth d in role r is given ---

/** The tools a child never gets, whatever its role: it cannot delegate or own a todo list. */
export const childDenied: ReadonlyArray<string> = ["task", "todowrite"]

const withoutSpawn: ReadonlyArray<Posture> = postures.filter((posture) => posture !== "spawn")

/** What an agent asks for besides its role: the caller's `allowed_tools`, a definition, extra denials. */
export interface GrantOptions {
  readonly allowedTools?: ReadonlyArray<string> | undefined
  /** The caller's `ask_tools` (rule 5): only ever adds asks. */
  readonly askTools?: ReadonlyArray<string> | undefined
  readonly definition?: Ceiling | undefined
  readonly deny?: ReadonlyArray<string> | undefined
  /** Tool names and postures that must ask (`[permissions] ask`, a definition's `ask_tools`). */
  readonly ask?: ReadonlyArray<string> | undefined
  /** The MCP servers it may use, as a ceiling (`serversCeiling`); absent: its parent's. */
  readonly servers?: Ceiling | undefined
}

/** The part of a role a grant reads (Roles.RoleSpec is one): its name, postures and write scope. */
export interface GrantRole {
  readonly name: string
  readonly postures: ReadonlySet<Posture>
  readonly writeScope?: ReadonlyArray<string> | undefined
}

/**
 * Everything an agent in `role` at `depth` is given (rule 1): its role's ceiling, its
 * definition's, its caller's `allowed_tools`, and the runtime's policy — sub-agents never
 * get `childDenied`, and nobody spawns at `maxDepth` and below. Both engines derive an
 * agent's rules from this (the embedded Session, the cluster's workflow).
 */
export const grantFor = (
  depth: number,
  maxDepth: number,
  role: GrantRole,
  options: GrantOptions = {}
): Grant => ({
  label: depth === 0 ? `${role.name} agent` : `${role.name} sub-agent at depth ${depth}`,
  role: { postures: role.postures, writeScope: role.writeScope },
  definition: options.definition,
  allowedTools: options.allowedTools,
  askTools: options.askTools,
  servers: options.servers,
  policy: {
    deny: depth === 0 ? options.deny : [...childDenied, ...(options.deny ?? [])],
    ask: options.ask,
    postures: depth >= maxDepth ? withoutSpawn : undefined
  }
})

/**
 * What one agent of a chain was given, as a record keeps it: its role at its depth and its
 * caller's `allowed_tools`. An agent's rules are its chain's grants applied in turn from the
 * root's rules, root first, itself last: a child never gets more than its parent had.
 */
export const GrantRecord = Schema.Struct({
  role: Schema.String,
  depth: Schema.Int,
  allowedTools: Schema.optionalKey(Schema.Array(Schema.String)),
  /** The caller's `ask_tools` (absent in older records: nothing asked). */
  askTools: Schema.optionalKey(Schema.Array(Schema.String)),
  /** The MCP servers it may use (McpNarrowing); absent: its parent's. */
  mcpServers: Schema.optionalKey(Schema.Array(Schema.String))
})
export type GrantRecord = typeof GrantRecord.Type

/** An agent's chain of grants (an older record's: its role alone). */
export const grantsOf = (agent: {
  readonly grants?: ReadonlyArray<GrantRecord> | undefined
  readonly role: string
  readonly depth: number
}): ReadonlyArray<GrantRecord> => agent.grants ?? [{ role: agent.role, depth: agent.depth }]

const postureAllowed = (rules: Rules, posture: Posture): boolean =>
  required(posture).every((needed) => rules.postures.has(needed))

/**
 * What `target` allows that `current` does not, in postures and write paths; empty when
 * `target` only narrows. Tool names are not compared: a reassignment meets them, so a role
 * or definition can only remove names, never add them.
 */
export const widening = (current: Rules, target: Rules): ReadonlyArray<string> => {
  const out: Array<string> = []
  const extra = postures.filter((posture) => postureAllowed(target, posture) && !postureAllowed(current, posture))
  if (extra.length > 0) out.push(`the ${extra.join(", ")} posture${extra.length > 1 ? "s" : ""}`)
  const writing = postures.some((posture) => writes(posture) && postureAllowed(target, posture))
  if (writing && current.writeScope !== "all") {
    const within = [...current.writeScope].join(", ") || "nothing"
    if (target.writeScope === "all") out.push(`writing anywhere (it may write only under ${within})`)
    else {
      const outside = [...target.writeScope].filter((prefix) => !inScope(current.writeScope, prefix))
      if (outside.length > 0) out.push(`writing under ${outside.join(", ")} (it may write only under ${within})`)
    }
  }
  return out
}

/**
 * A running agent's rules after it is moved to another role (rule 4). The target is what
 * the grant gives under `parent` (the rules a new agent with that role would get there); if
 * it adds a posture or a write path to `current`, the list of what it adds, else the meet of
 * `current` and the target.
 */
export const reassign = (current: Rules, parent: Rules, grant: Grant): Result.Result<Rules, ReadonlyArray<string>> => {
  const target = effective(parent, grant)
  const grants = widening(current, target)
  return grants.length > 0
    ? Result.fail(grants)
    : Result.succeed(derive(current, { ...asCeiling(target), label: grant.label }))
}

/**
 * Effective rules as a record stores them (JSON), so an agent rebuilt after a restart (or
 * adopted by another process) never gets more than it had, whatever its parent now is.
 */
export const RulesJson = Schema.Struct({
  allow: Schema.Union([Schema.Literal("all"), Schema.Array(Schema.String)]),
  deny: Schema.Array(Schema.String),
  postures: Schema.Array(Posture),
  write_scope: Schema.Union([Schema.Literal("all"), Schema.Array(Schema.String)]),
  /** Absent in records older than `ask`: nothing asked. */
  ask: Schema.optionalKey(Schema.Array(Schema.String))
})
export type RulesJson = typeof RulesJson.Type

const jsonOf = new WeakMap<Rules, RulesJson>()

/** The rules as stored in a record; one (immutable) value per rules object, shared by siblings. */
export const toJson = (rules: Rules): RulesJson => {
  let json = jsonOf.get(rules)
  if (json === undefined) {
    json = {
      allow: rules.allow === "all" ? "all" : [...rules.allow],
      deny: [...rules.deny],
      postures: [...rules.postures],
      write_scope: rules.writeScope === "all" ? "all" : [...rules.writeScope],
      ...(rules.ask.size > 0 ? { ask: [...rules.ask] } : {})
    }
    jsonOf.set(rules, json)
  }
  return json
}

/** Stored rules as a ceiling: deriving with it gives at most what was stored. */
export const ceilingFromJson = (json: RulesJson): Ceiling => ({
  allow: json.allow === "all" ? undefined : json.allow,
  deny: json.deny,
  postures: json.postures,
  writeScope: json.write_scope === "all" ? undefined : json.write_scope,
  ask: json.ask
})

// --- MCP tool-name patterns: `mcp__<server>` (the whole server), `mcp__<server>__*`, `mcp__*` ---

/** Does the entry `entry` name the tool `name`: the same name, or an MCP pattern covering it? */
export const namesTool = (entry: string, name: string): boolean =>
  entry === name || (entry.startsWith("mcp__") && (entry.endsWith("*")
    ? name.startsWith(entry.slice(0, -1))
    : !entry.slice(5).includes("__") && name.startsWith(`${entry}__`)))

/** The server of an MCP tool name `mcp__<server>__<tool>`; undefined for any other name. */
export const mcpServerOf = (name: string): string | undefined => {
  if (!name.startsWith("mcp__")) return undefined
  const end = name.indexOf("__", 5)
  return end > 5 ? name.slice(5, end) : undefined
}

/**
 * An agent's MCP servers as a ceiling: every other server of `universe` (the servers there
 * are) denied whole, `mcp__<server>`. The denial is what enforces the set: a tool of another
 * server is neither offered nor callable by name, and its server is never started for it.
 */
export const serversCeiling = (servers: ReadonlyArray<string>, universe: ReadonlyArray<string>): Ceiling => ({
  deny: universe.filter((server) => !servers.includes(server)).map((server) => `mcp__${server}`)
})

/** Could an agent with `rules` use any tool of the MCP server `server` (its tools allowed, the server not denied)? */
export const mayUseServer = (rules: Rules, server: string): boolean => {
  const prefix = `mcp__${server}__`
  const named = (names: ReadonlySet<string>) =>
    names.has(`mcp__${server}`) || names.has(`${prefix}*`) || names.has("mcp__*")
  if (named(rules.deny)) return false
  return rules.allow === "all" || named(rules.allow) || [...rules.allow].some((name) => name.startsWith(prefix))
}

/** Is `name` in a set of entries, by name or by an MCP pattern? */
export const listsTool = (entries: ReadonlySet<string>, name: string): boolean => {
  if (entries.has(name)) return true
  if (!name.startsWith("mcp__")) return false
  for (const entry of entries) if (namesTool(entry, name)) return true
  return false
}

/** Name and posture only: what decides whether a tool is shown to the model. */
export const allowsTool = (rules: Rules, name: string, posture: Posture): boolean =>
  (rules.allow === "all" || listsTool(rules.allow, name)) && !listsTool(rules.deny, name) &&
  postureAllowed(rules, posture)

/** The decision on a tool's name and posture, before its arguments (and paths) are known. */
export const decideTool = (rules: Rules, name: string, posture: Posture): Decision => {
  if (listsTool(rules.deny, name)) return { allowed: false, reason: `"${name}" is denied for the ${rules.label}` }
  if (rules.allow !== "all" && !listsTool(rules.allow, name)) {
    return {
      allowed: false,
      reason: `"${name}" is not among the tools allowed for the ${rules.label} (${
        [...rules.allow].join(", ") || "none"
      })`
    }
  }
  if (!rules.postures.has(posture)) {
    return { allowed: false, reason: `the ${rules.label} may not use ${posture} tools` }
  }
  if (!postureAllowed(rules, posture)) {
    return {
      allowed: false,
      reason: `the ${rules.label} may not use ${posture} tools: ${posture} is a write, and it may not write`
    }
  }
  return allowed
}

/** The full decision for one call, with the reason a denied call gets. */
export const decide = (
  rules: Rules,
  name: string,
  posture: Posture,
  paths: ReadonlyArray<string>,
  command?: string | undefined
): Decision => {
  const tool = decideTool(rules, name, posture)
  if (!tool.allowed) return tool
  if (writes(posture) && rules.writeScope !== "all") {
    const scope = [...rules.writeScope].join(", ") || "nothing"
    if (paths.length === 0) return { allowed: false, reason: `the ${rules.label} may write only under ${scope}` }
    for (const path of paths) {
      if (!inScope(rules.writeScope, path)) {
        return { allowed: false, reason: `the ${rules.label} may write only under ${scope}, not "${path}"` }
      }
    }
  }
  // A deny entry with a pattern (`shell(git push *)`, `write_file(.github/**)`): judged on the
  // decoded call, as a plain denial is on its name.
  const pattern = RulePatterns.matching(rules.deny, name, posture, { paths, command })
  if (pattern !== undefined) return { allowed: false, reason: `"${pattern}" is denied for the ${rules.label}` }
  return allowed
}

// --- Ask: the third outcome (rule 5) ---

export type Outcome = "allow" | "ask" | "deny"

export type Judgement =
  | { readonly outcome: "allow" }
  | { readonly outcome: "ask" | "deny"; readonly reason: string }

const rank: Record<Outcome, number> = { deny: 0, ask: 1, allow: 2 }

/** The meet of two outcomes: the more restrictive (allow > ask > deny). */
export const meetOutcome = (a: Outcome, b: Outcome): Outcome => rank[a] <= rank[b] ? a : b

/** The ask entry (tool name first, then posture) a call of `name` with `posture` matches, if any. */
export const askedBy = (
  rules: Rules,
  name: string,
  posture: Posture,
  subjects?: RulePatterns.Subjects | undefined
): string | undefined =>
  listsTool(rules.ask, name)
    ? [...rules.ask].find((entry) => namesTool(entry, name))
    : required(posture).find((needed) => rules.ask.has(needed)) ??
      (subjects === undefined ? undefined : RulePatterns.matching(rules.ask, name, posture, subjects))

/** Why a call asks, for the ask entry (`askedBy`) it matched. */
export const askReason = (rules: Rules, entry: string, name: string): string =>
  entry === name
    ? `"${name}" is an ask tool for the ${rules.label}`
    : RulePatterns.parse(entry) !== undefined
    ? `"${entry}" asks for the ${rules.label}`
    : `${entry} tools ask for the ${rules.label}`

/** The three-valued decision for one call: a denial first, then an ask, else allowed (rule 5). */
export const judge = (
  rules: Rules,
  name: string,
  posture: Posture,
  paths: ReadonlyArray<string>,
  command?: string | undefined
): Judgement => {
  const decision = decide(rules, name, posture, paths, command)
  if (!decision.allowed) return { outcome: "deny", reason: decision.reason }
  const entry = askedBy(rules, name, posture, { paths, command })
  if (entry === undefined) return { outcome: "allow" }
  return { outcome: "ask", reason: askReason(rules, entry, name) }
}

/** Is `child` at most `parent` (allow > ask > deny), over a universe of tool names, postures and paths? */
export const narrows = (
  parent: Rules,
  child: Rules,
  universe: {
    readonly tools: ReadonlyArray<readonly [string, Posture]>
    readonly paths: ReadonlyArray<string>
    /** Shell commands, for rule patterns such as `shell(git push *)`; default none. */
    readonly commands?: ReadonlyArray<string> | undefined
  }
): boolean =>
  universe.tools.every(([name, posture]) =>
    universe.paths.every((path) =>
      // A command is judged only for a shell-posture tool (RulePatterns).
      (posture === "shell" ? [undefined, ...(universe.commands ?? [])] : [undefined]).every((command) =>
        rank[judge(child, name, posture, [path], command).outcome] <=
          rank[judge(parent, name, posture, [path], command).outcome]
      )
    )
  )

export class Permission extends Context.Service<Permission, {
  /** The rules of a root agent: everything, less `[permissions] deny` from the configuration. */
  readonly root: Rules
  readonly derive: (parent: Rules, request: DeriveRequest) => Rules
  /** Checks a call's tool name and posture, before its arguments are decoded. */
  readonly checkTool: (
    rules: Rules,
    tool: { readonly name: string; readonly posture: Posture }
  ) => Effect.Effect<void, PermissionDenied>
  /** Checks one call with the paths it touches; paths are made workspace-relative first. */
  readonly check: (
    rules: Rules,
    tool: { readonly name: string; readonly posture: Posture },
    paths: ReadonlyArray<string>,
    command?: string | undefined
  ) => Effect.Effect<void, PermissionDenied>
  /** The ask entry (rule 5) an allowed call matches, patterns judged on workspace-relative paths. */
  readonly askedBy: (
    rules: Rules,
    tool: { readonly name: string; readonly posture: Posture },
    paths: ReadonlyArray<string>,
    command?: string | undefined
  ) => Effect.Effect<string | undefined>
}>()("@fibril/core/Permission") {}

const verdict = (tool: string, decision: Decision): Effect.Effect<void, PermissionDenied> =>
  decision.allowed ? Effect.void : Effect.fail(new PermissionDenied({ tool, reason: decision.reason }))

export const make = Effect.fn("Permission.make")(function*(options: {
  readonly deny?: ReadonlyArray<string> | undefined
  readonly ask?: ReadonlyArray<string> | undefined
}) {
  const base = yield* Workspace
  const root = derive(allowAll, { deny: options.deny ?? [], ask: options.ask ?? [] })
  return Permission.of({
    root,
    derive,
    checkTool: (rules, tool) => verdict(tool.name, decideTool(rules, tool.name, tool.posture)),
    // Paths are judged in the caller's workspace: an isolated agent's worktree (Workspace.Isolated).
    askedBy: (rules, tool, paths, command) =>
      rules.ask.size === 0
        ? Effect.succeed(undefined)
        : Effect.map(currentWorkspace(base), (workspace) =>
          askedBy(rules, tool.name, tool.posture, { paths: paths.map(workspace.relativize), command })),
    check: (rules, tool, paths, command) =>
      Effect.flatMap(currentWorkspace(base), (workspace) => {
        const lexical = paths.map(workspace.relativize)
        if (rules.writeScope === "all" || !writes(tool.posture) || paths.length === 0) {
          return verdict(tool.name, decide(rules, tool.name, tool.posture, lexical, command))
        }
        // Under a write scope, where a path really leads counts too: `.fibril/plans/link/x`
        // through a symlink to `src/` is a write to `src/`. A path that resolves outside the
        // workspace is judged by its lexical form (and refused by the tool itself).
        return Effect.flatMap(
          Effect.forEach(paths, (path) =>
            workspace.resolve(path).pipe(
              Effect.map(workspace.relative),
              Effect.orElseSucceed(() => workspace.relativize(path))
            )),
          (real) => verdict(tool.name, decide(rules, tool.name, tool.posture, [...lexical, ...real], command))
        )
      })
  })
})

/** Permissions rooted at `deny` and `ask` (usually `[permissions]` from FibrilConfig). */
export const layer = (
  options: { readonly deny?: ReadonlyArray<string> | undefined; readonly ask?: ReadonlyArray<string> | undefined } = {}
): Layer.Layer<Permission, never, Workspace> => Layer.effect(Permission, make(options))
