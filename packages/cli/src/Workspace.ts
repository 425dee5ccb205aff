/**
 * Which directory a command works on. `--cwd DIR` names it exactly (it must exist: a typo
 * never creates a workspace). Without it, the project is found the way git finds its
 * repository: from the current directory upwards, the first directory holding `.fibril/` or
 * `.git` (a directory, or the file of a git worktree); the home directory's `.fibril/` is the
 * user's configuration, not a project, so it does not count. No such directory: the current
 * one.
 */
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Option from "effect/Option"
import * as Path from "effect/Path"
import { UsageError } from "./UsageError.ts"

const isDirectory = (fs: FileSystem.FileSystem, dir: string) =>
  Effect.map(Effect.option(fs.stat(dir)), Option.exists((info) => info.type === "Directory"))

const exists = (fs: FileSystem.FileSystem, file: string) => Effect.orElseSucceed(fs.exists(file), () => false)

/** A project root and what marks it (`undefined`: none was found, the start directory is used). */
export interface Root {
  readonly dir: string
  readonly marker: ".fibril" | ".git" | undefined
}

const root = (dir: string, marker: Root["marker"]): Root => ({ dir, marker })

/** The project root above `start` (inclusive), or `start` when there is none. */
export const locate = Effect.fn("fibril.workspace.locate")(function*(start: string, home: string) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  let dir = path.resolve(start)
  while (true) {
    if (dir !== path.resolve(home) && (yield* isDirectory(fs, path.join(dir, ".fibril")))) {
      return root(dir, ".fibril")
    }
    if (yield* exists(fs, path.join(dir, ".git"))) return root(dir, ".git")
    const parent = path.dirname(dir)
    if (parent === dir) return root(path.resolve(start), undefined)
    dir = parent
  }
})

export const findRoot = (start: string, home: string) => Effect.map(locate(start, home), (found) => found.dir)

/** The workspace of a command: `--cwd` as given (an existing directory), else the project root. */
export const resolve = Effect.fn("fibril.workspace.resolve")(function*(
  flag: Option.Option<string>,
  environment: { readonly cwd: string; readonly home: string }
) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  if (Option.isNone(flag)) return yield* findRoot(environment.cwd, environment.home)
  const dir = path.resolve(environment.cwd, flag.value)
  if (!(yield* isDirectory(fs, dir))) {
    return yield* new UsageError({
      problem: (yield* exists(fs, dir))
        ? `--cwd ${dir} is not a directory`
        : `--cwd ${dir}: no such directory (fibril does not create a workspace; create it first)`
    })
  }
  return dir
})
