/**
 * Worktrees — `isolation: "worktree"`: a git worktree per writing agent, and merging it back.
 *
 * A child gets a worktree of its parent's current tree: the parent's HEAD plus its uncommitted
 * changes, tracked and untracked, written as a commit through a temporary index (the parent's
 * own index and files are never touched), checked out on `fibril/<agent id>` under
 * `.fibril/worktrees/<agent id>` of the root workspace. When the child ends, what it changed is
 * committed on its branch. `merge` brings a branch into a tree (the parent's, or an isolated
 * parent's worktree): the three-way merge is computed by `git merge-tree --write-tree`, which
 * touches no tree; only a clean result is applied (as a patch to the files, not the index), so
 * a conflict comes back as data — files and hunks — and leaves the tree as it was.
 *
 * The merge base is the child's starting commit, not the parent's HEAD: the parent's state is
 * written as a commit whose parent is that starting commit, so what the parent had uncommitted
 * when it spawned is not a change of both sides.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Path from "effect/Path"
import * as ChildProcess from "effect/process/ChildProcess"
import * as ChildProcessSpawner from "effect/process/ChildProcessSpawner"
import * as Schema from "effect/Schema"
import * as Semaphore from "effect/Semaphore"
import * as Stream from "effect/Stream"
import * as Workspace from "./Workspace.ts"

// --- Errors ---

export class NotAGitWorkspace extends Schema.TaggedError<NotAGitWorkspace>()("NotAGitWorkspace", {
  workspace: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `isolation "worktree" needs a git repository with at least one commit, and ${this.workspace} is not one (${this.reason}); run \`git init && git commit --allow-empty -m init\` there, or spawn without isolation`
  }
}

export class GitFailed extends Schema.TaggedError<GitFailed>()("GitFailed", {
  command: Schema.String,
  exitCode: Schema.Int,
  stderr: Schema.String
}) {
  override get message() {
    return `\`${this.command}\` exited with ${this.exitCode}: ${this.stderr.trim() || "(no output)"}`
  }
}

export type WorktreeError = NotAGitWorkspace | GitFailed

/** `agent_merge` on an agent whose branch cannot be merged (or discarded) now. */
export class NotMergeable extends Schema.TaggedError<NotMergeable>()("NotMergeable", {
  agentId: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `agent ${this.agentId} cannot be merged: ${this.reason}`
  }
}

/**
 * `agent_merge` by an agent that is not the isolated agent's parent: a branch is merged into
 * the tree of the agent that asked for the work, never into a sibling's or a stranger's.
 */
export class NotTheParent extends Schema.TaggedError<NotTheParent>()("NotTheParent", {
  agentId: Schema.String,
  /** Its parent (undefined: a top-level agent, merged by the embedder or MCP client). */
  parentId: Schema.optional(Schema.String),
  /** Who asked (undefined: the embedder or MCP client). */
  callerId: Schema.optional(Schema.String)
}) {
  override get message() {
    const parent = this.parentId === undefined ? "a top-level agent" : `a child of ${this.parentId}`
    const caller = this.callerId === undefined ? "the client" : this.callerId
    return `agent ${this.agentId} is ${parent}, not of ${caller}: only the agent that spawned it can merge or discard its branch`
  }
}

// --- Data ---

/** Where an isolated agent works, as its record keeps it. */
export const Info = Schema.Struct({
  /** The worktree's top directory. */
  path: Schema.String,
  /** The agent's workspace inside it (the worktree's top, or the same subdirectory as its parent's). */
  root: Schema.String,
  branch: Schema.String,
  /** The commit it started from: the parent's HEAD plus its uncommitted changes. */
  base: Schema.String,
  /** Set when the agent ended: what its branch holds over `base`. */
  commits: Schema.optionalKey(Schema.Int),
  files_changed: Schema.optionalKey(Schema.Int),
  insertions: Schema.optionalKey(Schema.Int),
  deletions: Schema.optionalKey(Schema.Int),
  /** Set by `agent_merge`: its branch was merged into its parent's tree, or discarded. */
  state: Schema.optionalKey(Schema.Literals(["merged", "discarded"])),
  /** With `state`: whether the worktree and branch were removed (false: kept, retention). */
  removed: Schema.optionalKey(Schema.Boolean)
})
export type Info = typeof Info.Type

