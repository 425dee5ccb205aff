// `fibril ui` and `fibril run --ui` in a real browser (Debian's chromium, driven by
// playwright-core), and `/agui` read by `@ag-ui/client`. One browser and one set of processes
// for the file: `fibril run --ui` (a scripted fan-out whose children take seconds), another
// `fibril run` on the same workspace (its child hangs until the page cancels it), a
// `fibril ui` that shows every process's agents, a `fibril run --agui`, and a `fibril run
// --approve wait` whose child's write waits for an answer given on the page.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, FileSystem, Path, Stream } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { readFileSync } from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import { bin, repoRoot, scriptedWorkspace, sourceCondition } from "./run.ts"

const report = (summary: string) =>
  `SUMMARY:\n${summary}\n\nCHANGES:\nnone\n\nEVIDENCE:\nlisted\n\nRISKS:\nnone\n\nBLOCKERS:\nnone`

const task = (description: string, prompt: string) => ({
  name: "task",
  args: { description, prompt, subagent_type: "explore" }
})

/** Run A fans out to two explorers that take ~2 s; run B's one child hangs until cancelled. */
const script = {
  rules: [
    { match: { prompt: "wait forever" }, turns: [{ hang: true }] },
    {
      match: { role: "explore" },
      turns: [
        { tool_calls: [{ name: "list_dir", args: {} }], delay_ms: 1500 },
        { text: report("listed the workspace"), delay_ms: 500 }
      ]
    },
    {
      match: { depth: 0, prompt: "explore every part" },
      turns: [{ tool_calls: [task("part 0", "look at part 0"), task("part 1", "look at part 1")] }, {
        text: "All parts explored."
      }]
    },
    {
      match: { depth: 0, prompt: "start one that hangs" },
      turns: [{ tool_calls: [task("stuck", "wait forever")] }, { text: "B done." }]
    },
    // Run D: its child's write_file waits for a person (`ask`), answered on the page.
    {
      match: { depth: 1, prompt: "write it" },
      turns: [
        { tool_calls: [{ name: "write_file", args: { path: "approved.txt", content: "yes\n" } }] },
        { text: report("wrote it") }
      ]
    },
    {
      match: { depth: 0, prompt: "write with approval" },
      turns: [{
        tool_calls: [{ name: "task", args: { description: "writer", prompt: "write it", subagent_type: "general" } }]
      }, { text: "D done." }]
    }
  ]
}

const chromiumFlags = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync"
]

/** A `fibril` process kept running for the test's scope; resolves its printed page URL when it has one. */
const start = (args: ReadonlyArray<string>, cwd: string) =>
  Effect.gen(function*() {
    const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
    const handle = yield* spawner.spawn(ChildProcess.make(process.execPath, [sourceCondition, bin, ...args], {
      cwd,
      env: { OPENAI_API_KEY: undefined, OPENAI_BASE_URL: undefined, FIBRIL_MODEL: undefined },
      extendEnv: true
    }))
    const url = yield* Deferred.make<string>()
    let stderr = ""
    let stdout = ""
    yield* handle.stderr.pipe(
      Stream.decodeText(),
      Stream.runForEach((text) =>
        Effect.suspend(() => {
          stderr += text
          const found = /fibril ui: (http:\/\/\S+)/.exec(stderr)
          return found === null ? Effect.void : Deferred.succeed(url, found[1]!)
        })
      ),
      Effect.forkScoped
    )
    yield* handle.stdout.pipe(
      Stream.decodeText(),
      Stream.runForEach((text) => Effect.sync(() => void (stdout += text))),
      Effect.forkScoped
    )
    return {
      handle,
      url: Deferred.await(url).pipe(
        Effect.timeoutOrElse({
          duration: "60 seconds",
          orElse: () => Effect.die(`no URL printed; stderr: ${stderr}`)
        })
      ),
      output: () => ({ stdout, stderr })
    }
  })

/** Every address of this machine but 127.0.0.1 (::1 included): the page must not answer on any. */
const otherAddresses = () =>
  [
    "::1",
    ...Object.values(os.networkInterfaces()).flatMap((list) => (list ?? []).map((info) => info.address))
  ].filter((address, i, all) => address !== "127.0.0.1" && all.indexOf(address) === i)

