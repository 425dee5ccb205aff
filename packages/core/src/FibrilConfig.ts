/**
 * FibrilConfig: the settings of the Fibril agent runtime, resolved once at startup.
 *
 * Sources, highest precedence first: `FIBRIL_*` environment variables (the constant
 * case of the TOML path, e.g. `FIBRIL_AGENT_API_TIMEOUT_SECS`), the project file
 * `<cwd>/.fibril/config.toml`, the user file `<home>/.fibril/config.toml`, then
 * {@link defaults}. The sources are chained into one `ConfigProvider` and read through
 * `Config`; numeric limits are then clamped in code, and every clamped value is kept
 * in `clamped` so `fibril config` can show the user what was changed and why.
 *
 * A configuration says what is wrong with it. A table or key that is not in
 * {@link knownKeys} is an error naming the file, the line and the nearest valid name
 * (`[permisions]`: did you mean `[permissions]`?); `strict = false` in a file,
 * `FIBRIL_STRICT=false` or `--no-strict` turns these into {@link Resolved.warnings}. A value
 * of the wrong type names the key and where it came from: the file and line, or the
 * environment variable. A `[permissions] deny` entry that names no known tool is always
 * an error (a denial that matches nothing denies nothing), with the Fibril name of a Claude
 * Code or opencode tool (`Bash` -> `shell`) as the suggestion.
 *
 * @since 0.1.0
 */
import * as Config from "effect/Config"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Record from "effect/Record"
import * as Schema from "effect/Schema"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import type * as TomlModule from "smol-toml"
import { claudeTools, fibrilTools, opencodeTools } from "./AgentDefinitions.ts"
import { nearest } from "./internal/suggest.ts"
import * as Trust from "./Trust.ts"

// The TOML parser is loaded when a config file is first read (a process with none never needs it).
let tomlModule: typeof TomlModule | undefined
const Toml = (): typeof TomlModule => (tomlModule ??= createRequire(import.meta.url)("smol-toml") as typeof TomlModule)

// ---------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------

/**
 * What a sub-agent spawn does when `subagents.max_concurrent` are already running.
 *
 * @since 0.1.0
 */
export type Admission = "reject" | "queue"

/**
 * `[agent]`: the root agent loop and its model calls.
 *
 * @since 0.1.0
 */
export interface AgentSettings {
  readonly maxSteps: number
  readonly apiTimeoutSecs: number
  readonly maxRetries: number
  readonly retryBaseMs: number
  readonly retryMaxMs: number
}

/**
 * `[subagents]`: limits, budgets and models of spawned sub-agents.
 *
 * @since 0.1.0
 */
export interface SubagentSettings {
  readonly maxConcurrent: number
  readonly maxDepth: number
  readonly admission: Admission
  readonly heartbeatTimeoutSecs: number
  /** Step budget of each sub-agent; unset means the agent's own `maxSteps`. */
  readonly maxSteps: number | undefined
  readonly maxTokens: number | undefined
  readonly maxWallSecs: number | undefined
  /** Token budget shared by a whole tree of sub-agents. */
  readonly treeMaxTokens: number | undefined
  /** Bound on each part of a child's result (summary, each section) and on stored reasons, in characters. */
  readonly maxResultChars: number
  readonly defaultModel: string | undefined
  readonly workerModel: string | undefined
  readonly explorerModel: string | undefined
  readonly awaiterModel: string | undefined
  readonly reviewModel: string | undefined
  readonly customModel: string | undefined
  /** `[subagents.models]`: role name -> model id (env: `FIBRIL_SUBAGENTS_MODELS="worker=m1,explorer=m2"`). */
  readonly models: Readonly<Record<string, string>>
}

/**
 * `[tools]`: limits of the built-in tools.
 *
 * @since 0.1.0
 */
export interface ToolSettings {
  readonly shellTimeoutSecs: number
  readonly maxOutputChars: number
}

/**
 * `[permissions]`.
 *
 * @since 0.1.0
 */
export interface PermissionSettings {
  /** Tool names that are never offered to any agent (env: comma-separated). */
  readonly deny: ReadonlyArray<string>
}

/**
 * How far a `shell` command may write (`[sandbox] mode`): `"read-only"` (the whole file
 * system read-only, a private /tmp), `"workspace-write"` (the workspace writable, except
 * `.git` and `.fibril`), or `"off"` (no sandbox). The mode is the most an agent's shell
 * gets; an agent that may not write is read-only whatever it says.
 *
 * @since 0.1.0
 */
export type SandboxMode = "read-only" | "workspace-write" | "off"

/**
 * `[sandbox.roles.<role>]`: per-role overrides; an unset key falls back to `[sandbox]`.
 *
 * @since 0.1.0
 */
export interface SandboxRoleSettings {
  readonly mode?: SandboxMode | undefined
  readonly network?: boolean | undefined
  readonly writablePaths?: ReadonlyArray<string> | undefined
}

/**
 * `[sandbox]`: the operating-system sandbox of `shell` commands.
 *
 * @since 0.1.0
 */
export interface SandboxSettings {
  readonly mode: SandboxMode
  /** Network access (and Unix sockets) inside the sandbox. */
  readonly network: boolean
  /** Also writable inside the sandbox: absolute, or relative to the workspace. */
  readonly writablePaths: ReadonlyArray<string>
  /** The bubblewrap binary (a name looked up on PATH, or a path). */
  readonly bwrapPath: string
  /** Size of the sandbox's private /tmp, and of its /dev/shm, each (MiB). */
  readonly tmpSizeMb: number
  /** Processes (threads included) a sandboxed command may run at once, all together. */
  readonly maxProcesses: number
  /** Memory of a sandboxed command (MiB): in total where a cgroup is available, else per process. */
  readonly memoryMb: number
  readonly roles: Readonly<Record<string, SandboxRoleSettings>>
}

/**
 * `[cluster]`: cluster mode (docs/cluster.md).
 *
 * @since 0.1.0
 */
export interface ClusterSettings {
  /**
   * The cluster's database: a PostgreSQL URL, or `sqlite:<file>` on one machine. Set, `run`,
   * `agents` and `mcp` are clients of the cluster.
   */
  readonly url: string | undefined
}

/**
 * The resolved settings, with camelCase names for the snake_case TOML keys.
 *
 * @since 0.1.0
 */
