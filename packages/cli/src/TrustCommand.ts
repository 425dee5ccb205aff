/**
 * `fibril trust [path]`, `fibril trust --revoke [path]`, `fibril trust --list`: the user's list
 * of workspaces whose own `.fibril/config.toml` may widen the sandbox (core Trust.ts). A
 * workspace is trusted with the config it holds now; a later change must be trusted again.
 */
import * as FibrilConfig from "@fibril/core/FibrilConfig"
import * as Trust from "@fibril/core/Trust"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Option from "effect/Option"
import * as path from "node:path"
import type * as Output from "./Output.ts"
import * as Workspace from "./Workspace.ts"

export interface Environment {
  readonly cwd: string
  readonly home: string
  readonly env: Readonly<Record<string, string | undefined>>
}

/** The workspace a `fibril trust` names: the path (an existing directory), else the project around cwd. */
const workspaceOf = (given: Option.Option<string>, environment: Environment) =>
  Workspace.resolve(Option.map(given, (dir) => path.resolve(environment.cwd, dir)), environment)

/** What the trusted config now widens, by loading it the way every command does. */
const widened = (workspace: string, environment: Environment) =>
  FibrilConfig.load({ cwd: workspace, home: environment.home, env: environment.env, strict: false }).pipe(
    Effect.map((resolved) => resolved.trust?.status === "trusted" ? resolved.trust.widenings : []),
    Effect.orElseSucceed(() => [])
  )

export const trust = Effect.fn("fibril.trust")(function*(
  given: Option.Option<string>,
  environment: Environment,
  output: Output.Output
) {
  const workspace = yield* workspaceOf(given, environment)
  const now = new Date(yield* Clock.currentTimeMillis)
  const entry = yield* Trust.trust({ workspace, home: environment.home, now })
  yield* output.line(
    `trusted ${entry.path} with its .fibril/config.toml as it is now (sha256 ${entry.configSha256.slice(0, 12)}…), ` +
      `recorded in ${Trust.listFile(environment.home)}`
  )
  const widenings = yield* widened(entry.path, environment)
  yield* output.line(
    widenings.length === 0
      ? "its config widens nothing today"
      : `its config now widens the sandbox:\n${
        widenings.map((widening) => `  ${widening.key} = ${widening.value}: ${widening.effect}`).join("\n")
      }`
  )
})

export const revoke = Effect.fn("fibril.trust.revoke")(function*(
  given: Option.Option<string>,
  environment: Environment,
  output: Output.Output
) {
  const workspace = yield* workspaceOf(given, environment)
  const removed = yield* Trust.revoke({ workspace, home: environment.home })
  yield* output.line(
    removed
      ? `${workspace} is no longer trusted: settings of its .fibril/config.toml that widen the sandbox are ignored`
      : `${workspace} was not trusted`
  )
})

export const list = Effect.fn("fibril.trust.list")(function*(environment: Environment, output: Output.Output) {
  const fs = yield* FileSystem.FileSystem
  const entries = yield* Trust.list(fs, environment.home)
  if (entries.length === 0) return yield* output.line(`no trusted workspaces (${Trust.listFile(environment.home)})`)
  for (const entry of entries) {
    const text = yield* Effect.option(fs.readFileString(path.join(entry.path, ".fibril", "config.toml")))
    const state = Option.isNone(text)
      ? "its config file is gone"
      : Trust.digest(text.value) === entry.configSha256
      ? "config unchanged"
      : "config CHANGED since: its widenings are ignored until trusted again"
    yield* output.line(`${entry.path}  trusted ${entry.trustedAt}  ${state}`)
  }
})
