/**
 * Reading and validating the TOML config files: the registry of the tables and keys a file may
 * hold, the line each is written on, the unknown ones (with the nearest valid name), values of
 * the wrong TOML type, `[permissions] deny` entries that name no tool, the seed's names of
 * keys, and where each value came from. The errors a configuration can have are defined here,
 * next to what finds them; `FibrilConfig` exports them.
 */
import * as Config from "effect/Config"
import * as Effect from "effect/Effect"
import type * as FileSystem from "effect/FileSystem"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { createRequire } from "node:module"
import type * as TomlModule from "smol-toml"
import { claudeTools, opencodeTools } from "../AgentDefinitions.ts"
import { postures } from "../Permission.ts"
import { accepts, bounds, describeBounds, type IntKey, sandboxModesAccepted } from "./configBounds.ts"
import * as RulePatterns from "./rulePatterns.ts"
import { nearest } from "./suggest.ts"

// The TOML parser is loaded when a config file is first read (a process with none never needs it).
let tomlModule: typeof TomlModule | undefined
const Toml = (): typeof TomlModule => (tomlModule ??= createRequire(import.meta.url)("smol-toml") as typeof TomlModule)

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/** A config file exists but could not be read or is not valid TOML. */
export class ConfigFileError extends Schema.TaggedError<ConfigFileError>()("ConfigFileError", {
  path: Schema.String,
  /** smol-toml's message with line and column, or the read error. */
  reason: Schema.String
}) {
  override get message(): string {
    return `Cannot load config file ${this.path}: ${this.reason}`
  }
}

/** A config value has the wrong type or is not one of the accepted values. */
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

/** A table or key a config file holds that Fibril does not know. */
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

/** Config files hold tables or keys Fibril does not know (strict mode). */
export class ConfigUnknownKeys extends Schema.TaggedError<ConfigUnknownKeys>()("ConfigUnknownKeys", {
  problems: Schema.Array(UnknownKey)
}) {
  override get message(): string {
    return `Unknown configuration (fix the names, or use --no-strict or strict = false to only warn):\n${
      this.problems.map((problem) => `  ${describeUnknown(problem)}`).join("\n")
    }`
  }
}

