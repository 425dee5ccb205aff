/**
 * Trust — what a workspace's own `.fibril/config.toml` may do before its user has said so.
 *
 * A repository is cloned, not written, by its user: a `.fibril/config.toml` planted in it
 * could turn the sandbox off or open `/` for writing, and every `fibril run` there would obey.
 * So the settings of a project file that *widen* the posture its user would have without it
 * (the environment, `~/.fibril/config.toml` and the defaults: the "base") take effect only in a
 * workspace the user has trusted with `fibril trust`, as Codex's trusted projects do:
 *
 * - `[sandbox] mode` / `[sandbox.roles.<r>] mode` looser than the base (`off` > `workspace-write`
 *   > `read-only`);
 * - `network = true` where the base has none;
 * - `writable_paths` entries the base does not already make writable;
 * - `[sandbox] bwrap_path` other than the base's (the sandbox binary runs outside any sandbox);
 * - `[sandbox] tmp_size_mb`, `max_processes`, `memory_mb` above the base's (looser bounds);
 * - `[permissions] deny` dropping a tool the base denies (untrusted, the lists are united).
 * - `[permissions] allow` entries the base does not have (they answer `ask` questions unasked).
 *
 * Everything else a project file says (narrower settings, limits, models) applies as before;
 * the environment and the user file keep their full power. The list of trusted workspaces is
 * `<home>/.fibril/trusted.toml`: each entry is a workspace's real path and the SHA-256 of its
 * config file when it was trusted, so a config changed afterwards (a `git pull`) is untrusted
 * again until the user looks at it and trusts it again.
 */
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { createHash, randomUUID } from "node:crypto"
import { createRequire } from "node:module"
import * as path from "node:path"
import type * as TomlModule from "smol-toml"
import type { SandboxMode, Settings } from "./FibrilConfig.ts"

let tomlModule: typeof TomlModule | undefined
const Toml = (): typeof TomlModule => (tomlModule ??= createRequire(import.meta.url)("smol-toml") as typeof TomlModule)

// ---------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------

/** One setting of a project file that widens the posture. */
export interface Widening {
  /** Dotted TOML path, e.g. `"sandbox.roles.explore.mode"`. */
  readonly key: string
  /** The value as written, as TOML/JSON text. */
  readonly value: string
  /** 1-based line in the file, when found. */
  readonly line?: number | undefined
  /** What it does: `"turns the sandbox off"`. */
  readonly effect: string
}

/**
 * What the trust check decided for a workspace whose project file widens something.
 * `trusted`: the widenings apply; `untrusted` (never trusted) and `changed` (trusted, but the
 * file changed since): they were ignored.
 */
export interface Report {
  readonly workspace: string
  readonly file: string
  readonly status: "trusted" | "untrusted" | "changed"
  readonly widenings: ReadonlyArray<Widening>
}

/** One trusted workspace of `<home>/.fibril/trusted.toml`. */
export interface Entry {
  /** The workspace's real path (symlinks resolved). */
  readonly path: string
  /** SHA-256 (hex) of its `.fibril/config.toml` when trusted. */
  readonly configSha256: string
  /** ISO time of the `fibril trust`. */
  readonly trustedAt: string
}

/** The trust list cannot be read, parsed or written. */
export class TrustFileError extends Schema.TaggedError<TrustFileError>()("TrustFileError", {
  path: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `Cannot use the list of trusted workspaces ${this.path}: ${this.reason}`
  }
}

/** `fibril trust` on a workspace without a `.fibril/config.toml`: there is nothing to trust. */
export class NothingToTrust extends Schema.TaggedError<NothingToTrust>()("NothingToTrust", {
  workspace: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `Nothing to trust in ${this.workspace}: ${this.reason}`
  }
}

/** `<home>/.fibril/trusted.toml`, next to the user's own config file. */
export const listFile = (home: string): string => path.join(home, ".fibril", "trusted.toml")

/** The SHA-256 of a config file's text, as recorded. */
export const digest = (text: string): string => createHash("sha256").update(text, "utf8").digest("hex")

// ---------------------------------------------------------------------------
// Which settings widen
// ---------------------------------------------------------------------------

const modeRank: Readonly<Record<SandboxMode, number>> = { "read-only": 0, "workspace-write": 1, off: 2 }

const isTable = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof Date)

const at = (table: unknown, ...keys: ReadonlyArray<string>): unknown =>
  keys.reduce<unknown>((value, key) => isTable(value) && Object.hasOwn(value, key) ? value[key] : undefined, table)

