/**
 * AgentDefinitions — user-defined sub-agent types, read from markdown files.
 *
 * A definition is a markdown file whose YAML frontmatter says what the agent is for and what
 * it may use, and whose body is its prompt. Three layouts are read, so agents written for
 * other harnesses work unchanged: Fibril's own (`.fibril/agents/*.md`), Claude Code's
 * (`.claude/agents/*.md`) and opencode's (`.opencode/agent/*.md`, `.opencode/agents/*.md`).
 * Foreign tool names are mapped onto Fibril's tools; what has no equivalent is dropped with
 * a warning, and a permission Fibril cannot express (an interactive "ask", a per-command
 * pattern) becomes a denial, never a wider grant. `parse` is pure; `load` reads the
 * directories and never fails: a bad file becomes an `AgentFileProblem` naming its path and
 * the problem, and the other files still load. See docs/agents.md.
 */
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Path from "effect/Path"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SchemaIssue from "effect/SchemaIssue"
import { createRequire } from "node:module"
import type * as YamlModule from "yaml"
import { ClaudePermissionMode, fromPermissionMode } from "./internal/claudePermissionMode.ts"
import * as McpEntry from "./internal/mcpEntry.ts"
import * as RulePatterns from "./internal/rulePatterns.ts"
import { canonical, type RoleName } from "./Roles.ts"

// The YAML parser is loaded on first use (most runs read no agent file): it is about 6 MiB of
// code and start-up time that a process without agent files never needs.
let yamlModule: typeof YamlModule | undefined
const Yaml = (): typeof YamlModule => (yamlModule ??= createRequire(import.meta.url)("yaml") as typeof YamlModule)

// ---------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------

/** Which harness's layout a file follows. */
export type Format = "fibril" | "claude" | "opencode"

/** A sub-agent type defined by a user. */
export interface AgentDefinition {
  /** As written; matching is case-insensitive. */
  readonly name: string
  readonly description: string
  /** The built-in role whose posture (and write scope) the agent inherits. */
  readonly baseRole: RoleName
  /** Fibril tool names; undefined: the base role's posture decides. */
  readonly allowedTools: ReadonlyArray<string> | undefined
  readonly deniedTools: ReadonlyArray<string>
  /** Tools whose calls wait for a person's answer (Fibril `ask_tools`, opencode `"ask"`). */
  readonly askTools?: ReadonlyArray<string> | undefined
  /** A model id or alias as written; "inherit" or absent: undefined. */
  readonly model: string | undefined
  readonly maxSteps: number | undefined
  /**
   * `output_schema` (any format): the JSON Schema its result must match (OutputSchema.ts);
   * checked against the supported subset when the agent is spawned.
   */
  readonly outputSchema?: { readonly [key: string]: unknown } | undefined
  /** `isolation` (Fibril and Claude Code front matter): how its agents are kept apart; absent: not. */
  readonly isolation?: "worktree" | "process" | undefined
  /**
   * `mcpServers` (any format, as Claude Code writes it): the servers it names (configured ones
   * by name) and the ones it defines inline; the inline ones are started with the process
   * (McpTools). `names` (inline ones included) are the only servers its agents may use,
   * within their parent's (McpNarrowing).
   */
  readonly mcpServers?: {
    readonly names: ReadonlyArray<string>
    readonly inline: ReadonlyArray<McpEntry.Server>
  } | undefined
  /** The markdown body, trimmed. */
  readonly prompt: string
  readonly source: { readonly path: string; readonly format: Format }
  /** False for opencode `mode: primary` and `disable: true` agents: loaded, but not a `subagent_type`. */
  readonly usableAsSubagent: boolean
}

/** A file that could not become a definition. */
export class AgentFileProblem extends Schema.TaggedError<AgentFileProblem>()("AgentFileProblem", {
  path: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `agent definition ${this.path}: ${this.reason}`
  }
}

/** One parsed file: the definition and what was dropped or reinterpreted on the way. */
export interface Parsed {
  readonly definition: AgentDefinition
  /** Each prefixed with the file's path. */
  readonly warnings: ReadonlyArray<string>
}

export interface LoadResult {
  /** In precedence order: fibril, claude, opencode; by file name within a directory. */
  readonly definitions: ReadonlyArray<AgentDefinition>
  readonly problems: ReadonlyArray<AgentFileProblem>
  readonly warnings: ReadonlyArray<string>
}

/** The directories `load` reads under its root, highest precedence first. */
export const directories: ReadonlyArray<{ readonly dir: string; readonly format: Format }> = [
  { dir: ".fibril/agents", format: "fibril" },
  { dir: ".claude/agents", format: "claude" },
  { dir: ".opencode/agent", format: "opencode" },
  { dir: ".opencode/agents", format: "opencode" }
]

