/**
 * McpNarrowing — the MCP servers an agent may use, narrowed from its parent's.
 *
 * An agent's servers are one value with three sources, each a ceiling met with the others
 * (intersected): its definition's `mcpServers` (Claude Code's names, its inline servers
 * included), its role's `[roles.<name>] mcp_servers`, and its caller's `mcp_servers` on `task`
 * or `agent_spawn`. Absent in all three, the agent has its parent's servers; the root may use
 * every server there is (less `[permissions] deny`).
 *
 * A name the parent may not use, or that names no server here, is refused at spawn
 * (McpServersRefused, naming the servers it may be given) rather than dropped: a child left
 * without a server its caller or author counted on would fail later, at some call, far from
 * the cause, while a refusal is fixed at once by naming fewer servers.
 *
 * The set is enforced by the permission rules, not by a second mechanism: `ceiling` denies
 * every other server whole (`mcp__<server>`). So its tools are not offered, a call by name is
 * denied, its server is not started for the agent, a grandchild never gets it back (denials
 * are united down a tree) and a process child, whose rules travel as stored rules, keeps it.
 */
import * as Exit from "effect/Exit"
import * as Schema from "effect/Schema"
import * as Permission from "./Permission.ts"

/** A spawn names MCP servers its parent may not use, or that are not configured here. */
export class McpServersRefused extends Schema.TaggedError<McpServersRefused>()("McpServersRefused", {
  role: Schema.String,
  /** The names refused. */
  refused: Schema.Array(Schema.String),
  /** The servers it may be given: those its parent may use. */
  usable: Schema.Array(Schema.String),
  /** Every server there is here. */
  configured: Schema.Array(Schema.String)
}) {
  override get message() {
    const quoted = (names: ReadonlyArray<string>) => names.map((name) => JSON.stringify(name)).join(", ")
    const unknown = this.refused.filter((name) => !this.configured.includes(name))
    const denied = this.refused.filter((name) => this.configured.includes(name))
    const why = [
      ...(denied.length === 0 ? [] : [`its parent may not use ${quoted(denied)}`]),
      ...(unknown.length === 0 ? [] : [
        `${quoted(unknown)} ${unknown.length === 1 ? "is" : "are"} not configured here (configured: ${
          this.configured.join(", ") || "none"
        })`
      ])
    ]
    return `refused: the ${this.role} agent may not be given the MCP server${this.refused.length === 1 ? "" : "s"} ${
      quoted(this.refused)
    }: ${why.join("; ")}. It may be given ${
      this.usable.length === 0 ? "no MCP server" : this.usable.join(", ")
    }: name some of those in mcp_servers, or leave mcp_servers out for its parent's. Nothing was started.`
  }
}

/** The servers of `universe` an agent with `rules` may use. */
export const usable = (rules: Permission.Rules, universe: ReadonlyArray<string>): ReadonlyArray<string> =>
  universe.filter((server) => Permission.mayUseServer(rules, server))

/** The meet of an agent's sources (undefined: no limit from that source; all undefined: its parent's). */
export const meet = (
  ...sources: ReadonlyArray<ReadonlyArray<string> | undefined>
): ReadonlyArray<string> | undefined => sources.reduce(Permission.meetNames, undefined)

/** Every name an agent's sources give: each is checked, even one the meet leaves out (a typo is caught). */
export const named = (...sources: ReadonlyArray<ReadonlyArray<string> | undefined>): ReadonlyArray<string> =>
  sources.every((source) => source === undefined) ? none : [...new Set(sources.flatMap((source) => source ?? []))]

const none: ReadonlyArray<string> = []

/**
 * `servers` checked under the parent's rules, as the ceiling the agent's grant carries
 * (undefined: none, its parent's servers). `asked`: every name its sources gave (default
 * `servers`), each of which must be a server the parent may use. Decided at once: an Exit.
 */
export const grant = (
  role: string,
  parent: Permission.Rules,
  universe: ReadonlyArray<string>,
  servers: ReadonlyArray<string> | undefined,
  asked: ReadonlyArray<string> = servers ?? []
): Exit.Exit<Permission.Ceiling | undefined, McpServersRefused> => {
  if (servers === undefined && asked.length === 0) return Exit.succeed(undefined)
  const allowed = usable(parent, universe)
  const refused = asked.filter((server) => !allowed.includes(server))
  if (servers === undefined) {
    return refused.length === 0
      ? Exit.succeed(undefined)
      : Exit.fail(new McpServersRefused({ role, refused, usable: allowed, configured: [...universe] }))
  }
  return refused.length === 0
    ? Exit.succeed(Permission.serversCeiling(servers, universe))
    : Exit.fail(new McpServersRefused({ role, refused, usable: allowed, configured: [...universe] }))
}

/**
 * `grant` for an agent's options, the servers there are looked up only when a source names one
 * (the usual spawn names none).
 */
export const grantOf = (
  role: string,
  parent: Permission.Rules,
  universe: () => ReadonlyArray<string>,
  options: {
    readonly mcpServers?: ReadonlyArray<string> | undefined
    readonly mcpServersNamed?: ReadonlyArray<string> | undefined
  }
): Exit.Exit<Permission.Ceiling | undefined, McpServersRefused> =>
  options.mcpServers === undefined && (options.mcpServersNamed ?? []).length === 0
    ? Exit.succeed(undefined)
    : grant(role, parent, universe(), options.mcpServers, options.mcpServersNamed)

/** The ceiling of `servers` alone, unchecked (a stored grant, already checked at its spawn). */
export const ceiling = (
  servers: ReadonlyArray<string> | undefined,
  universe: ReadonlyArray<string>
): Permission.Ceiling | undefined => servers === undefined ? undefined : Permission.serversCeiling(servers, universe)
