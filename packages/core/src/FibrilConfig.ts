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
 * @since 0.1.0
 */
import { Config, ConfigProvider, Context, Effect, FileSystem, Layer, Option, Record, Schema } from "effect"
import * as os from "node:os"
import * as path from "node:path"
import * as Toml from "smol-toml"

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
    defaultModel: undefined,
    workerModel: undefined,
    explorerModel: undefined,
    awaiterModel: undefined,
    reviewModel: undefined,
    customModel: undefined,
    models: {}
  },
  tools: { shellTimeoutSecs: 120, maxOutputChars: 30_000 },
  permissions: { deny: [] }
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
  /** What was wrong, from the underlying `ConfigError`. */
  problem: Schema.String,
  /** What the key accepts. */
  accepted: Schema.String
}) {
  override get message(): string {
    return `Invalid config value for ${this.key} (env ${this.envVar}): ${this.problem}. Accepted: ${this.accepted}`
  }
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
  "tools.shell_timeout_secs": [1, 3600],
  "tools.max_output_chars": [1000, 1_000_000]
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

/** Env first (FIBRIL_ + constant case of the path), then the project table, then the user table. */
const makeProvider = (
  env: Readonly<Record<string, string | undefined>>,
  project: unknown,
  user: unknown
): ConfigProvider.ConfigProvider =>
  ConfigProvider.fromEnvRecord({ ...env }).pipe(
    ConfigProvider.constantCase,
    ConfigProvider.nested("FIBRIL"),
    ConfigProvider.orElse(ConfigProvider.fromUnknown(project)),
    ConfigProvider.orElse(ConfigProvider.fromUnknown(user))
  )

/** Reads every key through `Config`, then clamps. */
const readSettings = Effect.fnUntraced(function*(provider: ConfigProvider.ConfigProvider) {
  const read = <A>(key: string, accepted: string, make: (name: string) => Config.Config<A>) => {
    const segments = key.split(".")
    const config = segments.slice(0, -1).reduceRight(
      (inner, section) => Config.nested(inner, section),
      make(segments.at(-1) ?? key)
    )
    return config.parse(provider).pipe(
      Effect.catchTag("ConfigError", (error) =>
        Effect.gen(function*() {
          // "Expected an integer\n  at ["agent"]["max_steps"]": the path is already in `key`.
          const expected = error.cause.message.split("\n")[0] ?? error.message
          const given = yield* provider.load(segments).pipe(Effect.orElseSucceed(() => undefined))
          return yield* new ConfigInvalid({
            key,
            envVar: envVarOf(key),
            problem: given?._tag === "Value" ? `got ${JSON.stringify(given.value)} (${expected})` : expected,
            accepted
          })
        }))
    )
  }
  const optionalString = (key: string) =>
    read(key, "a string", (name) => Config.String(name).pipe(Config.option, Config.map(Option.getOrUndefined)))

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
        `"reject" | "queue"`,
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
      defaultModel: yield* optionalString("subagents.default_model"),
      workerModel: yield* optionalString("subagents.worker_model"),
      explorerModel: yield* optionalString("subagents.explorer_model"),
      awaiterModel: yield* optionalString("subagents.awaiter_model"),
      reviewModel: yield* optionalString("subagents.review_model"),
      customModel: yield* optionalString("subagents.custom_model"),
      models: yield* read(
        "subagents.models",
        `a table of role name = model id strings ("role=model,role=model" in the environment)`,
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
        "an array of tool names (comma-separated in the environment)",
        (name) => Config.Array(Schema.String, name).pipe(Config.withDefault(d.permissions.deny))
      )
    }
  }
  return { settings, clamped }
})

const tomlReason = (error: unknown): string =>
  error instanceof Toml.TomlError
    ? `line ${error.line}, column ${error.column}: ${error.message}`
    : String(error)

/** The parsed file, or `None` when it does not exist. */
const readToml = Effect.fnUntraced(function*(fs: FileSystem.FileSystem, file: string) {
  const text = yield* fs.readFileString(file).pipe(
    Effect.map(Option.some),
    Effect.catchTag("PlatformError", (error) =>
      error.reason._tag === "NotFound"
        ? Effect.succeedNone
        : Effect.fail(new ConfigFileError({ path: file, reason: error.message })))
  )
  if (Option.isNone(text)) return Option.none<Toml.TomlTable>()
  const table = yield* Effect.try({
    try: () => Toml.parse(text.value),
    catch: (error) => new ConfigFileError({ path: file, reason: tomlReason(error) })
  })
  return Option.some<Toml.TomlTable>(table)
})

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
}

/**
 * Reads env, project file, user file and defaults into settings, clamping numeric
 * limits. Missing files are skipped; unreadable or malformed files fail with
 * `ConfigFileError`, wrongly typed values with `ConfigInvalid`.
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
  const project = yield* readToml(fs, projectFile)
  // When cwd is home, the same file is both; read it once.
  const user = userFile === projectFile ? Option.none<Toml.TomlTable>() : yield* readToml(fs, userFile)
  const provider = makeProvider(options.env, Option.getOrElse(project, () => ({})), Option.getOrElse(user, () => ({})))
  const { settings, clamped } = yield* readSettings(provider)
  const sources = [
    ...Option.match(project, { onNone: () => [], onSome: () => [projectFile] }),
    ...Option.match(user, { onNone: () => [], onSome: () => [userFile] })
  ]
  return { settings, clamped, sources } satisfies Resolved
})

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
    permissions: { ...defaults.permissions, ...overrides.permissions }
  },
  clamped: [],
  sources: []
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
): Layer.Layer<FibrilConfig, ConfigFileError | ConfigInvalid, FileSystem.FileSystem> =>
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
export const layerConfig: Layer.Layer<FibrilConfig, ConfigFileError | ConfigInvalid, FileSystem.FileSystem> =
  Layer.unwrap(Effect.sync(() => layer({ cwd: process.cwd(), home: os.homedir(), env: { ...process.env } })))
