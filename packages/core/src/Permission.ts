/**
 * Permission — what an agent may execute.
 *
 * A rule set allows tools by name (or all), denies tools by name, allows whole postures,
 * and scopes writes to path prefixes. `derive` computes a child's rules from its parent's
 * and can only narrow: every set is intersected, every deny list is united. `decide` is
 * called by the agent loop when a call is *executed* (not only when tools are listed), so a
 * model that names a hidden tool gets a denial it can read, and nothing runs.
 */
import { Context, Effect, Layer, Schema } from "effect"
import { Workspace } from "./Workspace.ts"

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
  /** Workspace-relative prefixes that `write` tools may touch. */
  readonly writeScope: Scope<string>
}

/** What a child asks for; anything it asks beyond its parent is ignored. */
export interface DeriveRequest {
  readonly label?: string | undefined
  readonly allow?: Iterable<string> | undefined
  readonly deny?: Iterable<string> | undefined
  readonly postures?: Iterable<Posture> | undefined
  readonly writeScope?: Iterable<string> | undefined
}

export class PermissionDenied extends Schema.TaggedError<PermissionDenied>()("PermissionDenied", {
  tool: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `permission denied for tool "${this.tool}": ${this.reason}. Nothing was executed.`
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
  writeScope: "all"
}

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

/** A child's rules: never more than its parent's. */
export const derive = (parent: Rules, request: DeriveRequest): Rules => ({
  label: request.label ?? parent.label,
  allow: intersectNames(parent.allow, request.allow),
  deny: request.deny === undefined ? parent.deny : new Set([...parent.deny, ...request.deny]),
  postures: request.postures === undefined
    ? parent.postures
    : new Set([...request.postures].filter((posture) => parent.postures.has(posture))),
  writeScope: intersectScope(parent.writeScope, request.writeScope)
})

/** Name and posture only: what decides whether a tool is shown to the model. */
export const allowsTool = (rules: Rules, name: string, posture: Posture): boolean =>
  (rules.allow === "all" || rules.allow.has(name)) && !rules.deny.has(name) && rules.postures.has(posture)

/** The full decision for one call, with the reason a denied call gets. */
export const decide = (
  rules: Rules,
  name: string,
  posture: Posture,
  paths: ReadonlyArray<string>
): Decision => {
  if (rules.deny.has(name)) return { allowed: false, reason: `"${name}" is denied for the ${rules.label}` }
  if (rules.allow !== "all" && !rules.allow.has(name)) {
    return {
      allowed: false,
      reason: `"${name}" is not among the tools allowed for the ${rules.label} (${[...rules.allow].join(", ") || "none"})`
    }
  }
  if (!rules.postures.has(posture)) {
    return { allowed: false, reason: `the ${rules.label} may not use ${posture} tools` }
  }
  if (posture === "write" && rules.writeScope !== "all") {
    const scope = [...rules.writeScope].join(", ") || "nothing"
    if (paths.length === 0) return { allowed: false, reason: `the ${rules.label} may write only under ${scope}` }
    for (const path of paths) {
      if (!inScope(rules.writeScope, path)) {
        return { allowed: false, reason: `the ${rules.label} may write only under ${scope}, not "${path}"` }
      }
    }
  }
  return allowed
}

/** Is `child` at most `parent`, over a universe of tool names, postures and paths? */
export const narrows = (
  parent: Rules,
  child: Rules,
  universe: { readonly tools: ReadonlyArray<readonly [string, Posture]>; readonly paths: ReadonlyArray<string> }
): boolean =>
  universe.tools.every(([name, posture]) =>
    universe.paths.every((path) =>
      !decide(child, name, posture, [path]).allowed || decide(parent, name, posture, [path]).allowed
    )
  )

export class Permission extends Context.Service<Permission, {
  /** The rules of a root agent: everything, less `[permissions] deny` from the configuration. */
  readonly root: Rules
  readonly derive: (parent: Rules, request: DeriveRequest) => Rules
  /** Checks one call; paths are made workspace-relative first. */
  readonly check: (
    rules: Rules,
    tool: { readonly name: string; readonly posture: Posture },
    paths: ReadonlyArray<string>
  ) => Effect.Effect<void, PermissionDenied>
}>()("@fibril/core/Permission") {}

export const make = Effect.fn("Permission.make")(function*(options: { readonly deny?: ReadonlyArray<string> }) {
  const workspace = yield* Workspace
  const root = derive(allowAll, { deny: options.deny ?? [] })
  return Permission.of({
    root,
    derive,
    check: (rules, tool, paths) => {
      const decision = decide(rules, tool.name, tool.posture, paths.map(workspace.relativize))
      return decision.allowed ? Effect.void : Effect.fail(new PermissionDenied({ tool: tool.name, reason: decision.reason }))
    }
  })
})

/** Permissions rooted at `deny` (usually `[permissions] deny` from FibrilConfig). */
export const layer = (options: { readonly deny?: ReadonlyArray<string> } = {}): Layer.Layer<Permission, never, Workspace> =>
  Layer.effect(Permission, make(options))
