/**
 * A read-only agent's stdio MCP server: a separate instance of the same server, started
 * inside the shell's read-only sandbox, so it cannot write where its agents cannot. The
 * bubblewrap command line is Sandbox's (one place builds it); this module only says which
 * command runs in it and how a read-only instance is told apart from a writer's.
 *
 * Two instances keyed by the caller's posture, not one: whether "only read-only agents use
 * it" cannot be known when a server starts (an agent that may write can be spawned later),
 * and a process already running unconfined cannot be confined afterwards. So an agent that may
 * write calls the server as configured (unconfined, as before), and an agent that may not
 * calls its own instance in the sandbox; each starts on its first use.
 */
import * as Effect from "effect/Effect"
import * as PlatformError from "effect/PlatformError"
import type { ChildProcess } from "effect/process"
import { ChildProcessSpawner, CommandLine } from "effect/process"
import * as Result from "effect/Result"
import type * as Permission from "../Permission.ts"
import * as Sandbox from "../Sandbox.ts"
import type * as ToolRegistry from "../ToolRegistry.ts"
import { accessOfCaller } from "./callerAccess.ts"
import { type Connection, McpServerUnavailable } from "./mcpConnection.ts"
import type { Server } from "./mcpEntry.ts"

/** Which instance of a server an agent uses: `write` may write somewhere, `read-only` may not. */
export type Posture = "write" | "read-only"

/** The instance an agent with `rules` uses (no rules: not an agent of the loop, so read-only). */
export const postureOf = (
  registry: ToolRegistry.ToolRegistry["Service"],
  rules: Permission.Rules | undefined
): Effect.Effect<Posture> =>
  Effect.map(accessOfCaller(registry, rules), (access) => access._tag === "none" ? "read-only" : "write")

/**
 * The read-only instance's sandbox: the shell's read-only posture under `[sandbox]` (the whole
 * file system read-only but `writable_paths`, a private /tmp, its own pid namespace, the same
 * bounds; `mode = "off"` runs it unconfined like every sandbox), with the network on (MCP
 * servers are mostly API clients: GitHub, issue trackers) but Unix sockets still blocked, since
 * a host daemon's socket (Docker, D-Bus) would write for it past any mount. One instance
 * serves every read-only role, so `[sandbox.roles.*]` overrides do not apply to it.
 */
export const policyOf = (options: Sandbox.Options, server: Server): Sandbox.Policy => ({
  ...Sandbox.policyFor({ ...options, roles: {} }, `mcp_servers.${server.name}`, `MCP server "${server.name}"`, {
    _tag: "none"
  }),
  network: true,
  unixSockets: false,
  // Its own files stay readable where the sandbox's private /tmp would hide them (a server
  // script in a checkout under /tmp): the absolute paths of its command line.
  readable: server.transport === "stdio"
    ? [server.command, ...server.args].filter((part) => part.startsWith("/"))
    : []
})

const refused = (description: string) => PlatformError.badArgument({ module: "McpTools", method: "spawn", description })

/**
 * A spawner that starts each command as `sh -c 'exec <command>'` under `policy`: handed to the
 * MCP client of the read-only instance, which then speaks to the server through the sandbox.
 */
export const confinedSpawner = (
  sandbox: Sandbox.Sandbox["Service"],
  policy: Sandbox.Policy
): ChildProcessSpawner.ChildProcessSpawner["Service"] =>
  ChildProcessSpawner.make((command: ChildProcess.Command) =>
    Effect.gen(function*() {
      if (command._tag !== "StandardCommand") return yield* refused("a piped command cannot be confined")
      const line = CommandLine.join([command.command, ...command.args])
      if (Result.isFailure(line)) return yield* refused(line.failure.message)
      const launch = yield* sandbox.launch(policy, `exec ${line.success}`, command.options).pipe(
        Effect.mapError((error) => refused(error.message))
      )
      const { handle } = yield* sandbox.spawn(launch)
      return handle
    })
  )

/**
 * `connection` usable only where the sandbox works (or is configured off): otherwise its
 * client fails saying why, and no process is started.
 */
export const whereSandboxed = (
  connection: Connection,
  sandbox: Sandbox.Sandbox["Service"],
  policy: Sandbox.Policy,
  server: Server
): Connection => ({
  ...connection,
  client: policy.mode === "off" ?
    connection.client :
    Effect.flatMap(sandbox.status, (status) =>
      status.available ? connection.client : Effect.fail(
        new McpServerUnavailable({
          server: server.name,
          source: server.source,
          reason: `an agent that may not write uses this server only inside the read-only sandbox, and none works ` +
            `here (${status.reason}); nothing was started. Install bubblewrap, or set [sandbox] mode = "off" ` +
            `to run every sandboxed process unconfined`
        })
      ))
})