/** The base roles a definition may name (`custom` is what a definition itself is). */
export const baseRoles: ReadonlyArray<RoleName> = [
  "general",
  "explore",
  "plan",
  "review",
  "implementer",
  "verifier",
  "tool_agent"
]

/** Every tool name Fibril registers (built-ins, delegation, memory). */
export const fibrilTools: ReadonlyArray<string> = [
  "read_file",
  "list_dir",
  "grep",
  "glob",
  "write_file",
  "edit_file",
  "shell",
  "todowrite",
  "todoread",
  "task",
  "remember",
  "agent_spawn",
  "agent_open",
  "agent_wait",
  "agent_result",
  "agent_cancel",
  "agent_close",
  "agent_list",
  "agent_send_input",
  "agent_eval",
  "agent_resume",
  "agent_assign",
  "handle_read",
  "agent_merge"
]

/** Claude Code tool -> Fibril tools (keys lower-case; lookups ignore case). */
export const claudeTools: Readonly<Record<string, ReadonlyArray<string>>> = {
  read: ["read_file"],
  write: ["write_file"],
  edit: ["edit_file"],
  multiedit: ["edit_file"],
  bash: ["shell"],
  grep: ["grep"],
  glob: ["glob"],
  ls: ["list_dir"],
  todowrite: ["todowrite"],
  task: ["task"],
  agent: ["task"]
}

/** opencode tool (in `tools:`) -> Fibril tools. */
export const opencodeTools: Readonly<Record<string, ReadonlyArray<string>>> = {
  read: ["read_file"],
  write: ["write_file"],
  edit: ["edit_file"],
  bash: ["shell"],
  grep: ["grep"],
  glob: ["glob"],
  list: ["list_dir"],
  todowrite: ["todowrite"],
  todoread: ["todoread"],
  task: ["task"]
}

/** opencode permission key -> Fibril tools; `edit` governs every file-changing tool. */
const opencodePermissions: Readonly<Record<string, ReadonlyArray<string>>> = {
  ...opencodeTools,
  edit: ["write_file", "edit_file"]
}

/** Tools of the other harnesses that Fibril has no counterpart for. */
const claudeWithoutEquivalent = new Set([
  "webfetch",
  "websearch",
  "notebookedit",
  "notebookread",
  "bashoutput",
  "killbash",
  "killshell",
  "slashcommand",
  "skill",
  "exitplanmode",
  "askuserquestion"
])
const opencodeWithoutEquivalent = new Set([
  "webfetch",
  "websearch",
  "codesearch",
  "skill",
  "lsp",
  "patch",
  "multiedit",
  "question",
  "batch",
  "external_directory",
  "doom_loop"
])

// ---------------------------------------------------------------------------
// Frontmatter schemas
// ---------------------------------------------------------------------------

const string = (key: string) => Schema.String.annotate({ message: `${key} must be a string` })

const nonBlank = (key: string) =>
  string(key).check(Schema.makeFilter((s: string) => s.trim() === "" ? `${key} must not be empty` : undefined))

const positiveInt = (key: string) =>
  Schema.Number.annotate({ message: `${key} must be a positive integer` }).check(
    Schema.makeFilter((n: number) => Number.isInteger(n) && n > 0 ? undefined : `${key} must be a positive integer`)
  )

const toolList = (key: string) =>
  Schema.Union([Schema.String, Schema.Array(Schema.String)]).annotate({
    message: `${key} must be a list or a comma-separated string`
  })

const namePattern = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/

/** A definition's name: a plain identifier that is not a built-in role name or alias. */
const AgentName = string("name").check(
  Schema.makeFilter((s: string) =>
    namePattern.test(s)
      ? undefined
      : `name "${s}" must start with a letter or digit and use only letters, digits, "-", "_" and "." (at most 64)`
  ),
  Schema.makeFilter((s: string) => {
    const role = canonical(s)
    if (role === undefined) return undefined
    const what = role === s.toLowerCase() ? "the built-in role" : "an alias of the built-in role"
    return `name "${s}" collides with ${what} ${role} (rename the agent)`
  })
)

const BaseRole = string("role").check(
  Schema.makeFilter((s: string) => {
    const role = canonical(s)
    return role !== undefined && baseRoles.includes(role)
      ? undefined
      : `role "${s}" is not one of ${baseRoles.join(", ")} (aliases accepted)`
  })
)

const Description = nonBlank("description").pipe(Schema.annotateKey({ messageMissingKey: "missing description" }))