const connects = (host: string, port: number) =>
  Effect.callback<boolean>((resume) => {
    const socket = net.connect({ host, port })
    socket.once("connect", () => {
      socket.destroy()
      resume(Effect.succeed(true))
    })
    socket.once("error", () => resume(Effect.succeed(false)))
    socket.setTimeout(2000, () => {
      socket.destroy()
      resume(Effect.succeed(false))
    })
  })

/** The local address the kernel lists for a listening TCP port (IPv4 /proc/net/tcp, hex). */
const listeners = (port: number) =>
  ["/proc/net/tcp", "/proc/net/tcp6"].flatMap((file) =>
    readFileSync(file, "utf8").split("\n").slice(1).map((line) => line.trim().split(/\s+/)).filter((cols) =>
      cols.length > 3 && cols[3] === "0A" && parseInt(cols[1]!.split(":")[1]!, 16) === port
    ).map((cols) => cols[1]!.split(":")[0]!)
  )

describe("fibril ui", () => {
  it.live(
    "run --ui: the tree goes running → completed live, a transcript shows its tool calls, a lane per agent; 401 without the token; 127.0.0.1 only; /agui in order and the same as run --agui lines; fibril ui shows four processes, cancels across them and answers an ask question",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const dir = yield* scriptedWorkspace(script)
        yield* fs.makeDirectory(path.join(dir, ".fibril"))
        yield* fs.writeFileString(
          path.join(dir, ".fibril", "config.toml"),
          [
            "[permissions]",
            "ask = [\"write_file\"]",
            "[permissions.usd_per_mtok]",
            "\"scripted:script.json\" = 2.5"
          ].join("\n")
        )
        const model = ["--model", "scripted:script.json"]
        // Everything starts at once: five processes and the browser.
        const [a, b, ui, agui, d, browser, { HttpAgent }] = yield* Effect.all([
          start(["run", "explore every part", ...model, "--ui"], dir),
          start(["run", "start one that hangs", ...model, "--json"], dir),
          start(["ui"], dir),
          start(["run", "explore every part", ...model, "--agui"], dir),
          start(["run", "write with approval", ...model, "--approve", "wait", "--json"], dir),
          // Loaded here, not at the top: importing them takes seconds, spent while the processes start.
          Effect.acquireRelease(
            Effect.flatMap(fs.makeTempDirectoryScoped(), (profile) =>
              Effect.promise(async () =>
                (await import("playwright-core")).chromium.launchPersistentContext(profile, {
                  executablePath: "/usr/bin/chromium",
                  headless: true,
                  args: chromiumFlags
                })
              )),
            (context) =>
              Effect.promise(() =>
                context.close()
              )
          ),
          Effect.promise(() => import("@ag-ui/client"))
        ], { concurrency: "unbounded" })

        // --- The run's page ---
        const url = yield* a.url
        const page = yield* Effect.promise(() => browser.newPage())
        yield* Effect.promise(() => page.goto(url))
        // A marker a reload would lose: the states below change in the same document.
        yield* Effect.promise(() => page.evaluate(() => Object.assign(globalThis, { fibrilMarker: 1 })))
        yield* Effect.promise(() => page.waitForSelector("tr.agent[data-status=running]"))
        const runningSeen = yield* Effect.promise(() =>
          page.$$eval("tr.agent[data-status=running]", (rows) => rows.length)
        )
        assert.isAtLeast(runningSeen, 1)
        // The root and its two children, all completed, without a reload.
        const rootId = (/root agent (agent_\w+)/.exec(yield* waitFor(() => a.output().stdout, /root agent/))!)[1]!
        yield* until(page, (rows) => {
          const mine = rows.filter((row) => row.id === rootId || row.parent === rootId)
          return mine.length === 3 && mine.every((row) => row.status === "completed")
        })
        assert.strictEqual(yield* Effect.promise(() => page.evaluate(() => Reflect.get(globalThis, "fibrilMarker"))), 1)
        // A lane per agent in the timeline, and the cap drawn as a line.
        const agentRows = yield* Effect.promise(() =>
          page.$$eval("tr.agent", (all) => all.map((row) => row.getAttribute("data-agent-id")).sort())
        )
        const lanes = yield* Effect.promise(() =>
          page.$$eval("rect.lane", (all) => all.map((lane) => lane.getAttribute("data-agent-id")).sort())
        )
        assert.deepStrictEqual(lanes, agentRows)
        assert.strictEqual(yield* Effect.promise(() => page.locator("line.cap").count()), 1)
        // A child's transcript, with its tool call.
        yield* Effect.promise(() => page.locator(`tr.agent[data-parent-id=${rootId}]`, { hasText: "part 0" }).click())
        yield* Effect.promise(() => page.waitForSelector("#transcript .msg.tool-call"))
        const calls = yield* Effect.promise(() =>
          page.$$eval("#transcript .msg.tool-call", (all) => all.map((m) => m.textContent))
        )
        assert.isTrue(calls.some((text) => text!.includes("→ list_dir")), JSON.stringify(calls))
        assert.include(yield* Effect.promise(() => page.locator("#result").innerText()), "listed the workspace")
        const screenshot = yield* Effect.promise(() => page.screenshot({ fullPage: true }))
        assert.isAbove(screenshot.length, 10_000)
        // Written to docs/ only when asked (FIBRIL_UI_SCREENSHOT=1): the committed picture is not rewritten by every run.
        if (process.env["FIBRIL_UI_SCREENSHOT"] === "1") {
          yield* fs.writeFile(path.join(repoRoot, "docs", "ui.png"), screenshot)
        }

        // --- The token, and 127.0.0.1 only ---
        const parsed = new URL(url)
        const bare = `${parsed.origin}/`
        for (
          const attempt of [
            bare,
            `${bare}events`,
            `${bare}agent?id=${rootId}`,
            `${bare}?token=wrong${parsed.searchParams.get("token")!.slice(5)}`
          ]
        ) {
          const response = yield* Effect.promise(() => fetch(attempt))
          assert.strictEqual(response.status, 401, attempt)
        }
        const cancelWithout = yield* Effect.promise(() => fetch(`${bare}cancel?id=${rootId}`, { method: "POST" }))
        assert.strictEqual(cancelWithout.status, 401)
        const port = Number(parsed.port)
        for (const address of otherAddresses()) assert.isFalse(yield* connects(address, port), address)
        assert.deepStrictEqual(listeners(port), ["0100007F"])
        assert.strictEqual(parsed.hostname, "127.0.0.1")

        // --- AG-UI: the same run, read by @ag-ui/client ---
        const seen: Array<{ type: string; subagentRunId?: string; toolCallName?: string; delta?: string }> = []
        const agent = new HttpAgent({
          url: `${bare}agui`,
          headers: { authorization: `Bearer ${parsed.searchParams.get("token")}` }
        })
        yield* Effect.promise(() =>
          agent.runAgent({}, {
            onEvent: ({ event }) => {
              seen.push(event as (typeof seen)[number])
            }
          })
        )
        const types = seen.map((event) => event.type)
        assert.strictEqual(types[0], "RUN_STARTED")
        assert.strictEqual(types.at(-1), "RUN_FINISHED")
        const children = [...new Set(seen.flatMap((e) => e.type === "SUBAGENT_STARTED" ? [e.subagentRunId!] : []))]
        assert.strictEqual(children.length, 2)
        for (const child of children) {
          const at = (type: string, extra: (e: (typeof seen)[number]) => boolean = () => true) =>
            seen.findIndex((e) => e.type === type && e.subagentRunId === child && extra(e))
          const started = at("SUBAGENT_STARTED")
          const call = at("TOOL_CALL_START", (e) => e.toolCallName === "list_dir")
          const result = at("TOOL_CALL_RESULT")
          const finished = at("SUBAGENT_FINISHED")
          assert.isTrue(started >= 0 && started < call && call < result && result < finished, JSON.stringify(types))
        }
        const finalText = seen.findIndex((e) =>
          e.type === "TEXT_MESSAGE_CONTENT" && e.subagentRunId === undefined && e.delta === "All parts explored."
        )
        assert.isTrue(finalText > seen.findLastIndex((e) => e.type === "SUBAGENT_FINISHED"))
        assert.strictEqual(finalText, seen.length - 3) // then TEXT_MESSAGE_END, RUN_FINISHED

        // --- `fibril run --agui`: the same events as JSON lines on stdout, and nothing else there ---
        const aguiExit = yield* agui.handle.exitCode
        assert.strictEqual(Number(aguiExit), 0, JSON.stringify(agui.output()))
        const lines = agui.output().stdout.trim().split("\n").map((line) => JSON.parse(line) as { type: string })
        assert.strictEqual(lines[0]!.type, "RUN_STARTED")
        assert.strictEqual(lines.at(-1)!.type, "RUN_FINISHED")
        assert.strictEqual(lines.filter((line) => line.type === "SUBAGENT_FINISHED").length, 2)
        // The same events as /agui's run (a run of its own: its two children interleave as they go).
        assert.deepStrictEqual(lines.map((line) => line.type).toSorted(), types.toSorted())

        // --- `fibril ui`: the agents of the four runs (four processes), and cancel across processes ---
        const other = yield* Effect.promise(() => browser.newPage())
        const uiUrl = yield* ui.url
        yield* Effect.promise(() => other.goto(uiUrl))
        yield* until(other, (rows) => rows.length >= 10 && new Set(rows.map((row) => row.owner)).size === 4)
        // Tokens priced by [permissions.usd_per_mtok] for the agents' model.
        const cost = yield* Effect.promise(() => other.locator("tr.agent .cost").first().innerText())
        assert.match(cost, /^\$\d+\.\d{4}$/)
        const stuck = other.locator("tr.agent", { hasText: "stuck" })
        yield* Effect.promise(() => stuck.locator("button.cancel").click())
        yield* Effect.promise(() => other.waitForSelector("tr.agent[data-status=cancelled]", { timeout: 20_000 }))
        // Run B goes on without its child and ends; its records say why the child stopped.
        const bExit = yield* b.handle.exitCode
        assert.strictEqual(Number(bExit), 0, JSON.stringify(b.output()))
        assert.include(b.output().stdout, "Cancelled from fibril ui")

        // --- A question of run D's child (an `ask` rule) on the page; allowed there, the file is written ---
        const question = other.locator("tr.agent", { hasText: "writer" }).locator(".question")
        yield* Effect.promise(() => question.waitFor({ timeout: 30_000 }))
        assert.include(yield* Effect.promise(() => question.innerText()), "write_file")
        assert.isFalse(yield* fs.exists(path.join(dir, "approved.txt")), "written before anyone allowed it")
        yield* Effect.promise(() => question.locator("button.allow").click())
        const dExit = yield* d.handle.exitCode
        assert.strictEqual(Number(dExit), 0, JSON.stringify(d.output()))
        assert.strictEqual(yield* fs.readFileString(path.join(dir, "approved.txt")), "yes\n")
        const noAnswer = yield* Effect.promise(() =>
          fetch(uiUrl.replace("/?", "/answer?") + "&id=q_nope&decision=allow", { method: "POST" })
        )
        assert.strictEqual(noAnswer.status, 404)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    120_000
  )
})

