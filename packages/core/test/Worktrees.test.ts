// isolation: "worktree", through the real services (Fibril.layer over a ScriptedModel) in a real
// git repository in a temp directory: each isolated child works in its own worktree of the
// parent's tree (uncommitted changes included), is confined to it, and its branch is merged
// back with agent_merge — a conflict comes back as data and changes nothing.
import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Effect, FileSystem, Path, Result } from "effect"
import { execFileSync } from "node:child_process"
import * as AgentDefinitions from "../src/AgentDefinitions.ts"
import * as FibrilConfig from "../src/FibrilConfig.ts"
import { Session } from "../src/Session.ts"
import * as SubAgentManagerModule from "../src/SubAgentManager.ts"
import { SubAgentManager } from "../src/SubAgentManager.ts"
import * as WorktreesService from "../src/Worktrees.ts"
import type * as Worktrees from "../src/Worktrees.ts"
import { provideNode, report, setup } from "./support.ts"

const git = (cwd: string, ...args: Array<string>) =>
  execFileSync("git", args, { cwd, encoding: "utf8", env: { ...process.env, LC_ALL: "C" } }).trim()

const lines = (changes: Partial<Record<number, string>> = {}) =>
  Array.from({ length: 9 }, (_, i) => changes[i + 1] ?? `line${i + 1}`).join("\n") + "\n"

/** A repository with one commit, plus uncommitted work: a tracked file changed, a new file. */
const repository = Effect.fn("repository")(function*() {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
  git(root, "init", "-q", "-b", "main")
  git(root, "config", "user.email", "test@example.com")
  git(root, "config", "user.name", "Test")
  yield* fs.writeFileString(path.join(root, "shared.txt"), lines())
  yield* fs.writeFileString(path.join(root, "readme.md"), "committed\n")
  git(root, "add", "-A")
  git(root, "commit", "-q", "-m", "init")
  yield* fs.writeFileString(path.join(root, "readme.md"), "committed\nand changed, not committed\n")
  yield* fs.writeFileString(path.join(root, "notes.txt"), "untracked notes\n")
  return root
})

type Result = { readonly name: string; readonly result: unknown; readonly isFailure: boolean }
const lastOf = (results: ReadonlyArray<Result>, name: string) => results.filter((r) => r.name === name).at(-1)!

const spawn = (tag: string) => ({
  name: "agent_spawn",
  args: { prompt: `[${tag}] edit shared.txt`, subagent_type: "implementer", isolation: "worktree" }
})

const edit = (oldString: string, newString: string): ScriptedModel.Turn => ({
  tool_calls: [{ name: "edit_file", args: { path: "shared.txt", old_string: oldString, new_string: newString } }]
})