export interface Settings {
  /** Default model id of the root agent. */
  readonly model: string | undefined
  readonly agent: AgentSettings
  readonly subagents: SubagentSettings
  readonly tools: ToolSettings
  readonly permissions: PermissionSettings
  readonly sandbox: SandboxSettings
  readonly cluster: ClusterSettings
}

/**
 * A value that was outside its allowed range and was replaced.
 *
 * @since 0.1.0
 */
export interface Clamped {
  /** Dotted TOML path, e.g. `"agent.api_timeout_secs"`. */
  readonly key: string
  readonly given: number
  readonly used: number
}

/**
 * The service shape: settings plus where they came from.
 *
 * @since 0.1.0
 */
export interface Resolved {
  readonly settings: Settings
  readonly clamped: ReadonlyArray<Clamped>
  /** Config files that existed and were read, highest precedence first. */
  readonly sources: ReadonlyArray<string>
  /**
   * Unknown tables and keys, when not strict (each as {@link describeUnknown} words it), and
   * seed names a file sets next to their Fibril key (see {@link seedAliases}).
   */
  readonly warnings: ReadonlyArray<string>
  /**
   * Where each value that is not a default came from, by dotted Fibril key: `"environment
   * variable FIBRIL_MODEL"`, `"/repo/.fibril/config.toml, line 3"`, or for a key written under
   * its seed name (see {@link seedAliases}) `"subagents.api_timeout_secs in
   * /repo/.fibril/config.toml, line 2 (alias of agent.api_timeout_secs)"`. A key not here has
   * its default.
   */
  readonly origins: Readonly<Record<string, string>>
  /**
   * Set when the project file widens the sandbox (Trust.ts): whether the workspace is trusted,
   * so the widenings apply, or not, so they were ignored.
   */
  readonly trust?: Trust.Report | undefined
}

/**
 * The resolved configuration of the running process.
 *
 * @since 0.1.0
 */
export class FibrilConfig extends Context.Service<FibrilConfig, Resolved>()("@fibril/core/FibrilConfig") {}

/**
 * The settings used when no source sets a key.
 *
 * @since 0.1.0
 */
export const defaults: Settings = {
  model: undefined,
  agent: { maxSteps: 50, apiTimeoutSecs: 120, maxRetries: 3, retryBaseMs: 1000, retryMaxMs: 30_000 },
  subagents: {
    maxConcurrent: 10,
    maxDepth: 1,
    admission: "reject",
    heartbeatTimeoutSecs: 300,
    maxSteps: undefined,
    maxTokens: undefined,
    maxWallSecs: undefined,
    treeMaxTokens: undefined,
    maxResultChars: 16_384,
    defaultModel: undefined,
    workerModel: undefined,
    explorerModel: undefined,
    awaiterModel: undefined,
    reviewModel: undefined,
    customModel: undefined,
    models: {}
  },
  tools: { shellTimeoutSecs: 120, maxOutputChars: 30_000 },
  permissions: { deny: [] },
  sandbox: {
    mode: "workspace-write",
    network: false,
    writablePaths: [],
    bwrapPath: "bwrap",
    tmpSizeMb: 256,
    maxProcesses: 256,
    memoryMb: 4096,
    roles: {}
  },
  cluster: { url: undefined }
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/**
 * A config file exists but could not be read or is not valid TOML.
 *
 * @since 0.1.0
 */
export class ConfigFileError extends Schema.TaggedError<ConfigFileError>()("ConfigFileError", {
  path: Schema.String,
  /** smol-toml's message with line and column, or the read error. */
  reason: Schema.String
}) {
  override get message(): string {
    return `Cannot load config file ${this.path}: ${this.reason}`
  }
}

/**
 * A config value has the wrong type or is not one of the accepted values.
 *
 * @since 0.1.0
 */
export class ConfigInvalid extends Schema.TaggedError<ConfigInvalid>()("ConfigInvalid", {
  /** Dotted TOML path, e.g. `"agent.max_steps"`. */
  key: Schema.String,
  /** The environment variable for the same key, e.g. `"FIBRIL_AGENT_MAX_STEPS"`. */
  envVar: Schema.String,
  /** Where the value came from: `"/repo/.fibril/config.toml, line 3"` or `"environment variable FIBRIL_…"`. */
  source: Schema.String,
  /** What was wrong, from the underlying `ConfigError`. */
  problem: Schema.String,
  /** What the key accepts. */
  accepted: Schema.String
}) {
  override get message(): string {
    return `Invalid config value for ${this.key} (${this.source}): ${this.problem}. Accepted: ${this.accepted}`
  }
}

/**
 * A table or key a config file holds that Fibril does not know.
 *
 * @since 0.1.0
 */
export const UnknownKey = Schema.Struct({
  file: Schema.String,
  /** 1-based; absent when the key could not be found in the text. */
  line: Schema.optionalKey(Schema.Int),
  /** Dotted path, e.g. `"permisions"` or `"agent.max_step"`. */
  key: Schema.String,
  kind: Schema.Literals(["table", "key"]),
  /** The nearest valid name, e.g. `"[permissions]"` or `"agent.max_steps"`. */
  suggestion: Schema.optionalKey(Schema.String)
})
export type UnknownKey = typeof UnknownKey.Type

/** `"/repo/.fibril/config.toml, line 1: unknown table [permisions]; did you mean [permissions]?"` */
export const describeUnknown = (problem: UnknownKey): string => {
  const where = problem.line === undefined ? problem.file : `${problem.file}, line ${problem.line}`
  const what = problem.kind === "table" ? `unknown table [${problem.key}]` : `unknown key ${problem.key}`
  return `${where}: ${what}${problem.suggestion === undefined ? "" : `; did you mean ${problem.suggestion}?`}`
}

/**
 * Config files hold tables or keys Fibril does not know (strict mode).
 *
 * @since 0.1.0
 */
export class ConfigUnknownKeys extends Schema.TaggedError<ConfigUnknownKeys>()("ConfigUnknownKeys", {
  problems: Schema.Array(UnknownKey)
}) {
  override get message(): string {
    return `Unknown configuration (fix the names, or use --no-strict or strict = false to only warn):\n${
      this.problems.map((problem) => `  ${describeUnknown(problem)}`).join("\n")
    }`
  }
}

/**
 * `[permissions] deny` names tools that do not exist: such a denial would deny nothing.
 *
 * @since 0.1.0
 */
export class ConfigUnknownTool extends Schema.TaggedError<ConfigUnknownTool>()("ConfigUnknownTool", {
  key: Schema.String,
  source: Schema.String,
  unknown: Schema.Array(Schema.Struct({ name: Schema.String, suggestion: Schema.optionalKey(Schema.String) })),
  known: Schema.Array(Schema.String)
}) {
  override get message(): string {
    const names = this.unknown.map((tool) =>
      `"${tool.name}"${tool.suggestion === undefined ? "" : ` (did you mean "${tool.suggestion}"?)`}`
    )
    return `${this.key} (${this.source}) names ${names.length === 1 ? "an unknown tool" : "unknown tools"}: ${
      names.join(", ")
    }; a denial that matches no tool denies nothing. Known tools: ${this.known.join(", ")}`
  }
}

// ---------------------------------------------------------------------------
// Known tables and keys
// ---------------------------------------------------------------------------

/**
 * Every table and key a config file may hold, by dotted table path (`""` is the top level).
 * A list names the table's keys; `"any"` accepts any key (a map such as
 * `[subagents.models]`, role -> model); a `*` segment matches any one name (for per-name
 * tables such as `"sandbox.roles.*"`). Anything else in a file is an unknown key. To add a
 * section, add its entry here and read its keys in `readSettings`.
 *
 * @since 0.1.0
 */
export const knownKeys: Readonly<Record<string, ReadonlyArray<string> | "any">> = {
  "": ["model", "strict"],
  agent: ["max_steps", "api_timeout_secs", "max_retries", "retry_base_ms", "retry_max_ms"],
  subagents: [
    "max_concurrent",
    "max_depth",
    "admission",
    "heartbeat_timeout_secs",
    "max_steps",
    "max_tokens",
    "max_wall_secs",
    "tree_max_tokens",
    "max_result_chars",
    "default_model",
    "worker_model",
    "explorer_model",
    "awaiter_model",
    "review_model",
    "custom_model"
  ],
  "subagents.models": "any",
  tools: ["shell_timeout_secs", "max_output_chars"],
  permissions: ["deny"],
  sandbox: ["mode", "network", "writable_paths", "bwrap_path", "tmp_size_mb", "max_processes", "memory_mb"],
  "sandbox.roles": [],
  "sandbox.roles.*": ["mode", "network", "writable_paths"],
  cluster: ["url"]
}

/** The registry entry for a table path, `*` segments matching any name. */
const tableSpec = (table: string): ReadonlyArray<string> | "any" | undefined => {
  const exact = knownKeys[table]
  if (exact !== undefined) return exact
  const segments = table.split(".")
  for (const [pattern, spec] of Object.entries(knownKeys)) {
    const parts = pattern.split(".")
    if (parts.length === segments.length && parts.every((part, i) => part === "*" || part === segments[i])) return spec
  }
  return undefined
}

/** The tables directly inside `table`, as named in the registry. */
const childTables = (table: string): ReadonlyArray<string> =>
  Object.keys(knownKeys).flatMap((path) => {
    if (path === "") return []
    const parent = path.includes(".") ? path.slice(0, path.lastIndexOf(".")) : ""
    return parent === table ? [path.slice(parent === "" ? 0 : parent.length + 1)] : []
  }).filter((name) => name !== "*")

const isTable = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof Date)