interface Row {
  readonly id: string
  readonly parent: string
  readonly status: string
  readonly text: string
  /** The owner cell without its state: `pid 123@host`. */
  readonly owner: string
}

/** Reads the page's tree every 100 ms (at most 30 s) until `done` holds: the page is never reloaded. */
const until = (page: import("playwright-core").Page, done: (rows: ReadonlyArray<Row>) => boolean) =>
  Effect.gen(function*() {
    let rows: ReadonlyArray<Row> = []
    for (let i = 0; i < 300; i++) {
      rows = yield* Effect.promise(() =>
        page.$$eval("tr.agent", (all) =>
          all.map((row) => ({
            id: row.getAttribute("data-agent-id") ?? "",
            parent: row.getAttribute("data-parent-id") ?? "",
            status: row.getAttribute("data-status") ?? "",
            text: row.textContent ?? "",
            owner: (row.children[8]?.textContent ?? "").split(" (")[0] ?? ""
          })))
      )
      if (done(rows)) return rows
      yield* Effect.sleep("100 millis")
    }
    return yield* Effect.die(`the page never got there: ${JSON.stringify(rows)}`)
  })

/** Polls `read` (a bounded wait, for a real process's output) until it matches. */
const waitFor = (read: () => string, pattern: RegExp) =>
  Effect.gen(function*() {
    for (let i = 0; i < 600; i++) {
      const text = read()
      if (pattern.test(text)) return text
      yield* Effect.sleep("100 millis")
    }
    return yield* Effect.die(`never matched ${pattern}: ${read()}`)
  })
