/**
 * Which model a `fibril` command runs on.
 *
 * Precedence: flags (`--model`, `--base-url`) > environment (`OPENAI_API_KEY`,
 * `OPENAI_BASE_URL`, `FIBRIL_MODEL`) > project `.fibril/config.toml` > `~/.fibril/config.toml`
 * > defaults (FibrilConfig already merged the last four for `model`). `scripted:<file>`
 * selects the ScriptedModel with a JSON script; anything else is an OpenAI-compatible
 * endpoint, which needs an API key.
 */
import type * as FibrilConfig from "@fibril/core/FibrilConfig"
import * as Models from "@fibril/core/Models"
import { hasUserinfo, redactUrl } from "@fibril/core/Secrets"
import { OpenAiClient, OpenAiModels } from "@fibril/openai"
import * as ScriptedModel from "@fibril/testkit/ScriptedModel"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import type * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import { existsSync } from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { UsageError } from "./UsageError.ts"

export const defaultModel = "gpt-4.1-mini"

/** A mistake in how fibril was invoked or configured (exit code 2). */
export { UsageError } from "./UsageError.ts"

/**
 * The script format's documentation where this `fibril` can read it: the copy the build puts
 * beside the compiled CLI (`dist/docs/`, shipped in the package), or the repository's when the
 * sources run.
 */
export const scriptFormatDoc: string = [
  new URL("./docs/script-format.md", import.meta.url),
  new URL("../../../docs/script-format.md", import.meta.url)
].map((url) => fileURLToPath(url)).find((file) => existsSync(file)) ?? "docs/script-format.md"

export const missingKey = new UsageError({
  problem: "No model to run on: OPENAI_API_KEY is not set.\n" +
    "  Set OPENAI_API_KEY (and OPENAI_BASE_URL for DeepSeek, vLLM, Ollama or OpenRouter; FIBRIL_MODEL or --model for the model id),\n" +
    `  or run on a scripted model: --model scripted:<script.json> (see ${scriptFormatDoc}).`
})

export type Selection =
  | { readonly kind: "scripted"; readonly file: string; readonly label: string }
  | {
    readonly kind: "openai"
    readonly model: string
    readonly baseURL: string | undefined
    readonly apiKey: Redacted.Redacted<string>
    /** `FIBRIL_STRUCTURED_OUTPUT=1`: the endpoint supports `response_format: json_schema` (typed sub-agent results). */
    readonly structuredOutput: boolean
  }

export interface Input {
  readonly model?: string | undefined
  readonly baseUrl?: string | undefined
  readonly env: Readonly<Record<string, string | undefined>>
  readonly settings: FibrilConfig.Settings
  /** The workspace: a script named in a config file is relative to it. */
  readonly cwd: string
  /** Where the command was typed: a script named by `--model` is relative to it (default `cwd`). */
  readonly invocationDir?: string | undefined
}

/** The flags that choose the model: `--model`, `--base-url`. */
export interface ModelFlags {
  readonly model: Option.Option<string>
  readonly baseUrl: Option.Option<string>
}

/** The model a command on the workspace `cwd` runs on: its flags, the environment, the settings. */
export const fromFlags = (
  environment: { readonly env: Readonly<Record<string, string | undefined>>; readonly cwd: string },
  cwd: string,
  settings: FibrilConfig.Settings,
  flags: ModelFlags
): Effect.Effect<Selection, UsageError> =>
  select({
    model: Option.getOrUndefined(flags.model),
    baseUrl: Option.getOrUndefined(flags.baseUrl),
    env: environment.env,
    settings,
    cwd,
    invocationDir: environment.cwd
  })