/** A list as a file may write it: an array, or a comma-separated string (as in the environment). */
const listOf = (value: unknown): ReadonlyArray<string> | undefined =>
  Array.isArray(value)
    ? value.filter((item): item is string => typeof item === "string")
    : typeof value === "string"
    ? value.split(",").map((item) => item.trim()).filter((item) => item !== "")
    : undefined

const isMode = (value: unknown): value is SandboxMode => typeof value === "string" && Object.hasOwn(modeRank, value)

const shown = (value: unknown) => JSON.stringify(value)

/**
 * What a check needs besides the project table: the base settings (everything but the project
 * file), the workspace (relative writable paths are under it), and whether the environment
 * sets a key (then the project's value is never used, and widens nothing).
 */
export interface Base {
  readonly settings: Settings
  readonly workspace: string
  readonly fromEnv: (key: string) => boolean
}

interface Found {
  readonly widening: Omit<Widening, "line">
  /** The project table without this widening (mutates the copy it is given). */
  readonly strip: (copy: Record<string, unknown>) => void
}

const remove = (...keys: ReadonlyArray<string>) => (copy: Record<string, unknown>) => {
  const parent = at(copy, ...keys.slice(0, -1))
  if (isTable(parent)) delete parent[keys.at(-1)!]
}

/** `mode`, `network`, `writable_paths` of `[sandbox]` or one `[sandbox.roles.<r>]` against the base. */
const postureWidenings = (
  table: Record<string, unknown>,
  prefix: ReadonlyArray<string>,
  base: { readonly mode: SandboxMode; readonly network: boolean; readonly writable: ReadonlyArray<string> },
  context: Base
): Array<Found> => {
  const found: Array<Found> = []
  const key = (name: string) => [...prefix, name].join(".")
  const mode = table["mode"]
  if (isMode(mode) && modeRank[mode] > modeRank[base.mode] && !context.fromEnv(key("mode"))) {
    found.push({
      widening: {
        key: key("mode"),
        value: shown(mode),
        effect: mode === "off"
          ? "runs shell commands with no sandbox"
          : `lets shell commands write the workspace (the base is "${base.mode}")`
      },
      strip: remove(...prefix, "mode")
    })
  }
  if (table["network"] === true && !base.network && !context.fromEnv(key("network"))) {
    found.push({
      widening: { key: key("network"), value: "true", effect: "gives shell commands the network" },
      strip: remove(...prefix, "network")
    })
  }
  const writable = listOf(table["writable_paths"])
  if (writable !== undefined && !context.fromEnv(key("writable_paths"))) {
    const already = new Set(base.writable.map((entry) => path.resolve(context.workspace, entry)))
    const added = writable.filter((entry) => !already.has(path.resolve(context.workspace, entry)))
    if (added.length > 0) {
      found.push({
        widening: {
          key: key("writable_paths"),
          value: shown(writable),
          effect: `makes ${added.map((entry) => path.resolve(context.workspace, entry)).join(", ")} writable`
        },
        strip: remove(...prefix, "writable_paths")
      })
    }
  }
  return found
}