/** What a result shows of an isolated agent's work. */
export const Summary = Schema.Struct({
  branch: Schema.String,
  base: Schema.String,
  commits: Schema.Int,
  files_changed: Schema.Int,
  insertions: Schema.Int,
  deletions: Schema.Int,
  /** open: its branch waits for agent_merge; merged or discarded: agent_merge was done with it. */
  state: Schema.Literals(["open", "merged", "discarded"]),
  /** With merged or discarded: whether the worktree and branch are gone (false: kept). */
  removed: Schema.optionalKey(Schema.Boolean)
})
export type Summary = typeof Summary.Type

export const summaryOf = (info: Info): Summary => ({
  branch: info.branch,
  base: info.base,
  commits: info.commits ?? 0,
  files_changed: info.files_changed ?? 0,
  insertions: info.insertions ?? 0,
  deletions: info.deletions ?? 0,
  state: info.state ?? "open",
  ...(info.removed === undefined ? {} : { removed: info.removed })
})

/** The record's worktree after `agent_merge`: merged (an empty branch too) or discarded, and removed or kept. */
export const settled = (info: Info, result: MergeResult): Info =>
  result.outcome === "conflict"
    ? info
    : { ...info, state: result.outcome === "discarded" ? "discarded" : "merged", removed: result.removed }

export const Hunk = Schema.Struct({
  /** The merged file's text before the conflict. */
  ours: Schema.String,
  theirs: Schema.String
})
export const Conflict = Schema.Struct({ path: Schema.String, hunks: Schema.Array(Hunk) })
export type Conflict = typeof Conflict.Type

export const MergeResult = Schema.Struct({
  agent_id: Schema.String,
  branch: Schema.String,
  /** merged: into the tree; conflict: nothing applied; discarded: branch dropped; empty: nothing to merge. */
  outcome: Schema.Literals(["merged", "conflict", "discarded", "empty"]),
  /** fast-forward: the tree had not changed since the agent started; three-way otherwise. */
  mode: Schema.optionalKey(Schema.Literals(["fast-forward", "three-way"])),
  files: Schema.Array(Schema.String),
  conflicts: Schema.Array(Conflict),
  /** Whether the worktree and branch were removed (retention). */
  removed: Schema.Boolean
})
export type MergeResult = typeof MergeResult.Type

/** Paths never part of a snapshot or a child's commit: other worktrees and the run state. */
const excluded = [":(glob,exclude)**/.fibril/worktrees/**", ":(glob,exclude)**/.fibril/state/**"]

export const branchOf = (agentId: string) => `fibril/${agentId}`

// --- Git ---

interface Git {
  (cwd: string, args: ReadonlyArray<string>, env?: Record<string, string>): Effect.Effect<
    { readonly exitCode: number; readonly stdout: string; readonly stderr: string }
  >
}

const ok = (result: { readonly exitCode: number; readonly stderr: string }, args: ReadonlyArray<string>) =>
  result.exitCode === 0
    ? Effect.void
    : Effect.fail(new GitFailed({ command: `git ${args.join(" ")}`, exitCode: result.exitCode, stderr: result.stderr }))

