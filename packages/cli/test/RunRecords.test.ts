// Records that never lie, with real `fibril` processes on a real disk: a run stopped past its
// lease (SIGSTOP) while another process lists the agents, a lister whose clock is a minute
// ahead (faketime), a lister on another host (a UTS namespace of its own), a store that fills
// its disk (a small tmpfs), a row that does not decode, and a state path that is a file.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { Effect, Fiber, FileSystem, Path, Stream } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { execFileSync, spawnSync } from "node:child_process"
import { DatabaseSync } from "node:sqlite"
import { bin, fibril, scriptedWorkspace, sourceCondition } from "./run.ts"

/** Short, so that a stop of a few seconds is past it; renewed every 500 ms while agents run. */
const leaseMs = 1500

interface Row {
  readonly agent_id: string
  readonly status: string
  readonly depth: number
  readonly outcome?: { readonly text: string }
  readonly events?: ReadonlyArray<{ readonly type: string; readonly at: number; readonly detail?: string }>
}

/** The records in the workspace's store, read straight from the file (none while it does not exist). */
const rows = (dir: string): Array<Row> => {
  try {
    const db = new DatabaseSync(`${dir}/.fibril/state/fibril.db`, { readOnly: true })
    try {
      return db.prepare("SELECT record FROM fibril_agents").all().map((row) => JSON.parse(String(row["record"])) as Row)
    } finally {
      db.close()
    }
  } catch {
    return []
  }
}

const answerAfter = (answer: string, delayMs: number) => ({
  rules: [{ match: { depth: 0 }, turns: [{ text: answer, delay_ms: delayMs }] }]
})

const text = (stream: Stream.Stream<Uint8Array, unknown>) => stream.pipe(Stream.decodeText(), Stream.mkString)

/** A `fibril run` in the background, with a short lease; resolves once its root is recorded running. */
const startRun = (dir: string) =>
  Effect.gen(function*() {
    const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
    const handle = yield* spawner.spawn(
      ChildProcess.make(
        process.execPath,
        [sourceCondition, bin, "run", "answer", "--model", "scripted:script.json", "--json"],
        {
          cwd: dir,
          env: { OPENAI_API_KEY: undefined, FIBRIL_MODEL: undefined, FIBRIL_STORE_LEASE_MS: String(leaseMs) },
          extendEnv: true
        }
      )
    )
    // Read to the end in the background: a reader that stopped would close the pipe.
    const stdout = yield* Effect.forkScoped(text(handle.stdout))
    const stderr = yield* Effect.forkScoped(text(handle.stderr))
    let root: Row | undefined
    for (let i = 0; i < 300 && root === undefined; i++) {
      root = rows(dir).find((row) => row.depth === 0 && row.status === "running")
      if (root === undefined) yield* Effect.sleep("50 millis")
    }
    assert.isDefined(root, "the root was never recorded running")
    return { handle, pid: Number(handle.pid), rootId: root!.agent_id, stdout, stderr }
  })

type Listed = Array<{ agent_id: string; status: string; owner?: { state: string } }>

