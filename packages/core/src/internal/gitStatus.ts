/**
 * What `git status` shows of a workspace, before and after a shell command: the files the
 * command changed, for `shell`'s result (its `changed`) and so for Claims, which reads them
 * from the transcript (a file listed under CHANGES that a shell command made is verified).
 *
 * A snapshot is every path git lists (modified, added, deleted, untracked), each with its
 * status letters and its size and modification time: a file that was dirty already and is
 * changed again differs too. Where the workspace is not in a git work tree, git is missing or
 * slow, or lists more than `maxEntries` paths, there is no snapshot: nothing is compared.
 *
 * git is untrusted here: the repository it reads may have a configuration or attributes the
 * agent wrote (a `.git` it made where none was, `writable_paths = [".git"]`), and `git status`
 * can run programs they name (a clean filter, an fsmonitor). So `shell` runs it as it runs the
 * agent's own commands, through the sandbox, read-only (or unconfined exactly when the
 * agent's command was: then git can do nothing the command could not): `Run`. It also runs
 * with `core.fsmonitor` off and without optional locks.
 */
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Option from "effect/Option"

/** path (absolute) → its status letters, size and modification time. */
export type Snapshot = ReadonlyMap<string, string>

/** Beyond this many listed paths, no snapshot (a comparison would cost more than it tells). */
export const maxEntries = 2000

/** Runs `sh -c script` in the workspace root (confined as above): its stdout if it exits 0. */
export type Run = (script: string) => Effect.Effect<Option.Option<string>>

const git = "GIT_OPTIONAL_LOCKS=0 git -c core.fsmonitor=false"

/** The work tree's top on the first line, then `XY path\0` for each listed path (relative to the top). */
export const script =
  `${git} rev-parse --show-toplevel && ${git} status --porcelain=v1 -z --untracked-files=all --no-renames`

/** The workspace's changes as git lists them now, or none (see the module's header). */
export const snapshot = (run: Run): Effect.Effect<Snapshot | undefined, never, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const output = yield* run(script)
    if (Option.isNone(output)) return undefined
    const newline = output.value.indexOf("\n")
    if (newline <= 0) return undefined
    const top = output.value.slice(0, newline)
    const entries = output.value.slice(newline + 1).split("\0").filter((entry) => entry.length > 3)
    if (entries.length > maxEntries) return undefined
    const fs = yield* FileSystem.FileSystem
    const shot = new Map<string, string>()
    yield* Effect.forEach(entries, (entry) => {
      const path = `${top}/${entry.slice(3)}`
      return Effect.map(
        Effect.option(fs.stat(path)),
        (info) => {
          const stamp = Option.match(info, {
            onNone: () => "gone",
            onSome: (stat) => `${stat.size}:${Option.getOrElse(Option.map(stat.mtime, (d) => d.getTime()), () => 0)}`
          })
          shot.set(path, `${entry.slice(0, 2)}:${stamp}`)
        }
      )
    }, { discard: true, concurrency: 16 })
    return shot
  })

/** The paths whose entry differs between two snapshots (listed in one only, or changed), sorted. */
export const changedBetween = (before: Snapshot, after: Snapshot): Array<string> => {
  const changed = new Set<string>()
  for (const [path, entry] of after) if (before.get(path) !== entry) changed.add(path)
  for (const path of before.keys()) if (!after.has(path)) changed.add(path)
  return [...changed].sort()
}
