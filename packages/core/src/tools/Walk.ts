/**
 * Walk — the directory walker behind `grep` and `glob`.
 *
 * Depth-first, each directory's entries in name order, so output is deterministic. It
 * never descends into `.git` or `node_modules` (noise for a model, and often huge), never
 * follows a symlinked directory (no loops, no duplicates, no way out of the workspace),
 * and yields a symlinked file only when its target resolves inside the workspace. FIFOs,
 * sockets and devices are skipped: reading one could block forever. Unreadable
 * directories are skipped silently; the caller already checked the starting point. It walks
 * descriptors, not paths (internal/safeFs.ts): each directory is opened through its parent's.
 */
import * as Effect from "effect/Effect"
import type * as FileSystem from "effect/FileSystem"
import * as Path from "effect/Path"
import type * as PlatformError from "effect/PlatformError"
import * as Result from "effect/Result"
import type * as Scope from "effect/Scope"
import { posix } from "node:path"
import type * as SafeFs from "../internal/safeFs.ts"
import { ToolFailure } from "../ToolRegistry.ts"
import { type OutsideWorkspace, Workspace } from "../Workspace.ts"
import * as GlobPattern from "./GlobPattern.ts"

/** Directory names the walker never enters. */
export const skippedDirectories: ReadonlySet<string> = new Set([".git", "node_modules"])

export interface Entry {
  /** Absolute path (through the walked directories, not the symlink target). */
  readonly absolute: string
  /** Workspace-relative, `/`-separated. */
  readonly relative: string
  /** Relative to the directory the walk started from, `/`-separated. */
  readonly fromStart: string
  /**
   * The file, opened through the walked directory's descriptor (a link: resolved and checked
   * the way `Workspace.open` does); `type` says what was really opened. Valid in `visit`.
   */
  readonly open: Effect.Effect<SafeFs.Handle, OutsideWorkspace | PlatformError.PlatformError, Scope.Scope>
}

/**
 * Visits every regular file under `start` (a handle from `Workspace.open`, whose real path is
 * `start.real`); `visit` returns `false` to stop the walk early. A file as `start` is visited
 * alone. Directories are entered through their parent's descriptor without following links,
 * so a swap while walking can never lead out of the workspace.
 */
export const files = <E, R>(
  start: SafeFs.Handle,
  visit: (entry: Entry) => Effect.Effect<boolean, E, R>
): Effect.Effect<void, E, R | Path.Path | Workspace> =>
  Effect.gen(function*() {
    const path = yield* Path.Path
    const workspace = yield* Workspace
    let stopped = false

    const entry = (absolute: string, open: Entry["open"]): Entry => ({
      absolute,
      relative: workspace.relative(absolute),
      fromStart: path.relative(start.real, absolute).split(path.sep).join("/") || path.basename(absolute),
      open
    })

    const emit = (absolute: string, open: Entry["open"]) =>
      Effect.map(Effect.scoped(visit(entry(absolute, open))), (goOn) => {
        if (!goOn) stopped = true
      })

    // A link, or an entry of unknown type: what it really is, if it may be walked at all (a
    // linked directory is never entered).
    const kindOf = (absolute: string, type: FileSystem.File.Type) =>
      type !== "SymbolicLink" && type !== "Unknown"
        ? Effect.succeed(type)
        : Effect.scoped(workspace.open(absolute)).pipe(
          Effect.map((target) => (type === "SymbolicLink" && target.type === "Directory" ? "Unknown" : target.type)),
          Effect.orElseSucceed((): FileSystem.File.Type => "Unknown")
        )

    const walkDirectory = (directory: SafeFs.Handle, absolute: string): Effect.Effect<void, E, R> =>
      Effect.gen(function*() {
        const entries = yield* directory.entries.pipe(
          Effect.orElseSucceed((): ReadonlyArray<FileSystem.DirectoryEntry> => [])
        )
        const sorted = [...entries].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
        for (const { name, type } of sorted) {
          if (stopped) return
          const child = path.join(absolute, name)
          const kind = yield* kindOf(child, type)
          if (kind === "Directory") {
            if (skippedDirectories.has(name)) continue
            // Entered through this directory's descriptor, not following a link; skipped
            // when it is no longer a directory (swapped meanwhile) or cannot be opened.
            yield* Effect.scoped(
              directory.child(name).pipe(
                Effect.orElseSucceed(() => undefined),
                Effect.flatMap((opened) => opened?.type === "Directory" ? walkDirectory(opened, child) : Effect.void)
              )
            )
          } else if (kind === "File") {
            yield* emit(child, type === "File" ? directory.child(name) : workspace.open(child))
          }
        }
      })

    if (start.type === "Directory") yield* walkDirectory(start, start.real)
    else if (start.type === "File") yield* emit(start.real, Effect.succeed(start))
  })

/** A glob compiled once per tool call (see `GlobPattern`); `basename` as in {@link matches}. */
export interface Glob {
  readonly matcher: GlobPattern.Matcher
  readonly hasSlash: boolean
}

/**
 * Compiles a glob given to `tool` (a leading `./` is dropped); a refused pattern (extended
 * glob, too long, too many alternatives) is a `ToolFailure` naming the reason.
 */
export const glob = (tool: string, pattern: string, parameter = "pattern"): Effect.Effect<Glob, ToolFailure> => {
  const normalized = pattern.startsWith("./") ? pattern.slice(2) : pattern
  const compiled = GlobPattern.compile(normalized)
  return Result.isSuccess(compiled)
    ? Effect.succeed({ matcher: compiled.success, hasSlash: normalized.includes("/") })
    : Effect.fail(new ToolFailure({ tool, reason: `${parameter} "${pattern}" is refused: ${compiled.failure}` }))
}

/**
 * Does the glob match the entry? It is tried on the path relative to the walk's start and on
 * the workspace-relative path, so both `*.ts` under `src` and `src/*.ts` work; with
 * `basename`, a pattern without `/` also matches a file name anywhere (ripgrep's `--glob`
 * convention, used by grep's `include`). Matching is linear in the path (`GlobPattern`).
 */
export const matches = (pattern: Glob, entry: Entry, options: { readonly basename?: boolean } = {}): boolean => {
  if (pattern.matcher.test(entry.fromStart) || pattern.matcher.test(entry.relative)) return true
  return options.basename === true && !pattern.hasSlash && pattern.matcher.test(posix.basename(entry.relative))
}
