/**
 * Loading the configuration for a command: `FibrilConfig.load` with the `--no-strict`
 * global flag applied, and what was only a warning (an unknown key when not strict)
 * written to stderr as a log line before the command goes on; so is what the workspace's own
 * config file widened, or what of it was ignored because the workspace is not trusted.
 *
 * `--no-strict` is a global flag (`fibril --no-strict run …` or `fibril run … --no-strict`)
 * so every command that reads the configuration honours it the same way.
 */
import { Flag, GlobalFlag } from "effect/cli"
import * as Effect from "effect/Effect"

/** `--strict` (default) / `--no-strict`: unknown config tables and keys are errors, or only warnings. */
export const Strict = GlobalFlag.Setting("strict")({
  flag: Flag.Boolean("strict").pipe(
    Flag.withDescription(
      "Unknown tables and keys in .fibril/config.toml are errors (default); --no-strict makes them warnings"
    ),
    Flag.withDefault(true)
  )
})

/** The configuration for `cwd`; warnings are logged (stderr in the CLI). */
export const load = Effect.fn("fibril.config.load")(function*(
  environment: { readonly home: string; readonly env: Readonly<Record<string, string | undefined>> },
  cwd: string
) {
  const strict = yield* Strict
  // Imported by the command that reads the configuration: parsing and help do not load it
  // (the config schema, the agent-definition formats; docs/performance.md, start-up).
  const [FibrilConfig, Trust] = yield* Effect.promise(() =>
    Promise.all([import("@fibril/core/FibrilConfig"), import("@fibril/core/Trust")])
  )
  const resolved = yield* FibrilConfig.load({
    cwd,
    home: environment.home,
    env: environment.env,
    // Only the negation is a command-line choice; otherwise the `strict` key decides.
    ...(strict ? {} : { strict: false })
  })
  for (const warning of resolved.warnings) yield* Effect.logWarning(`config: ${warning}`)
  // What the project file widened (a trusted workspace), or what of it was ignored and why.
  if (resolved.trust !== undefined) yield* Effect.logWarning(Trust.describe(resolved.trust))
  return resolved
})
