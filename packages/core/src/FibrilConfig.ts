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
import * as os from "node:os"
import * as path from "node:path"
import type * as TomlModule from "smol-toml"
import { fibrilTools } from "./AgentDefinitions.ts"
import {
  accepts,
  bounds,
  type Clamped,
  clampInto,
  describeBounds,
  type IntKey,
  sandboxModes,
  sandboxModesAccepted
} from "./internal/configBounds.ts"
import {
  approvalConfigs,
  approvalDefaults,
  type ApprovalSettings,
  type ConfigFile,
  type ConfigFileError,
  ConfigInvalid,
  ConfigUnknownKeys,
  ConfigUnknownTool,
  describeUnknown,
  envVarOf,
  locate,
  originsOf,
  readToml,
  unknownAsked,
  unknownKeys,
  unknownTools,
  withSeedAliases,
  wrongType
} from "./internal/configFile.ts"
import { makeSources, readRoles, readRoleSettings, type RoleSettings } from "./internal/configRoles.ts"
import * as Trust from "./Trust.ts"

// ---------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------

/** What a sub-agent spawn does when `subagents.max_concurrent` are already running. */
export type Admission = "reject" | "queue"

/** `[agent]`: the root agent loop and its model calls. */
export interface AgentSettings {
  readonly maxSteps: number
  readonly apiTimeoutSecs: number
  readonly maxRetries: number
  readonly retryBaseMs: number
  readonly retryMaxMs: number
}

/** `[subagents]`: limits, budgets and models of spawned sub-agents. */
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
  /** Heap cap of an `isolation: "process"` child, in MB (`--max-old-space-size`). */
  readonly processMemoryMb: number
  /** `[subagents.isolation]`: role name -> "worktree" | "process", when a spawn names none (docs/subagents.md). */
  readonly isolation?: Readonly<Record<string, "worktree" | "process">> | undefined
}

/** `[tools]`: limits of the built-in tools. */
export interface ToolSettings {
  readonly shellTimeoutSecs: number
  readonly maxOutputChars: number
}

/** `[permissions]`. */
export interface PermissionSettings extends ApprovalSettings {
  /** Tool names that are never offered to any agent (env: comma-separated). */
  readonly deny: ReadonlyArray<string>
}

/**
 * How far a `shell` command may write (`[sandbox] mode`): `"read-only"` (the whole file
 * system read-only, a private /tmp), `"workspace-write"` (the workspace writable, except
 * `.git` and `.fibril`), or `"off"` (no sandbox). The mode is the most an agent's shell
 * gets; an agent that may not write is read-only whatever it says.
 */
export type SandboxMode = "read-only" | "workspace-write" | "off"

/** `[sandbox.roles.<role>]`: per-role overrides; an unset key falls back to `[sandbox]`. */
export interface SandboxRoleSettings {
  readonly mode?: SandboxMode | undefined
  readonly network?: boolean | undefined
  readonly writablePaths?: ReadonlyArray<string> | undefined
}

/** `[sandbox]`: the operating-system sandbox of `shell` commands. */
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

/** `[cluster]`: cluster mode (docs/cluster.md). */
export interface ClusterSettings {
  /**
   * The cluster's database: a PostgreSQL URL, or `sqlite:<file>` on one machine. Set, `run`,
   * `agents` and `mcp` are clients of the cluster.
   */
  readonly url: string | undefined
}

/** `[rate_limit]`: the gate each provider endpoint's calls wait at (RateLimiter, docs/configuration.md). */
export interface RateLimitSettings {
  readonly enabled: boolean
  readonly initialConcurrency: number
  readonly maxConcurrency: number
}

// `[telemetry]`: what the exported spans record (GenAiTrace, docs/observability.md).
export type { TelemetrySettings } from "./GenAiTrace.ts"
/** The resolved settings, with camelCase names for the snake_case TOML keys. */
export interface Settings {
  /** Default model id of the root agent. */
  readonly model: string | undefined
  readonly agent: AgentSettings
  readonly subagents: SubagentSettings
  readonly tools: ToolSettings
  readonly permissions: PermissionSettings
  readonly sandbox: SandboxSettings
  readonly cluster: ClusterSettings
  readonly rateLimit: RateLimitSettings
  readonly telemetry: import("./GenAiTrace.ts").TelemetrySettings
  /** `[roles.<role>]`: per-role settings, by lower-case role name. */
  readonly roles: Readonly<Record<string, RoleSettings>>
}

// `[roles.<role>]`: its agents' MCP servers (internal/configRoles.ts).
export type { RoleSettings } from "./internal/configRoles.ts"

/** The service shape: settings plus where they came from. */
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

// A value that was outside its allowed range and was replaced (internal/configBounds.ts).
export type { Clamped } from "./internal/configBounds.ts"

/** The resolved configuration of the running process. */
export class FibrilConfig extends Context.Service<FibrilConfig, Resolved>()("@fibril/core/FibrilConfig") {}

/** The settings used when no source sets a key. */
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
    models: {},
    processMemoryMb: 512,
    isolation: {}
  },
  tools: { shellTimeoutSecs: 120, maxOutputChars: 30_000 },
  permissions: { deny: [], ...approvalDefaults },
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
  cluster: { url: undefined },
  rateLimit: { enabled: true, initialConcurrency: 4, maxConcurrency: 64 },
  telemetry: { captureContent: false },
  roles: {}
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

