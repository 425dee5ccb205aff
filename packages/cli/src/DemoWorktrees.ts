/**
 * `fibril demo --scenario worktrees`: `isolation: "worktree"` on a scripted model, in a fresh
 * git repository in a temporary directory (never the user's project).
 *
 * Three implementers edit the same file in parallel, each in its own worktree; each checks on
 * disk that the parent's file is untouched while it works. The parent merges the first two
 * (fast-forward, then three-way), gets the third's conflict as data, delegates its resolution
 * to a fourth isolated implementer (which starts from the tree with both merges), merges that,
 * discards the third, and the final file has all three changes.
 */
import * as Fibril from "@fibril/core/Fibril"
import * as Session from "@fibril/core/Session"
import * as Worktrees from "@fibril/core/Worktrees"
import * as ScriptedModel from "@fibril/testkit/ScriptedModel"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Path from "effect/Path"
import * as ChildProcess from "effect/process/ChildProcess"
import * as ChildProcessSpawner from "effect/process/ChildProcessSpawner"
import * as Schema from "effect/Schema"
import type * as Output from "./Output.ts"

const lines = (changes: Partial<Record<number, string>> = {}) =>
  Array.from({ length: 9 }, (_, i) => changes[i + 1] ?? `line${i + 1}`).join("\n") + "\n"

const report = (summary: string) =>
  `SUMMARY:\n${summary}\n\nCHANGES:\nshared.txt\n\nEVIDENCE:\nedit_file\n\nRISKS:\nnone\n\nBLOCKERS:\nnone`

type Turn = ScriptedModel.Turn

/** The script: the parent's turns follow the results it has seen; each child edits one line. */
export const script = (readParent: Effect.Effect<string>, seen: Array<string>): ScriptedModel.ScriptInput => {
  const child = (tag: string, oldString: string, newString: string): ScriptedModel.Rule => ({
    match: { prompt: `[${tag}]` },
    respond: (conversation): Turn | Effect.Effect<Turn> =>
      conversation.turn === 0
        ? {
          tool_calls: [{
            name: "edit_file",
            args: { path: "shared.txt", old_string: oldString, new_string: newString }
          }]
        }
        : Effect.map(readParent, (onDisk): Turn => {
          seen.push(onDisk)
          return { text: report(`${tag}: ${newString.trim()}`) }
        })
  })
  const spawn = (tag: string, change: string) => ({
    name: "agent_spawn",
    args: {
      prompt: `[${tag}] ${change}`,
      description: `implementer ${tag}`,
      subagent_type: "implementer",
      isolation: "worktree"
    }
  })
  return {
    rules: [
      child("A", "line1\n", "line1 by A\n"),
      child("B", "line9\n", "line9 by B\n"),
      child("C", "line1\n", "line1 by C\n"),
      child("D", "line1 by A\n", "line1 by A and C\n"),
      {
        match: { depth: 0 },
        respond: (conversation): Turn => {
          const results = conversation.toolResults
          const spawned = results.filter((r) => r.name === "agent_spawn").map((r) =>
            (r.result as { agent_id: string }).agent_id
          )
          const merge = (id: string | undefined, action?: string): Turn => ({
            tool_calls: [{ name: "agent_merge", args: { agent_id: id, ...(action === undefined ? {} : { action }) } }]
          })
          switch (conversation.turn) {
            case 0:
              return {
                tool_calls: [
                  spawn("A", "change line1"),
                  spawn("B", "change line9"),
                  spawn("C", "change line1 differently")
                ]
              }
            case 1:
              return { tool_calls: [{ name: "agent_wait", args: { ids: spawned, wait_mode: "all" } }] }
            case 2:
              return merge(spawned[0])
            case 3:
              return merge(spawned[1])
            case 4:
              return merge(spawned[2])
            case 5: {
              const conflict = results.at(-1)!.result as Worktrees.MergeResult
              return {
                tool_calls: [{
                  name: "task",
                  args: {
                    description: "resolve the conflict",
                    prompt: `[D] keep both sides of ${JSON.stringify(conflict.conflicts)}`,
                    subagent_type: "implementer",
                    isolation: "worktree"
                  }
                }]
              }
            }
            case 6:
              return merge((results.at(-1)!.result as { agent_id: string }).agent_id)
            case 7:
              return merge(spawned[2], "discard")
            default:
              return { text: "All three changes are in shared.txt: two merged, the conflict resolved by a delegate." }
          }
        }
      }
    ]
  }
}