const findWidenings = (project: Record<string, unknown>, context: Base): Array<Found> => {
  const base = context.settings
  const found: Array<Found> = []
  const sandbox = at(project, "sandbox")
  if (isTable(sandbox)) {
    found.push(...postureWidenings(sandbox, ["sandbox"], {
      mode: base.sandbox.mode,
      network: base.sandbox.network,
      writable: base.sandbox.writablePaths
    }, context))
    const bwrap = sandbox["bwrap_path"]
    if (typeof bwrap === "string" && bwrap !== base.sandbox.bwrapPath && !context.fromEnv("sandbox.bwrap_path")) {
      found.push({
        widening: {
          key: "sandbox.bwrap_path",
          value: shown(bwrap),
          effect: "runs this program, outside any sandbox, as the sandbox of every shell command"
        },
        strip: remove("sandbox", "bwrap_path")
      })
    }
    // The sandbox's bounds (docs/security.md, "Shell sandbox bounds"): raising one widens.
    const bounds = [
      ["tmp_size_mb", base.sandbox.tmpSizeMb, "MiB of /tmp and /dev/shm"],
      ["max_processes", base.sandbox.maxProcesses, "processes"],
      ["memory_mb", base.sandbox.memoryMb, "MiB of memory"]
    ] as const
    for (const [name, limit, unit] of bounds) {
      const value = sandbox[name]
      if (typeof value === "number" && value > limit && !context.fromEnv(`sandbox.${name}`)) {
        found.push({
          widening: {
            key: `sandbox.${name}`,
            value: String(value),
            effect: `lets a sandboxed shell command use ${value} ${unit} (yours: ${limit})`
          },
          strip: remove("sandbox", name)
        })
      }
    }
    const roles = sandbox["roles"]
    if (isTable(roles)) {
      for (const [name, table] of Object.entries(roles)) {
        if (!isTable(table)) continue
        const role = base.sandbox.roles[name.toLowerCase()]
        found.push(...postureWidenings(table, ["sandbox", "roles", name], {
          mode: role?.mode ?? base.sandbox.mode,
          network: role?.network ?? base.sandbox.network,
          writable: role?.writablePaths ?? base.sandbox.writablePaths
        }, context))
      }
    }
  }
  const deny = listOf(at(project, "permissions", "deny"))
  if (deny !== undefined && !context.fromEnv("permissions.deny")) {
    const dropped = base.permissions.deny.filter((tool) => !deny.includes(tool))
    if (dropped.length > 0) {
      found.push({
        widening: {
          key: "permissions.deny",
          value: shown(deny),
          effect: `allows ${dropped.join(", ")}, which your own configuration denies`
        },
        // Untrusted, the project's denials still apply, on top of the base's.
        strip: (copy) => {
          const permissions = at(copy, "permissions")
          if (isTable(permissions)) permissions["deny"] = [...deny, ...dropped]
        }
      })
    }
  }
  // `[permissions] allow` answers ask rules' questions without a person: entries of the
  // project's own would skip the questions the user's rules ask.
  const allow = listOf(at(project, "permissions", "allow"))
  if (allow !== undefined && !context.fromEnv("permissions.allow")) {
    const allowed = base.permissions.allow ?? []
    const added = allow.filter((entry) => !allowed.includes(entry))
    if (added.length > 0) {
      found.push({
        widening: {
          key: "permissions.allow",
          value: shown(allow),
          effect: `runs ${added.join(", ")} without asking, where the rules ask a person`
        },
        // Untrusted, the project's list keeps only what the user's own allows.
        strip: (copy) => {
          const permissions = at(copy, "permissions")
          if (isTable(permissions)) permissions["allow"] = allow.filter((entry) => allowed.includes(entry))
        }
      })
    }
  }
  return found
}

/**
 * The settings of a project table that widen the base, and the table without them (the
 * copy an untrusted workspace is read with). Pure.
 */
export const widenings = (
  project: Record<string, unknown>,
  context: Base,
  lines: ReadonlyMap<string, number> = new Map()
): { readonly widenings: ReadonlyArray<Widening>; readonly narrowed: Record<string, unknown> } => {
  const found = findWidenings(project, context)
  const narrowed = structuredClone(project)
  for (const item of found) item.strip(narrowed)
  return {
    widenings: found.map(({ widening }) => ({ ...widening, line: lines.get(widening.key) })),
    narrowed
  }
}

/**
 * Whether a project table holds any key a widening can come from (so the base settings
 * need not be read for the common file that holds none).
 */
export const mayWiden = (project: Record<string, unknown>): boolean =>
  at(project, "sandbox") !== undefined || at(project, "permissions", "deny") !== undefined ||
  at(project, "permissions", "allow") !== undefined

// ---------------------------------------------------------------------------
// The list of trusted workspaces
// ---------------------------------------------------------------------------

const EntryTable = Schema.Struct({
  path: Schema.String,
  config_sha256: Schema.String,
  trusted_at: Schema.String
})
const ListTable = Schema.Struct({ workspace: Schema.optionalKey(Schema.Array(EntryTable)) })

/** The trusted workspaces recorded under `home` (none when the file does not exist). */
export const list = Effect.fnUntraced(function*(fs: FileSystem.FileSystem, home: string) {
  const file = listFile(home)
  const fail = (reason: string) => new TrustFileError({ path: file, reason })
  const text = yield* fs.readFileString(file).pipe(
    Effect.map(Option.some),
    Effect.catchTag(
      "PlatformError",
      (error) => error.reason._tag === "NotFound" ? Effect.succeedNone : Effect.fail(fail(error.message))
    )
  )
  if (Option.isNone(text)) return [] as ReadonlyArray<Entry>
  const table = yield* Effect.try({ try: () => Toml().parse(text.value), catch: (error) => fail(String(error)) })
  const decoded = yield* Schema.decodeUnknownEffect(ListTable)(table).pipe(
    Effect.mapError((error) =>
      fail(`${error.message}; expected [[workspace]] tables with path, config_sha256 and trusted_at`)
    )
  )
  return (decoded.workspace ?? []).map((entry): Entry => ({
    path: entry.path,
    configSha256: entry.config_sha256,
    trustedAt: entry.trusted_at
  }))
})