/** `output_schema`: a JSON Schema object (its subset is checked at spawn, OutputSchema.ts). */
const OutputSchemaField = Schema.Record(Schema.String, Schema.Unknown).annotate({
  message: "output_schema must be a JSON Schema object"
})
const outputSchemaOf = (schema: { readonly [key: string]: unknown } | undefined) =>
  schema === undefined ? {} : { outputSchema: schema }
const IsolationField = Schema.Literals(["worktree", "process"]).annotate({
  message: `isolation must be "worktree" or "process"`
})

const FibrilFrontmatter = Schema.Struct({
  name: Schema.optionalKey(AgentName),
  description: Description,
  role: Schema.optionalKey(BaseRole),
  tools: Schema.optionalKey(toolList("tools")),
  denied_tools: Schema.optionalKey(toolList("denied_tools")),
  ask_tools: Schema.optionalKey(toolList("ask_tools")),
  model: Schema.optionalKey(string("model")),
  max_steps: Schema.optionalKey(positiveInt("max_steps")),
  output_schema: Schema.optionalKey(OutputSchemaField),
  isolation: Schema.optionalKey(IsolationField),
  // As Claude Code writes it (names and inline servers): read by `mcpServersOf`.
  mcpServers: Schema.optionalKey(Schema.Unknown)
})

const ClaudeFrontmatter = Schema.Struct({
  name: AgentName.pipe(Schema.annotateKey({ messageMissingKey: "missing name" })),
  description: Description,
  tools: Schema.optionalKey(toolList("tools")),
  disallowedTools: Schema.optionalKey(toolList("disallowedTools")),
  model: Schema.optionalKey(string("model")),
  maxTurns: Schema.optionalKey(positiveInt("maxTurns")),
  output_schema: Schema.optionalKey(OutputSchemaField),
  isolation: Schema.optionalKey(IsolationField),
  permissionMode: Schema.optionalKey(ClaudePermissionMode)
})

const Action = Schema.Literals(["allow", "ask", "deny"])
type Action = typeof Action.Type
const PermissionRule = Schema.Union([Action, Schema.Record(Schema.String, Action)]).annotate({
  message: `each permission must be "allow", "ask", "deny", or a map of patterns to those`
})
type PermissionRule = typeof PermissionRule.Type

const OpencodeFrontmatter = Schema.Struct({
  description: Description,
  mode: Schema.optionalKey(
    Schema.Literals(["primary", "subagent", "all"]).annotate({ message: `mode must be "primary", "subagent" or "all"` })
  ),
  model: Schema.optionalKey(string("model")),
  permission: Schema.optionalKey(
    Schema.Record(Schema.String, PermissionRule).annotate({ message: "permission must map tool names to rules" })
  ),
  tools: Schema.optionalKey(
    Schema.Record(Schema.String, Schema.Boolean).annotate({ message: "tools must map tool names to true or false" })
  ),
  temperature: Schema.optionalKey(Schema.Finite.annotate({ message: "temperature must be a number" })),
  maxSteps: Schema.optionalKey(positiveInt("maxSteps")),
  steps: Schema.optionalKey(positiveInt("steps")),
  disable: Schema.optionalKey(Schema.Boolean.annotate({ message: "disable must be true or false" })),
  output_schema: Schema.optionalKey(OutputSchemaField)
})

const fibrilKeys = new Set(Object.keys(FibrilFrontmatter.fields))
/** Claude Code fields Fibril cannot honour: worth a warning, since the agent behaves differently. */
const claudeUnsupported = ["hooks", "skills", "memory"]
const opencodeUnsupported = ["temperature", "top_p", "prompt"]

const formatter = SchemaIssue.makeFormatterStandardSchemaV1()

/** Decodes with every issue reported, as one line: "missing description; tools must be ...". */
const decode = <A>(
  schema: Schema.Codec<A, unknown>,
  input: unknown
): Result.Result<A, string> =>
  Result.mapError(
    Schema.decodeUnknownResult(schema)(input, { errors: "all" }),
    (error) => [...new Set(formatter(error.issue).issues.map((issue) => issue.message))].join("; ")
  )

// ---------------------------------------------------------------------------
// Frontmatter and YAML
// ---------------------------------------------------------------------------

interface Split {
  readonly yaml: string
  readonly body: string
}

/** The block between the opening and closing `---` lines, and the body after it. */
const splitFrontmatter = (text: string): Result.Result<Split, string> => {
  const lines = text.replace(/^\uFEFF/, "").split(/\r?\n/)
  if (lines[0]?.trimEnd() !== "---") return Result.fail("no frontmatter (expected a block between --- lines)")
  const close = lines.findIndex((line, index) => index > 0 && line.trimEnd() === "---")
  if (close < 0) return Result.fail("frontmatter is not closed (expected a --- line after it)")
  return Result.succeed({ yaml: lines.slice(1, close).join("\n"), body: lines.slice(close + 1).join("\n").trim() })
}

