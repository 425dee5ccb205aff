/**
 * Workspace — the directory an agent tree works in, and the only one its file tools touch.
 *
 * A file tool reaches the disk only through `open`: the path is resolved against the root and
 * walked from a descriptor of the root, directory by directory, each one verified inside the
 * root on what was opened, links resolved and checked here (internal/safeFs.ts); the tool then
 * reads, writes (a temporary file renamed in the verified directory) or lists through that
 * handle, so a directory swapped for a symlink while it works cannot redirect it.
 *
 * `resolve` is the path-level check (the real path of the path or of its nearest existing
 * ancestor, refused outside the root): for what only needs a path, such as permission scopes
 * and the sandbox's writable paths.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Path from "effect/Path"
import type * as PlatformError from "effect/PlatformError"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as SafeFs from "./internal/safeFs.ts"

export class OutsideWorkspace extends Schema.TaggedError<OutsideWorkspace>()("OutsideWorkspace", {
  path: Schema.String,
  root: Schema.String
}) {
  override get message() {
    return `path "${this.path}" resolves outside the workspace ${this.root}; only paths inside the workspace are accepted (relative to it, or absolute under it)`
  }
}

export class Workspace extends Context.Service<Workspace, {
  /** The real (symlink-free) absolute path of the root. */
  readonly root: string
  /** The real absolute path of `path` (relative to the root, or absolute), refused outside the root. */
  readonly resolve: (path: string) => Effect.Effect<string, OutsideWorkspace>
  /** `absolute` relative to the root, with `/` separators ("." for the root itself). */
  readonly relative: (absolute: string) => string
  /** `path` (relative to the root, or absolute) made root-relative without touching the disk. */
  readonly relativize: (path: string) => string
  /** Lexical check only (no file system access): is `path` inside the root? */
  readonly containsLexically: (path: string) => boolean
  /**
   * `path` opened inside the root (links resolved and checked, each directory verified on its
   * descriptor): the handle reads, replaces, appends or lists what was opened, until the scope
   * ends. `createParents` makes missing directories on the way, one verified step at a time.
   */
  readonly open: (
    path: string,
    options?: { readonly createParents?: boolean }
  ) => Effect.Effect<SafeFs.Handle, OutsideWorkspace | PlatformError.PlatformError, Scope.Scope>
}>()("@fibril/core/Workspace") {}

export const make = Effect.fn("Workspace.make")(function*(root: string) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const realRoot = yield* fs.realPath(path.resolve(root)).pipe(Effect.orElseSucceed(() => path.resolve(root)))

  const inside = (absolute: string) => absolute === realRoot || absolute.startsWith(realRoot + path.sep)

  // The real path of `absolute`, or of its nearest existing ancestor with the rest appended.
  const realOf = (absolute: string): Effect.Effect<string> =>
    fs.realPath(absolute).pipe(
      Effect.catch(() => {
        const parent = path.dirname(absolute)
        return parent === absolute
          ? Effect.succeed(absolute)
          : Effect.map(realOf(parent), (real) => path.join(real, path.basename(absolute)))
      })
    )

  const resolve = Effect.fn("Workspace.resolve")(function*(given: string) {
    const lexical = path.resolve(realRoot, given)
    if (!inside(lexical)) return yield* new OutsideWorkspace({ path: given, root: realRoot })
    const real = yield* realOf(lexical)
    if (!inside(real)) return yield* new OutsideWorkspace({ path: given, root: realRoot })
    return real
  })

  const confined = SafeFs.make(realRoot, SafeFs.probeDescriptorRelative(realRoot))
  const open = (given: string, options?: { readonly createParents?: boolean }) => {
    const lexical = path.resolve(realRoot, given)
    return confined.open(lexical, options).pipe(
      Effect.catchTag("Outside", () => Effect.fail(new OutsideWorkspace({ path: given, root: realRoot })))
    )
  }

  const relative = (absolute: string) => path.relative(realRoot, absolute).split(path.sep).join("/") || "."

  return Workspace.of({
    root: realRoot,
    resolve,
    relative,
    relativize: (given) => relative(path.resolve(realRoot, given)),
    containsLexically: (given) => inside(path.resolve(realRoot, given)),
    open
  })
})

/** The workspace rooted at `root` (usually the current directory, resolved at the entry point). */
export const layer = (root: string): Layer.Layer<Workspace, never, FileSystem.FileSystem | Path.Path> =>
  Layer.effect(Workspace, make(root))

// --- Isolation ---

/**
 * The workspace an isolated agent (`isolation: "worktree"`, Worktrees.ts) and every agent it
 * starts are confined to, in place of the root one. Set on the agent's run fiber, so the file
 * tools (ToolRegistry puts it over the Workspace a tool captured), the permission check and the
 * sandbox of every call in that tree see it; unset, the root workspace holds.
 */
export const Isolated = Context.Reference<Workspace["Service"] | undefined>("@fibril/core/Workspace/Isolated", {
  defaultValue: () => undefined
})

/** The workspace in force for the calling fiber: an isolated agent's, else `base`. */
export const current = (base: Workspace["Service"]): Effect.Effect<Workspace["Service"]> =>
  Effect.map(Effect.service(Isolated), (isolated) => isolated ?? base)
