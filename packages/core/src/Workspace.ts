/**
 * Workspace — the directory an agent tree works in, and the only one its file tools touch.
 *
 * Every path a tool receives goes through `resolve`: it is resolved against the root, then
 * through the real file system (symlinks included), and refused if the result is not inside
 * the root's real path. A path that does not exist yet is checked through its nearest
 * existing ancestor, so `write_file` into a symlinked directory cannot escape either.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Path from "effect/Path"
import * as Schema from "effect/Schema"

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

  const relative = (absolute: string) => path.relative(realRoot, absolute).split(path.sep).join("/") || "."

  return Workspace.of({
    root: realRoot,
    resolve,
    relative,
    relativize: (given) => relative(path.resolve(realRoot, given)),
    containsLexically: (given) => inside(path.resolve(realRoot, given))
  })
})

/** The workspace rooted at `root` (usually the current directory, resolved at the entry point). */
export const layer = (root: string): Layer.Layer<Workspace, never, FileSystem.FileSystem | Path.Path> =>
  Layer.effect(Workspace, make(root))
