/**
 * McpServers — the MCP servers a process may use, as configured.
 *
 * Servers come from `[mcp_servers.<name>]` tables of the project and user config files and
 * from a project's `.mcp.json` (the file Claude Code and other clients write), so servers a
 * user already set up work unchanged. A server is stdio (`command`, `args`, `env`) or
 * streamable HTTP (`url`, `headers`), with a per-call `timeout_secs`. Each entry remembers
 * where it came from; `masked` is what `fibril config` prints (env and header values are
 * secrets: never shown). Reading the tools of a server is `McpTools`' job.
 */
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as path from "node:path"
import { readToml } from "./internal/configFile.ts"

/** The keys a `[mcp_servers.<name>]` table (or a `.mcp.json` entry) may hold. */
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

const shape =
  "a table with command (a string), args (an array of strings) and env (a table of strings) for a stdio server, " +
  "or url (http:// or https://) and headers (a table of strings) for a streamable HTTP server; " +
  "timeout_secs (a positive number) for either"

const isRecord = (value: unknown): value is Record<string, unknown> =>
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
export const fromEntry = (name: string, entry: unknown, source: string): Effect.Effect<Server, McpServerInvalid> => {
  const invalid = (problem: string) =>
    Effect.fail(new McpServerInvalid({ server: name, source, problem, accepted: shape }))
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
    return Effect.succeed({ transport: "http", name, source, timeoutSecs: timeout, url, headers })
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
  return Effect.succeed({ transport: "stdio", name, source, timeoutSecs: timeout, command, args, env })
}

/** The entries of a `{ name: entry }` table, each checked. */
export const fromTable = (table: unknown, source: string): Effect.Effect<Array<Server>, McpServerInvalid> =>
  isRecord(table)
    ? Effect.forEach(Object.entries(table), ([name, entry]) => fromEntry(name, entry, source))
    : Effect.fail(
      new McpServerInvalid({ server: "*", source, problem: "mcp_servers is not a table", accepted: shape })
    )

/** A `.mcp.json` that is not JSON or has no `mcpServers` object. */
export class McpJsonInvalid extends Schema.TaggedError<McpJsonInvalid>()("McpJsonInvalid", {
  path: Schema.String,
  problem: Schema.String
}) {
  override get message(): string {
    return `Cannot read ${this.path}: ${this.problem}. Accepted: {"mcpServers": {"<name>": {"command": ..., "args": [...]}}}`
  }
}

const readMcpJson = Effect.fnUntraced(function*(fs: FileSystem.FileSystem, file: string) {
  const text = yield* fs.readFileString(file).pipe(
    Effect.map(Option.some),
    Effect.catchTag("PlatformError", (error) =>
      error.reason._tag === "NotFound"
        ? Effect.succeedNone
        : Effect.fail(new McpJsonInvalid({ path: file, problem: error.message })))
  )
  if (Option.isNone(text)) return []
  const parsed = yield* Effect.try({
    try: (): unknown => JSON.parse(text.value),
    catch: (error) => new McpJsonInvalid({ path: file, problem: `not JSON (${String(error)})` })
  })
  if (!isRecord(parsed) || !isRecord(parsed.mcpServers)) {
    return yield* new McpJsonInvalid({ path: file, problem: "no mcpServers object" })
  }
  return yield* fromTable(parsed.mcpServers, file)
})

/** Where `load` looks. */
export interface LoadOptions {
  readonly cwd: string
  readonly home: string
}

/**
 * The configured servers, by name: the project's `.fibril/config.toml` over its `.mcp.json`
 * over the user's `~/.fibril/config.toml` (a name defined twice is the nearer definition).
 *
 * @example
 * ```ts
 * const servers = yield* McpServers.load({ cwd: "/repo", home: "/home/me" })
 * ```
 */
export const load = Effect.fn("McpServers.load")(function*(options: LoadOptions) {
  const fs = yield* FileSystem.FileSystem
  const fromToml = Effect.fnUntraced(function*(file: string) {
    const read = yield* readToml(fs, file)
    if (Option.isNone(read) || read.value.table.mcp_servers === undefined) return []
    return yield* fromTable(read.value.table.mcp_servers, file)
  })
  const projectFile = path.join(options.cwd, ".fibril", "config.toml")
  const userFile = path.join(options.home, ".fibril", "config.toml")
  const layers = [
    yield* fromToml(projectFile),
    yield* readMcpJson(fs, path.join(options.cwd, ".mcp.json")),
    userFile === projectFile ? [] : yield* fromToml(userFile)
  ]
  const byName = new Map<string, Server>()
  for (const servers of layers) {
    for (const server of servers) if (!byName.has(server.name)) byName.set(server.name, server)
  }
  return [...byName.values()]
})

const mask = (record: Readonly<Record<string, string>>): Record<string, string> =>
  Object.fromEntries(Object.keys(record).map((key) => [key, "********"]))

/** A server as `fibril config` prints it: env and header values masked. */
export const masked = (server: Server): Server =>
  server.transport === "stdio" ? { ...server, env: mask(server.env) } : { ...server, headers: mask(server.headers) }

/** One line per server for `fibril config`: `name  stdio  command args  (source)`. */
export const describe = (server: Server): string => {
  const shown = masked(server)
  const detail = shown.transport === "stdio"
    ? [shown.command, ...shown.args].join(" ") +
      (Object.keys(shown.env).length > 0 ? `  env ${JSON.stringify(shown.env)}` : "")
    : shown.url + (Object.keys(shown.headers).length > 0 ? `  headers ${JSON.stringify(shown.headers)}` : "")
  return `${shown.name}  ${shown.transport}  ${detail}  timeout ${shown.timeoutSecs}s  (${shown.source})`
}