describe("isolation: worktree", () => {
  it.effect(
    "three implementers edit one file in parallel; two merge, the third's conflict is data and is resolved by delegating",
    () =>
      Effect.gen(function*() {
        const root = yield* repository()
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const parentFile = path.join(root, "shared.txt")
        const original = lines()
        // What each child saw of the parent's tree on disk, after its own edit.
        const seen: Array<string> = []
        const child = (tag: string, oldString: string, newString: string): ScriptedModel.Rule => ({
          match: { prompt: `[${tag}]` },
          respond: (conversation) =>
            conversation.turn === 0
              ? { tool_calls: [{ name: "read_file", args: { path: "notes.txt" } }] }
              : conversation.turn === 1
              ? edit(oldString, newString)
              : Effect.map(fs.readFileString(parentFile), (onDisk) => {
                seen.push(onDisk)
                return { text: report(`${tag} edited shared.txt`) }
              }).pipe(Effect.orDie)
        })
        let merges: Array<Worktrees.MergeResult> = []
        const { get } = yield* setup(
          {
            rules: [
              child("A", "line1\n", "line1 by A\n"),
              child("B", "line9\n", "line9 by B\n"),
              child("C", "line1\n", "line1 by C\n"),
              child("D", "line1 by A\n", "line1 by A and C\n"),
              {
                match: { depth: 0 },
                respond: (conversation): ScriptedModel.Turn => {
                  const results = conversation.toolResults
                  const spawned = results.filter((r) => r.name === "agent_spawn")
                    .map((r) => (r.result as { agent_id: string }).agent_id)
                  const merge = (i: number, action?: string): ScriptedModel.Turn => ({
                    tool_calls: [{ name: "agent_merge", args: { agent_id: spawned[i], ...(action ? { action } : {}) } }]
                  })
                  switch (conversation.turn) {
                    case 0:
                      return {
                        tool_calls: [spawn("A"), spawn("B"), spawn("C")]
                      }
                    case 1:
                      return { tool_calls: [{ name: "agent_wait", args: { ids: spawned, wait_mode: "all" } }] }
                    case 2:
                      return merge(0)
                    case 3:
                      return merge(1)
                    case 4:
                      return merge(2)
                    case 5: {
                      // Delegated: a fresh isolated implementer starts from the tree as it is now.
                      const conflict = lastOf(results, "agent_merge").result as Worktrees.MergeResult
                      return {
                        tool_calls: [{
                          name: "task",
                          args: {
                            description: "resolve the conflict",
                            prompt: `[D] resolve ${JSON.stringify(conflict.conflicts)}`,
                            subagent_type: "implementer",
                            isolation: "worktree"
                          }
                        }]
                      }
                    }
                    case 6: {
                      const resolver = (lastOf(results, "task").result as { agent_id: string }).agent_id
                      return { tool_calls: [{ name: "agent_merge", args: { agent_id: resolver } }] }
                    }
                    case 7:
                      return merge(2, "discard")
                    default:
                      merges = results.filter((r) => r.name === "agent_merge").map((r) =>
                        r.result as Worktrees.MergeResult
                      )
                      return { text: report("merged all three") }
                  }
                }
              }
            ]
          },
          {},
          { root }
        )
        const session = get(Session)
        const parent = yield* session.create({ role: "general" })
        yield* session.prompt(parent.id, "implement it in parallel")

        // No child ever changed the parent's file while it ran.
        assert.deepStrictEqual(seen, [original, original, original, lines({ 1: "line1 by A", 9: "line9 by B" })])
        assert.strictEqual(merges.length, 5)
        const [a, b, c, d, discarded] = merges as [
          Worktrees.MergeResult,
          Worktrees.MergeResult,
          Worktrees.MergeResult,
          Worktrees.MergeResult,
          Worktrees.MergeResult
        ]
        assert.strictEqual(a.outcome, "merged")
        assert.strictEqual(a.mode, "fast-forward")
        assert.deepStrictEqual(a.files, ["shared.txt"])
        assert.strictEqual(b.outcome, "merged")
        assert.strictEqual(b.mode, "three-way")
        assert.strictEqual(c.outcome, "conflict")
        assert.deepStrictEqual(c.conflicts.map((conflict) => conflict.path), ["shared.txt"])
        assert.deepStrictEqual(c.conflicts[0]!.hunks, [{ ours: "line1 by A", theirs: "line1 by C" }])
        assert.isFalse(c.removed)
        assert.strictEqual(d.outcome, "merged")
        assert.strictEqual(discarded.outcome, "discarded")
        // All three changes; the parent's own uncommitted work kept; its index and HEAD as they were.
        assert.strictEqual(yield* fs.readFileString(parentFile), lines({ 1: "line1 by A and C", 9: "line9 by B" }))
        assert.strictEqual(yield* fs.readFileString(path.join(root, "notes.txt")), "untracked notes\n")
        assert.include(yield* fs.readFileString(path.join(root, "readme.md")), "not committed")
        assert.strictEqual(git(root, "rev-list", "--count", "HEAD"), "1")
        assert.strictEqual(git(root, "diff", "--cached", "--name-only"), "")
        assert.deepStrictEqual(
          git(root, "status", "--porcelain", "--untracked-files=all", "--", ":!.fibril").split("\n"),
          [
            "M readme.md",
            " M shared.txt",
            "?? notes.txt"
          ]
        )
        // Merged and discarded: no worktree and no fibril/ branch left.
        assert.deepStrictEqual(git(root, "branch", "--list", "fibril/*"), "")
        assert.deepStrictEqual(yield* fs.readDirectory(path.join(root, ".fibril", "worktrees")), [])
        assert.strictEqual(git(root, "worktree", "list").split("\n").length, 1)
      }).pipe(provideNode)
  )

  it.effect("agent_merge: only the parent may merge; the record then says merged or discarded, and a second merge is refused", () =>
    Effect.gen(function*() {
      const root = yield* repository()
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const write = (file: string): ScriptedModel.Turn => ({
        tool_calls: [{ name: "write_file", args: { path: file, content: `${file}\n` } }]
      })
      let stranger = ""
      let seen: ReadonlyArray<Result> = []
      const { get } = yield* setup(
        {
          rules: [
            { match: { prompt: "[X]" }, turns: [write("x.txt"), { text: report("wrote x.txt") }] },
            { match: { prompt: "[Y]" }, turns: [write("y.txt"), { text: report("wrote y.txt") }] },
            {
              match: { depth: 0 },
              respond: (conversation): ScriptedModel.Turn => {
                const results = conversation.toolResults
                const own = (results[0]?.result as { agent_id?: string } | undefined)?.agent_id ?? "missing"
                const merge = (agent_id: string, action?: string) => ({
                  name: "agent_merge",
                  args: { agent_id, ...(action ? { action } : {}) }
                })
                switch (conversation.turn) {
                  case 0:
                    return {
                      tool_calls: [{
                        name: "task",
                        args: {
                          description: "x",
                          prompt: "[X] write",
                          subagent_type: "implementer",
                          isolation: "worktree"
                        }
                      }]
                    }
                  case 1:
                    // Another agent's child (here a top-level one).
                    return { tool_calls: [merge(stranger)] }
                  case 2:
                    // Its own, twice in one turn (the calls run concurrently): one merge.
                    return { tool_calls: [merge(own), merge(own)] }
                  case 3:
                    // Merged already: discarding it is refused too.
                    return { tool_calls: [merge(own, "discard")] }
                  case 4:
                    return { tool_calls: [{ name: "agent_list", args: {} }] }
                  default:
                    seen = results
                    return { text: report("merged mine") }
                }
              }
            }
          ]
        },
        {},
        { root }
      )
      const manager = get(SubAgentManager)
      // A top-level isolated agent: its parent is the client, not the root session below.
      const other = yield* manager.run(undefined, { prompt: "[Y] write", role: "implementer", isolation: "worktree" })
      stranger = other.agent_id
      const session = get(Session)
      const parent = yield* session.create({ role: "general" })
      yield* session.prompt(parent.id, "delegate")
      const merges = seen.filter((r) => r.name === "agent_merge")
      const tags = merges.map((r) => [
        r.isFailure,
        (r.result as { error?: string; outcome?: string }).error ??
          (r.result as { outcome: string }).outcome
      ])
      assert.deepStrictEqual(tags[0], [true, "NotTheParent"])
      assert.sameDeepMembers(tags.slice(1, 3), [[false, "merged"], [true, "NotMergeable"]])
      assert.deepStrictEqual(tags[3], [true, "NotMergeable"])
      const own = (seen[0]!.result as { agent_id: string }).agent_id
      assert.include(
        (merges[0]!.result as { message: string }).message,
        `agent ${stranger} is a top-level agent, not of ${parent.id}: only the agent that spawned it`
      )
      assert.include(
        (merges[3]!.result as { message: string }).message,
        `its branch fibril/${own} was merged already and removed`
      )
      // The stranger's tree was not touched; the child's change is in the parent's files.
      assert.isFalse(yield* fs.exists(path.join(root, "y.txt")))
      assert.strictEqual(yield* fs.readFileString(path.join(root, "x.txt")), "x.txt\n")
      // Its record says merged and removed, in agent_list and in the record; the stranger's is open.
      const listed = (lastOf(seen, "agent_list").result as {
        agents: ReadonlyArray<{ agent_id: string; worktree?: { state: string; removed?: boolean } }>
      }).agents
      assert.deepStrictEqual(listed.find((agent) => agent.agent_id === own)?.worktree?.state, "merged")
      const record = yield* manager.result(own, { block: false })
      assert.deepStrictEqual([record.worktree?.state, record.worktree?.removed], ["merged", true])
      assert.deepStrictEqual(git(root, "branch", "--list", `fibril/${own}`), "")
      // The client (no caller) is the stranger's parent: it may discard it, and the record says so.
      const embedded = get(SubAgentManagerModule.Embedded)
      const notMine = yield* Effect.flip(
        embedded.mergeWorktree({ callerId: undefined, agentId: own, into: root, action: "merge" })
      )
      assert.strictEqual(notMine._tag, "NotTheParent")
      const dropped = yield* embedded.mergeWorktree({
        callerId: undefined,
        agentId: stranger,
        into: root,
        action: "discard"
      })
      assert.deepStrictEqual([dropped.outcome, dropped.removed], ["discarded", true])
      const gone = yield* manager.result(stranger, { block: false })
      assert.deepStrictEqual([gone.worktree?.state, gone.worktree?.removed], ["discarded", true])
      assert.isFalse(yield* fs.exists(other.worktree!.path))
      // Its branch is settled: resuming it (or the merged one) is refused, saying why.
      for (const [agentId, settled] of [[stranger, "discarded"], [own, "merged"]] as const) {
        const refused = yield* Effect.flip(manager.resume(undefined, agentId, "more work"))
        assert.strictEqual(refused._tag, "NotResumable")
        assert.include(refused.message, `its worktree was ${settled} and removed; spawn a new agent`)
      }
    }).pipe(provideNode))

  it.effect("an isolated child cannot write outside its worktree; a nested child works inside it", () =>
    Effect.gen(function*() {
      const root = yield* repository()
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const parentFile = path.join(root, "shared.txt")
      // Untracked in the parent, so part of the child's tree: a link out of the worktree.
      yield* fs.symlink(root, path.join(root, "linkdir"))
      const attacks = [
        { name: "write_file", args: { path: "../../../shared.txt", content: "pwned" } },
        { name: "write_file", args: { path: parentFile, content: "pwned" } },
        { name: "edit_file", args: { path: parentFile, old_string: "line1", new_string: "pwned" } },
        { name: "write_file", args: { path: "linkdir/shared.txt", content: "pwned" } },
        { name: "edit_file", args: { path: "linkdir/shared.txt", old_string: "line1", new_string: "pwned" } },
        { name: "read_file", args: { path: "../../../notes.txt" } },
        {
          name: "shell",
          args: { command: `echo pwned > ${parentFile}; echo pwned > linkdir/notes.txt; echo ok > inside.txt` }
        }
      ]
      let refusals: ReadonlyArray<ScriptedModel.ToolResult> = []
      // The workspace each one's system prompt names.
      const named: Record<string, string | undefined> = {}
      const workspaceOf = (conversation: ScriptedModel.Conversation) =>
        /\nWorkspace: (.*)\n/.exec(conversation.system)?.[1]
      const { get } = yield* setup(
        {
          rules: [
            {
              match: { prompt: "[G]" },
              respond: (conversation): ScriptedModel.Turn => {
                named["grandchild"] = workspaceOf(conversation)
                return conversation.turn === 0
                  ? {
                    tool_calls: [{ name: "write_file", args: { path: "shared.txt", content: "by the grandchild\n" } }]
                  }
                  : { text: report("wrote shared.txt") }
              }
            },
            {
              match: { prompt: "[attack]" },
              respond: (conversation): ScriptedModel.Turn => {
                named["child"] = workspaceOf(conversation)
                if (conversation.turn === 0) return { tool_calls: attacks } as unknown as ScriptedModel.Turn
                if (conversation.turn === 1) {
                  refusals = conversation.lastToolResults
                  return {
                    tool_calls: [{ name: "agent_spawn", args: { prompt: "[G] write", subagent_type: "general" } }]
                  }
                }
                if (conversation.turn === 2) {
                  const spawned = conversation.lastToolResults[0]!.result as { agent_id: string }
                  return { tool_calls: [{ name: "agent_wait", args: { ids: [spawned.agent_id] } }] }
                }
                return { text: report("tried") }
              }
            }
          ]
        },
        { maxDepth: 2 },
        { root }
      )
      const manager = get(SubAgentManager)
      const child = yield* manager.run(undefined, {
        prompt: "[attack] leave your worktree",
        role: "general",
        isolation: "worktree"
      })
      assert.strictEqual(child.status, "completed")
      assert.deepStrictEqual(refusals.map((r) => [r.name, r.isFailure, (r.result as { error: string }).error]), [
        ["write_file", true, "OutsideWorkspace"],
        ["write_file", true, "OutsideWorkspace"],
        ["edit_file", true, "OutsideWorkspace"],
        ["write_file", true, "OutsideWorkspace"],
        ["edit_file", true, "OutsideWorkspace"],
        ["read_file", true, "OutsideWorkspace"],
        ["shell", false, undefined]
      ])
      // The shell ran in the worktree, its writes outside refused by the sandbox.
      assert.include((refusals.at(-1)!.result as { stderr: string }).stderr, "Read-only file system")
      // The parent's tree is as it was; the grandchild's write is in the child's worktree, committed on its branch.
      assert.strictEqual(yield* fs.readFileString(parentFile), lines())
      const worktree = child.worktree!
      assert.strictEqual(worktree.branch, `fibril/${child.agent_id}`)
      assert.strictEqual(worktree.path, path.join(root, ".fibril", "worktrees", child.agent_id))
      // Each is told the workspace it works in: the child's worktree, not the parent's tree.
      assert.deepStrictEqual(named, { child: worktree.path, grandchild: worktree.path })
      assert.strictEqual(git(worktree.path, "show", `${worktree.branch}:shared.txt`), "by the grandchild")
      assert.strictEqual(git(worktree.path, "show", `${worktree.branch}:inside.txt`), "ok")
      assert.deepStrictEqual([worktree.commits, worktree.files_changed], [1, 2])
      assert.strictEqual(git(worktree.path, "status", "--porcelain"), "")
    }).pipe(provideNode))

  it.effect("the worktree starts from the parent's uncommitted state, without touching the parent's index", () =>
    Effect.gen(function*() {
      const root = yield* repository()
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      git(root, "add", "readme.md")
      const staged = git(root, "diff", "--cached", "--name-only")
      const { get } = yield* setup({ rules: [{ turns: [{ text: report("nothing to do") }] }] }, {}, {
        root,
        worktrees: { keep: true },
        // No `isolation` on the spawn: the role's, from settings.
        subagents: { roleIsolation: { implementer: "worktree" } }
      })
      const child = yield* get(SubAgentManager).run(undefined, { prompt: "look", role: "implementer" })
      const at = child.worktree!.path
      assert.strictEqual(yield* fs.readFileString(path.join(at, "notes.txt")), "untracked notes\n")
      assert.strictEqual(
        yield* fs.readFileString(path.join(at, "readme.md")),
        "committed\nand changed, not committed\n"
      )
      assert.deepStrictEqual([child.worktree!.commits, child.worktree!.files_changed], [0, 0])
      assert.strictEqual(git(root, "diff", "--cached", "--name-only"), staged)
      assert.strictEqual(git(root, "rev-list", "--count", "HEAD"), "1")
      // Nothing changed: merging is "empty"; with `keep`, the worktree and branch stay for a person.
      const merged = yield* get(WorktreesService.Worktrees).merge(root, child.agent_id, child.worktree!)
      assert.strictEqual(merged.outcome, "empty")
      assert.isFalse(merged.removed)
      assert.isTrue(yield* fs.exists(at))
      assert.strictEqual(
        git(root, "branch", "--list", "--format=%(refname:short)", child.worktree!.branch),
        child.worktree!.branch
      )
    }).pipe(provideNode))

  it.effect("a workspace that is not a git repository, or has no commit, is refused at spawn with a typed error", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const { get, root } = yield* setup({ rules: [{ turns: [{ text: report("never runs") }] }] })
      const manager = get(SubAgentManager)
      const notGit = yield* Effect.flip(manager.spawn(undefined, { prompt: "x", isolation: "worktree" }))
      assert.strictEqual(notGit._tag, "NotAGitWorkspace")
      assert.include(
        notGit.message,
        `isolation "worktree" needs a git repository with at least one commit, and ${root}`
      )
      git(root, "init", "-q")
      const empty = yield* Effect.flip(manager.spawn(undefined, { prompt: "x", isolation: "worktree" }))
      assert.strictEqual(empty._tag, "NotAGitWorkspace")
      assert.include(empty.message, "it has no commit yet")
      const process = yield* Effect.flip(manager.spawn(undefined, { prompt: "x", isolation: "process" }))
      // (process isolation without a host program: ProcessRun's refusal, also before anything starts)
      assert.strictEqual(process._tag, "IsolationUnavailable")
      // The one isolation refusal: the mode asked, and what this runtime accepts instead.
      assert.deepStrictEqual(process._tag === "IsolationUnavailable" ? [process.mode, process.accepted] : [], [
        "process",
        ["worktree"]
      ])
      assert.include(process.message, "accepted here: isolation \"worktree\" or no isolation (omit it)")
      // Nothing was left behind: no agent, no permit held, no worktree.
      assert.deepStrictEqual(yield* manager.list({ includeArchived: true }), [])
      assert.strictEqual(yield* manager.running, 0)
      assert.isFalse(yield* fs.exists(`${root}/.fibril/worktrees`))
    }).pipe(provideNode))

  it.effect("isolation from an agent definition's front matter and from [subagents.isolation]; a bad value is refused", () =>
    Effect.gen(function*() {
      const claude = AgentDefinitions.parse(
        ".claude/agents/writer.md",
        "---\nname: writer\ndescription: Writes code\nisolation: worktree\n---\nWrite it.\n",
        "claude"
      )
      assert.isTrue(Result.isSuccess(claude))
      if (Result.isSuccess(claude)) assert.strictEqual(claude.success.definition.isolation, "worktree")
      const bad = AgentDefinitions.parse(
        ".fibril/agents/writer.md",
        "---\ndescription: Writes code\nisolation: container\n---\nWrite it.\n",
        "fibril"
      )
      assert.isTrue(Result.isFailure(bad))
      if (Result.isFailure(bad)) assert.include(bad.failure.message, `isolation must be "worktree" or "process"`)

      const fs = yield* FileSystem.FileSystem
      const cwd = yield* fs.makeTempDirectoryScoped()
      yield* fs.makeDirectory(`${cwd}/.fibril`)
      yield* fs.writeFileString(`${cwd}/.fibril/config.toml`, `[subagents.isolation]\nimplement = "worktree"\n`)
      const loaded = yield* FibrilConfig.load({ cwd, home: cwd, env: {} })
      assert.deepStrictEqual(SubAgentManagerModule.optionsFrom(loaded.settings).roleIsolation, {
        implementer: "worktree"
      })
      yield* fs.writeFileString(`${cwd}/.fibril/config.toml`, `[subagents.isolation]\nimplementer = "vm"\n`)
      const error = yield* Effect.flip(FibrilConfig.load({ cwd, home: cwd, env: {} }))
      assert.strictEqual(error._tag, "ConfigInvalid")
      assert.include(error.message, `a table of role name = "worktree" or "process"`)
    }).pipe(provideNode))
})
