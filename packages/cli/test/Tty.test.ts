// `fibril run` on a real terminal (tmux): the live tree is drawn in place, every row within
// the terminal's width and no stale frame left in the scrollback (at 80×24 with more agents
// than rows, and at 120 columns with rows longer than that), a resize is followed; Ctrl-C
// cancels the whole tree, kills the child's shell process, says what was cancelled and by
// what, and exits 130.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Path, Stream } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { pidsWith } from "./inspect.ts"
import { bin, sourceCondition } from "./run.ts"

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
        {
          tool_calls: [{
            name: "task",
            args: { description: "long check", prompt: "run the slow check", subagent_type: "verifier" }
          }]
        },
        { text: "never" }
      ]
    }
  ]
}

/** Runs `fibril run …` (or `command`) in a new tmux session of the given size, in `dir`; killed with the scope. */
const session = (
  dir: string,
  args: string,
  size: { readonly x: number; readonly y: number },
  command = "run",
  env = ""
) =>
  Effect.gen(function*() {
    const name = `fibril-test-${process.pid}-${Date.now()}-${Math.floor(Math.random() * 1000)}`
    const line =
      `cd ${dir} && env -u OPENAI_API_KEY ${env} ${process.execPath} ${sourceCondition} ${bin} ${command} ${args}; echo EXIT=$?; sleep 60`
    yield* tmux(["new-session", "-d", "-s", name, "-x", String(size.x), "-y", String(size.y), line])
    yield* Effect.addFinalizer(() => Effect.ignore(tmux(["kill-session", "-t", name])))
    return name
  })

/** The screen until `done` holds (polled every 50 ms, at most `ms`). */
const screenWhen = (name: string, done: (screen: string) => boolean, ms = 20_000) =>
  Effect.gen(function*() {
    let screen = ""
    for (let waited = 0; waited < ms; waited += 50) {
      screen = yield* tmux(["capture-pane", "-p", "-t", name])
      if (done(screen)) return screen
      yield* Effect.sleep("50 millis")
    }
    return screen
  })

/** Everything the terminal holds, scrollback included, wrapped rows joined into the lines written. */
const history = (name: string) => tmux(["capture-pane", "-p", "-J", "-S", "-", "-E", "-", "-t", name])

const columnsOf = (line: string) => [...new Intl.Segmenter().segment(line)].length

const report = "SUMMARY:\ndone\n\nCHANGES:\nnone\n\nEVIDENCE:\nlisted\n\nRISKS:\nnone\n\nBLOCKERS:\nnone"
const long =
  "survey every module under src/ and explain how the configuration loader resolves overrides from environment variables and files, with examples"

/** A root that sends `n` explorers with long descriptions; every model turn takes a while. */
const fanOut = (n: number, delays: readonly [number, number]) => ({
  rules: [
    {
      match: { role: "explore" },
      turns: [{ delay_ms: delays[0], tool_calls: [{ name: "list_dir", args: {} }] }, {
        delay_ms: delays[1],
        text: report
      }]
    },
    {
      match: { depth: 0 },
      turns: [
        {
          delay_ms: 200,
          tool_calls: Array.from({ length: n }, (_, i) => ({
            name: "task",
            args: { description: `part ${i}: ${long}`, prompt: `part ${i}`, subagent_type: "explore" }
          }))
        },
        { delay_ms: 200, text: "All parts surveyed." }
      ]
    }
  ]
})

/** A tree row as drawn (its icon or spinner, after the branches). */
const treeRow = /^[│├└─ ]*[○●✓✗⊘⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] (general|explore)\b/

const workspaceWith = (scripted: unknown, config?: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const dir = yield* fs.makeTempDirectoryScoped()
    yield* fs.writeFileString(path.join(dir, "script.json"), JSON.stringify(scripted))
    if (config !== undefined) {
      yield* fs.makeDirectory(path.join(dir, ".fibril"))
      yield* fs.writeFileString(path.join(dir, ".fibril", "config.toml"), config)
    }
    return dir
  })