const join = (table: string, key: string) => table === "" ? key : `${table}.${key}`

/** What to suggest for an unknown `key` in `table`: a near name there, or the same key in another table. */
const suggestFor = (table: string, key: string, kind: UnknownKey["kind"]): string | undefined => {
  const spec = tableSpec(table)
  const keys = Array.isArray(spec) ? spec : []
  const tables = childTables(table)
  const near = nearest(key, [...keys, ...tables])
  if (near !== undefined) return tables.includes(near) ? `[${join(table, near)}]` : join(table, near)
  if (kind === "key") {
    const elsewhere = Object.entries(knownKeys).find(([, names]) => Array.isArray(names) && names.includes(key))
    if (elsewhere !== undefined) return join(elsewhere[0], key)
  }
  return undefined
}

/** The tables and keys of a parsed file that {@link knownKeys} does not list. */
const unknownKeys = (file: string, table: TomlModule.TomlTable, lines: ReadonlyMap<string, number>) => {
  const problems: Array<UnknownKey> = []
  const walk = (path: string, value: Record<string, unknown>) => {
    const spec = tableSpec(path)
    if (spec === "any") return
    for (const [key, inner] of Object.entries(value)) {
      const full = join(path, key)
      if (isTable(inner) && tableSpec(full) !== undefined) walk(full, inner)
      else if (spec === undefined || !spec.includes(key)) {
        const kind = isTable(inner) ? "table" : "key"
        const line = lines.get(full)
        const suggestion = suggestFor(path, key, kind)
        problems.push({
          file,
          key: full,
          kind,
          ...(line === undefined ? {} : { line }),
          ...(suggestion === undefined ? {} : { suggestion })
        })
      }
    }
  }
  walk("", table)
  return problems
}

// A TOML key: bare, "basic" or 'literal', possibly dotted.
const keyPart = String.raw`(?:"(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_-]+)`
const keyLine = new RegExp(String.raw`^\s*(${keyPart}(?:\s*\.\s*${keyPart})*)\s*=`)
const headerLine = new RegExp(String.raw`^\s*\[\[?\s*(${keyPart}(?:\s*\.\s*${keyPart})*)\s*\]\]?\s*(?:#.*)?$`)

