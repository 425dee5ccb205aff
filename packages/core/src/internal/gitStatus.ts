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
 * git runs on the host, not in the sandbox: with `core.fsmonitor` off (a repository's config
 * could name a program for it) and optional locks off (it never takes the index lock from
 * a command of the agent's).
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Option from "effect/Option"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import * as Stream from "effect/Stream"

/** path (absolute) → its status letters, size and modification time. */
export type Snapshot = ReadonlyMap<string, string>

/** Beyond this many listed paths, no snapshot (a comparison would cost more than it tells). */
export const maxEntries = 2000

const timeout = Duration.seconds(5)

const git = (root: string, args: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
    const handle = yield* spawner.spawn(
      ChildProcess.make("git", ["-c", "core.fsmonitor=false", "-C", root, ...args], {
        stdin: "ignore",
        stderr: "ignore",
        env: { GIT_OPTIONAL_LOCKS: "0" },
        extendEnv: true
      })
    )
    const [output, code] = yield* Effect.all(
      [Stream.mkString(Stream.decodeText(handle.stdout)), handle.exitCode],
      { concurrency: "unbounded" }
    )
    return Number(code) === 0 ? Option.some(output) : Option.none<string>()
  }).pipe(
    Effect.scoped,
    Effect.timeoutOption(timeout),
    Effect.map(Option.flatten),
    Effect.orElseSucceed(() => Option.none<string>())
  )

/** The work tree's top directory of each root seen in one (asked once per root). */
const toplevels = new Map<string, string>()

const toplevelOf = (root: string) => {
  const known = toplevels.get(root)
  if (known !== undefined) return Effect.succeed(Option.some(known))
  return Effect.map(git(root, ["rev-parse", "--show-toplevel"]), (found) =>
    Option.map(found, (output) => {
      const top = output.trim()
      toplevels.set(root, top)
      return top
    }))
}

/** The workspace's changes as git lists them now, or none (see the module's header). */
export const snapshot = (
  root: string
): Effect.Effect<Snapshot | undefined, never, ChildProcessSpawner.ChildProcessSpawner | FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const top = yield* toplevelOf(root)
    if (Option.isNone(top)) return undefined
    const listed = yield* git(root, ["status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames"])
    if (Option.isNone(listed)) return undefined
    // `XY path\0` each: paths relative to the work tree's top.
    const entries = listed.value.split("\0").filter((entry) => entry.length > 3)
    if (entries.length > maxEntries) return undefined
    const fs = yield* FileSystem.FileSystem
    const shot = new Map<string, string>()
    yield* Effect.forEach(entries, (entry) => {
      const path = `${top.value}/${entry.slice(3)}`
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
