// `fibril run` on a real terminal (tmux): the live tree is drawn, and Ctrl-C cancels the
// whole tree, kills the child's shell process, says what was cancelled and exits 1.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Path, Stream } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { readdirSync, readFileSync } from "node:fs"
import { bin } from "./run.ts"

const tmux = (args: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
    const handle = yield* spawner.spawn(ChildProcess.make("tmux", [...args]))
    const [out] = yield* Effect.all([handle.stdout.pipe(Stream.decodeText(), Stream.mkString), handle.exitCode])
    return out
  }).pipe(Effect.scoped)

const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/**
 * Host pids of processes with `marker` among their arguments: the verifier's shell runs in
 * a sandbox with its own pid namespace, where `$$` is not a host pid.
 */
const pidsWith = (marker: string): Array<number> =>
  readdirSync("/proc").filter((entry) => /^\d+$/.test(entry)).flatMap((entry) => {
    try {
      return readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0").includes(marker) ? [Number(entry)] : []
    } catch {
      return []
    }
  })

const marker = String(300_000 + Math.floor(Math.random() * 100_000))

const script = {
  rules: [
    {
      match: { role: "verifier" },
      turns: [{ tool_calls: [{ name: "shell", args: { command: `exec sleep ${marker}` } }] }, { text: "never" }]
    },
    {
      match: { depth: 0 },
      turns: [
        { tool_calls: [{ name: "task", args: { description: "long check", prompt: "run the slow check", subagent_type: "verifier" } }] },
        { text: "never" }
      ]
    }
  ]
}

describe("fibril run on a terminal", () => {
  it.live("draws the live tree; Ctrl-C cancels the tree, leaves no child process, exits 1", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = yield* fs.makeTempDirectoryScoped()
      yield* fs.writeFileString(path.join(dir, "script.json"), JSON.stringify(script))
      const name = `fibril-test-${process.pid}-${Date.now()}`
      const command = `cd ${dir} && env -u OPENAI_API_KEY ${process.execPath} ${bin} run 'check it' --model scripted:script.json; echo EXIT=$?; sleep 60`
      yield* tmux(["new-session", "-d", "-s", name, "-x", "160", "-y", "40", command])
      yield* Effect.addFinalizer(() => Effect.ignore(tmux(["kill-session", "-t", name])))
      let pid = 0
      for (let i = 0; i < 200 && pid === 0; i++) {
        pid = pidsWith(marker)[0] ?? 0
        if (pid === 0) yield* Effect.sleep("50 millis")
      }
      assert.isAbove(pid, 0, "the verifier's shell command started")
      yield* Effect.sleep("200 millis")
      const live = yield* tmux(["capture-pane", "-p", "-t", name])
      assert.match(live, /● general \[agent_\w+\] running/)
      assert.match(live, /└─ ● verifier "long check" \[agent_\w+\] running .*\(shell\)/)
      yield* tmux(["send-keys", "-t", name, "C-c"])
      let screen = ""
      for (let i = 0; i < 100 && !screen.includes("EXIT="); i++) {
        yield* Effect.sleep("50 millis")
        screen = yield* tmux(["capture-pane", "-p", "-t", name])
      }
      assert.include(screen, "EXIT=1")
      assert.include(screen, "Cancelled 2 agent(s):")
      assert.include(screen, "verifier [agent_")
      assert.isFalse(alive(pid), "the sleep process was killed")
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 30_000)
})
