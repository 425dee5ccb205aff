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
import { check, isRecord, McpServerInvalid, type Server, serverMarker, shape } from "./internal/mcpEntry.ts"

export {
  acceptedKeys,
  check,
  defaultTimeoutSecs,
  type HttpServer,
  McpServerInvalid,
  type Server,
  type StdioServer
} from "./internal/mcpEntry.ts"

/** {@link check} as an Effect. */
export const fromEntry = (name: string, entry: unknown, source: string): Effect.Effect<Server, McpServerInvalid> => {
  const checked = check(name, entry, source)
  return checked instanceof McpServerInvalid ? Effect.fail(checked) : Effect.succeed(checked)
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

/**
 * The servers whose tools a process's agents get: `load`'s, except in a Fibril started as an MCP
 * server by another Fibril (`env` carries the marker every server Fibril starts gets), which
 * starts none: a `.mcp.json` that runs `fibril mcp` would otherwise start Fibril inside Fibril
 * without end.
 */
export const forProcess = (options: LoadOptions & { readonly env: Readonly<Record<string, string | undefined>> }) =>
  options.env[serverMarker] === undefined ? load(options) : Effect.succeed([])
