// `fibril agents list` shows an isolated agent's worktree and branch (issue 36): a real
// `isolation: "worktree"` child recorded in the workspace's SQLite store, listed from that store.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import * as Fibril from "@fibril/core/Fibril"
import { Embedded, SubAgentManager } from "@fibril/core/SubAgentManager"
import { ScriptedModel } from "@fibril/testkit"
import { Context, Effect, FileSystem, Layer } from "effect"
import { execFileSync } from "node:child_process"
import * as AgentsCommand from "../src/AgentsCommand.ts"
import * as DemoWorktrees from "../src/DemoWorktrees.ts"

const git = (cwd: string, ...args: Array<string>) => execFileSync("git", args, { cwd, encoding: "utf8" }).trim()

describe("fibril agents list", () => {
  it.effect("shows each isolated agent's worktree and branch, in lines and in --json; once merged, that it was", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      git(root, "init", "-q")
      git(root, "-c", "user.name=T", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "init")
      const script = {
        rules: [{
          turns: [
            { tool_calls: [{ name: "write_file", args: { path: "a.txt", content: "a\n" } }] },
            { text: "SUMMARY:\nwrote a.txt\n\nCHANGES:\na.txt\n\nEVIDENCE:\nnone\n\nRISKS:\nnone\n\nBLOCKERS:\nnone" }
          ]
        }]
      } satisfies ScriptedModel.ScriptInput
      const lines: Array<string> = []
      const output = { line: (text: string) => Effect.sync(() => void lines.push(text)) }
      const listed = (json: boolean) =>
        Effect.suspend(() => {
          lines.length = 0
          return AgentsCommand.list(`${root}/.fibril/state`, true, json, output)
        })
      const agentId = yield* Effect.scoped(Effect.gen(function*() {
        const context = yield* Layer.build(
          Fibril.layer({ cwd: root, store: "file" }).pipe(Layer.provide(ScriptedModel.layer(script)))
        )
        const child = yield* Context.get(context, SubAgentManager).run(undefined, {
          prompt: "write a.txt",
          role: "implementer",
          isolation: "worktree"
        })
        const id = child.agent_id
        yield* listed(false)
        assert.include(
          lines.find((text) => text.startsWith(id)),
          `worktree ${root}/.fibril/worktrees/${id} on fibril/${id} (1 commit, 1 file changed)`
        )
        yield* listed(true)
        const [tree] = JSON.parse(lines[0]!) as Array<{ worktree: { branch: string; files_changed: number } }>
        assert.deepStrictEqual([tree!.worktree.branch, tree!.worktree.files_changed], [`fibril/${id}`, 1])
        // Merged by its parent (the client: it is a top-level agent): the record says so.
        yield* Context.get(context, Embedded).mergeWorktree({
          callerId: undefined,
          agentId: id,
          into: root,
          action: "merge"
        })
        return id
      }))
      // Read back from the store by another process's view: merged, its worktree and branch gone.
      yield* listed(false)
      assert.include(
        lines.find((text) => text.startsWith(agentId)),
        "  worktree merged (1 commit, 1 file changed); worktree and branch removed"
      )
      yield* listed(true)
      const [tree] = JSON.parse(lines[0]!) as Array<{ worktree: { state: string; removed: boolean } }>
      assert.deepStrictEqual([tree!.worktree.state, tree!.worktree.removed], ["merged", true])
      assert.strictEqual(git(root, "branch", "--list", `fibril/${agentId}`), "")
    }).pipe(Effect.provide(NodeServices.layer)))
})

describe("fibril demo --scenario worktrees", () => {
  it.effect("two merges, the third's conflict as data, resolved by a delegate; the parent's file untouched meanwhile", () =>
    Effect.gen(function*() {
      const lines: Array<string> = []
      const output = { line: (text: string) => Effect.sync(() => void lines.push(text)) }
      const result = yield* DemoWorktrees.run(output)
      assert.deepStrictEqual(
        result.merges.map((merge) => typeof merge === "string" ? [merge] : [merge.outcome, merge.mode ?? ""]),
        [
          ["merged", "fast-forward"],
          ["merged", "three-way"],
          ["conflict", ""],
          ["merged", "fast-forward"],
          ["discarded", ""]
        ]
      )
      assert.strictEqual(result.untouched, 3)
      assert.include(result.final, "line1 by A and C\n")
      assert.include(result.final, "line9 by B\n")
      assert.include(lines.join("\n"), `conflict in shared.txt: ours "line1 by A" / theirs "line1 by C"`)
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
})
