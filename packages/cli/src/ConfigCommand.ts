/**
 * `fibril config`: the effective configuration after defaults, files, environment and
 * flags, with every clamped value marked, and the files that were read.
 */
import type * as FibrilConfig from "@fibril/core/FibrilConfig"
import { Effect } from "effect"
import type * as Output from "./Output.ts"

const snake = (key: string) => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)

/** `agent.max_steps = 50` lines, in TOML order, `undefined` values as comments. */
export const lines = (resolved: FibrilConfig.Resolved): Array<string> => {
  const clamped = new Map(resolved.clamped.map((c) => [c.key, c]))
  const out: Array<string> = []
  const value = (key: string, v: unknown) => {
    const mark = clamped.get(key)
    const note = mark === undefined ? "" : `   # clamped: ${mark.given} given, ${mark.used} used`
    return v === undefined ? `# ${key.split(".").at(-1)} (unset)` : `${key.split(".").at(-1)} = ${JSON.stringify(v)}${note}`
  }
  const settings = resolved.settings
  out.push(value("model", settings.model))
  for (const [section, fields] of Object.entries({
    agent: settings.agent,
    subagents: settings.subagents,
    tools: settings.tools,
    permissions: settings.permissions
  })) {
    out.push("", `[${section}]`)
    for (const [key, v] of Object.entries(fields)) {
      if (key === "models") continue
      out.push(value(`${section}.${snake(key)}`, v))
    }
  }
  out.push("", "[subagents.models]")
  for (const [role, model] of Object.entries(settings.subagents.models)) out.push(`${role} = ${JSON.stringify(model)}`)
  return out
}

export const show = Effect.fn("fibril.config")(function*(
  resolved: FibrilConfig.Resolved,
  model: string,
  json: boolean,
  output: Output.Output
) {
  if (json) {
    return yield* output.line(JSON.stringify({ ...resolved, model_selection: model }))
  }
  yield* output.line(`# Effective configuration (sources, highest first: environment, ${
    resolved.sources.length === 0 ? "no config files" : resolved.sources.join(", ")
  }, defaults)`)
  yield* output.line(`# model selection: ${model}`)
  for (const text of lines(resolved)) yield* output.line(text)
})