const segmentsOf = (dotted: string): Array<string> =>
  [...dotted.matchAll(new RegExp(keyPart, "g"))].map(([part]) =>
    part.startsWith("\"")
      ? part.slice(1, -1).replace(/\\(["\\])/g, "$1")
      : part.startsWith("'")
      ? part.slice(1, -1)
      : part
  )

/**
 * The 1-based line where each table and key of a TOML text is first written, by dotted
 * path. smol-toml reports no positions for values, so the text is scanned: table headers
 * set the current table, `key =` lines (dotted keys too) add paths under it.
 */
export const keyLines = (text: string): ReadonlyMap<string, number> => {
  const lines = new Map<string, number>()
  let table: Array<string> = []
  text.split(/\r?\n/).forEach((line, index) => {
    const header = headerLine.exec(line)
    if (header !== null) {
      table = segmentsOf(header[1]!)
      const path = table.join(".")
      if (!lines.has(path)) lines.set(path, index + 1)
      return
    }
    const key = keyLine.exec(line)
    if (key === null) return
    const parts = [...table, ...segmentsOf(key[1]!)]
    for (let end = table.length + 1; end <= parts.length; end++) {
      const path = parts.slice(0, end).join(".")
      if (!lines.has(path)) lines.set(path, index + 1)
    }
  })
  return lines
}

// ---------------------------------------------------------------------------
// Clamping
// ---------------------------------------------------------------------------

/** Allowed range of every integer key; out-of-range values are clamped, not rejected. */
const bounds = {
  "agent.max_steps": [1, 1000],
  "agent.api_timeout_secs": [1, 1800],
  "agent.max_retries": [0, 10],
  "agent.retry_base_ms": [10, 60_000],
  "agent.retry_max_ms": [100, 600_000],
  "subagents.max_concurrent": [1, 20],
  "subagents.max_depth": [0, 5],
  "subagents.heartbeat_timeout_secs": [30, 3600],
  "subagents.max_steps": [1, 1000],
  "subagents.max_tokens": [1, Number.MAX_SAFE_INTEGER],
  "subagents.max_wall_secs": [1, 86_400],
  "subagents.tree_max_tokens": [1, Number.MAX_SAFE_INTEGER],
  "subagents.max_result_chars": [256, 1_048_576],
  "tools.shell_timeout_secs": [1, 3600],
  "tools.max_output_chars": [1000, 1_000_000],
  "sandbox.tmp_size_mb": [1, 65_536],
  "sandbox.max_processes": [16, 65_536],
  "sandbox.memory_mb": [64, 1_048_576]
} as const satisfies Record<string, readonly [number, number]>

type IntKey = keyof typeof bounds

/**
 * Clamps `given` into the range of `key`, then raises it to `atLeast`; records the
 * key in `log` when the value used differs from the value given.
 */
const clampInto = (log: Array<Clamped>) => (key: IntKey, given: number, atLeast = Number.NEGATIVE_INFINITY): number => {
  const [min, max] = bounds[key]
  const used = Math.max(atLeast, Math.min(max, Math.max(min, given)))
  if (used !== given) log.push({ key, given, used })
  return used
}

const describeBounds = (key: IntKey): string => {
  const [min, max] = bounds[key]
  return max === Number.MAX_SAFE_INTEGER
    ? `an integer >= ${min} (smaller values are clamped)`
    : `an integer; values outside ${min}..${max} are clamped`
}

// ---------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------

/** `"agent.max_steps"` -> `"FIBRIL_AGENT_MAX_STEPS"`. */
const envVarOf = (key: string): string => `FIBRIL_${key.replaceAll(".", "_").toUpperCase()}`

/**
 * The sources in order: env (FIBRIL_ + constant case of the path), the project table, the
 * user table. A key takes its value from the first that has it.
 */
const makeSources = (
  env: Readonly<Record<string, string | undefined>>,
  project: unknown,
  user: unknown
): ReadonlyArray<ConfigProvider.ConfigProvider> => [
  ConfigProvider.fromEnvRecord({ ...env }).pipe(ConfigProvider.constantCase, ConfigProvider.nested("FIBRIL")),
  ConfigProvider.fromUnknown(project),
  ConfigProvider.fromUnknown(user)
]

const sandboxModes = ["read-only", "workspace-write", "off"] as const satisfies ReadonlyArray<SandboxMode>
const sandboxModesAccepted = sandboxModes.map((mode) => `"${mode}"`).join(" | ")

/** What the keys that are not integers accept, as error messages say it. */
const accepts = {
  string: "a string",
  boolean: "true or false",
  admission: `"reject" | "queue"`,
  models: `a table of role name = model id strings ("role=model,role=model" in the environment)`,
  deny: "an array of tool names (comma-separated in the environment)",
  writablePaths: "an array of paths, absolute or relative to the workspace (comma-separated in the environment)",
  bwrapPath: "a string: the bubblewrap binary, a name on PATH or a path"
} as const

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
const readRoles = (
  sources: ReadonlyArray<ConfigProvider.ConfigProvider>,
  read: <A>(
    key: string,
    accepted: string,
    make: (name: string) => Config.Config<A>,
    from: ConfigProvider.ConfigProvider
  ) => Effect.Effect<A, ConfigInvalid>
): Effect.Effect<Readonly<Record<string, SandboxRoleSettings>>, ConfigInvalid> =>
  Effect.map(
    Effect.forEach(sources, (source) =>
      read(
        "sandbox.roles",
        `tables [sandbox.roles.<role>] with mode (${sandboxModesAccepted}), network (true or false) and writable_paths (an array of paths)`,
        (name) => Config.schema(Schema.Record(Schema.String, SandboxRoleTable), name).pipe(Config.withDefault({})),
        source
      )),
    (tables) => {
      const roles: Record<string, SandboxRoleSettings> = {}
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

/** Reads every key through `Config`, then clamps; `sourceOf` says where a bad value came from. */
const readSettings = Effect.fnUntraced(function*(
  sources: ReadonlyArray<ConfigProvider.ConfigProvider>,
  sourceOf: (key: string) => string
) {
  const provider = sources.reduce((first, next) => ConfigProvider.orElse(first, next))
  const read = <A>(
    key: string,
    accepted: string,
    make: (name: string) => Config.Config<A>,
    from: ConfigProvider.ConfigProvider = provider
  ) => {
    const segments = key.split(".")
    const config = segments.slice(0, -1).reduceRight(
      (inner, section) => Config.nested(inner, section),
      make(segments.at(-1) ?? key)
    )
    return config.parse(from).pipe(
      Effect.catchTag("ConfigError", (error) =>
        Effect.gen(function*() {
          // "Expected an integer\n  at ["agent"]["max_steps"]": the path is already in `key`.
          const expected = error.cause.message.split("\n")[0] ?? error.message
          const given = yield* from.load(segments).pipe(Effect.orElseSucceed(() => undefined))
          return yield* new ConfigInvalid({
            key,
            envVar: envVarOf(key),
            source: sourceOf(key),
            problem: given?._tag === "Value" ? `got ${JSON.stringify(given.value)} (${expected})` : expected,
            accepted
          })
        }))
    )
  }
  const optionalString = (key: string) =>
    read(key, accepts.string, (name) => Config.String(name).pipe(Config.option, Config.map(Option.getOrUndefined)))

  const ints = yield* Effect.all(
    Record.map(bounds, (_, key) => read(key, describeBounds(key), (name) => Config.option(Config.Int(name))))
  )
  const clamped: Array<Clamped> = []
  const clamp = clampInto(clamped)
  const required = (key: IntKey, fallback: number) => clamp(key, Option.getOrElse(ints[key], () => fallback))
  const optional = (key: IntKey) => Option.getOrUndefined(Option.map(ints[key], (n) => clamp(key, n)))

  const d = defaults
  const apiTimeoutSecs = clamp(
    "agent.api_timeout_secs",
    // 0 means "use the default", like unset.
    Option.getOrElse(Option.filter(ints["agent.api_timeout_secs"], (n) => n !== 0), () => d.agent.apiTimeoutSecs)
  )
  const settings: Settings = {
    model: yield* optionalString("model"),
    agent: {
      maxSteps: required("agent.max_steps", d.agent.maxSteps),
      apiTimeoutSecs,
      maxRetries: required("agent.max_retries", d.agent.maxRetries),
      retryBaseMs: required("agent.retry_base_ms", d.agent.retryBaseMs),
      retryMaxMs: required("agent.retry_max_ms", d.agent.retryMaxMs)
    },
    subagents: {
      maxConcurrent: required("subagents.max_concurrent", d.subagents.maxConcurrent),
      maxDepth: required("subagents.max_depth", d.subagents.maxDepth),
      admission: yield* read(
        "subagents.admission",
        accepts.admission,
        (name) => Config.Literals(["reject", "queue"], name).pipe(Config.withDefault(d.subagents.admission))
      ),
      // A heartbeat must outlive the slowest model call it waits on.
      heartbeatTimeoutSecs: clamp(
        "subagents.heartbeat_timeout_secs",
        Option.getOrElse(ints["subagents.heartbeat_timeout_secs"], () => d.subagents.heartbeatTimeoutSecs),
        apiTimeoutSecs + 30
      ),
      maxSteps: optional("subagents.max_steps"),
      maxTokens: optional("subagents.max_tokens"),
      maxWallSecs: optional("subagents.max_wall_secs"),
      treeMaxTokens: optional("subagents.tree_max_tokens"),
      maxResultChars: required("subagents.max_result_chars", d.subagents.maxResultChars),
      defaultModel: yield* optionalString("subagents.default_model"),
      workerModel: yield* optionalString("subagents.worker_model"),
      explorerModel: yield* optionalString("subagents.explorer_model"),
      awaiterModel: yield* optionalString("subagents.awaiter_model"),
      reviewModel: yield* optionalString("subagents.review_model"),
      customModel: yield* optionalString("subagents.custom_model"),
      models: yield* read(
        "subagents.models",
        accepts.models,
        (name) => Config.Record(Schema.String, Schema.String, name).pipe(Config.withDefault(d.subagents.models))
      )
    },
    tools: {
      shellTimeoutSecs: required("tools.shell_timeout_secs", d.tools.shellTimeoutSecs),
      maxOutputChars: required("tools.max_output_chars", d.tools.maxOutputChars)
    },
    permissions: {
      deny: yield* read(
        "permissions.deny",
        accepts.deny,
        (name) => Config.Array(Schema.String, name).pipe(Config.withDefault(d.permissions.deny))
      )
    },
    sandbox: {
      mode: yield* read(
        "sandbox.mode",
        sandboxModesAccepted,
        (name) => Config.Literals(sandboxModes, name).pipe(Config.withDefault(d.sandbox.mode))
      ),
      network: yield* read(
        "sandbox.network",
        accepts.boolean,
        (name) => Config.Boolean(name).pipe(Config.withDefault(d.sandbox.network))
      ),
      writablePaths: yield* read(
        "sandbox.writable_paths",
        accepts.writablePaths,
        (name) => Config.Array(Schema.String, name).pipe(Config.withDefault(d.sandbox.writablePaths))
      ),
      bwrapPath: yield* read(
        "sandbox.bwrap_path",
        accepts.bwrapPath,
        (name) => Config.String(name).pipe(Config.withDefault(d.sandbox.bwrapPath))
      ),
      tmpSizeMb: required("sandbox.tmp_size_mb", d.sandbox.tmpSizeMb),
      maxProcesses: required("sandbox.max_processes", d.sandbox.maxProcesses),
      memoryMb: required("sandbox.memory_mb", d.sandbox.memoryMb),
      roles: yield* readRoles(sources, read)
    },
    cluster: { url: yield* optionalString("cluster.url") }
  }
  return { settings, clamped }
})

const tomlReason = (error: unknown): string =>
  error instanceof Toml().TomlError
    ? `line ${error.line}, column ${error.column}: ${error.message}`
    : String(error)

/** A config file as read: its path, text (for line numbers) and parsed table. */
interface ConfigFile {
  readonly path: string
  /** The text as read: its digest is what a trusted workspace was trusted with. */
  readonly text: string
  readonly table: TomlModule.TomlTable
  readonly lines: ReadonlyMap<string, number>
  /** Fibril key -> the seed's name it was written under in this file ({@link withSeedAliases}). */
  readonly aliased?: ReadonlyMap<string, string>
}

/** The parsed file, or `None` when it does not exist. */
const readToml = Effect.fnUntraced(function*(fs: FileSystem.FileSystem, file: string) {
  const text = yield* fs.readFileString(file).pipe(
    Effect.map(Option.some),
    Effect.catchTag("PlatformError", (error) =>
      error.reason._tag === "NotFound"
        ? Effect.succeedNone
        : Effect.fail(new ConfigFileError({ path: file, reason: error.message })))
  )
  if (Option.isNone(text)) return Option.none<ConfigFile>()
  const table = yield* Effect.try({
    try: () => Toml().parse(text.value),
    catch: (error) => new ConfigFileError({ path: file, reason: tomlReason(error) })
  })
  return Option.some<ConfigFile>({ path: file, text: text.value, table, lines: keyLines(text.value) })
})

/** The value at a dotted path of a parsed table, if any. */
const valueAt = (table: TomlModule.TomlTable, key: string): unknown =>
  key.split(".").reduce<unknown>((value, part) => isTable(value) ? value[part] : undefined, table)

/** Where the value of `key` comes from: the environment variable, else the first file holding it. */
const locate = (
  env: Readonly<Record<string, string | undefined>>,
  files: ReadonlyArray<ConfigFile>
) =>
(key: string): string => {
  const variable = envVarOf(key)
  const fromEnv = env[variable]
  if (fromEnv !== undefined && fromEnv !== "") return `environment variable ${variable}`
  const file = files.find((file) => valueAt(file.table, key) !== undefined)
  if (file === undefined) return "defaults"
  const line = file.lines.get(key)
  const where = line === undefined ? file.path : `${file.path}, line ${line}`
  const written = file.aliased?.get(key)
  return written === undefined ? where : `${written} in ${where} (alias of ${key})`
}

/**
 * What a config file may hold at a key, by TOML type. `Config` reads a file's values leniently
 * (a number where a string is wanted becomes its digits; an array where a number or a flag is
 * wanted reads as unset, so the default is used in silence), so a file's values are checked
 * against these first. Strings where a number or a flag is wanted are left to `Config`, which
 * parses or refuses them as it does every environment variable ("12", "yes").
 */
type FileKind = "string" | "integer" | "boolean" | "strings" | "string table"
const fileKinds: Readonly<Record<string, readonly [FileKind, string]>> = {
  strict: ["boolean", accepts.boolean],
  model: ["string", accepts.string],
  "subagents.admission": ["string", accepts.admission],
  "subagents.default_model": ["string", accepts.string],
  "subagents.worker_model": ["string", accepts.string],
  "subagents.explorer_model": ["string", accepts.string],
  "subagents.awaiter_model": ["string", accepts.string],
  "subagents.review_model": ["string", accepts.string],
  "subagents.custom_model": ["string", accepts.string],
  "subagents.models": ["string table", accepts.models],
  "permissions.deny": ["strings", accepts.deny],
  "sandbox.mode": ["string", sandboxModesAccepted],
  "sandbox.network": ["boolean", accepts.boolean],
  "sandbox.writable_paths": ["strings", accepts.writablePaths],
  "sandbox.bwrap_path": ["string", accepts.bwrapPath],
  "cluster.url": ["string", accepts.string],
  ...Object.fromEntries(Object.keys(bounds).map((key) => [key, ["integer", describeBounds(key as IntKey)] as const]))
}

const tomlType = (value: unknown): string =>
  Array.isArray(value)
    ? "an array"
    : isTable(value)
    ? "a table"
    : value instanceof Date
    ? "a date"
    : typeof value === "number" || typeof value === "bigint"
    ? "a number"
    : typeof value === "boolean"
    ? "a boolean"
    : "a string"

const fitsKind = (kind: FileKind, value: unknown): boolean => {
  switch (kind) {
    case "string":
      return typeof value === "string"
    case "integer":
      return typeof value === "number" || typeof value === "bigint" || typeof value === "string"
    case "boolean":
      return typeof value === "boolean" || typeof value === "string"
    case "strings":
      // A comma-separated string is read as the list, as in the environment.
      return typeof value === "string" || (Array.isArray(value) && value.every((item) => typeof item === "string"))
    case "string table":
      return isTable(value) && Object.values(value).every((item) => typeof item === "string")
  }
}

/** The first value of a file whose TOML type its key does not accept, as a `ConfigInvalid`. */
const wrongType = (file: ConfigFile): ConfigInvalid | undefined => {
  for (const [key, [kind, accepted]] of Object.entries(fileKinds)) {
    const value = valueAt(file.table, key)
    if (value === undefined || fitsKind(kind, value)) continue
    const line = file.lines.get(key)
    const shown = value instanceof Date
      ? value.toISOString()
      : JSON.stringify(value, (_, v) => typeof v === "bigint" ? String(v) : v)
    return new ConfigInvalid({
      key,
      envVar: envVarOf(key),
      source: line === undefined ? file.path : `${file.path}, line ${line}`,
      problem: `got ${shown} (${tomlType(value)}${
        Array.isArray(value) || isTable(value) ? " with an entry that is not a string" : ""
      })`,
      accepted
    })
  }
  return undefined
}

/** `[permissions] deny` entries that name no known tool, each with the tool it probably means. */
const unknownTools = (deny: ReadonlyArray<string>, known: ReadonlyArray<string>) =>
  deny.filter((name) => !known.includes(name)).map((name) => {
    const key = name.toLowerCase()
    const foreign = Object.hasOwn(claudeTools, key) ? claudeTools[key] : Object.hasOwn(opencodeTools, key)
      ? opencodeTools[key]
      : undefined
    const suggestion = foreign?.find((tool) => known.includes(tool)) ?? nearest(name, known)
    return suggestion === undefined ? { name } : { name, suggestion }
  })

// ---------------------------------------------------------------------------
// The seed's names (DeepSeek TUI / CodeWhale)
// ---------------------------------------------------------------------------

/**
 * Keys a DeepSeek TUI / CodeWhale config file holds that Fibril names differently, by the
 * seed's dotted name -> the Fibril key it is read as. Every other key the seed documents for
 * sub-agents (`[subagents]` `max_concurrent`, `heartbeat_timeout_secs`, `default_model`,
 * `worker_model`, `explorer_model`, `awaiter_model`, `review_model`, `custom_model`, and
 * `[subagents.models]`) has the same name in Fibril, so a seed config file loads as written.
 * (Keys with no Fibril counterpart, such as CodeWhale 0.9's `launch_concurrency` or
 * `[subagents.providers.*]`, stay unknown keys: an error, or with `strict = false` a warning.)
 * Where one file sets both names, the Fibril key wins and a warning says so (the seed's own
 * rule for `max_subagents`: `[subagents] max_concurrent` overrides it); between files and the
 * environment the usual precedence holds.
 *
 * @since 0.1.0
 */
export const seedAliases: Readonly<Record<string, string>> = {
  // The seed's per-step timeout of sub-agents' model calls; Fibril's applies to every agent.
  "subagents.api_timeout_secs": "agent.api_timeout_secs",
  max_subagents: "subagents.max_concurrent",
  // CodeWhale 0.9's names (its Fleet roles, and the budgets it moved out of the tool call).
  "subagents.scout_model": "subagents.explorer_model",
  "subagents.planner_model": "subagents.awaiter_model",
  "subagents.reviewer_model": "subagents.review_model",
  "subagents.default_max_steps": "subagents.max_steps",
  "subagents.default_wall_time_secs": "subagents.max_wall_secs",
  "subagents.token_budget": "subagents.tree_max_tokens"
}

/** `table` with the value at the dotted `key` replaced (`undefined`: removed), copied along the path. */
const withValueAt = (table: Record<string, unknown>, key: string, value: unknown): Record<string, unknown> => {
  const [head, ...rest] = key.split(".")
  const copy = { ...table }
  if (rest.length === 0) {
    if (value === undefined) delete copy[head!]
    else copy[head!] = value
    return copy
  }
  const inner = copy[head!]
  copy[head!] = withValueAt(isTable(inner) ? inner : {}, rest.join("."), value)
  return copy
}

/**
 * The file as Fibril reads it: each seed name moved to its Fibril key (remembered in
 * `aliased`, with its line), or dropped with a warning where the file sets the Fibril key too.
 */
const withSeedAliases = (file: ConfigFile): { readonly file: ConfigFile; readonly conflicts: Array<string> } => {
  let table: Record<string, unknown> = file.table
  const lines = new Map(file.lines)
  const aliased = new Map<string, string>()
  const conflicts: Array<string> = []
  for (const [seedKey, key] of Object.entries(seedAliases)) {
    const value = valueAt(file.table, seedKey)
    if (value === undefined || isTable(value)) continue
    table = withValueAt(table, seedKey, undefined)
    const own = valueAt(file.table, key)
    if (own === undefined) {
      table = withValueAt(table, key, value)
      aliased.set(key, seedKey)
      const line = file.lines.get(seedKey)
      if (line !== undefined) lines.set(key, line)
    } else {
      const line = (name: string) => file.lines.has(name) ? `, line ${file.lines.get(name)}` : ""
      conflicts.push(
        `${file.path}${line(seedKey)}: ${seedKey} = ${JSON.stringify(value)} (the seed's name of ${key}) is ignored: ` +
          `${key} = ${JSON.stringify(own)} is set too (line ${file.lines.get(key) ?? "?"}), and the Fibril key wins`
      )
    }
  }
  return { file: { ...file, table: table as TomlModule.TomlTable, lines, aliased }, conflicts }
}

/** Where each value that is not a default came from (see {@link Resolved.origins}). */
const originsOf = (
  settings: Settings,
  env: Readonly<Record<string, string | undefined>>,
  files: ReadonlyArray<ConfigFile>
): Record<string, string> => {
  const sourceOf = locate(env, files)
  const keys = Object.entries(knownKeys).flatMap(([table, names]) =>
    Array.isArray(names) && !table.includes("*") ? names.map((name) => join(table, name)) : []
  )
  const models = envVarOf("subagents.models") in env && env[envVarOf("subagents.models")] !== ""
    ? ["subagents.models"]
    : Object.keys(settings.subagents.models).map((role) => `subagents.models.${role}`)
  return Object.fromEntries(
    [...keys, ...models].flatMap((key) => {
      const source = sourceOf(key)
      return source === "defaults" ? [] : [[key, source]]
    })
  )
}

// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

/**
 * Where to look for configuration. Pass the process values in at the edge
 * ({@link layerConfig} does); nothing below reads `process` itself.
 *
 * @since 0.1.0
 */
export interface LoadOptions {
  readonly cwd: string
  readonly home: string
  readonly env: Readonly<Record<string, string | undefined>>
  /**
   * `false` (`--no-strict`): unknown tables and keys are warnings, not errors. Unset: the
   * `strict` key decides (env `FIBRIL_STRICT`, then the files), default true.
   */
  readonly strict?: boolean | undefined
  /** Tool names `[permissions] deny` may name; default every tool Fibril registers. */
  readonly knownTools?: ReadonlyArray<string> | undefined
}

/**
 * Reads env, project file, user file and defaults into settings, clamping numeric
 * limits. Missing files are skipped; unreadable or malformed files fail with
 * `ConfigFileError`, wrongly typed values with `ConfigInvalid` (naming the file and line,
 * or the environment variable), unknown tables and keys with `ConfigUnknownKeys` (or
 * become `warnings` when not strict), and a denial of an unknown tool with
 * `ConfigUnknownTool`.
 *
 * @example
 * ```ts
 * const { settings, clamped } = yield* FibrilConfig.load({ cwd: "/repo", home: "/home/me", env: {} })
 * ```
 *
 * @since 0.1.0
 */
export const load = Effect.fn("FibrilConfig.load")(function*(options: LoadOptions) {
  const fs = yield* FileSystem.FileSystem
  const projectFile = path.join(options.cwd, ".fibril", "config.toml")
  const userFile = path.join(options.home, ".fibril", "config.toml")
  // Keys written under the seed's names are read as the Fibril keys they mean.
  const seedConflicts: Array<string> = []
  const aliasing = Option.map((file: ConfigFile) => {
    const read = withSeedAliases(file)
    seedConflicts.push(...read.conflicts)
    return read.file
  })
  const project = aliasing(yield* readToml(fs, projectFile))
  // When cwd is home, the same file is both; read it once.
  const user = userFile === projectFile ? Option.none<ConfigFile>() : aliasing(yield* readToml(fs, userFile))
  const files = [...Option.toArray(project), ...Option.toArray(user)]
  const sources = makeSources(
    options.env,
    Option.getOrElse(Option.map(project, (file) => file.table), () => ({})),
    Option.getOrElse(Option.map(user, (file) => file.table), () => ({}))
  )
  const sourceOf = locate(options.env, files)
  // Strictness first: it decides whether what follows is an error or a warning.
  const strictKey = yield* Config.Boolean("strict").pipe(Config.withDefault(true)).parse(
    sources.reduce((first, next) => ConfigProvider.orElse(first, next))
  ).pipe(
    Effect.catchTag("ConfigError", () =>
      Effect.fail(
        new ConfigInvalid({
          key: "strict",
          envVar: envVarOf("strict"),
          source: sourceOf("strict"),
          problem: "not true or false",
          accepted: accepts.boolean
        })
      ))
  )
  const strict = options.strict ?? strictKey
  const unknown = files.flatMap((file) => unknownKeys(file.path, file.table, file.lines))
  if (strict && unknown.length > 0) return yield* new ConfigUnknownKeys({ problems: unknown })
  const mistyped = files.map(wrongType).find((error) => error !== undefined)
  if (mistyped !== undefined) return yield* mistyped
  const gate = yield* gateProject(fs, options, project, user, sourceOf)
  const { settings, clamped } = yield* readSettings(
    gate === undefined ? sources : makeSources(options.env, gate.table, Option.getOrUndefined(user)?.table ?? {}),
    sourceOf
  )
  const known = options.knownTools ?? fibrilTools
  const unknownDenied = unknownTools(settings.permissions.deny, known)
  if (unknownDenied.length > 0) {
    return yield* new ConfigUnknownTool({
      key: "permissions.deny",
      source: sourceOf("permissions.deny"),
      unknown: unknownDenied,
      known
    })
  }
  return {
    settings,
    clamped,
    sources: files.map((file) => file.path),
    warnings: [...seedConflicts, ...unknown.map(describeUnknown)],
    // An untrusted workspace's ignored widenings are not where any value came from.
    origins: originsOf(
      settings,
      options.env,
      gate === undefined ?
        files :
        files.map((file) =>
          Option.isSome(project) && file === project.value
            ? { ...file, table: gate.table as TomlModule.TomlTable }
            : file
        )
    ),
    ...(gate === undefined ? {} : { trust: gate.report })
  } satisfies Resolved
})

/**
 * The project table to read, when the project file widens the sandbox (Trust.ts): as written
 * in a trusted workspace, without its widenings otherwise; with the report either way.
 * `undefined` when the file widens nothing.
 */
const gateProject = Effect.fnUntraced(function*(
  fs: FileSystem.FileSystem,
  options: LoadOptions,
  project: Option.Option<ConfigFile>,
  user: Option.Option<ConfigFile>,
  sourceOf: (key: string) => string
) {
  if (Option.isNone(project) || !Trust.mayWiden(project.value.table)) return undefined
  // The base: everything but the project file.
  const base = yield* readSettings(makeSources(options.env, {}, Option.getOrUndefined(user)?.table ?? {}), sourceOf)
  const found = Trust.widenings(project.value.table, {
    settings: base.settings,
    workspace: options.cwd,
    fromEnv: (key) => (options.env[envVarOf(key)] ?? "") !== ""
  }, project.value.lines)
  if (found.widenings.length === 0) return undefined
  const { status, workspace } = yield* Trust.statusOf(fs, {
    workspace: options.cwd,
    home: options.home,
    configText: project.value.text
  }).pipe(
    // An unreadable list trusts nothing.
    Effect.catchTag("TrustFileError", () => Effect.succeed({ status: "untrusted" as const, workspace: options.cwd }))
  )
  const report: Trust.Report = { workspace, file: project.value.path, status, widenings: found.widenings }
  return { table: status === "trusted" ? project.value.table : found.narrowed, report }
})

/**
 * Everything `load` can fail with: a file that cannot be read or parsed, a value of the
 * wrong type, unknown tables or keys (strict), a denial of an unknown tool.
 *
 * @since 0.1.0
 */
export type LoadError = ConfigFileError | ConfigInvalid | ConfigUnknownKeys | ConfigUnknownTool

/**
 * Overrides for {@link fromSettings}; each section is merged over its defaults.
 *
 * @since 0.1.0
 */
export interface SettingsOverrides {
  readonly model?: string | undefined
  readonly agent?: Partial<AgentSettings> | undefined
  readonly subagents?: Partial<SubagentSettings> | undefined
  readonly tools?: Partial<ToolSettings> | undefined
  readonly permissions?: Partial<PermissionSettings> | undefined
  readonly sandbox?: Partial<SandboxSettings> | undefined
  readonly cluster?: Partial<ClusterSettings> | undefined
}

/**
 * Builds the service value from {@link defaults} merged with `overrides`, section
 * by section. No files, no env, no clamping: tests get exactly what they ask for.
 *
 * @since 0.1.0
 */
export const fromSettings = (overrides: SettingsOverrides = {}): Resolved => ({
  settings: {
    model: overrides.model ?? defaults.model,
    agent: { ...defaults.agent, ...overrides.agent },
    subagents: { ...defaults.subagents, ...overrides.subagents },
    tools: { ...defaults.tools, ...overrides.tools },
    permissions: { ...defaults.permissions, ...overrides.permissions },
    sandbox: { ...defaults.sandbox, ...overrides.sandbox },
    cluster: { ...defaults.cluster, ...overrides.cluster }
  },
  clamped: [],
  sources: [],
  warnings: [],
  origins: {}
})

/**
 * Test layer: {@link fromSettings} as a `FibrilConfig`.
 *
 * @since 0.1.0
 */
export const layerSettings = (overrides: SettingsOverrides = {}): Layer.Layer<FibrilConfig> =>
  Layer.succeed(FibrilConfig, FibrilConfig.of(fromSettings(overrides)))

/**
 * `FibrilConfig` from explicit locations and environment (see {@link load}).
 *
 * @since 0.1.0
 */
export const layer = (
  options: LoadOptions
): Layer.Layer<FibrilConfig, LoadError, FileSystem.FileSystem> =>
  Layer.effect(FibrilConfig, Effect.map(load(options), FibrilConfig.of))

/**
 * `FibrilConfig` for the running process: `process.cwd()`, `os.homedir()` and
 * `process.env`, read once when the layer is built.
 *
 * @example
 * ```ts
 * program.pipe(Effect.provide(FibrilConfig.layerConfig), Effect.provide(NodeServices.layer))
 * ```
 *
 * @since 0.1.0
 */
export const layerConfig: Layer.Layer<FibrilConfig, LoadError, FileSystem.FileSystem> = Layer.unwrap(
  Effect.sync(() => layer({ cwd: process.cwd(), home: os.homedir(), env: { ...process.env } }))
)
