// The real MCP server the MCP tests run against, `@modelcontextprotocol/server-everything`, over
// stdio: one place for how it is started and how its processes are found.
import { spawnSync } from "node:child_process"
import { createRequire } from "node:module"
import type * as McpServers from "../src/McpServers.ts"

export const serverBin = createRequire(import.meta.url).resolve("@modelcontextprotocol/server-everything/dist/index.js")

/**
 * server-everything as the stdio server `name`; with a `marker`, an extra argument (ignored by
 * the server) by which `running` finds its processes.
 */
export const everything = (
  name: string,
  options: { readonly marker?: string; readonly env?: Readonly<Record<string, string>> } = {}
): McpServers.StdioServer => ({
  transport: "stdio",
  name,
  source: "test",
  timeoutSecs: 30,
  command: process.execPath,
  args: options.marker === undefined ? [serverBin, "stdio"] : [serverBin, "stdio", options.marker],
  env: options.env ?? {}
})

/** The pids of the processes of `server` (started with a marker) running now. */
export const running = (server: McpServers.StdioServer): ReadonlyArray<string> =>
  spawnSync("pgrep", ["-f", server.args[2]!], { encoding: "utf8" }).stdout.split("\n").filter((pid) => pid !== "")