/** After the run: one final tree in the whole scrollback, every row of it within `columns`. */
const assertOneTree = (all: string, columns: number, agents: number) => {
  assert.include(all, "EXIT=0")
  const rows = all.split("\n").filter((line) => treeRow.test(line))
  for (const row of rows) assert.isAtMost(columnsOf(row), columns - 1, `wider than the terminal: ${row}`)
  // No frame left behind: the root's row is there once, each agent's once, all finished.
  assert.strictEqual(rows.filter((row) => / general /.test(row)).length, 1, rows.join("\n"))
  assert.strictEqual(rows.length, agents, rows.join("\n"))
  for (const row of rows) assert.match(row, /✓ (general|explore)/)
}

/** Every file under `dir` whose text holds `text`. */
const filesHolding = (dir: string, text: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const found: Array<string> = []
    for (const entry of yield* fs.readDirectory(dir, { recursive: true })) {
      const file = path.join(dir, entry)
      if ((yield* fs.stat(file)).type !== "File") continue
      if ((yield* fs.readFileString(file).pipe(Effect.orElseSucceed(() => ""))).includes(text)) found.push(file)
    }
    return found
  })

/** A root → a middle agent → an asker (depth 2) that writes two files, and its sibling that lists. */
const askScript = {
  rules: [
    {
      match: { prompt: "asker" },
      turns: [
        { tool_calls: [{ name: "write_file", args: { path: "allowed.txt", content: "yes" } }] },
        { tool_calls: [{ name: "write_file", args: { path: "denied.txt", content: "no" } }] },
        { text: report }
      ]
    },
    {
      match: { prompt: "worker" },
      turns: [{ delay_ms: 100, tool_calls: [{ name: "list_dir", args: {} }] }, { delay_ms: 100, text: report }]
    },
    {
      match: { prompt: "middle" },
      turns: [
        {
          tool_calls: [
            { name: "agent_spawn", args: { description: "asker", prompt: "asker: write the files" } },
            { name: "agent_spawn", args: { description: "worker", prompt: "worker: list" } }
          ]
        },
        { tool_calls: [{ name: "agent_wait", args: { wait_mode: "all" } }] },
        { text: report }
      ]
    },
    {
      match: { depth: 0 },
      turns: [
        { tool_calls: [{ name: "task", args: { description: "middle", prompt: "middle", subagent_type: "general" } }] },
        { text: "All done." }
      ]
    }
  ]
}