const git = (cwd: string, args: ReadonlyArray<string>) =>
  Effect.flatMap(
    Effect.service(ChildProcessSpawner.ChildProcessSpawner),
    (spawner) => spawner.exitCode(ChildProcess.make("git", [...args], { cwd }))
  )

const decodeMergeResult = Schema.decodeUnknownOption(Worktrees.MergeResult)

/** An `agent_merge` call's result: what it merged, or (refused) what the model was told. */
const decodeMerge = (result: unknown): Worktrees.MergeResult | string => {
  const decoded = decodeMergeResult(result)
  return decoded._tag === "Some" ? decoded.value : JSON.stringify(result)
}

export const run = Effect.fn("fibril.demo.worktrees")(function*(output: Output.Output) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped({ prefix: "fibril-demo-worktrees-" }))
  const file = path.join(root, "shared.txt")
  yield* fs.writeFileString(file, lines())
  for (
    const args of [
      ["init", "-q"],
      ["add", "-A"],
      ["-c", "user.name=Fibril demo", "-c", "user.email=demo@localhost", "commit", "-q", "-m", "init"]
    ]
  ) yield* git(root, args)

  yield* output.line("Fibril demo (worktrees): the model is SCRIPTED (the ScriptedModel), not an LLM.")
  yield* output.line(`A fresh git repository in ${root}; shared.txt has nine lines.`)
  const seen: Array<string> = []
  const answer = yield* Effect.gen(function*() {
    const session = yield* Session.Session
    const parent = yield* session.create({ role: "general" })
    const result = yield* session.prompt(parent.id, "Have three implementers change shared.txt, then merge them.")
    const merges = (yield* session.transcript(parent.id)).flatMap((message) =>
      message.role === "tool"
        ? message.content.flatMap((part) =>
          part.type === "tool-result" && part.name === "agent_merge" ? [decodeMerge(part.result)] : []
        )
        : []
    )
    return { text: result.text, merges }
  }).pipe(
    Effect.provide(
      Fibril.layer({ cwd: root }).pipe(
        Layer.provide(ScriptedModel.layer(script(Effect.orDie(fs.readFileString(file)), seen)))
      )
    )
  )
  yield* output.line("")
  for (const merge of answer.merges) {
    if (typeof merge === "string") {
      yield* output.line(`agent_merge refused: ${merge}`)
      continue
    }
    yield* output.line(
      `agent_merge ${merge.agent_id} (${merge.branch}): ${merge.outcome}${
        merge.mode === undefined ? "" : `, ${merge.mode}`
      }${merge.files.length === 0 ? "" : `, files ${merge.files.join(", ")}`}`
    )
    for (const conflict of merge.conflicts) {
      for (const hunk of conflict.hunks) {
        yield* output.line(`  conflict in ${conflict.path}: ours "${hunk.ours}" / theirs "${hunk.theirs}"`)
      }
    }
  }
  const untouched = seen.filter((text) => text === lines()).length
  yield* output.line("")
  yield* output.line(
    `While the three ran, each saw the parent's shared.txt unchanged on disk: ${untouched === 3 ? "yes" : "NO"}.`
  )
  yield* output.line("Final shared.txt:")
  const final = yield* fs.readFileString(file)
  for (const line of final.trimEnd().split("\n")) yield* output.line(`  ${line}`)
  yield* output.line("")
  yield* output.line(answer.text)
  return { final, merges: answer.merges, untouched }
})
