// The run receipt from the command line: `fibril agents show` prints it (follow-up and
// takeover included), the takeover command it gives works when a person runs it, and
// `fibril agents transcript` pages a transcript by id, session name or handle.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Path } from "effect"
import { fibril, repoRoot } from "./run.ts"

const report = (summary: string) =>
  `SUMMARY:\n${summary}\n\nCHANGES:\nnone\n\nEVIDENCE:\nnone\n\nRISKS:\nnone\n\nBLOCKERS:\nnone`

/** The root starts a detached explorer that hangs, then answers: the run's end stops the explorer. */
const script = {
  rules: [
    { match: { role: "explore" }, turns: [{ hang: true }] },
    {
      match: { depth: 0 },
      turns: [
        {
          tool_calls: [{
            name: "agent_open",
            args: { prompt: "keep watching", description: "watcher", subagent_type: "explore", detached: true }
          }]
        },
        { text: "Started a watcher." }
      ]
    }
  ]
}

interface Shown {
  readonly agent_id: string
  readonly session_name: string
  readonly status: string
  readonly run_id: string
  readonly runs: ReadonlyArray<{ readonly run_id: string; readonly status: string }>
  readonly events: ReadonlyArray<{ readonly type: string }>
  readonly artifacts: ReadonlyArray<{ readonly kind: string; readonly ref: string }>
  readonly follow_up: { readonly tool: string; readonly session_name: string }
  readonly takeover: { readonly available: boolean; readonly command?: string; readonly transcript_command?: string }
  readonly usage: { readonly status: string }
  readonly verification: { readonly status: string }
  readonly owner: { readonly state: string }
}

describe("fibril agents: the run receipt", () => {
  it.live("show prints the receipt; its takeover command, run as printed, continues the agent as a new run", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      yield* fs.writeFileString(path.join(dir, "script.json"), JSON.stringify(script))
      yield* fs.writeFileString(
        path.join(dir, "takeover.json"),
        JSON.stringify({ rules: [{ turns: [{ text: report("taken over and finished") }] }] })
      )
      const run = yield* fibril(["run", "watch", "--model", "scripted:script.json"], { cwd: dir })
      assert.strictEqual(run.exitCode, 0, run.stderr)

      const listed = JSON.parse((yield* fibril(["agents", "list", "--all", "--json"], { cwd: dir })).stdout) as Array<
        { children: Array<{ agent_id: string; session_name: string }> }
      >
      const watcher = listed[0]!.children[0]!
      // By session name.
      const shown = yield* fibril(["agents", "show", watcher.session_name], { cwd: dir })
      assert.strictEqual(shown.exitCode, 0, shown.stderr)
      const before = JSON.parse(shown.stdout) as Shown
      assert.strictEqual(before.agent_id, watcher.agent_id)
      assert.strictEqual(before.status, "cancelled")
      assert.strictEqual(before.run_id, `${watcher.agent_id}-r1`)
      assert.deepStrictEqual(before.events.map((e) => e.type), ["spawned", "started", "cancelled"])
      assert.strictEqual(before.follow_up.tool, "agent_resume")
      // No model step finished: nothing to report.
      assert.strictEqual(before.usage.status, "unknown")
      assert.strictEqual(before.verification.status, "self_report")
      assert.strictEqual(before.owner.state, "gone")
      assert.isTrue(before.takeover.available)
      const command = before.takeover.command!
      assert.strictEqual(command, `fibril agents resume ${watcher.agent_id} --cwd ${dir}`)

      // A person runs the command as given, from another directory.
      const [program, ...args] = command.split(" ")
      assert.strictEqual(program, "fibril")
      const taken = yield* fibril(args, { cwd: repoRoot, env: { FIBRIL_MODEL: `scripted:${dir}/takeover.json` } })
      assert.strictEqual(taken.exitCode, 0, taken.stderr)
      assert.include(taken.stdout, `as run ${watcher.agent_id}-r2`)
      assert.include(taken.stdout, "taken over and finished")

      // By run id: the same record, now with two runs.
      const after = JSON.parse(
        (yield* fibril(["agents", "show", `${watcher.agent_id}-r1`], { cwd: dir })).stdout
      ) as Shown
      assert.strictEqual(after.status, "completed")
      assert.deepStrictEqual(after.runs.map((r) => [r.run_id, r.status]), [
        [`${watcher.agent_id}-r1`, "cancelled"],
        [`${watcher.agent_id}-r2`, "completed"]
      ])
      assert.deepStrictEqual(after.events.map((e) => e.type).slice(-3), ["resumed", "started", "completed"])
      assert.isTrue(after.takeover.available)
      assert.strictEqual(after.usage.status, "reported")

      // The transcript, a page at a time, by name and by handle.
      const page = yield* fibril(["agents", "transcript", watcher.session_name, "--limit", "2"], { cwd: dir })
      assert.strictEqual(page.exitCode, 0, page.stderr)
      const lines = page.stdout.trimEnd().split("\n")
      assert.strictEqual(lines[0], "[system] #0")
      assert.include(page.stdout, "[user] #1")
      assert.notInclude(page.stdout, "#2")
      assert.match(lines.at(-1)!, /^messages 0–1 of \d+; next page: --offset 2$/)
      const rest = yield* fibril(["agents", "transcript", `${watcher.agent_id}.jsonl`, "--offset", "2"], { cwd: dir })
      assert.include(rest.stdout, "Your previous run ended cancelled")
      assert.include(rest.stdout, "taken over and finished")
      assert.notInclude(rest.stdout, "next page")
      const everything = yield* fibril(["agents", "transcript", watcher.agent_id], { cwd: dir })
      assert.include(everything.stdout, "[system] #0")
      assert.include(everything.stdout, "taken over and finished")
    }).pipe(Effect.provide(NodeServices.layer)))
})