describe("fibril run on a terminal", () => {
  it.live(
    "80×24, more agents than rows: rows cut to the width, a frame of at most 23 rows, no stale frame in the scrollback",
    () =>
      Effect.gen(function*() {
        const dir = yield* workspaceWith(
          fanOut(25, [300, 600]),
          "[subagents]\nmax_concurrent = 20\nadmission = \"queue\"\n"
        )
        const name = yield* session(dir, "'survey the whole project, part by part' --model scripted:script.json", {
          x: 80,
          y: 24
        })
        const live = yield* screenWhen(name, (screen) => /part 19/.test(screen) || screen.includes("EXIT="))
        const liveRows = live.split("\n").filter((line) => treeRow.test(line) || line.startsWith("… "))
        assert.isAtMost(liveRows.length, 23, live)
        assert.match(live, /… \d+ more agents? \(\d+ running\)/)
        yield* screenWhen(name, (screen) => screen.includes("EXIT="))
        const all = yield* history(name)
        assertOneTree(all, 80, 26)
        // The totals are broken between words within the width, never in a number.
        const lines = all.split("\n")
        const from = lines.findIndex((line) => line.startsWith("Totals: "))
        const totals = lines.slice(from, lines.findIndex((line, i) => i >= from && line.includes("Root agent")) + 1)
        for (const line of totals) assert.isAtMost(columnsOf(line.trimEnd()), 79, totals.join("\n"))
        assert.match(
          totals.map((line) => line.trim()).join(" "),
          /^Totals: 26 agents, \d+ tool calls, \d+ input \+ \d+ output tokens \(\d+ cached\), \d+ ms, model scripted:script\.json\. Root agent agent_\w+\.$/
        )
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    60_000
  )

  it.live(
    "120 columns, rows longer than that: cut to the width, no stale frame in the scrollback",
    () =>
      Effect.gen(function*() {
        const dir = yield* workspaceWith(fanOut(4, [400, 800]))
        const name = yield* session(dir, `'${long} (the root)' --model scripted:script.json`, { x: 120, y: 40 })
        const live = yield* screenWhen(name, (screen) => /waiting on model/.test(screen) && /part 3/.test(screen))
        // While the explorers wait on their model: a spinner, an elapsed time, the description cut with …
        assert.match(
          live,
          /├─ [⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] explore "part 0: survey every module under src\/.*…" running \d+\.\ds {2}waiting on model/
        )
        assert.match(live, /^● general "survey every mod.*" running \d+\.\ds {2}\(task\) waiting on 4 sub-agents/m)
        yield* screenWhen(name, (screen) => screen.includes("EXIT="))
        const all = yield* history(name)
        assertOneTree(all, 120, 5)
        assert.match(all, /✓ general ".*" completed [\d.]+s {2}steps 2 {2}tools 4 {2}tokens [\d.k]+ own, [\d.k]+ tree/)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    60_000
  )

  it.live("a resize: the next frame is drawn at the new width, over the old one", () =>
    Effect.gen(function*() {
      const dir = yield* workspaceWith(fanOut(4, [3000, 3000]))
      const name = yield* session(dir, "'survey it' --model scripted:script.json", { x: 120, y: 30 })
      yield* screenWhen(name, (screen) => /part 3/.test(screen))
      yield* tmux(["resize-window", "-t", name, "-x", "70"])
      // The frame after the resize: every agent once on the screen, each row within 70 columns.
      const screen = yield* screenWhen(
        name,
        (s) => s.includes("part 3:") && s.split("\n").every((line) => columnsOf(line) < 70),
        5_000
      )
      const rows = screen.split("\n").filter((line) => line.trim() !== "")
      assert.strictEqual(rows.filter((row) => / general /.test(row)).length, 1, screen)
      for (const i of [0, 1, 2, 3]) {
        assert.strictEqual(rows.filter((row) => row.includes(`part ${i}:`)).length, 1, screen)
      }
      for (const row of rows) assert.isTrue(treeRow.test(row), `not a row of the frame: ${row}`)
      yield* screenWhen(name, (s) => s.includes("EXIT="))
      const end = yield* tmux(["capture-pane", "-p", "-t", name])
      assert.include(end, "EXIT=0")
      assert.strictEqual(end.split("\n").filter((line) => treeRow.test(line) && / general /.test(line)).length, 1, end)
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 60_000)

  it.live(
    "fibril demo on a terminal: paced like a model, the tree seen growing, then printed once",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* fs.makeTempDirectoryScoped()
        yield* fs.writeFileString(path.join(dir, "README.md"), "# Tide tables\n\nPrints the tides of a harbour.\n")
        const name = yield* session(dir, "", { x: 80, y: 24 }, "demo")
        // While the explorers run: two or more of them on the screen at once.
        const live = yield* screenWhen(
          name,
          (screen) => (screen.match(/[├└]─ [⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏●] explore/g) ?? []).length >= 2
        )
        assert.notInclude(live, "EXIT=", "the demo is paced: its explorers are seen running")
        yield* screenWhen(name, (screen) => screen.includes("EXIT="))
        const all = yield* history(name)
        assert.include(all, "EXIT=0")
        const rows = all.split("\n").filter((line) =>
          /^[│├└─ ]*[○●✓✗⊘⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] (general|explore|review)\b/.test(line)
        )
        assert.strictEqual(rows.filter((row) => / general /.test(row)).length, 1, rows.join("\n"))
        assert.strictEqual(rows.length, 5, rows.join("\n"))
        for (const row of rows) assert.isAtMost(columnsOf(row), 79, row)
        assert.include(all, "README.md:1: # Tide tables")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    60_000
  )

  it.live(
    "draws the live tree; Ctrl-C cancels the tree, leaves no child process, says so, exits 130",
    () =>
      Effect.gen(function*() {
        const dir = yield* workspaceWith(script)
        const name = yield* session(dir, "'check it' --model scripted:script.json", { x: 160, y: 40 })
        let pid = 0
        for (let i = 0; i < 200 && pid === 0; i++) {
          pid = pidsWith(marker)[0] ?? 0
          if (pid === 0) yield* Effect.sleep("50 millis")
        }
        assert.isAbove(pid, 0, "the verifier's shell command started")
        const live = yield* screenWhen(name, (screen) => screen.includes("(shell)"), 5_000)
        assert.match(live, /● general "check it" running \d+\.\ds {2}\(task\) waiting on 1 sub-agent/)
        assert.match(live, /└─ ● verifier "long check" running \d+\.\ds {2}\(shell\)/)
        yield* tmux(["send-keys", "-t", name, "C-c"])
        const screen = yield* screenWhen(name, (s) => s.includes("EXIT="), 5_000)
        assert.include(screen, "EXIT=130")
        assert.include(screen, "Cancelled 2 agent(s):")
        assert.include(screen, "verifier [agent_")
        assert.include(screen, "The root agent cancelled:\n  cancelled by Ctrl-C")
        assert.match(screen, /⊘ general "check it" cancelled .* — Cancelled by Ctrl-C/)
        assert.isFalse(alive(pid), "the sleep process was killed")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    30_000
  )

  it.live(
    "answers a grandchild's questions at the terminal: allow once writes the file; a deny's reason reaches the model",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* workspaceWith(
          askScript,
          "[subagents]\nmax_depth = 2\n\n[permissions]\nask = [\"write_file\"]\n"
        )
        const home = yield* fs.makeTempDirectoryScoped()
        const name = yield* session(
          dir,
          "'check it' --model scripted:script.json",
          { x: 200, y: 40 },
          "run",
          `HOME=${home}`
        )
        // The question on the asker's row and under the tree; its sibling finishes meanwhile.
        const asked = yield* screenWhen(
          name,
          (screen) => screen.includes("[a]llow once") && /✓ general "worker"/.test(screen),
          8_000
        )
        assert.match(asked, /├─ ● general "asker" running [\d.]+s {2}\? write_file \{"path":"allowed\.txt".* — /, asked)
        assert.match(
          asked,
          /\? Approval needed: general › general › general \[agent_\w+\] \(general\) wants write_file/
        )
        assert.include(asked, `arguments: {"path":"allowed.txt","content":"yes"}`)
        assert.match(asked, /why: .*write_file/)
        assert.isFalse(yield* fs.exists(path.join(dir, "allowed.txt")), "nothing written before the answer")
        yield* tmux(["send-keys", "-t", name, "a"])
        const second = yield* screenWhen(name, (screen) => screen.includes(`"path":"denied.txt"`), 5_000)
        assert.include(second, "✓ allowed write_file once")
        assert.strictEqual(yield* fs.readFileString(path.join(dir, "allowed.txt")), "yes")
        yield* tmux(["send-keys", "-t", name, "d"])
        yield* tmux(["send-keys", "-t", name, "-l", "keep denied.txt out of it"])
        yield* tmux(["send-keys", "-t", name, "Enter"])
        const end = yield* screenWhen(name, (screen) => screen.includes("EXIT="), 5_000)
        assert.include(end, "EXIT=0", end)
        assert.include(end, "All done.")
        assert.isFalse(yield* fs.exists(path.join(dir, "denied.txt")))
        // The model read the reason: it is in the asker's transcript, as the call's result.
        assert.isNotEmpty(
          yield* filesHolding(path.join(dir, ".fibril"), "was not approved (terminal): keep denied.txt out of it")
        )
        // Nothing was saved to the user's config by a once / deny answer.
        assert.isFalse(yield* fs.exists(path.join(home, ".fibril", "config.toml")))
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    20_000
  )
})
