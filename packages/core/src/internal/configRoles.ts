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

/** How FibrilConfig reads one key from one source, with the words for what is accepted. */
type Read = <A>(
  key: string,
  accepted: string,
  make: (name: string) => Config.Config<A>,
  from: ConfigProvider.ConfigProvider
) => Effect.Effect<A, ConfigInvalid>

/**
 * Per-role tables under `key`, merged key by key over the sources (lowest priority first, so
 * each source overrides the keys it sets): an environment variable for one role's key changes
 * that key only, not every role table the files hold. Role names are case-insensitive (the
 * variable arrives as VERIFIER).
 */
const readRoleTables = <S extends Schema.Codec<any, any>, R>(
  sources: ReadonlyArray<ConfigProvider.ConfigProvider>,
  read: Read,
  key: string,
  accepted: string,
  table: S,
  merge: (given: S["Type"], before: R | undefined) => R
): Effect.Effect<Readonly<Record<string, R>>, ConfigInvalid> =>
  Effect.map(
    Effect.forEach(sources, (source) =>
      read(
        key,
        accepted,
        (name) => Config.schema(Schema.Record(Schema.String, table), name).pipe(Config.withDefault({})),
        source
      )),
    (tables) => {
      const roles: Record<string, R> = {}
      for (const found of [...tables].reverse()) {
        for (const [name, given] of Object.entries(found as Record<string, S["Type"]>)) {
          const role = name.toLowerCase()
          roles[role] = merge(given, roles[role])
        }
      }
      return roles
    }
  )

/** `[sandbox.roles.<role>]` (readRoleTables). */
export const readRoles = (
  sources: ReadonlyArray<ConfigProvider.ConfigProvider>,
  read: Read
): Effect.Effect<Readonly<Record<string, RoleTable>>, ConfigInvalid> =>
  readRoleTables(
    sources,
    read,
    "sandbox.roles",
    `tables [sandbox.roles.<role>] with mode (${sandboxModesAccepted}), network (true or false) and writable_paths (an array of paths)`,
    SandboxRoleTable,
    (given, before: RoleTable | undefined): RoleTable => ({
      mode: given.mode ?? before?.mode,
      network: given.network ?? before?.network,
      writablePaths: given.writable_paths ?? before?.writablePaths
    })
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
 * `[roles.<role>]` (readRoleTables, as `[sandbox.roles.<role>]`). Only narrows (its servers are
 * met with the parent's), so an untrusted project may set it.
 */
export const readRoleSettings = (
  sources: ReadonlyArray<ConfigProvider.ConfigProvider>,
  read: Read
): Effect.Effect<Readonly<Record<string, RoleSettings>>, ConfigInvalid> =>
  readRoleTables(
    sources,
    read,
    "roles",
    "tables [roles.<role>] with mcp_servers (an array of MCP server names)",
    RoleSettingsTable,
    (given, before: RoleSettings | undefined): RoleSettings => ({
      mcpServers: given.mcp_servers === undefined ? before?.mcpServers : namesOf(given.mcp_servers)
    })
  )