/** Hunks of a file the merge wrote with conflict markers. */
export const hunksOf = (text: string): Array<typeof Hunk.Type> => {
  const hunks: Array<typeof Hunk.Type> = []
  let side: "none" | "ours" | "theirs" = "none"
  let ours: Array<string> = []
  let theirs: Array<string> = []
  for (const line of text.split("\n")) {
    if (line.startsWith("<<<<<<<")) {
      side = "ours"
      ours = []
      theirs = []
    } else if (side === "ours" && line.startsWith("=======")) side = "theirs"
    else if (side === "theirs" && line.startsWith(">>>>>>>")) {
      hunks.push({ ours: ours.join("\n"), theirs: theirs.join("\n") })
      side = "none"
    } else if (side === "ours") ours.push(line)
    else if (side === "theirs") theirs.push(line)
  }
  return hunks
}

const shortstat = (text: string) => {
  const count = (word: RegExp) => Number(word.exec(text)?.[1] ?? 0)
  return {
    files_changed: count(/(\d+) files? changed/),
    insertions: count(/(\d+) insertions?\(\+\)/),
    deletions: count(/(\d+) deletions?\(-\)/)
  }
}

// --- Service ---

export class Worktrees extends Context.Service<Worktrees, {
  /** A worktree of `from`'s current tree (HEAD and uncommitted changes) for `agentId`, and its workspace. */
  readonly create: (from: string, agentId: string) => Effect.Effect<
    { readonly info: Info; readonly workspace: Workspace.Workspace["Service"] },
    WorktreeError
  >
  /** The workspace of an existing worktree (a resumed agent's). */
  readonly workspaceOf: (info: Info) => Effect.Effect<Workspace.Workspace["Service"]>
  /** Commits what the agent changed on its branch (`message`: its summary) and counts it. */
  readonly finish: (info: Info, message: string) => Effect.Effect<Info, GitFailed>
  /** Merges the agent's branch into the tree at `into`; a conflict is data and changes nothing. */
  readonly merge: (into: string, agentId: string, info: Info) => Effect.Effect<MergeResult, WorktreeError>
  /** Drops the agent's worktree and branch. */
  readonly discard: (agentId: string, info: Info) => Effect.Effect<MergeResult, GitFailed>
}>()("@fibril/core/Worktrees") {}

export interface Options {
  /** Keep merged and discarded agents' worktrees and branches (for a person to look at). Default false. */
  readonly keep?: boolean | undefined
}

