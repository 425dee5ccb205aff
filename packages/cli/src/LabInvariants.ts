/**
 * The invariants of a `fibril lab` command: the built-in ones by name (`--invariants`) and a
 * user's own from a module (`--invariants-from my-invariants.mjs`).
 *
 * A module's invariants are plain values, so it needs nothing from Fibril: each export (the
 * default export may be one invariant or an array of them) that has a `name`, a `description`
 * and a `check(trace)` function is one. `check` returns `undefined` when the invariant holds,
 * otherwise a message or `{ message, agent, at, evidence }` (docs/lab.md, "Add your own").
 */
import { Invariants } from "@fibril/testkit"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import { UsageError } from "./UsageError.ts"

const usage = (problem: string) => new UsageError({ problem })

const isInvariant = (value: unknown): value is Invariants.Invariant =>
  typeof value === "object" && value !== null && typeof (value as { name?: unknown }).name === "string" &&
  typeof (value as { check?: unknown }).check === "function"

/** The invariants a module exports (see the header); none is a usage error saying what is expected. */
export const load = (file: string): Effect.Effect<ReadonlyArray<Invariants.Invariant>, UsageError> =>
  Effect.tryPromise({
    try: () => import(pathToFileURL(file).href) as Promise<Record<string, unknown>>,
    catch: (error) =>
      usage(`--invariants-from ${file}: cannot load it (${error instanceof Error ? error.message : String(error)})`)
  }).pipe(
    Effect.flatMap((module) => {
      const exported = Object.entries(module).flatMap(([key, value]) =>
        key === "default" && Array.isArray(value) ? value : [value]
      )
      const found = exported.filter(isInvariant).map((invariant) => ({
        ...invariant,
        description: typeof invariant.description === "string" ? invariant.description : invariant.name
      }))
      return found.length > 0 ? Effect.succeed(found) : Effect.fail(usage(
        `--invariants-from ${file}: it exports no invariant; expected exports (or a default array) of { name, description, check(trace) }, check returning undefined when it holds, else a message or { message, agent, at, evidence }`
      ))
    })
  )

/**
 * The built-in invariants `--invariants` names (all when absent), then those of
 * `--invariants-from`, whose names must not repeat.
 */
export const select = (
  cwd: string,
  names: Option.Option<string>,
  from: Option.Option<string>
): Effect.Effect<ReadonlyArray<Invariants.Invariant>, UsageError> =>
  Effect.gen(function*() {
    const builtIn = Option.isNone(names) ? Invariants.all : Invariants.byNames(
      names.value.split(",").map((name) => name.trim()).filter((name) => name !== "")
    )
    if ("unknown" in builtIn) {
      return yield* Effect.fail(
        usage(
          `unknown invariant "${builtIn.unknown}"; the invariants are: ${
            Invariants.all.map((i) => i.name).join(", ")
          } (your own: --invariants-from a module)`
        )
      )
    }
    if (Option.isNone(from)) return builtIn
    const own = yield* load(path.resolve(cwd, from.value))
    const builtInNames = new Set(Invariants.all.map((invariant) => invariant.name))
    const clash = own.find((invariant) => builtInNames.has(invariant.name))
    if (clash !== undefined) {
      return yield* Effect.fail(
        usage(`--invariants-from: "${clash.name}" is already a built-in invariant's name; give yours another`)
      )
    }
    return [...builtIn, ...own]
  })