const write = Effect.fnUntraced(function*(fs: FileSystem.FileSystem, home: string, entries: ReadonlyArray<Entry>) {
  const file = listFile(home)
  const text = "# Workspaces whose .fibril/config.toml may widen the sandbox (`fibril trust`; docs/security.md).\n" +
    "# Each holds the SHA-256 of the config it was trusted with: a changed config must be trusted again.\n\n" +
    Toml().stringify({
      workspace: entries.map((entry) => ({
        path: entry.path,
        config_sha256: entry.configSha256,
        trusted_at: entry.trustedAt
      }))
    }) + "\n"
  // Written beside and renamed over, so a crash never leaves half a list.
  const temporary = `${file}.${randomUUID()}.tmp`
  yield* fs.makeDirectory(path.dirname(file), { recursive: true }).pipe(
    Effect.andThen(fs.writeFileString(temporary, text)),
    Effect.andThen(fs.rename(temporary, file)),
    Effect.mapError((error) => new TrustFileError({ path: file, reason: error.message }))
  )
})

/** The real path of a workspace (symlinks resolved), so one directory has one entry. */
export const realWorkspace = (fs: FileSystem.FileSystem, workspace: string) =>
  fs.realPath(workspace).pipe(Effect.orElseSucceed(() => path.resolve(workspace)))

/**
 * Records `workspace` as trusted with the config it holds now. Fails with `NothingToTrust`
 * when it has no `.fibril/config.toml`.
 */
export const trust = Effect.fn("Trust.trust")(function*(options: {
  readonly workspace: string
  readonly home: string
  readonly now: Date
}) {
  const fs = yield* FileSystem.FileSystem
  const workspace = yield* realWorkspace(fs, options.workspace)
  const file = path.join(workspace, ".fibril", "config.toml")
  const text = yield* fs.readFileString(file).pipe(
    Effect.mapError((error) =>
      new NothingToTrust({
        workspace,
        reason: error.reason._tag === "NotFound"
          ? `it has no ${file} (only a project config file can widen the sandbox)`
          : `${file} cannot be read (${error.message})`
      })
    )
  )
  const entry: Entry = { path: workspace, configSha256: digest(text), trustedAt: options.now.toISOString() }
  const entries = yield* list(fs, options.home)
  yield* write(fs, options.home, [...entries.filter((other) => other.path !== workspace), entry])
  return entry
})

/** Removes `workspace` from the list; `false` when it was not in it. */
export const revoke = Effect.fn("Trust.revoke")(
  function*(options: { readonly workspace: string; readonly home: string }) {
    const fs = yield* FileSystem.FileSystem
    const workspace = yield* realWorkspace(fs, options.workspace)
    const entries = yield* list(fs, options.home)
    const kept = entries.filter((entry) => entry.path !== workspace && entry.path !== path.resolve(options.workspace))
    if (kept.length === entries.length) return false
    yield* write(fs, options.home, kept)
    return true
  }
)

/** Whether `workspace` is trusted with the config text it holds now. */
export const statusOf = Effect.fnUntraced(function*(
  fs: FileSystem.FileSystem,
  options: { readonly workspace: string; readonly home: string; readonly configText: string }
) {
  const workspace = yield* realWorkspace(fs, options.workspace)
  const entry = (yield* list(fs, options.home)).find((candidate) => candidate.path === workspace)
  const status: Report["status"] = entry === undefined
    ? "untrusted"
    : entry.configSha256 === digest(options.configText)
    ? "trusted"
    : "changed"
  return { workspace, status }
})

/**
 * One line for stderr saying what a workspace's config widened, or what was ignored and how
 * to apply it.
 */
export const describe = (report: Report): string => {
  const items = report.widenings.map((widening) =>
    `${widening.key} = ${widening.value}${
      widening.line === undefined ? "" : ` (line ${widening.line})`
    }: ${widening.effect}`
  ).join("; ")
  switch (report.status) {
    case "trusted":
      return `config: ${report.file} (a trusted workspace) widens the sandbox: ${items}`
    case "untrusted":
      return `config: ignored what ${report.file} widens, because this workspace is not trusted: ${items}. ` +
        `If you wrote or reviewed that file, run \`fibril trust ${report.workspace}\` to apply it`
    case "changed":
      return `config: ignored what ${report.file} widens, because the file changed since this workspace was ` +
        `trusted: ${items}. Review it, then run \`fibril trust ${report.workspace}\` again to apply it`
  }
}