/** "YAML: <message> at line N, column M", N counted in the file (the frontmatter starts on line 2). */
const yamlError = (source: string, error: YamlModule.YAMLError): string => {
  const offset = error.pos[0]
  const before = source.slice(0, offset)
  const line = before.split("\n").length + 1
  const column = offset - before.lastIndexOf("\n")
  return `YAML: ${error.message} at line ${line}, column ${column}`
}

const parseYaml = (source: string): Result.Result<unknown, string> => {
  const doc = Yaml().parseDocument(source, { prettyErrors: false })
  const first = doc.errors[0]
  if (first !== undefined) return Result.fail(yamlError(source, first))
  // toJS throws on an alias without an anchor; that is a YAML error like the others.
  return Result.try({ try: () => doc.toJS(), catch: (e) => `YAML: ${e instanceof Error ? e.message : String(e)}` })
}

/**
 * Harness-generated files often carry an unquoted one-line value with `: ` inside
 * (`description: Use this agent when... Examples: <example>Context: ...`), which strict YAML
 * rejects. Quoting such top-level values is the only repair attempted.
 */
const quoteColonValues = (source: string): { readonly source: string; readonly keys: ReadonlyArray<string> } => {
  const keys: Array<string> = []
  const lines = source.split("\n").map((line) => {
    const match = /^([A-Za-z_][\w-]*):[ \t]+(\S.*?)[ \t]*$/.exec(line)
    const key = match?.[1]
    const value = match?.[2]
    if (key === undefined || value === undefined || /^["'[{|>&*!#]/.test(value)) return line
    if (!/:(\s|$)/.test(value)) return line
    keys.push(key)
    return `${key}: ${JSON.stringify(value)}`
  })
  return { source: lines.join("\n"), keys }
}

/** The frontmatter as a plain object, keys with null values (`tools:`) treated as absent. */
const readFrontmatter = (
  path: string,
  source: string,
  warnings: Array<string>
): Result.Result<Record<string, unknown>, string> => {
  let parsed = parseYaml(source)
  if (Result.isFailure(parsed)) {
    const repaired = quoteColonValues(source)
    const retry = repaired.keys.length > 0 ? parseYaml(repaired.source) : parsed
    if (Result.isFailure(retry)) return Result.fail(parsed.failure)
    warnings.push(
      `${path}: ${parsed.failure}; read leniently by quoting the value of ${repaired.keys.join(", ")}`
    )
    parsed = retry
  }
  const value = parsed.success
  if (value === null || value === undefined) return Result.succeed({})
  if (typeof value !== "object" || Array.isArray(value)) {
    return Result.fail("frontmatter must be a mapping of keys to values")
  }
  return Result.succeed(Object.fromEntries(Object.entries(value).filter(([, v]) => v !== null && v !== undefined)))
}

// ---------------------------------------------------------------------------
// Tools
// ---------------------------------------------------------------------------

/** "Read, Grep, Bash(git log:*)" -> ["Read", "Grep", "Bash(git log:*)"] (commas inside parentheses kept). */
const splitTools = (tools: string | ReadonlyArray<string>): ReadonlyArray<string> => {
  if (typeof tools !== "string") return tools.map((t) => t.trim()).filter((t) => t !== "")
  const parts: Array<string> = []
  let depth = 0
  let current = ""
  for (const char of tools) {
    if (char === "(") depth++
    if (char === ")") depth = Math.max(0, depth - 1)
    if (char === "," && depth === 0) {
      parts.push(current)
      current = ""
    } else current += char
  }
  parts.push(current)
  return parts.map((t) => t.trim()).filter((t) => t !== "")
}

/** `table[key]` for own keys only, so a tool called "constructor" is just unknown. */
const lookup = (table: Readonly<Record<string, ReadonlyArray<string>>>, key: string) =>
  Object.hasOwn(table, key) ? table[key] : undefined

const unique = (names: Iterable<string>): ReadonlyArray<string> => [...new Set(names)]

const globPattern = (pattern: string): RegExp =>
  new RegExp(`^${pattern.split("*").map((part) => part.replace(/[.+?^${}()|[\]\\]/g, "\\$&")).join(".*")}$`, "i")

/** The Fibril tool a foreign name would map to, for a "did you mean" hint. */
const suggestion = (name: string): string => {
  const key = name.toLowerCase()
  const mapped = lookup(claudeTools, key) ?? lookup(opencodeTools, key)
  return mapped === undefined ? "" : ` (did you mean ${mapped.join(", ")}?)`
}

/** Fibril names, matched case-insensitively; `agent_*` patterns allowed. */
const fibrilToolNames = (path: string, key: string, tools: string | ReadonlyArray<string>, warnings: Array<string>) =>
  unique(
    splitTools(tools).flatMap((name) => {
      // `shell(git push *)` in ask_tools or denied_tools: a rule on the call's command or paths.
      const pattern = key === "tools" ? undefined : RulePatterns.parse(name)
      if (pattern !== undefined && fibrilTools.includes(pattern.tool)) return [name]
      const matches = name.includes("*")
        ? fibrilTools.filter((tool) => globPattern(name).test(tool))
        : fibrilTools.filter((tool) => tool === name.toLowerCase())
      if (matches.length === 0) warnings.push(`${path}: ${key}: unknown tool "${name}"${suggestion(name)}; skipped`)
      return matches
    })
  )

/**
 * Claude Code names. In an allow list a `Tool(arguments)` restriction is dropped (Fibril
 * cannot enforce it, and granting the whole tool would widen it); in a deny list it denies the
 * whole tool.
 */
const claudeToolNames = (
  path: string,
  key: string,
  tools: string | ReadonlyArray<string>,
  mode: "allow" | "deny",
  warnings: Array<string>
) =>
  unique(
    splitTools(tools).flatMap((entry) => {
      const restricted = /^([^(]+)\((.*)\)$/.exec(entry)
      const name = (restricted?.[1] ?? entry).trim()
      // An MCP tool keeps its name: Fibril lists MCP tools as Claude Code does (McpTools).
      if (restricted === null && name.startsWith("mcp__")) return [name]
      const mapped = lookup(claudeTools, name.toLowerCase())
      if (mapped === undefined) {
        const why = claudeWithoutEquivalent.has(name.toLowerCase())
          ? "has no Fibril equivalent"
          : "is not a known Claude Code tool"
        warnings.push(`${path}: ${key}: "${entry}" ${why}; skipped`)
        return []
      }
      if (restricted !== null) {
        if (mode === "allow") {
          warnings.push(
            `${path}: ${key}: "${entry}" restricts ${name} to certain arguments, which Fibril cannot enforce; skipped`
          )
          return []
        }
        warnings.push(
          `${path}: ${key}: "${entry}" denies all of ${mapped.join(", ")} (argument patterns are not supported)`
        )
      }
      return mapped
    })
  )

const matchingKeys = (key: string, table: Readonly<Record<string, unknown>>): ReadonlyArray<string> =>
  key.includes("*") ? Object.keys(table).filter((name) => globPattern(key).test(name)) : [key.toLowerCase()]

interface Policy {
  readonly allowed: ReadonlyArray<string> | undefined
  readonly denied: ReadonlyArray<string>
  readonly asked: ReadonlyArray<string>
}

/** The Fibril tools opencode names can reach, in Fibril's order. */
const opencodeReachable: ReadonlyArray<string> = fibrilTools.filter((tool) =>
  Object.values(opencodePermissions).some((mapped) => mapped.includes(tool))
)

/**
 * opencode `tools` (name -> enabled) and `permission` (name -> allow/ask/deny, or per-pattern
 * rules), keys possibly wildcards, the last matching entry winning as in opencode. A tool is
 * usable when it is enabled and allowed. When a `"*"` entry switches everything off, the
 * result is an allow list of what later entries switched back on.
 */
const opencodePolicy = (
  path: string,
  tools: Readonly<Record<string, boolean>>,
  permission: Readonly<Record<string, PermissionRule>>,
  warnings: Array<string>
): Policy => {
  let enabledByDefault = true
  const enabled = new Map<string, boolean>()
  for (const [key, on] of Object.entries(tools)) {
    if (key === "*") {
      enabledByDefault = on
      enabled.clear()
      continue
    }
    const mapped = matchingKeys(key, opencodeTools).flatMap((name) => lookup(opencodeTools, name) ?? [])
    // Disabling a tool Fibril does not have is already true.
    if (mapped.length === 0 && on) {
      const why = opencodeWithoutEquivalent.has(key.toLowerCase())
        ? "has no Fibril equivalent"
        : "matches no tool Fibril knows"
      warnings.push(`${path}: tools: "${key}" ${why}; skipped`)
    }
    for (const tool of mapped) enabled.set(tool, on)
  }
  let allowedByDefault = true
  let askedByDefault = false
  const allowed = new Map<string, boolean>()
  const asked = new Map<string, boolean>()
  // `bash: { "*": allow, "git push *": ask }`: the tool stays allowed and each pattern is a rule
  // of its own (`shell(git push *)`, RulePatterns), judged on the call's command or paths.
  const patternAsks: Array<string> = []
  const patternDenials: Array<string> = []
  for (const [key, rule] of Object.entries(permission)) {
    if (key !== "*" && typeof rule !== "string" && rule["*"] === "allow") {
      const targets = matchingKeys(key, opencodePermissions).flatMap((name) => lookup(opencodePermissions, name) ?? [])
      for (const [pattern, action] of Object.entries(rule)) {
        if (pattern === "*") continue
        if (action === "allow") {
          warnings.push(`${path}: permission.${key}: "${pattern}": allow after "*": allow adds nothing; ignored`)
        }
        for (const tool of targets) {
          if (action === "ask") patternAsks.push(`${tool}(${pattern})`)
          if (action === "deny") patternDenials.push(`${tool}(${pattern})`)
        }
      }
      if (targets.length > 0) {
        for (const tool of targets) {
          allowed.set(tool, true)
          asked.set(tool, false)
        }
        continue
      }
    }
    const patterns = typeof rule === "string" ? [] : Object.values(rule)
    // "ask", or patterns that only allow or ask, ask for the whole tool: never wider than the
    // patterns. A pattern that denies still denies the whole tool (a person cannot widen it).
    const ask = rule === "ask" ||
      (patterns.includes("ask") && patterns.every((action) => action !== "deny"))
    const allow = ask || rule === "allow" || (patterns.length > 0 && patterns.every((action) => action === "allow"))
    const mapped = key === "*"
      ? opencodeReachable
      : matchingKeys(key, opencodePermissions).flatMap((name) => lookup(opencodePermissions, name) ?? [])
    if (mapped.length === 0) {
      if (!opencodeWithoutEquivalent.has(key.toLowerCase())) {
        warnings.push(`${path}: permission: "${key}" matches no tool Fibril knows; ignored`)
      }
      continue
    }
    const what = key === "*"
      ? "every tool not allowed by a later entry is"
      : `${mapped.join(", ")} ${mapped.length > 1 ? "are" : "is"}`
    if (typeof rule !== "string" && ask) {
      warnings.push(`${path}: permission.${key} has per-pattern rules, which Fibril cannot enforce; ${what} asked`)
    } else if (typeof rule !== "string" && !allow) {
      warnings.push(`${path}: permission.${key} has per-pattern rules, which Fibril cannot enforce; ${what} denied`)
    }
    if (key === "*") {
      allowedByDefault = allow
      askedByDefault = ask
      allowed.clear()
      asked.clear()
    } else {
      for (const tool of mapped) {
        allowed.set(tool, allow)
        asked.set(tool, ask)
      }
    }
  }
  const usable = (tool: string) => (enabled.get(tool) ?? enabledByDefault) && (allowed.get(tool) ?? allowedByDefault)
  const closed = !enabledByDefault || !allowedByDefault
  return {
    allowed: closed ? opencodeReachable.filter(usable) : undefined,
    denied: [...opencodeReachable.filter((tool) => !usable(tool)), ...patternDenials],
    asked: [...opencodeReachable.filter((tool) => usable(tool) && (asked.get(tool) ?? askedByDefault)), ...patternAsks]
  }
}

// ---------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------

const fileStem = (path: string): string => (path.split(/[\\/]/).pop() ?? path).replace(/\.md$/i, "")

const modelOf = (model: string | undefined): string | undefined => {
  const trimmed = model?.trim()
  return trimmed === undefined || trimmed === "" || trimmed.toLowerCase() === "inherit" ? undefined : trimmed
}

const minus = (allowed: ReadonlyArray<string> | undefined, denied: ReadonlyArray<string>) =>
  allowed?.filter((tool) => !denied.includes(tool))

const fromFibril = (path: string, raw: Record<string, unknown>, prompt: string, warnings: Array<string>) => {
  const unknown = Object.keys(raw).filter((key) => !fibrilKeys.has(key))
  if (unknown.length > 0) warnings.push(`${path}: unknown field(s) ${unknown.join(", ")}; ignored`)
  return Result.map(decode(FibrilFrontmatter, raw), (fm): AgentDefinition => {
    const allowed = fm.tools === undefined ? undefined : fibrilToolNames(path, "tools", fm.tools, warnings)
    const denied = fm.denied_tools === undefined ? [] : fibrilToolNames(path, "denied_tools", fm.denied_tools, warnings)
    const asked = fm.ask_tools === undefined ? [] : fibrilToolNames(path, "ask_tools", fm.ask_tools, warnings)
    return {
      name: fm.name ?? fileStem(path),
      description: fm.description.trim(),
      baseRole: (fm.role === undefined ? undefined : canonical(fm.role)) ?? "general",
      allowedTools: minus(allowed, denied),
      deniedTools: denied,
      ...(asked.length > 0 ? { askTools: asked } : {}),
      model: modelOf(fm.model),
      maxSteps: fm.max_steps,
      ...outputSchemaOf(fm.output_schema),
      ...(fm.isolation === undefined ? {} : { isolation: fm.isolation }),
      ...(raw["mcpServers"] === undefined
        ? {}
        : { mcpServers: mcpServersOf(path, fm.name ?? fileStem(path), raw["mcpServers"], warnings) }),
      prompt,
      source: { path, format: "fibril" },
      usableAsSubagent: true
    }
  })
}

/**
 * `mcpServers` as Claude Code writes it (read in all three formats): a list of configured
 * server names and `{ name: definition }` entries (or one such map). A bad inline entry is a
 * warning and is left out. The names (the inline ones' included) are the servers its agents may
 * use (McpNarrowing).
 */
const mcpServersOf = (path: string, agent: string, value: unknown, warnings: Array<string>) => {
  const names: Array<string> = []
  const inline: Array<McpEntry.Server> = []
  const add = (name: string, entry: unknown) => {
    const checked = McpEntry.check(name, entry, `agent ${agent} (${path})`)
    if (checked instanceof McpEntry.McpServerInvalid) warnings.push(`${path}: mcpServers: ${checked.message}; skipped`)
    else {
      inline.push(checked)
      names.push(name)
    }
  }
  const entries = Array.isArray(value) ? value : [value]
  for (const entry of entries) {
    if (typeof entry === "string") names.push(entry)
    else if (McpEntry.isRecord(entry)) { for (const [name, definition] of Object.entries(entry)) add(name, definition) }
    else {warnings.push(
        `${path}: mcpServers: ${JSON.stringify(entry)} is neither a server name nor a definition; skipped`
      )}
  }
  return { names, inline }
}

const fromClaude = (path: string, raw: Record<string, unknown>, prompt: string, warnings: Array<string>) => {
  const unsupported = claudeUnsupported.filter((key) => key in raw)
  if (unsupported.length > 0) warnings.push(`${path}: ${unsupported.join(", ")} not supported by Fibril; ignored`)
  return Result.map(decode(ClaudeFrontmatter, raw), (fm): AgentDefinition => {
    const allowed = fm.tools === undefined ? undefined : claudeToolNames(path, "tools", fm.tools, "allow", warnings)
    const denied = fm.disallowedTools === undefined
      ? []
      : claudeToolNames(path, "disallowedTools", fm.disallowedTools, "deny", warnings)
    const mode = fm.permissionMode === undefined ? undefined : fromPermissionMode(fm.permissionMode)
    if (mode?.note !== undefined) warnings.push(`${path}: permissionMode: ${mode.note}`)
    return {
      name: fm.name,
      description: fm.description.trim(),
      // A read-only mode is the review role's postures: no writes, no commands, no spawning.
      baseRole: mode?.readOnly === true ? "review" : "general",
      allowedTools: minus(allowed, denied),
      deniedTools: denied,
      ...(mode === undefined || mode.ask.length === 0 ? {} : { askTools: mode.ask }),
      model: modelOf(fm.model),
      maxSteps: fm.maxTurns,
      ...outputSchemaOf(fm.output_schema),
      ...(fm.isolation === undefined ? {} : { isolation: fm.isolation }),
      ...(raw["mcpServers"] === undefined
        ? {}
        : { mcpServers: mcpServersOf(path, fm.name, raw["mcpServers"], warnings) }),
      prompt,
      source: { path, format: "claude" },
      usableAsSubagent: true
    }
  })
}

const fromOpencode = (path: string, raw: Record<string, unknown>, prompt: string, warnings: Array<string>) => {
  const name = fileStem(path)
  const unsupported = opencodeUnsupported.filter((key) => key in raw)
  if (unsupported.length > 0) warnings.push(`${path}: ${unsupported.join(", ")} not supported by Fibril; ignored`)
  if (typeof raw["name"] === "string" && raw["name"] !== name) {
    warnings.push(`${path}: name "${raw["name"]}" ignored; opencode agents are named after their file ("${name}")`)
  }
  const named = Result.mapError(decode(AgentName, name), (reason) => `file name: ${reason}`)
  return Result.flatMap(named, () =>
    Result.map(decode(OpencodeFrontmatter, raw), (fm): AgentDefinition => {
      const policy = opencodePolicy(path, fm.tools ?? {}, fm.permission ?? {}, warnings)
      const mode = fm.mode ?? "all"
      if (fm.disable === true) warnings.push(`${path}: disabled (disable: true); not usable as a subagent_type`)
      else if (mode === "primary") warnings.push(`${path}: mode is primary; not usable as a subagent_type`)
      return {
        name,
        description: fm.description.trim(),
        baseRole: "general",
        allowedTools: policy.allowed,
        deniedTools: policy.denied,
        ...(policy.asked.length > 0 ? { askTools: policy.asked } : {}),
        model: modelOf(fm.model),
        maxSteps: fm.maxSteps ?? fm.steps,
        ...outputSchemaOf(fm.output_schema),
        ...(raw["mcpServers"] === undefined
          ? {}
          : { mcpServers: mcpServersOf(path, name, raw["mcpServers"], warnings) }),
        prompt,
        source: { path, format: "opencode" },
        usableAsSubagent: mode !== "primary" && fm.disable !== true
      }
    }))
}

/**
 * Parses one file. Pure: `path` is only used to name the agent (opencode, or a Fibril file
 * without `name`) and in messages.
 *
 * @example
 * const parsed = AgentDefinitions.parse(".claude/agents/reviewer.md", text, "claude")
 * if (Result.isSuccess(parsed)) parsed.success.definition.allowedTools // ["read_file", "grep", "glob"]
 */
export const parse = (path: string, text: string, format: Format): Result.Result<Parsed, AgentFileProblem> => {
  const warnings: Array<string> = []
  const definition = Result.flatMap(
    splitFrontmatter(text),
    ({ body, yaml }) =>
      Result.flatMap(readFrontmatter(path, yaml, warnings), (raw) => {
        switch (format) {
          case "fibril":
            return fromFibril(path, raw, body, warnings)
          case "claude":
            return fromClaude(path, raw, body, warnings)
          case "opencode":
            return fromOpencode(path, raw, body, warnings)
        }
      })
  )
  return Result.mapBoth(definition, {
    onFailure: (reason) => new AgentFileProblem({ path, reason }),
    onSuccess: (decoded) => ({ definition: decoded, warnings })
  })
}

// ---------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------

/**
 * Reads every `*.md` in {@link directories} under `root` (not recursively). Missing
 * directories are skipped; a file that cannot be read or parsed is a problem and the rest
 * still load. Names are unique case-insensitively: the first by precedence (fibril > claude >
 * opencode, then file name) wins and the shadowed file gets a warning.
 *
 * @example
 * const { definitions, problems } = yield* AgentDefinitions.load(process.cwd())
 */
export const load: (root: string) => Effect.Effect<LoadResult, never, FileSystem.FileSystem | Path.Path> = Effect.fn(
  "AgentDefinitions.load"
)(function*(root: string) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const byName = new Map<string, AgentDefinition>()
  const problems: Array<AgentFileProblem> = []
  const warnings: Array<string> = []
  for (const { dir, format } of directories) {
    const directory = path.join(root, dir)
    const exists = yield* fs.exists(directory).pipe(Effect.catch(() => Effect.succeed(false)))
    if (!exists) continue
    const listed = yield* Effect.result(fs.readDirectory(directory))
    if (Result.isFailure(listed)) {
      const reason = `cannot list directory: ${listed.failure.message}`
      problems.push(new AgentFileProblem({ path: directory, reason }))
      continue
    }
    const files = listed.success.filter((name) => name.toLowerCase().endsWith(".md")).sort()
    for (const file of files) {
      const filePath = path.join(directory, file)
      const text = yield* Effect.result(fs.readFileString(filePath))
      if (Result.isFailure(text)) {
        problems.push(new AgentFileProblem({ path: filePath, reason: `cannot read: ${text.failure.message}` }))
        continue
      }
      const parsed = parse(filePath, text.success, format)
      if (Result.isFailure(parsed)) {
        problems.push(parsed.failure)
        continue
      }
      warnings.push(...parsed.success.warnings)
      const definition = parsed.success.definition
      const key = definition.name.toLowerCase()
      const first = byName.get(key)
      if (first === undefined) byName.set(key, definition)
      else {
        warnings.push(
          `${filePath}: agent "${definition.name}" is shadowed by ${first.source.path}` +
            " (precedence: fibril > claude > opencode)"
        )
      }
    }
  }
  const result: LoadResult = { definitions: [...byName.values()], problems, warnings }
  return result
})

/** The definition usable as a `subagent_type` called `name` (any case), if any. */
export const find = (definitions: ReadonlyArray<AgentDefinition>, name: string): AgentDefinition | undefined => {
  const key = name.trim().toLowerCase()
  return definitions.find((definition) => definition.usableAsSubagent && definition.name.toLowerCase() === key)
}
