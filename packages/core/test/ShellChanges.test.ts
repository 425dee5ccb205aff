// A writing shell command's changes, seen by `git status` before and after it (its result's
// `changed`), and a child's CHANGES checked against them: real services (Fibril.layer over a
// ScriptedModel), a real git repository with uncommitted work, bubblewrap, the disk.
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Path } from "effect"
import type { Prompt } from "effect/ai"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { Session } from "../src/Session.ts"
import type * as Shell from "../src/tools/Shell.ts"
import { provideNode, setup } from "./support.ts"

const toolResults = (messages: ReadonlyArray<Prompt.Message>) =>
  messages.flatMap((m) => m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [p] : []) : [])

const answer = (changes: string, evidence: string) =>
  `SUMMARY:\ndone\n\nCHANGES:\n${changes}\n\nEVIDENCE:\n${evidence}\n\nRISKS:\nnone\n\nBLOCKERS:\nnone`

describe.skipIf(process.platform !== "linux")("shell: what a writing command changed, and checked claims", () => {
  it.live("a writer's commands list what they changed; its CHANGES are verified by them, a file none changed is not", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
      const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      const git = (...args: ReadonlyArray<string>) =>
        spawner.exitCode(
          ChildProcess.make("git", ["-c", "user.name=t", "-c", "user.email=t@example.com", ...args], { cwd: root })
        )
      yield* git("init", "-q")
      yield* fs.writeFileString(path.join(root, "v.txt"), "committed\n")
      yield* fs.writeFileString(path.join(root, "old.txt"), "dirty before the child\n")
      yield* git("add", "v.txt")
      yield* git("commit", "-q", "-m", "one")
      // Dirty before the child runs: changing it again is a change; leaving it is none.
      yield* fs.writeFileString(path.join(root, "v.txt"), "uncommitted work\n")
      const commands = ["echo made > made.txt", "echo more >> v.txt", "cat v.txt"]
      const { get } = yield* setup(
        {
          rules: [
            {
              match: { role: "implementer" },
              turns: [
                // One command a turn: calls of one turn run at once, and each would see the others' changes.
                ...commands.map((command) => ({ tool_calls: [{ name: "shell", args: { command } }] as const })),
                { text: answer("- made.txt\n- v.txt\n- old.txt", "`cat v.txt` exit 0") }
              ]
            },
            {
              match: { role: "explore" },
              turns: [{ tool_calls: [{ name: "shell", args: { command: "cat v.txt" } }] }, {
                text: answer("none", "ran `cat v.txt`")
              }]
            },
            {
              match: { depth: 0 },
              turns: [
                {
                  tool_calls: [{
                    name: "task",
                    args: { description: "write", prompt: "make files", subagent_type: "implementer" }
                  }]
                },
                {
                  tool_calls: [{
                    name: "task",
                    args: { description: "look", prompt: "look", subagent_type: "explore" }
                  }]
                },
                { text: "done" }
              ]
            }
          ]
        },
        {},
        { root }
      )
      const session = get(Session)
      const parent = yield* session.create()
      assert.strictEqual((yield* session.prompt(parent.id, "go")).text, "done")
      const [writer, reader] = toolResults(yield* session.transcript(parent.id)).map((r) =>
        r.result as { agent_id: string; claims: unknown }
      )
      // What each command changed, by git status before and after it.
      const shells = toolResults(yield* session.transcript(writer!.agent_id)).map((r) => r.result as Shell.Result)
      assert.deepStrictEqual(shells.map((r) => [r.sandbox, r.exit_code, r.changed]), [
        ["workspace-write", 0, ["made.txt"]],
        ["workspace-write", 0, ["v.txt"]],
        ["workspace-write", 0, []]
      ])
      assert.strictEqual(yield* fs.readFileString(path.join(root, "v.txt")), "uncommitted work\nmore\n")
      assert.deepStrictEqual(writer!.claims, {
        checked: 4,
        verified: 3,
        unverified: [{
          claim: "changed old.txt",
          why:
            "no write_file or edit_file call of it changed old.txt, nor did any of its shell commands (by git status)"
        }]
      })
      // A read-only command is not compared (it can change nothing): no `changed`.
      const [looked] = toolResults(yield* session.transcript(reader!.agent_id)).map((r) => r.result as Shell.Result)
      assert.deepStrictEqual([looked!.sandbox, "changed" in looked!], ["read-only", false])
      assert.deepStrictEqual(reader!.claims, { checked: 1, verified: 1, unverified: [] })
    }).pipe(provideNode))

  it.live("git status never runs what the agent configured outside the sandbox: a clean filter in a .git it made", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      // Not a git work tree: `.git` does not exist, so the sandbox has nothing to keep read-only.
      const root = path.join(dir, "ws")
      yield* fs.makeDirectory(root)
      const pwned = path.join(dir, "pwned")
      const commands = [
        // Its own repository, whose clean filter writes outside the workspace when git hashes f.txt.
        `git init -q && git config filter.x.clean 'touch ${pwned}; cat' && echo '* filter=x' > .gitattributes` +
        ` && echo a > f.txt && git -c user.name=t -c user.email=t@example.com add f.txt .gitattributes`,
        // f.txt changed: a git status that hashes it runs the filter.
        "echo b >> f.txt"
      ]
      const { get } = yield* setup(
        {
          rules: [
            {
              match: { role: "implementer" },
              turns: [
                ...commands.map((command) => ({ tool_calls: [{ name: "shell", args: { command } }] as const })),
                { text: answer("- f.txt", "none") }
              ]
            },
            {
              match: { depth: 0 },
              turns: [{
                tool_calls: [{
                  name: "task",
                  args: { description: "write", prompt: "make files", subagent_type: "implementer" }
                }]
              }, { text: "done" }]
            }
          ]
        },
        {},
        { root }
      )
      const session = get(Session)
      const parent = yield* session.create()
      assert.strictEqual((yield* session.prompt(parent.id, "go")).text, "done")
      const [task] = toolResults(yield* session.transcript(parent.id)).map((r) => r.result as { agent_id: string })
      const shells = toolResults(yield* session.transcript(task!.agent_id)).map((r) => r.result as Shell.Result)
      assert.deepStrictEqual(shells.map((r) => [r.sandbox, r.exit_code]), [["workspace-write", 0], [
        "workspace-write",
        0
      ]])
      // git ran (it compared: f.txt changed), but read-only in the sandbox: the filter wrote nothing outside.
      assert.deepStrictEqual(shells[1]!.changed, ["f.txt"])
      assert.isFalse(yield* fs.exists(pwned), "the agent's clean filter ran outside the sandbox")
    }).pipe(provideNode))
})
