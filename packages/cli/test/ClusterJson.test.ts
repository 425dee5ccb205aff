// `fibril run --json` and `fibril run --cluster --json` speak one stream: for the same scripted
// tree, the same event types, of the same agents (by depth) and tools, in the same order,
// between the opening `root` and the closing `final`. Real processes: the embedded run, and a
// `fibril worker` plus the `fibril run --cluster` client on one SQLite file.
import { afterAll, assert, describe, it } from "@effect/vitest"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { freePort } from "../../cluster/test/postgres.ts"
import { fibril, killAll, until } from "../../cluster/test/processes.ts"

const tmp = mkdtempSync(path.join(os.tmpdir(), "fibril-cluster-json-"))

afterAll(async () => {
  await killAll()
  rmSync(tmp, { recursive: true, force: true })
})

/** A root that delegates with `task`; the child lists the directory, then both answer. */
const script = {
  rules: [
    {
      match: { depth: 1 },
      turns: [{ tool_calls: [{ name: "list_dir", args: {} }] }, { text: "child done" }]
    },
    {
      match: { depth: 0 },
      turns: [
        { tool_calls: [{ name: "task", args: { description: "a look", prompt: "look" } }] },
        { text: "root done" }
      ]
    }
  ]
}

interface Line {
  readonly type: string
  readonly depth?: number
  readonly tool?: string
}

const linesOf = (stdout: string): ReadonlyArray<Line> =>
  stdout.trim().split("\n").map((line) => JSON.parse(line) as Line)

/** What must match: each line's type, its agent's depth and its tool. */
const sequence = (lines: ReadonlyArray<Line>) =>
  lines.map((line) => [line.type, line.depth, line.tool].filter((part) => part !== undefined).join(":"))

describe("fibril run --cluster --json", () => {
  it("prints the event types of fibril run --json, in the same order, between root and final", async () => {
    writeFileSync(path.join(tmp, "script.json"), JSON.stringify(script))
    const model = `scripted:${path.join(tmp, "script.json")}`

    const embedded = fibril(["run", "go", "--cwd", tmp, "--model", model, "--json"])
    assert.strictEqual(await embedded.done, 0, embedded.out.stderr)

    const url = `sqlite:${path.join(tmp, "cluster.db")}`
    const migrated = fibril(["cluster", "migrate", "--cluster", url])
    assert.strictEqual(await migrated.done, 0, migrated.out.stderr)
    const port = String(await freePort())
    const worker = fibril(["worker", "--cluster", url, "--cwd", tmp, "--model", model, "--port", port])
    await until(() => worker.out.stderr.includes("fibril worker: pid"), `worker up (${worker.out.stderr})`)
    const client = fibril(["run", "go", "--cluster", url, "--cwd", tmp, "--json"])
    assert.strictEqual(await client.done, 0, client.out.stderr)
    worker.child.kill("SIGTERM")

    const expected = sequence(linesOf(embedded.out.stdout))
    // The tree this script makes, as the embedded engine streams it (a check of the reference).
    assert.deepStrictEqual(expected, [
      "root",
      "spawned:0",
      "started:0",
      "step:0",
      "tool_call:0:task",
      "spawned:1",
      "started:1",
      "step:1",
      "tool_call:1:list_dir",
      "tool_result:1:list_dir",
      "text:1",
      "step:1",
      "completed:1",
      "tool_result:0:task",
      "text:0",
      "step:0",
      "completed:0",
      "final"
    ])
    assert.deepStrictEqual(sequence(linesOf(client.out.stdout)), expected)
    // The answer arrives in the `text` deltas as it does from the embedded engine.
    const texts = (stdout: string) =>
      linesOf(stdout).filter((line) => line.type === "text").map((line) => (line as { delta?: string }).delta)
    assert.deepStrictEqual(texts(client.out.stdout), texts(embedded.out.stdout))
  }, 120_000)
})