/** `[permissions] deny` names tools that do not exist: such a denial would deny nothing. */
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
    }; ${
      this.key === "permissions.ask"
        ? "an ask entry that matches no tool or posture asks nothing. Known tools and postures"
        : this.key === "permissions.allow"
        ? "an allow entry that matches no tool or posture answers nothing. Known tools and postures"
        : "a denial that matches no tool denies nothing. Known tools"
    }: ${this.known.join(", ")}`
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
 * section, add its entry here and read its keys in `readSettings` (FibrilConfig.ts).
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
    "custom_model",
    "process_memory_mb"
  ],
  "subagents.models": "any",
  "subagents.isolation": "any",
  tools: ["shell_timeout_secs", "max_output_chars"],
  permissions: ["deny", "ask", "allow", "ask_timeout_secs", "fan_out_max_agents", "fan_out_max_usd"],
  "permissions.usd_per_mtok": "any",
  sandbox: ["mode", "network", "writable_paths", "bwrap_path", "tmp_size_mb", "max_processes", "memory_mb"],
  "sandbox.roles": [],
  "sandbox.roles.*": ["mode", "network", "writable_paths"],
  cluster: ["url"],
  rate_limit: ["enabled", "initial_concurrency", "max_concurrency"],
  telemetry: ["capture_content"],
  // Per-role settings (internal/configRoles.ts reads them).
  roles: [],
  "roles.*": ["mcp_servers"],
  // MCP servers (McpServers.ts reads and checks them; its `acceptedKeys` is this list).
  mcp_servers: [],
  "mcp_servers.*": ["type", "command", "args", "env", "url", "headers", "timeout_secs"],
  "mcp_servers.*.env": "any",
  "mcp_servers.*.headers": "any"
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
export const unknownKeys = (file: string, table: TomlModule.TomlTable, lines: ReadonlyMap<string, number>) => {
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

/** `"agent.max_steps"` -> `"FIBRIL_AGENT_MAX_STEPS"`. */
export const envVarOf = (key: string): string => `FIBRIL_${key.replaceAll(".", "_").toUpperCase()}`

const tomlReason = (error: unknown): string =>
  error instanceof Toml().TomlError
    ? `line ${error.line}, column ${error.column}: ${error.message}`
    : String(error)

/** A config file as read: its path, text (for line numbers) and parsed table. */
export interface ConfigFile {
  readonly path: string
  /** The text as read: its digest is what a trusted workspace was trusted with. */
  readonly text: string
  readonly table: TomlModule.TomlTable
  readonly lines: ReadonlyMap<string, number>
  /** Fibril key -> the seed's name it was written under in this file ({@link withSeedAliases}). */
  readonly aliased?: ReadonlyMap<string, string>
}

/** The parsed file, or `None` when it does not exist. */
export const readToml = Effect.fnUntraced(function*(fs: FileSystem.FileSystem, file: string) {
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
export const locate = (
  env: Readonly<Record<string, string | undefined>>,
  files: ReadonlyArray<ConfigFile>
) =>
(key: string): string => {
  const variable = envVarOf(key)
  const fromEnv = env[variable]
  if (fromEnv !== undefined && fromEnv !== "") return `environment variable ${variable}`
  const file = files.find((candidate) => valueAt(candidate.table, key) !== undefined)
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
  "subagents.isolation": ["string table", accepts.isolation],
  "permissions.deny": ["strings", accepts.deny],
  "sandbox.mode": ["string", sandboxModesAccepted],
  "sandbox.network": ["boolean", accepts.boolean],
  "sandbox.writable_paths": ["strings", accepts.writablePaths],
  "sandbox.bwrap_path": ["string", accepts.bwrapPath],
  "cluster.url": ["string", accepts.string],
  "rate_limit.enabled": ["boolean", accepts.boolean],
  "telemetry.capture_content": ["boolean", accepts.boolean],
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
export const wrongType = (file: ConfigFile): ConfigInvalid | undefined => {
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

/** `[permissions]` of approvals (docs/security.md, "Asking a person"): what asks, how long, fan-out limits. */
export interface ApprovalSettings {
  /** Tool names and postures whose calls wait for a person's answer. */
  readonly ask?: ReadonlyArray<string> | undefined
  /** Tool names and postures whose questions are answered "allow" without asking (AllowAlways.ts). */
  readonly allow?: ReadonlyArray<string> | undefined
  /** How long a question waits before it is a denial; unset: 300 s. */
  readonly askTimeoutSecs?: number | undefined
  /** One turn's spawns beyond this many agents, or this estimated cost, ask first; unset: never. */
  readonly fanOutMaxAgents?: number | undefined
  readonly fanOutMaxUsd?: number | undefined
  /** model id -> US dollars per million tokens, for fan-out estimates. */
  readonly usdPerMtok?: Readonly<Record<string, number>> | undefined
}

/** `[permissions] ask` entries that name no tool (of `tools`) or posture, as the error `load` fails with. */
export const unknownAsked = (
  ask: ReadonlyArray<string> | undefined,
  tools: ReadonlyArray<string>,
  source: string,
  key: "permissions.ask" | "permissions.allow" = "permissions.ask"
): ConfigUnknownTool | undefined => {
  const known = [...tools, ...postures]
  const unknown = unknownTools(ask ?? [], known, key === "permissions.ask")
  return unknown.length === 0 ? undefined : new ConfigUnknownTool({ key, source, unknown, known })
}

export const approvalDefaults: ApprovalSettings = {
  ask: [],
  allow: [],
  askTimeoutSecs: undefined,
  fanOutMaxAgents: undefined,
  fanOutMaxUsd: undefined,
  usdPerMtok: {}
}

/** How the `[permissions]` keys of approvals are read (FibrilConfig.readSettings). */
export const approvalConfigs = {
  names: (name: string) => Config.Array(Schema.String, name).pipe(Config.withDefault<ReadonlyArray<string>>([])),
  usd: (name: string) => Config.option(Config.Number(name)).pipe(Config.map(Option.getOrUndefined)),
  prices: (name: string) =>
    Config.Record(Schema.String, Schema.Number, name).pipe(Config.withDefault<Readonly<Record<string, number>>>({}))
}

/** `[permissions] deny` entries that name no known tool, each with the tool it probably means. */
/**
 * Entries naming no known tool; with `patterns`, a `tool(pattern)` entry names its tool
 * (RulePatterns). An MCP entry (`mcp__<server>…`) cannot be checked here: a server's tools are
 * known only once it has started (on first use, after the configuration is read).
 */
export const unknownTools = (deny: ReadonlyArray<string>, known: ReadonlyArray<string>, patterns = true) =>
  (patterns ? deny.map(RulePatterns.toolOf) : deny).filter((name) => !known.includes(name) && !name.startsWith("mcp__"))
    .map((name) => {
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
export const withSeedAliases = (file: ConfigFile): { readonly file: ConfigFile; readonly conflicts: Array<string> } => {
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

/** Where each value that is not a default came from (see `FibrilConfig.Resolved.origins`). */
export const originsOf = (
  /** `[subagents.models]` as read: a role set in a file came from that file. */
  roleModels: Readonly<Record<string, string>>,
  env: Readonly<Record<string, string | undefined>>,
  files: ReadonlyArray<ConfigFile>
): Record<string, string> => {
  const sourceOf = locate(env, files)
  const keys = Object.entries(knownKeys).flatMap(([table, names]) =>
    Array.isArray(names) && !table.includes("*") ? names.map((name) => join(table, name)) : []
  )
  const models = envVarOf("subagents.models") in env && env[envVarOf("subagents.models")] !== ""
    ? ["subagents.models"]
    : Object.keys(roleModels).map((role) => `subagents.models.${role}`)
  return Object.fromEntries(
    [...keys, ...models].flatMap((key) => {
      const source = sourceOf(key)
      return source === "defaults" ? [] : [[key, source]]
    })
  )
}
