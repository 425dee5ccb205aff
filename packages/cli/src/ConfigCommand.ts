/**
 * `fibril config`: the effective configuration after defaults, files, environment and
 * flags, with every clamped value marked, each value that is not a default with where it came
 * from, and the files that were read.
 */
import type * as FibrilConfig from "@fibril/core/FibrilConfig"
import * as McpServers from "@fibril/core/McpServers"
import * as Sandbox from "@fibril/core/Sandbox"
import { redactUrl } from "@fibril/core/Secrets"
import type * as Trust from "@fibril/core/Trust"
import * as Effect from "effect/Effect"
import type * as Output from "./Output.ts"

const snake = (key: string) => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)

/** Tables whose keys are names a user chose (roles, agent types), kept as written. */
const namedTables = new Set(["models", "roles", "sandbox_roles", "origins"])

/**
 * The JSON form: every key snake_case like the TOML keys and `FIBRIL_*` variables (the
 * settings are camelCase in code), except the names under tables keyed by role or agent.
 */
export const snakeKeys = (value: unknown, keepKeys = false): unknown => {
  if (Array.isArray(value)) return value.map((item) => snakeKeys(item))
  if (typeof value !== "object" || value === null) return value
  return Object.fromEntries(
    Object.entries(value).map(([key, v]) => {
      const name = keepKeys ? key : snake(key)
      return [name, snakeKeys(v, !keepKeys && namedTables.has(name))]
    })
  )
}

/** `agent.max_steps = 50` lines, in TOML order, `undefined` values as comments. */
export const lines = (resolved: FibrilConfig.Resolved): Array<string> => {
  const clamped = new Map(resolved.clamped.map((c) => [c.key, c]))
  const out: Array<string> = []
  const value = (key: string, v: unknown) => {
    const mark = clamped.get(key)
    const origin = resolved.origins[key]
    // Each value that is not a default says where it came from (a key written under the
    // seed's name too: "subagents.api_timeout_secs in …, line 2 (alias of agent.api_timeout_secs)").
    const notes = [
      ...(mark === undefined ? [] : [`clamped: ${mark.given} given, ${mark.used} used`]),
      ...(origin === undefined ? [] : [`from ${origin}`])
    ]
    return v === undefined
      ? `# ${key.split(".").at(-1)} (unset)`
      : `${key.split(".").at(-1)} = ${JSON.stringify(v)}${notes.length === 0 ? "" : `   # ${notes.join("; ")}`}`
  }
  const settings = resolved.settings
  out.push(value("model", settings.model))
  for (
    const [section, fields] of Object.entries({
      agent: settings.agent,
      subagents: settings.subagents,
      tools: settings.tools,
      permissions: settings.permissions,
      sandbox: settings.sandbox,
      // The URL's password (and secret parameters) are never shown.
      cluster: { url: settings.cluster.url === undefined ? undefined : redactUrl(settings.cluster.url) }
    })
  ) {
    out.push("", `[${section}]`)
    for (const [key, v] of Object.entries(fields)) {
      if (key === "models" || key === "roles") continue
      out.push(value(`${section}.${snake(key)}`, v))
    }
  }
  out.push("", "[subagents.models]")
  const modelsOrigin = resolved.origins["subagents.models"]
  for (const [role, model] of Object.entries(settings.subagents.models)) {
    const origin = resolved.origins[`subagents.models.${role}`] ?? modelsOrigin
    out.push(`${role} = ${JSON.stringify(model)}${origin === undefined ? "" : `   # from ${origin}`}`)
  }
  for (const [role, overrides] of Object.entries(settings.sandbox.roles)) {
    out.push("", `[sandbox.roles.${role}]`)
    for (const [key, v] of Object.entries(overrides)) {
      if (v !== undefined) out.push(`${snake(key)} = ${JSON.stringify(v)}`)
    }
  }
  // `[roles.<role>]`: what a role's agents are given (McpNarrowing for mcp_servers).
  for (const [role, given] of Object.entries(settings.roles)) {
    out.push("", `[roles.${role}]`)
    for (const [key, v] of Object.entries(given)) {
      if (v !== undefined) out.push(`${snake(key)} = ${JSON.stringify(v)}`)
    }
  }
  return out
}

/** What the project file widens and whether it applies (its workspace trusted), as comments. */
export const trustLines = (report: Trust.Report | undefined): Array<string> =>
  report === undefined ? [] : [
    report.status === "trusted"
      ? `# trust: ${report.workspace} is trusted; its config widens the sandbox:`
      : `# trust: ${report.workspace} is ${
        report.status === "changed" ? "trusted, but its config changed since" : "not trusted"
      }; IGNORED (fibril trust applies them):`,
    ...report.widenings.map((widening) => `#   ${widening.key} = ${widening.value}: ${widening.effect}`)
  ]

/** Which sandbox `shell` commands get here, and what each built-in role's shell can do. */
export const sandboxLines = (settings: FibrilConfig.SandboxSettings, status: Sandbox.Status): Array<string> => [
  status.available
    ? `# shell sandbox: bubblewrap (${status.path}); each role's shell:`
    : `# shell sandbox: NONE available (${status.reason}); read-only roles get no shell, roles that may write ` +
      "run shell commands UNCONFINED. Install bubblewrap to sandbox them. Each role's shell:",
  ...Sandbox.describeRoles(settings, status).map(({ role, shell }) => `#   ${role}: ${shell}`)
]

/** Each MCP server, where it came from, its env and header values masked. */
export const mcpLines = (servers: ReadonlyArray<McpServers.Server>): Array<string> =>
  servers.length === 0
    ? []
    : ["# MCP servers (tools mcp__<server>__<tool>):", ...servers.map((server) => `#   ${McpServers.describe(server)}`)]

export const show = Effect.fn("fibril.config")(function*(
  resolved: FibrilConfig.Resolved,
  model: string,
  json: boolean,
  output: Output.Output,
  sandbox?: Sandbox.Status,
  mcpServers: ReadonlyArray<McpServers.Server> = []
) {
  if (json) {
    const url = resolved.settings.cluster.url
    return yield* output.line(JSON.stringify(snakeKeys({
      ...resolved,
      settings: { ...resolved.settings, cluster: { url: url === undefined ? undefined : redactUrl(url) } },
      model_selection: model,
      mcp_servers: mcpServers.map(McpServers.masked),
      ...(sandbox === undefined
        ? {}
        : {
          sandbox_status: sandbox,
          sandbox_roles: Object.fromEntries(
            Sandbox.describeRoles(resolved.settings.sandbox, sandbox).map(({ role, shell }) => [role, shell])
          )
        })
    })))
  }
  yield* output.line(
    `# Effective configuration (sources, highest first: environment, ${
      resolved.sources.length === 0 ? "no config files" : resolved.sources.join(", ")
    }, defaults)`
  )
  yield* output.line(`# model selection: ${model}`)
  for (const text of trustLines(resolved.trust)) yield* output.line(text)
  if (sandbox !== undefined) {
    for (const text of sandboxLines(resolved.settings.sandbox, sandbox)) yield* output.line(text)
  }
  for (const text of mcpLines(mcpServers)) yield* output.line(text)
  for (const text of lines(resolved)) yield* output.line(text)
})
