// The benchmark's adapters run BENCH.md's script correctly: every count checks out. The script
// keeps the shared harness's contract — the parent's tool is named `subagent`, and a summary
// counts only when it is the whole tool result the parent's model receives — so these runs
// are also the adapter's conformance test. No timing is asserted here (speed is measured by
// `npm run bench`, never in tests).
import { assert, describe, it } from "@effect/vitest"
import { spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import * as EffectAiFloor from "./effect-ai-floor.ts"
import * as EffectFloor from "./effect-floor.ts"
import * as Floor from "./floor.ts"
import * as Fibril from "./peer-adapter.ts"
import { makeScript, type Script } from "./script.ts"

const M = 3

const fanOutChecks = (s: Script, K: number, final: string) => {
  assert.strictEqual(final, `final: received ${K} summaries`)
  assert.deepStrictEqual(
    {
      summaries: s.counts.summaries,
      parentCalls: s.counts.parentCalls,
      childCalls: s.counts.childCalls,
      lookups: s.counts.lookups,
      badPayloads: s.counts.badPayloads
    },
    { summaries: K, parentCalls: 2, childCalls: K * (M + 1), lookups: K * M, badPayloads: 0 }
  )
}

const adapters = [
  ["fibril (memory store)", Fibril, "memory"],
  ["fibril (SQLite store)", Fibril, "file"],
  ["floor", Floor, "memory"],
  ["Effect floor", EffectFloor, "memory"],
  ["Effect floor with effect/ai values", EffectAiFloor, "memory"]
] as const

describe("bench adapters", () => {
  for (const [name, adapter, store] of adapters) {
    it(`${name}: W1 fan-out, unbounded and capped at 10`, async () => {
      for (const cap of [null, 10]) {
        const s = makeScript({ K: 25, M, blocking: false })
        const { final } = await adapter.runW1({ K: 25, M, cap, s, store })
        fanOutChecks(s, 25, final)
        await adapter.dispose(s)
      }
    })

    it(`${name}: W2 cancellation leaves no lookup pending, no timer armed, no model call after`, async () => {
      const K = 20
      const s = makeScript({ K, M, blocking: true })
      const controller = new AbortController()
      const settled = adapter.runW2({ K, M, signal: controller.signal, s, store }).then(
        () => "resolved",
        () => "rejected"
      )
      await s.allInLookup
      s.markAborted()
      controller.abort()
      assert.strictEqual(await settled, "rejected")
      assert.deepStrictEqual(
        {
          inLookup: s.counts.childrenInLookup,
          pending: s.counts.lookupsPending,
          timers: s.counts.timersArmed,
          after: s.counts.callsAfterAbort
        },
        { inLookup: K, pending: 0, timers: 0, after: 0 }
      )
      await adapter.dispose(s)
    })

    it(`${name}: W3 round trips reuse the layers built for the script`, async () => {
      const s = makeScript({ K: 1, M: 1, blocking: false })
      for (let i = 0; i < 20; i++) {
        const { final } = await adapter.runW3({ K: 1, M: 1, s, store })
        assert.strictEqual(final, "final: received 1 summaries")
      }
      assert.deepStrictEqual(
        {
          parentCalls: s.counts.parentCalls,
          childCalls: s.counts.childCalls,
          lookups: s.counts.lookups,
          badPayloads: s.counts.badPayloads
        },
        { parentCalls: 40, childCalls: 40, lookups: 20, badPayloads: 0 }
      )
      await adapter.dispose(s)
    })
  }
})

/**
 * Runs a bench script in a child process on the sources; resolves with its exit code and output,
 * or "hung" when it is still running after `hungAfterMs` (then it is killed).
 */
const runScript = (name: string, args: ReadonlyArray<string>, hungAfterMs: number) =>
  new Promise<{ readonly code: number | null | "hung"; readonly out: string; readonly err: string }>((resolve) => {
    const script = fileURLToPath(new URL(name, import.meta.url))
    const child = spawn(process.execPath, [script, ...args], {
      env: { ...process.env, NODE_OPTIONS: "--conditions=@fibril/source" },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let out = ""
    let err = ""
    child.stdout.on("data", (chunk) => (out += String(chunk)))
    child.stderr.on("data", (chunk) => (err += String(chunk)))
    const timer = setTimeout(() => {
      child.kill("SIGKILL")
      resolve({ code: "hung", out, err })
    }, hungAfterMs)
    child.on("exit", (code) => {
      clearTimeout(timer)
      resolve({ code, out, err })
    })
  })

// Generous: the run itself takes about a second; the heartbeat watchdog alone would keep an
// idle runtime's process alive for good (it slept 30 s at a time, forever).
const idleExit = (store: "memory" | "file") => runScript("./idle-exit.ts", [store], 25_000)

describe("an idle runtime", () => {
  for (const store of ["memory", "file"] as const) {
    it(`after an aborted run, without dispose, the process exits on its own (${store} store)`, async () => {
      const { code, out, err } = await idleExit(store)
      assert.strictEqual(code, 0, `exit: ${code}; stdout: ${out}; stderr: ${err}`)
      const report = JSON.parse(out.trim()) as { how: string; pending: number; handles: Array<string> }
      assert.strictEqual(report.how, "rejected")
      assert.strictEqual(report.pending, 0)
    }, 30_000)
  }
})

describe("the persistent store's floor (bench/sqlite-floor.ts)", () => {
  it("writes back every agent and message a W1 run stored, and reports its figures", async () => {
    const { code, out, err } = await runScript("./sqlite-floor.ts", ["10"], 25_000)
    assert.strictEqual(code, 0, `exit: ${code}; stderr: ${err}`)
    const row = JSON.parse(out.trim()) as Record<string, number | boolean>
    // The W1 script's child conversation: system, task, M lookups (call and result), the answer.
    assert.deepStrictEqual([row["ok"], row["agents"], row["messages_per_agent"]], [true, 10, 2 * M + 3])
    for (const field of ["us_per_agent", "cpu_us_per_agent", "json_us_per_agent", "json_bytes_per_agent"]) {
      assert.isAbove(row[field] as number, 0, field)
    }
  }, 30_000)
})