export const select = (input: Input): Effect.Effect<Selection, UsageError> => {
  const model = input.model ?? input.settings.model
  if (model !== undefined && model.startsWith("scripted:")) {
    const file = model.slice("scripted:".length)
    if (file === "") return Effect.fail(new UsageError({ problem: "--model scripted:<file> needs a script file" }))
    const base = input.model !== undefined ? input.invocationDir ?? input.cwd : input.cwd
    return Effect.succeed({ kind: "scripted", file: path.resolve(base, file), label: model })
  }
  const key = input.env["OPENAI_API_KEY"]
  if (key === undefined || key === "") return Effect.fail(missingKey)
  const baseURL = input.baseUrl ?? input.env["OPENAI_BASE_URL"]
  // fetch refuses a URL with user:password@ in it; say so before any request, without the secret.
  if (baseURL !== undefined && hasUserinfo(baseURL)) {
    return Effect.fail(
      new UsageError({
        problem: `The base URL ${redactUrl(baseURL)} has credentials in it (user:password@), which HTTP clients ` +
          "refuse to send. Remove them from the URL and put the API key in OPENAI_API_KEY."
      })
    )
  }
  // The SDK would take a malformed URL and fail only at the first model call, mid-run.
  if (baseURL !== undefined && !isHttpUrl(baseURL)) {
    return Effect.fail(
      new UsageError({
        problem: `The base URL ${redactUrl(baseURL)} is not an http(s) URL. OPENAI_BASE_URL / --base-url takes the ` +
          "endpoint's address ending in /v1, e.g. https://api.deepseek.com/v1 or http://localhost:11434/v1."
      })
    )
  }
  const structured = input.env["FIBRIL_STRUCTURED_OUTPUT"] ?? ""
  if (!["", "0", "1", "false", "true"].includes(structured)) {
    return Effect.fail(
      new UsageError({
        problem: `FIBRIL_STRUCTURED_OUTPUT=${structured} is not a switch: 1 or true (the endpoint serves ` +
          "response_format json_schema, used for typed sub-agent results), 0 or false (the final_answer tool)"
      })
    )
  }
  return Effect.succeed({
    kind: "openai",
    model: model ?? defaultModel,
    baseURL,
    apiKey: Redacted.make(key),
    structuredOutput: structured === "1" || structured === "true"
  })
}

const isHttpUrl = (text: string): boolean => {
  if (!URL.canParse(text)) return false
  const url = new URL(text)
  return (url.protocol === "http:" || url.protocol === "https:") && url.hostname !== ""
}

/** The model catalog for a selection; an unreadable script is a usage error (exit 2). */
export const layer = (
  selection: Selection
): Layer.Layer<Models.Models, UsageError, FileSystem.FileSystem> =>
  selection.kind === "scripted"
    ? Models.fromLanguageModel(selection.label).pipe(
      Layer.provide(ScriptedModel.layerFile(selection.file)),
      Layer.catchTag("ScriptFileError", (error) =>
        Layer.effect(Models.Models, Effect.fail(new UsageError({ problem: error.message }))))
    )
    : OpenAiModels.layer({ defaultModel: selection.model, structuredOutput: selection.structuredOutput }).pipe(
      Layer.provide(OpenAiClient.layer({ apiKey: selection.apiKey, baseURL: selection.baseURL }))
    )

/**
 * The model as a run builds it (`layer`, the one every command that runs agents uses) and the
 * model id it starts on resolved, as the root agent's spawn resolves it: what fails here fails
 * a run at start, with the same error. `fibril doctor` runs it.
 */
export const probe = (selection: Selection) =>
  Effect.scoped(Effect.gen(function*() {
    const models = Context.get(yield* Layer.build(layer(selection)), Models.Models)
    yield* models.resolve(models.defaultModel)
    return models.defaultModel
  }))

/** What `fibril config` and `fibril mcp` show about the model: never the key, nor one written into the URL. */
export const describe = (selection: Selection): string =>
  selection.kind === "scripted"
    ? `scripted model (${selection.file})`
    : `${selection.model} at ${redactUrl(selection.baseURL ?? OpenAiClient.defaultBaseURL)} (OPENAI_API_KEY set)`