// The errors, the registry of known keys and the seed's names are defined next to the reading
// of the files that raises and uses them (internal/configFile.ts); they are part of this API.
export {
  ConfigFileError,
  ConfigInvalid,
  ConfigUnknownKeys,
  ConfigUnknownTool,
  describeUnknown,
  keyLines,
  knownKeys,
  seedAliases,
  UnknownKey
} from "./internal/configFile.ts"

// ---------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------

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
      ),
      processMemoryMb: required("subagents.process_memory_mb", d.subagents.processMemoryMb),
      isolation: yield* read(
        "subagents.isolation",
        accepts.isolation,
        (name) =>
          Config.Record(Schema.String, Schema.Literals(["worktree", "process"]), name).pipe(
            Config.withDefault(d.subagents.isolation ?? {})
          )
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
      ),
      ask: yield* read("permissions.ask", accepts.ask, approvalConfigs.names),
      allow: yield* read("permissions.allow", accepts.ask, approvalConfigs.names),
      askTimeoutSecs: optional("permissions.ask_timeout_secs"),
      fanOutMaxAgents: optional("permissions.fan_out_max_agents"),
      fanOutMaxUsd: yield* read("permissions.fan_out_max_usd", accepts.usd, approvalConfigs.usd),
      usdPerMtok: yield* read("permissions.usd_per_mtok", accepts.prices, approvalConfigs.prices)
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
    cluster: { url: yield* optionalString("cluster.url") },
    rateLimit: {
      enabled: yield* read(
        "rate_limit.enabled",
        accepts.boolean,
        (name) => Config.Boolean(name).pipe(Config.withDefault(d.rateLimit.enabled))
      ),
      initialConcurrency: required("rate_limit.initial_concurrency", d.rateLimit.initialConcurrency),
      maxConcurrency: required("rate_limit.max_concurrency", d.rateLimit.maxConcurrency)
    },
    telemetry: {
      captureContent: yield* read(
        "telemetry.capture_content",
        accepts.boolean,
        (name) => Config.Boolean(name).pipe(Config.withDefault(d.telemetry.captureContent))
      )
    },
    roles: yield* readRoleSettings(sources, read)
  }
  return { settings, clamped }
})
// ---------------------------------------------------------------------------
// Constructors
// ---------------------------------------------------------------------------

/**
 * Where to look for configuration. Pass the process values in at the edge
 * ({@link layerConfig} does); nothing below reads `process` itself.
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
  const unknownAsk = unknownAsked(settings.permissions.ask, known, sourceOf("permissions.ask")) ??
    unknownAsked(settings.permissions.allow, known, sourceOf("permissions.allow"), "permissions.allow")
  if (unknownAsk !== undefined) return yield* unknownAsk
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
      settings.subagents.models,
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
 */
export type LoadError = ConfigFileError | ConfigInvalid | ConfigUnknownKeys | ConfigUnknownTool

/** Overrides for {@link fromSettings}; each section is merged over its defaults. */
export interface SettingsOverrides {
  readonly model?: string | undefined
  readonly agent?: Partial<AgentSettings> | undefined
  readonly subagents?: Partial<SubagentSettings> | undefined
  readonly tools?: Partial<ToolSettings> | undefined
  readonly permissions?: Partial<PermissionSettings> | undefined
  readonly sandbox?: Partial<SandboxSettings> | undefined
  readonly cluster?: Partial<ClusterSettings> | undefined
  readonly rateLimit?: Partial<RateLimitSettings> | undefined
  readonly telemetry?: Partial<import("./GenAiTrace.ts").TelemetrySettings> | undefined
  readonly roles?: Readonly<Record<string, RoleSettings>> | undefined
}

/**
 * Builds the service value from {@link defaults} merged with `overrides`, section
 * by section. No files, no env, no clamping: tests get exactly what they ask for.
 */
export const fromSettings = (overrides: SettingsOverrides = {}): Resolved => ({
  settings: {
    model: overrides.model ?? defaults.model,
    agent: { ...defaults.agent, ...overrides.agent },
    subagents: { ...defaults.subagents, ...overrides.subagents },
    tools: { ...defaults.tools, ...overrides.tools },
    permissions: { ...defaults.permissions, ...overrides.permissions },
    sandbox: { ...defaults.sandbox, ...overrides.sandbox },
    cluster: { ...defaults.cluster, ...overrides.cluster },
    rateLimit: { ...defaults.rateLimit, ...overrides.rateLimit },
    telemetry: { ...defaults.telemetry, ...overrides.telemetry },
    roles: overrides.roles ?? defaults.roles
  },
  clamped: [],
  sources: [],
  warnings: [],
  origins: {}
})

/** Test layer: {@link fromSettings} as a `FibrilConfig`. */
export const layerSettings = (overrides: SettingsOverrides = {}): Layer.Layer<FibrilConfig> =>
  Layer.succeed(FibrilConfig, FibrilConfig.of(fromSettings(overrides)))

/** `FibrilConfig` from explicit locations and environment (see {@link load}). */
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
 */
export const layerConfig: Layer.Layer<FibrilConfig, LoadError, FileSystem.FileSystem> = Layer.unwrap(
  Effect.sync(() => layer({ cwd: process.cwd(), home: os.homedir(), env: { ...process.env } }))
)
