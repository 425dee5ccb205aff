/**
 * The sources of the configuration's keys and the per-role tables, `[sandbox.roles.<role>]`
 * and `[roles.<role>]` (FibrilConfig's reading, kept beside it).
 */
import * as Config from "effect/Config"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { sandboxModes, sandboxModesAccepted } from "./configBounds.ts"
import type { ConfigInvalid } from "./configFile.ts"

/** `[sandbox.roles.<role>]` as read (FibrilConfig.SandboxRoleSettings). */
export interface RoleTable {
  readonly mode?: (typeof sandboxModes)[number] | undefined
  readonly network?: boolean | undefined
  readonly writablePaths?: ReadonlyArray<string> | undefined
}

/**
 * The sources in order: env (FIBRIL_ + constant case of the path), the project table, the
 * user table. A key takes its value from the first that has it.
 */
export const makeSources = (
  env: Readonly<Record<string, string | undefined>>,
  project: unknown,
  user: unknown
): ReadonlyArray<ConfigProvider.ConfigProvider> => [
  ConfigProvider.fromEnvRecord({ ...env }).pipe(ConfigProvider.constantCase, ConfigProvider.nested("FIBRIL")),
  ConfigProvider.fromUnknown(project),
  ConfigProvider.fromUnknown(user)
]

/** One `[sandbox.roles.<role>]` table as written (snake_case keys, every key optional). */
const SandboxRoleTable = Schema.Struct({
  mode: Schema.optionalKey(Schema.Literals(sandboxModes)),
  network: Schema.optionalKey(Schema.Boolean),
  writable_paths: Schema.optionalKey(Schema.Array(Schema.String))
})

/**
 * `[sandbox.roles.<role>]`, merged key by key over the sources: an environment variable for
 * one role's key (FIBRIL_SANDBOX_ROLES_VERIFIER_MODE) changes that key only, not every role
 * table the files hold. Role names are case-insensitive (the variable arrives as VERIFIER).
 */
export const readRoles = (
  sources: ReadonlyArray<ConfigProvider.ConfigProvider>,
  read: <A>(
    key: string,
    accepted: string,
    make: (name: string) => Config.Config<A>,
    from: ConfigProvider.ConfigProvider
  ) => Effect.Effect<A, ConfigInvalid>
): Effect.Effect<Readonly<Record<string, RoleTable>>, ConfigInvalid> =>
  Effect.map(
    Effect.forEach(sources, (source) =>
      read(
        "sandbox.roles",
        `tables [sandbox.roles.<role>] with mode (${sandboxModesAccepted}), network (true or false) and writable_paths (an array of paths)`,
        (name) => Config.schema(Schema.Record(Schema.String, SandboxRoleTable), name).pipe(Config.withDefault({})),
        source
      )),
    (tables) => {
      const roles: Record<string, RoleTable> = {}
      // Lowest priority first, so that each source overrides the keys it sets.
      for (const table of [...tables].reverse()) {
        for (const [name, given] of Object.entries(table)) {
          const role = name.toLowerCase()
          const before = roles[role]
          roles[role] = {
            mode: given.mode ?? before?.mode,
            network: given.network ?? before?.network,
            writablePaths: given.writable_paths ?? before?.writablePaths
          }
        }
      }
      return roles
    }
  )

/** `[roles.<role>]` as read (FibrilConfig.RoleSettings). */
export interface RoleSettings {
  /** The MCP servers its agents may use, within their parent's (McpNarrowing); absent: their parent's. */
  readonly mcpServers?: ReadonlyArray<string> | undefined
}

/** One `[roles.<role>]` table as written (a list from the environment is comma-separated). */
const RoleSettingsTable = Schema.Struct({
  mcp_servers: Schema.optionalKey(Schema.Union([Schema.Array(Schema.String), Schema.String]))
})

const namesOf = (given: ReadonlyArray<string> | string): ReadonlyArray<string> =>
  typeof given === "string" ? given.split(",").map((name) => name.trim()).filter((name) => name !== "") : given

/**
 * `[roles.<role>]`, merged key by key over the sources as `[sandbox.roles.<role>]` is (an
 * environment variable for one role's key changes that key only). Role names are
 * case-insensitive. Only narrows (its servers are met with the parent's), so an untrusted
 * project may set it.
 */
export const readRoleSettings = (
  sources: ReadonlyArray<ConfigProvider.ConfigProvider>,
  read: <A>(
    key: string,
    accepted: string,
    make: (name: string) => Config.Config<A>,
    from: ConfigProvider.ConfigProvider
  ) => Effect.Effect<A, ConfigInvalid>
): Effect.Effect<Readonly<Record<string, RoleSettings>>, ConfigInvalid> =>
  Effect.map(
    Effect.forEach(sources, (source) =>
      read(
        "roles",
        "tables [roles.<role>] with mcp_servers (an array of MCP server names)",
        (name) => Config.schema(Schema.Record(Schema.String, RoleSettingsTable), name).pipe(Config.withDefault({})),
        source
      )),
    (tables) => {
      const roles: Record<string, RoleSettings> = {}
      for (const table of [...tables].reverse()) {
        for (const [name, given] of Object.entries(table)) {
          const role = name.toLowerCase()
          roles[role] = {
            mcpServers: given.mcp_servers === undefined ? roles[role]?.mcpServers : namesOf(given.mcp_servers)
          }
        }
      }
      return roles
    }
  )
