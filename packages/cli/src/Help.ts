/**
 * `--help` and `fibril help [command]`: effect/cli's help (description, usage, arguments,
 * flags, subcommands, examples) followed by what it does not know about — the environment
 * variables a command reads and its exit codes.
 */
import { CliOutput, type HelpDoc } from "effect/cli"

interface Variable {
  readonly name: string
  readonly meaning: string
}

const model: ReadonlyArray<Variable> = [
  { name: "OPENAI_API_KEY", meaning: "the API key of the model endpoint (never printed)" },
  { name: "OPENAI_BASE_URL", meaning: "an OpenAI-compatible endpoint (…/v1): DeepSeek, vLLM, Ollama, OpenRouter" },
  { name: "FIBRIL_MODEL", meaning: "the model id (--model wins)" }
]

const config: ReadonlyArray<Variable> = [
  {
    name: "FIBRIL_<TABLE>_<KEY>",
    meaning: "any configuration key, e.g. FIBRIL_SUBAGENTS_MAX_CONCURRENT=4 (docs/configuration.md)"
  },
  { name: "FIBRIL_STRICT=false", meaning: "unknown configuration keys are warnings, not errors (like --no-strict)" }
]

const tracing: ReadonlyArray<Variable> = [
  { name: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", meaning: "export traces there (like --otlp)" }
]

const usage = {
  code: 2,
  meaning:
    "a usage or configuration error (bad flag, missing directory, empty prompt, missing key, unreadable script or config)"
}

interface Extra {
  readonly environment: ReadonlyArray<Variable>
  readonly exitCodes: ReadonlyArray<{ readonly code: number; readonly meaning: string }>
}

const interrupted = [
  { code: 130, meaning: "cancelled by Ctrl-C (143: SIGTERM, 129: SIGHUP, a closed terminal)" }
]

/** By command path after `fibril` ("" for fibril itself). */
const extras: Record<string, Extra> = {
  "": {
    environment: [...model, ...config, ...tracing],
    exitCodes: [
      { code: 0, meaning: "success" },
      { code: 1, meaning: "the agent failed (run, agents resume), or doctor found a problem" },
      usage,
      ...interrupted
    ]
  },
  run: {
    environment: [...model, ...config, ...tracing],
    exitCodes: [
      { code: 0, meaning: "the root agent completed" },
      { code: 1, meaning: "it failed" },
      usage,
      ...interrupted
    ]
  },
  demo: { environment: config, exitCodes: [{ code: 0, meaning: "the scenario ran" }, usage, ...interrupted] },
  mcp: {
    environment: [...model, ...config],
    exitCodes: [{ code: 0, meaning: "stdin closed (the client quit)" }, usage, ...interrupted]
  },
  config: { environment: [...model, ...config], exitCodes: [{ code: 0, meaning: "printed" }, usage] },
  doctor: {
    environment: [...model, ...config],
    exitCodes: [{ code: 0, meaning: "every check passed (warnings allowed)" }, { code: 1, meaning: "a check failed" }]
  },
  ui: {
    environment: config,
    exitCodes: [usage, ...interrupted]
  },
  agents: { environment: config, exitCodes: [{ code: 0, meaning: "success" }, usage] },
  "agents list": { environment: [], exitCodes: [{ code: 0, meaning: "listed" }, usage] },
  "agents show": { environment: [], exitCodes: [{ code: 0, meaning: "shown" }, { code: 2, meaning: "no such agent" }] },
  "agents transcript": {
    environment: [],
    exitCodes: [{ code: 0, meaning: "shown" }, { code: 2, meaning: "no such agent" }]
  },
  "agents cancel": {
    environment: [],
    exitCodes: [{ code: 0, meaning: "cancelled (or already finished)" }, { code: 2, meaning: "no such agent" }]
  },
  "agents resume": {
    environment: [...model, ...config],
    exitCodes: [
      { code: 0, meaning: "the resumed run completed" },
      { code: 1, meaning: "it did not" },
      usage,
      ...interrupted
    ]
  }
}

const table = (rows: ReadonlyArray<readonly [string, string]>) => {
  const width = Math.max(...rows.map(([left]) => left.length)) + 4
  return rows.map(([left, right]) => `  ${left.padEnd(width)}${right}`)
}

/** The extra sections for a command path (`["fibril", "agents", "list"]`). */
export const sections = (commandPath: ReadonlyArray<string>): Array<string> => {
  const extra = extras[commandPath.slice(1).join(" ")]
  if (extra === undefined) return []
  const out: Array<string> = []
  if (extra.environment.length > 0) {
    out.push("", "ENVIRONMENT", ...table(extra.environment.map((v) => [v.name, v.meaning])))
  }
  out.push("", "EXIT CODES", ...table(extra.exitCodes.map((c) => [String(c.code), c.meaning])))
  return out
}

/** effect/cli's formatter with the environment and exit codes added. */
export const formatter = (options?: { readonly colors?: boolean | undefined }): CliOutput.Formatter => {
  const base = CliOutput.defaultFormatter({ ...options, globalFlags: "summary" })
  return {
    ...base,
    formatHelpDoc: (doc: HelpDoc.HelpDoc) =>
      // (effect/cli leaves no blank line between the subcommands and the examples.)
      [
        base.formatHelpDoc(doc).replace(/([^\n])\n((?:\x1b\[1m)?EXAMPLES)/, "$1\n\n$2"),
        ...sections(doc.commandPath ?? ["fibril"])
      ]
        .join("\n")
  }
}
