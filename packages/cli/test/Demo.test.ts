import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { fibril } from "./run.ts"

describe("fibril demo", () => {
  it.live("runs the scripted scenario on the real workspace and exits 0", () =>
    Effect.gen(function*() {
      const { stdout, stderr, exitCode } = yield* fibril(["demo"])
      assert.strictEqual(exitCode, 0, stderr)
      assert.include(stdout, "the model is SCRIPTED")
      // the final tree, once: a root general agent, three explorers and a reviewer, all completed
      assert.strictEqual(stdout.split("\nAgents\n").length, 2)
      const tree = stdout.slice(stdout.indexOf("\nAgents\n"), stdout.indexOf("\nResults"))
      assert.match(tree, /✓ general completed [\d.]+s {2}steps 3 {2}tools 4 {2}tokens [\d.k]+ own, [\d.k]+ tree/)
      assert.strictEqual(tree.match(/├─ ✓ explore|└─ ✓ explore/g)?.length, 3)
      assert.match(tree, /└─ ✓ review "Review the findings" completed/)
      // the explorers really ran their tools here, and their reports read like it
      assert.match(stdout, /summary: {2}The workspace has \d+ top-level entries: \d+ directories \(.*packages/)
      assert.include(stdout, "packages/core/package.json")
      assert.match(stdout, /summary: {2}There are \d+ test files in \d+ directories, mostly packages\/core\/test/)
      assert.include(
        stdout,
        `summary:  The README ("Fibril") opens: "An Effect-native sub-agent runtime for TypeScript."`
      )
      assert.include(stdout, "evidence: - README.md:1: # Fibril")
      assert.include(stdout, "Final answer")
      assert.match(stdout, /Totals: 5 agents, \d+ tool calls, \d+ input \+ \d+ output tokens/)
      assert.include(stdout, "Model: scripted.")
    }).pipe(Effect.provide(NodeServices.layer)))
})
