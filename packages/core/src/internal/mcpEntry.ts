/**
 * One MCP server entry as written (a `[mcp_servers.<name>]` table, a `.mcp.json` entry, an
 * inline `mcpServers` entry of an agent file), checked. Kept apart from McpServers.ts (which
 * reads the config files) so agent definitions can use it without an import cycle.
 */
import * as Schema from "effect/Schema"

/** The keys a `[mcp_servers.<name>]` table (or a `.mcp.json` entry) may hold. */

/** Set in the environment of every stdio server Fibril starts (mcpConnection's `connect`). */
export const serverMarker = "FIBRIL_MCP_SERVER"

export const acceptedKeys: ReadonlyArray<string> = [
  "type",
  "command",
  "args",
  "env",
  "url",
  "headers",
  "timeout_secs"
]

/** How long a call may take when a server sets no `timeout_secs` (MCP calls have no default bound). */
export const defaultTimeoutSecs = 60

interface Common {
  readonly name: string
  /** `"/repo/.fibril/config.toml"`, `"/repo/.mcp.json"`, or `"agent explorer (/repo/.claude/agents/x.md)"`. */
  readonly source: string
  readonly timeoutSecs: number
}

export interface StdioServer extends Common {
  readonly transport: "stdio"
  readonly command: string
  readonly args: ReadonlyArray<string>
  readonly env: Readonly<Record<string, string>>
}

export interface HttpServer extends Common {
  readonly transport: "http"
  readonly url: string
  readonly headers: Readonly<Record<string, string>>
}

/** One configured server. */
export type Server = StdioServer | HttpServer

/** A server entry that cannot be used as written. */
export class McpServerInvalid extends Schema.TaggedError<McpServerInvalid>()("McpServerInvalid", {
  server: Schema.String,
  source: Schema.String,
  problem: Schema.String,
  accepted: Schema.String
}) {
  override get message(): string {
    return `MCP server "${this.server}" (${this.source}): ${this.problem}. Accepted: ${this.accepted}`
  }
}

export const shape =
  "a table with command (a string), args (an array of strings) and env (a table of strings) for a stdio server, " +
  "or url (http:// or https://) and headers (a table of strings) for a streamable HTTP server; " +
  "timeout_secs (a positive number) for either"

export const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const stringRecord = (value: unknown): Readonly<Record<string, string>> | undefined => {
  if (value === undefined) return {}
  if (!isRecord(value) || !Object.values(value).every((entry) => typeof entry === "string")) return undefined
  return value as Record<string, string>
}

/**
 * One entry as written (TOML table or `.mcp.json` object). Claude Code's `type` (`"stdio"`,
 * `"http"`) is accepted and checked against the keys; `"sse"` is refused (deprecated by MCP).
 */
export const check = (name: string, entry: unknown, source: string): Server | McpServerInvalid => {
  const invalid = (problem: string) => new McpServerInvalid({ server: name, source, problem, accepted: shape })
  if (!/^[A-Za-z0-9_-]+$/.test(name)) {
    return invalid(
      "a server name may hold only letters, digits, _ and - (it becomes part of tool names mcp__<server>__<tool>)"
    )
  }
  if (!isRecord(entry)) return invalid("not a table")
  const unknown = Object.keys(entry).filter((key) => !acceptedKeys.includes(key))
  if (unknown.length > 0) return invalid(`unknown ${unknown.length === 1 ? "key" : "keys"} ${unknown.join(", ")}`)
  const timeout = entry.timeout_secs ?? defaultTimeoutSecs
  if (typeof timeout !== "number" || !(timeout > 0)) return invalid("timeout_secs is not a positive number")
  const type = entry.type
  if (type !== undefined && type !== "stdio" && type !== "http") {
    return invalid(`type "${String(type)}" is not supported (stdio or http)`)
  }
  if (entry.command !== undefined && entry.url !== undefined) return invalid("both command and url are set")
  if (entry.url !== undefined || type === "http") {
    const url = entry.url
    if (typeof url !== "string" || !/^https?:\/\//.test(url)) return invalid("url is not an http:// or https:// URL")
    const headers = stringRecord(entry.headers)
    if (headers === undefined) return invalid("headers is not a table of strings")
    if (entry.args !== undefined || entry.env !== undefined) return invalid("args and env are for stdio servers")
    return { transport: "http", name, source, timeoutSecs: timeout, url, headers }
  }
  const command = entry.command
  if (typeof command !== "string" || command === "") return invalid("command is missing or not a string")
  const args = entry.args ?? []
  if (!Array.isArray(args) || !args.every((arg) => typeof arg === "string")) {
    return invalid("args is not an array of strings")
  }
  const env = stringRecord(entry.env)
  if (env === undefined) return invalid("env is not a table of strings")
  if (entry.headers !== undefined) return invalid("headers is for http servers")
  return { transport: "stdio", name, source, timeoutSecs: timeout, command, args, env }
}
