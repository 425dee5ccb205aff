/**
 * Walk — the directory walker behind `grep` and `glob`.
 *
 * Depth-first, each directory's entries in name order, so output is deterministic. It
 * never descends into `.git` or `node_modules` (noise for a model, and often huge), never
 * follows a symlinked directory (no loops, no duplicates, no way out of the workspace),
 * and yields a symlinked file only when its target resolves inside the workspace. FIFOs,
 * sockets and devices are skipped: reading one could block forever. Unreadable
 * directories are skipped silently; the caller already checked the starting point.
 */
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Path from "effect/Path"
import * as Result from "effect/Result"
import { posix } from "node:path"
import { ToolFailure } from "../ToolRegistry.ts"
import { Workspace } from "../Workspace.ts"
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
}

/**
 * Visits every regular file under `start` (an absolute path that went through
 * `Workspace.resolve`); `visit` returns `false` to stop the walk early. A file as `start`
 * is visited alone.
 */
export const files = <E, R>(
  start: string,
  visit: (entry: Entry) => Effect.Effect<boolean, E, R>
): Effect.Effect<void, E, R | FileSystem.FileSystem | Path.Path | Workspace> =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const workspace = yield* Workspace
    let stopped = false

    const entry = (absolute: string): Entry => ({
      absolute,
      relative: workspace.relative(absolute),
      fromStart: path.relative(start, absolute).split(path.sep).join("/") || path.basename(absolute)
    })

    const emit = (absolute: string) =>
      Effect.map(visit(entry(absolute)), (goOn) => {
        if (!goOn) stopped = true
      })

    // What a symlink (or an entry of unknown type) really is, if it may be walked at all.
    const kindOf = (absolute: string, type: FileSystem.File.Type) =>
      type !== "SymbolicLink" && type !== "Unknown"
        ? Effect.succeed(type)
        : workspace.resolve(absolute).pipe(
          Effect.flatMap((real) => fs.stat(real)),
          Effect.map((info) => (type === "SymbolicLink" && info.type === "Directory" ? "Unknown" : info.type)),
          Effect.orElseSucceed((): FileSystem.File.Type => "Unknown")
        )

    const walkDirectory = (directory: string): Effect.Effect<void, E, R> =>
      Effect.gen(function*() {
        const entries = yield* fs.readDirectoryEntries(directory).pipe(
          Effect.orElseSucceed((): ReadonlyArray<FileSystem.DirectoryEntry> => [])
        )
        const sorted = [...entries].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
        for (const { name, type } of sorted) {
          if (stopped) return
          const absolute = path.join(directory, name)
          const kind = yield* kindOf(absolute, type)
          if (kind === "Directory") {
            if (!skippedDirectories.has(name)) yield* walkDirectory(absolute)
          } else if (kind === "File") {
            yield* emit(absolute)
          }
        }
      })

    const info = yield* fs.stat(start).pipe(Effect.orElseSucceed(() => undefined))
    if (info?.type === "Directory") yield* walkDirectory(start)
    else if (info?.type === "File") yield* emit(start)
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
export const matches = (glob: Glob, entry: Entry, options: { readonly basename?: boolean } = {}): boolean => {
  if (glob.matcher.test(entry.fromStart) || glob.matcher.test(entry.relative)) return true
  return options.basename === true && !glob.hasSlash && glob.matcher.test(posix.basename(entry.relative))
}
