// Checked claims from the command line: `fibril run` (no terminal: one line per event) marks
// the child whose answer cites what it never read, and `fibril agents show` lists the claim
// with the reason. One real run of the CLI.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { fibril, scriptedWorkspace } from "./run.ts"

const script = {
  rules: [
    {
      match: { depth: 1 },
      turns: [{
        text:
          "SUMMARY:\nlooked\n\nCHANGES:\nnone\n\nEVIDENCE:\nsrc/never.ts:12 has it\n\nRISKS:\nnone\n\nBLOCKERS:\nnone"
      }]
    },
    {
      match: { depth: 0 },
      turns: [{ tool_calls: [{ name: "task", args: { description: "look", prompt: "look around" } }] }, {
        text: "done"
      }]
    }
  ]
}

describe("fibril: checked claims", () => {
  it.live(
    "run marks the child with an unverified claim; agents show lists it with the reason",
    () =>
      Effect.gen(function*() {
        const dir = yield* scriptedWorkspace(script)
        const run = yield* fibril(["run", "go", "--model", "scripted:script.json"], { cwd: dir })
        assert.strictEqual(run.exitCode, 0, run.stderr)
        const output = run.stdout + run.stderr
        const marked = /✓ general "look" completed [\d.]+s ! 1 unverified claim .*\[(agent_\w+)\]/.exec(output)
        assert.isNotNull(marked, output)
        const shown = yield* fibril(["agents", "show", marked![1]!], { cwd: dir })
        assert.strictEqual(shown.exitCode, 0, shown.stderr)
        const record = JSON.parse(shown.stdout) as { outcome: { claims: unknown } }
        assert.deepStrictEqual(record.outcome.claims, {
          checked: 1,
          verified: 0,
          unverified: [{ claim: "src/never.ts:12", why: "it never read, grepped or wrote src/never.ts" }]
        })
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    { timeout: 60_000 }
  )
})