export const make = Effect.fn("Worktrees.make")(function*(options: Options = {}) {
  const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const root = yield* Workspace.Workspace
  const workspaceAt = (dir: string) =>
    Workspace.make(dir).pipe(Effect.provideService(FileSystem.FileSystem, fs), Effect.provideService(Path.Path, path))

  const git: Git = (cwd, args, env) =>
    Effect.scoped(Effect.gen(function*() {
      const handle = yield* spawner.spawn(ChildProcess.make("git", [...args], {
        cwd,
        extendEnv: true,
        env: { GIT_TERMINAL_PROMPT: "0", LC_ALL: "C", ...env }
      }))
      const [stdout, stderr, exitCode] = yield* Effect.all([
        Stream.mkString(Stream.decodeText(handle.stdout)),
        Stream.mkString(Stream.decodeText(handle.stderr)),
        handle.exitCode
      ], { concurrency: "unbounded" })
      return { exitCode: Number(exitCode), stdout, stderr }
    })).pipe(
      Effect.catch((error) => Effect.succeed({ exitCode: 127, stdout: "", stderr: String(error) }))
    )

  /** git's output, or GitFailed. */
  const run = (cwd: string, args: ReadonlyArray<string>, env?: Record<string, string>) =>
    Effect.flatMap(git(cwd, args, env), (result) => Effect.as(ok(result, args), result.stdout.trim()))

  // Commits need a name; one the user configured wins.
  const identity = yield* Effect.cached(
    Effect.map(
      git(root.root, ["config", "user.email"]),
      (found): Record<string, string> =>
        found.exitCode === 0 ? {} : {
          GIT_AUTHOR_NAME: "Fibril",
          GIT_AUTHOR_EMAIL: "fibril@localhost",
          GIT_COMMITTER_NAME: "Fibril",
          GIT_COMMITTER_EMAIL: "fibril@localhost"
        }
    )
  )

  /** The repository's top and the workspace's place in it, or NotAGitWorkspace. */
  const repoOf = (workspace: string) =>
    Effect.gen(function*() {
      const top = yield* git(workspace, ["rev-parse", "--show-toplevel", "--show-prefix"])
      if (top.exitCode !== 0) {
        return yield* new NotAGitWorkspace({ workspace, reason: top.stderr.trim() || "git rev-parse failed" })
      }
      const [toplevel = workspace, prefix = ""] = top.stdout.split("\n")
      const head = yield* git(toplevel, ["rev-parse", "--verify", "-q", "HEAD^{commit}"])
      if (head.exitCode !== 0) return yield* new NotAGitWorkspace({ workspace, reason: "it has no commit yet" })
      return { toplevel, prefix: prefix.trim(), head: head.stdout.trim() }
    })

  /**
   * The tree at `toplevel` as a commit (HEAD's files plus every change, untracked included),
   * through a temporary index: the repository's own index is not touched.
   */
  const snapshot = (toplevel: string, parent: string, message: string) =>
    Effect.gen(function*() {
      const gitDir = yield* run(toplevel, ["rev-parse", "--absolute-git-dir"])
      const index = path.join(gitDir, `fibril-index-${process.pid}-${Math.random().toString(36).slice(2)}`)
      const env = { GIT_INDEX_FILE: index }
      return yield* Effect.gen(function*() {
        yield* run(toplevel, ["read-tree", "HEAD"], env)
        yield* run(toplevel, ["add", "-A", "--", ".", ...excluded], env)
        const tree = yield* run(toplevel, ["write-tree"], env)
        return yield* run(toplevel, ["commit-tree", tree, "-p", parent, "-m", message], {
          ...env,
          ...(yield* identity)
        })
      }).pipe(Effect.ensuring(Effect.ignore(fs.remove(index, { force: true }))))
    })

  const workspaceOf = (info: Info) => workspaceAt(info.root)

  const create = Effect.fn("Worktrees.create")(function*(from: string, agentId: string) {
    const repo = yield* repoOf(from)
    const base = yield* snapshot(repo.toplevel, repo.head, `fibril: the tree ${agentId} started from`)
    const branch = branchOf(agentId)
    const worktree = path.join(root.root, ".fibril", "worktrees", agentId)
    yield* run(repo.toplevel, ["worktree", "add", "--quiet", "-b", branch, worktree, base])
    const info: Info = { path: worktree, root: path.join(worktree, repo.prefix), branch, base }
    return { info, workspace: yield* workspaceOf(info) }
  })

  const finish = Effect.fn("Worktrees.finish")(function*(info: Info, message: string) {
    yield* run(info.path, ["add", "-A", "--", ".", ...excluded])
    const staged = yield* git(info.path, ["diff", "--cached", "--quiet"])
    if (staged.exitCode === 1) {
      yield* run(
        info.path,
        ["commit", "--quiet", "--no-verify", "-m", message.trim() || "fibril: agent's changes"],
        yield* identity
      )
    }
    const commits = Number(yield* run(info.path, ["rev-list", "--count", `${info.base}..HEAD`]))
    const stat = shortstat(yield* run(info.path, ["diff", "--shortstat", info.base, "HEAD"]))
    return { ...info, commits, ...stat } satisfies Info
  })

  const remove = (toplevel: string, info: Info) =>
    options.keep === true ? Effect.succeed(false) : Effect.gen(function*() {
      yield* run(toplevel, ["worktree", "remove", "--force", info.path])
      yield* run(toplevel, ["branch", "-D", info.branch])
      return true
    })

  const discard = Effect.fn("Worktrees.discard")(function*(agentId: string, info: Info) {
    const toplevel = yield* run(root.root, ["rev-parse", "--show-toplevel"])
    const removed = yield* remove(toplevel, info)
    return {
      agent_id: agentId,
      branch: info.branch,
      outcome: "discarded",
      files: [],
      conflicts: [],
      removed
    } satisfies MergeResult
  })

  const merge = Effect.fn("Worktrees.merge")(function*(into: string, agentId: string, info: Info) {
    const repo = yield* repoOf(into)
    const tip = yield* run(repo.toplevel, ["rev-parse", "--verify", `${info.branch}^{commit}`])
    const result = (outcome: MergeResult["outcome"], rest: Partial<MergeResult>): MergeResult => ({
      agent_id: agentId,
      branch: info.branch,
      outcome,
      files: [],
      conflicts: [],
      removed: false,
      ...rest
    })
    if (tip === info.base) return result("empty", { removed: yield* remove(repo.toplevel, info) })
    // The tree as it is now, on top of the agent's start: the merge base is where the agent began.
    const current = yield* snapshot(repo.toplevel, info.base, `fibril: the tree ${agentId} merges into`)
    const [currentTree, baseTree] = yield* Effect.all([
      run(repo.toplevel, ["rev-parse", `${current}^{tree}`]),
      run(repo.toplevel, ["rev-parse", `${info.base}^{tree}`])
    ])
    const computed = yield* git(repo.toplevel, [
      "merge-tree",
      "--write-tree",
      "--name-only",
      "--no-messages",
      current,
      tip
    ])
    if (computed.exitCode !== 0 && computed.exitCode !== 1) yield* ok(computed, ["merge-tree"])
    const [merged = "", ...rest] = computed.stdout.split("\n")
    if (computed.exitCode === 1) {
      const files = rest.filter((file) => file.length > 0)
      const conflicts = yield* Effect.forEach(
        files,
        (file) =>
          Effect.map(git(repo.toplevel, ["show", `${merged}:${file}`]), (shown) => ({
            path: file,
            hunks: shown.exitCode === 0 ? hunksOf(shown.stdout) : []
          }))
      )
      return result("conflict", { files, conflicts })
    }
    const files = (yield* run(repo.toplevel, ["diff", "--name-only", current, merged])).split("\n").filter((f) => f)
    const patch = yield* run(repo.toplevel, ["diff", "--binary", "--full-index", current, merged])
    if (patch.length > 0) {
      const gitDir = yield* run(repo.toplevel, ["rev-parse", "--absolute-git-dir"])
      const file = path.join(gitDir, `fibril-merge-${agentId}.patch`)
      yield* Effect.orDie(fs.writeFileString(file, `${patch}\n`))
      // Files only (no --index): the parent's index and HEAD stay as they are.
      yield* run(repo.toplevel, ["apply", "--binary", "--whitespace=nowarn", file]).pipe(
        Effect.ensuring(Effect.ignore(fs.remove(file, { force: true })))
      )
    }
    return result("merged", {
      mode: currentTree === baseTree ? "fast-forward" : "three-way",
      files,
      removed: yield* remove(repo.toplevel, info)
    })
  })

  // One change to the repository at a time: git takes its locks (index.lock, the worktree list,
  // refs) and fails rather than waits when another git holds one, and parallel children are
  // created, committed and merged at the same moment.
  const serial = (yield* Semaphore.make(1)).withPermits(1)
  return Worktrees.of({
    create: (from, agentId) => serial(create(from, agentId)),
    workspaceOf,
    finish: (info, message) => serial(finish(info, message)),
    merge: (into, agentId, info) => serial(merge(into, agentId, info)),
    discard: (agentId, info) => serial(discard(agentId, info))
  })
})

/** Worktrees under the root workspace's `.fibril/worktrees/`, git run as a child process. */
export const layer = (
  options: Options = {}
): Layer.Layer<
  Worktrees,
  never,
  ChildProcessSpawner.ChildProcessSpawner | FileSystem.FileSystem | Path.Path | Workspace.Workspace
> => Layer.effect(Worktrees, make(options))