describe("records that never lie", () => {
  it.live(
    "a run stopped past its lease while another process lists the agents ends completed, its answer stored",
    () =>
      Effect.gen(function*() {
        const dir = yield* scriptedWorkspace(answerAfter("the answer is 42", 3000))
        yield* Effect.scoped(Effect.gen(function*() {
          const run = yield* startRun(dir)
          process.kill(run.pid, "SIGSTOP")
          // Past its lease: on the old code the lister found it gone and took its agent.
          yield* Effect.sleep(`${2 * leaseMs} millis`)
          const listed = yield* fibril(["agents", "list", "--all", "--json"], { cwd: dir })
          process.kill(run.pid, "SIGCONT")
          assert.strictEqual(listed.exitCode, 0, listed.stderr)
          const root = (JSON.parse(listed.stdout) as Listed).find((a) => a.agent_id === run.rootId)
          assert.deepStrictEqual([root?.status, root?.owner?.state], ["running", "alive"])

          const exitCode = Number(yield* run.handle.exitCode.pipe(Effect.timeout("30 seconds")))
          const stderr = yield* Fiber.join(run.stderr)
          assert.strictEqual(exitCode, 0, stderr)
          const stored = rows(dir).find((row) => row.agent_id === run.rootId)
          assert.strictEqual(stored?.status, "completed")
          assert.include(stored?.outcome?.text, "the answer is 42")
        }))
      }).pipe(Effect.provide(NodeServices.layer)),
    60_000
  )

  it.live(
    "a lister whose clock is a minute ahead (faketime) leaves a live run's agent alone: it ends completed",
    () =>
      Effect.gen(function*() {
        const dir = yield* scriptedWorkspace(answerAfter("skew-proof answer", 3000))
        yield* Effect.scoped(Effect.gen(function*() {
          const run = yield* startRun(dir)
          // Held while it is listed, so that its answer cannot come first on a slow machine (a
          // stopped run past its lease still reads alive: the test above).
          process.kill(run.pid, "SIGSTOP")
          const listed = spawnSync(
            "faketime",
            ["-f", "+60s", process.execPath, sourceCondition, bin, "agents", "list", "--all", "--json"],
            { cwd: dir, encoding: "utf8", env: { ...process.env, OPENAI_API_KEY: "" } }
          )
          process.kill(run.pid, "SIGCONT")
          assert.strictEqual(listed.status, 0, listed.stderr)
          const root = (JSON.parse(listed.stdout) as Listed).find((a) => a.agent_id === run.rootId)
          assert.deepStrictEqual([root?.status, root?.owner?.state], ["running", "alive"])

          const exitCode = Number(yield* run.handle.exitCode.pipe(Effect.timeout("30 seconds")))
          assert.strictEqual(exitCode, 0, yield* Fiber.join(run.stderr))
          const stored = rows(dir).find((row) => row.agent_id === run.rootId)
          assert.strictEqual(stored?.status, "completed")
          assert.include(stored?.outcome?.text, "skew-proof answer")
          // Nothing in the record is dated after the run's own clock.
          for (const event of stored?.events ?? []) assert.isAtMost(event.at, Date.now())
        }))
      }).pipe(Effect.provide(NodeServices.layer)),
    60_000
  )

  it.live(
    "taken over from another host while stopped: its end is kept, the takeover in its events, and fibril run says so and exits 4",
    () =>
      Effect.gen(function*() {
        // A lister on another host (a UTS namespace with a hostname of its own): only the lease
        // can tell it whether the run lives, and the lease has run out.
        const probe = spawnSync("unshare", ["--uts", "sh", "-c", "hostname fibril-other-host"], { encoding: "utf8" })
        if (probe.status !== 0) {
          // Not root, or no user namespaces here: the store property test covers it (SharedLiveness.prop.test.ts).
          console.warn(`skipped: unshare --uts is not permitted here (${probe.stderr.trim()})`)
          return
        }
        const dir = yield* scriptedWorkspace(answerAfter("kept answer", 3000))
        yield* Effect.scoped(Effect.gen(function*() {
          const run = yield* startRun(dir)
          process.kill(run.pid, "SIGSTOP")
          yield* Effect.sleep(`${2 * leaseMs} millis`)
          const listed = spawnSync(
            "unshare",
            [
              "--uts",
              "sh",
              "-c",
              `hostname fibril-other-host && exec "$0" "$@"`,
              process.execPath,
              sourceCondition,
              bin,
              "agents",
              "list",
              "--all",
              "--json"
            ],
            { cwd: dir, encoding: "utf8", env: { ...process.env, OPENAI_API_KEY: "" } }
          )
          process.kill(run.pid, "SIGCONT")
          assert.strictEqual(listed.status, 0, listed.stderr)
          const seen = (JSON.parse(listed.stdout) as Listed).find((a) => a.agent_id === run.rootId)
          assert.strictEqual(seen?.status, "interrupted")

          const exitCode = Number(yield* run.handle.exitCode.pipe(Effect.timeout("30 seconds")))
          const stderr = yield* Fiber.join(run.stderr)
          assert.strictEqual(exitCode, 4, stderr)
          assert.include(stderr, `the record of ${run.rootId} was taken over by another process`)
          assert.include(stderr, "on fibril-other-host")
          assert.include(stderr, "its end is recorded all the same")
          const stored = rows(dir).find((row) => row.agent_id === run.rootId)
          assert.strictEqual(stored?.status, "completed")
          assert.include(stored?.outcome?.text, "kept answer")
          const takeover = stored?.events?.find((e) => e.type === "interrupted")
          assert.include(takeover?.detail, "its lease ran out")
          assert.include(takeover?.detail, "was still running it, and recorded its end")
          assert.strictEqual(stored?.events?.at(-1)?.type, "completed")
        }))
      }).pipe(Effect.provide(NodeServices.layer)),
    60_000
  )

  it.live(
    "a store whose disk fills: fibril run exits 3 naming the agent and the store, and no earlier record is lost",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* scriptedWorkspace(answerAfter("small first answer", 0))
        const state = path.join(dir, ".fibril", "state")
        yield* fs.makeDirectory(state, { recursive: true })
        const mounted = spawnSync("mount", ["-t", "tmpfs", "-o", "size=512k", "tmpfs", state], { encoding: "utf8" })
        if (mounted.status !== 0) {
          console.warn(`skipped: cannot mount a tmpfs here (${mounted.stderr.trim()}); run as root`)
          return
        }
        yield* Effect.addFinalizer(() => Effect.sync(() => spawnSync("umount", ["-l", state])))

        const first = yield* fibril(["run", "first", "--model", "scripted:script.json"], { cwd: dir })
        assert.strictEqual(first.exitCode, 0, first.stderr)
        const before = rows(dir)
        assert.deepStrictEqual(before.map((r) => r.status), ["completed"])

        // An answer of 1 MB: its transcript cannot fit in what is left of the 512 KiB.
        const big = `big answer ${"x".repeat(1024 * 1024)}`
        yield* fs.writeFileString(path.join(dir, "script.json"), JSON.stringify(answerAfter(big, 0)))
        const second = yield* fibril(["run", "second", "--model", "scripted:script.json", "--json"], { cwd: dir })
        assert.strictEqual(second.exitCode, 3, second.stderr.slice(-2000))
        const final = second.stdout.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l)).find((
          e: { type: string }
        ) => e.type === "final") as { agent_id: string; text: string }
        assert.include(final.text, "big answer", "the answer is printed")
        const messages = second.stderr.split("\n").filter((l) => l.includes("could not be saved"))
        assert.deepStrictEqual(messages, [
          `fibril: the record of ${final.agent_id} could not be saved in ${state}/fibril.db: disk full (database or disk is full); its answer is printed above`
        ])

        // Nothing already stored is damaged: the first run's record reads as before.
        const db = new DatabaseSync(`${state}/fibril.db`, { readOnly: true })
        try {
          assert.deepStrictEqual(db.prepare("PRAGMA integrity_check").all().map((r) => r["integrity_check"]), ["ok"])
        } finally {
          db.close()
        }
        const after = rows(dir)
        assert.deepStrictEqual(after.find((r) => r.agent_id === before[0]!.agent_id), before[0])
        assert.include(before[0]?.outcome?.text, "small first answer")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    90_000
  )

  it.live(
    "fibril mcp on a store whose disk fills: the call is answered with an error naming the agent, earlier records intact",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const big = `big answer ${"x".repeat(1024 * 1024)}`
        const dir = yield* scriptedWorkspace({
          rules: [
            { match: { prompt: "big" }, turns: [{ text: big }] },
            { turns: [{ text: "small answer" }], repeat_last: true }
          ]
        })
        const state = path.join(dir, ".fibril", "state")
        yield* fs.makeDirectory(state, { recursive: true })
        const mounted = spawnSync("mount", ["-t", "tmpfs", "-o", "size=512k", "tmpfs", state], { encoding: "utf8" })
        if (mounted.status !== 0) {
          console.warn(`skipped: cannot mount a tmpfs here (${mounted.stderr.trim()}); run as root`)
          return
        }
        yield* Effect.addFinalizer(() => Effect.sync(() => spawnSync("umount", ["-l", state])))
        const client = yield* Effect.acquireRelease(
          Effect.promise(async () => {
            const transport = new StdioClientTransport({
              command: process.execPath,
              args: [sourceCondition, bin, "mcp", "--model", "scripted:script.json"],
              cwd: dir,
              env: { PATH: process.env["PATH"] ?? "", HOME: dir },
              stderr: "pipe"
            })
            const connected = new Client({ name: "fibril-test", version: "0.0.0" })
            await connected.connect(transport)
            return connected
          }),
          (opened) => Effect.promise(() => opened.close())
        )
        const task = (prompt: string) =>
          Effect.promise(() =>
            client.callTool({ name: "task", arguments: { prompt, description: prompt, subagent_type: "explore" } })
          )
        const textOf = (result: Record<string, unknown>): string => {
          const content = result["content"]
          return Array.isArray(content) ? content.map((part: { text?: string }) => part.text ?? "").join("") : ""
        }
        const small = yield* task("small")
        assert.isNotTrue(small.isError, textOf(small))
        const before = rows(dir)
        assert.deepStrictEqual(before.map((r) => r.status), ["completed"])

        const failed = yield* task("big")
        assert.isTrue(failed.isError, textOf(failed).slice(0, 500))
        assert.match(
          textOf(failed),
          /^the record of agent_\w+ could not be saved in .*\/fibril\.db: disk full \(database or disk is full\); this call's outcome is not recorded$/
        )
        assert.deepStrictEqual(rows(dir).find((r) => r.agent_id === before[0]!.agent_id), before[0])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    90_000
  )

  it.live("a row that does not decode is listed as unreadable, and show says why", () =>
    Effect.gen(function*() {
      const dir = yield* scriptedWorkspace(answerAfter("fine", 0))
      const made = yield* fibril(["run", "make the store", "--model", "scripted:script.json"], { cwd: dir })
      assert.strictEqual(made.exitCode, 0, made.stderr)
      const db = new DatabaseSync(`${dir}/.fibril/state/fibril.db`)
      try {
        db.prepare(
          `INSERT INTO fibril_agents (agent_id, parent_id, status, owner_boot, handle, created_at, finished_at, record)
           VALUES ('agent_broken', NULL, 'completed', 'someone', 'h-broken', ?, ?, ?)`
        ).run(Date.now(), Date.now(), JSON.stringify({ agent_id: "agent_broken", status: "exploded" }))
      } finally {
        db.close()
      }
      const listed = yield* fibril(["agents", "list", "--all"], { cwd: dir })
      assert.strictEqual(listed.exitCode, 0, listed.stderr)
      const line = listed.stdout.split("\n").find((l) => l.startsWith("agent_broken"))
      assert.include(line, "agent_broken  unreadable")
      assert.include(line, "the stored record does not match SubAgentRecord")
      const json = yield* fibril(["agents", "list", "--all", "--json"], { cwd: dir })
      const entry = (JSON.parse(json.stdout) as Array<{ agent_id: string; unreadable?: boolean; error?: string }>)
        .find((a) => a.agent_id === "agent_broken")
      assert.isTrue(entry?.unreadable)
      assert.include(entry?.error, "does not match SubAgentRecord")

      const shown = yield* fibril(["agents", "show", "agent_broken"], { cwd: dir })
      assert.notStrictEqual(shown.exitCode, 0)
      assert.include(shown.stderr, "agent agent_broken is recorded in")
      assert.include(shown.stderr, "but its record cannot be read: the stored record does not match SubAgentRecord")
      assert.notInclude(shown.stderr, "no agent")
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 60_000)

  it.live(
    ".fibril/state as a file: list and run say what is wrong and what is expected (exit 2)",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* scriptedWorkspace(answerAfter("never", 0))
        yield* fs.makeDirectory(path.join(dir, ".fibril"))
        const state = path.join(dir, ".fibril", "state")
        yield* fs.writeFileString(state, "not a directory")
        for (
          const args of [["agents", "list"], ["agents", "show", "agent_x"], [
            "run",
            "hi",
            "--model",
            "scripted:script.json"
          ]]
        ) {
          const result = yield* fibril(args, { cwd: dir })
          assert.strictEqual(result.exitCode, 2, `${args.join(" ")}: ${result.stderr}`)
          assert.include(result.stderr, `${state} is a file, not a directory`)
          assert.include(result.stderr, "Move or remove it")
          assert.notInclude(result.stdout, "No agents recorded")
        }
        assert.strictEqual(execFileSync("cat", [state], { encoding: "utf8" }), "not a directory", "left as it was")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    60_000
  )
})
