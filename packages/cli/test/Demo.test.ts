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
      // the tree: a root general agent, three explorers and a reviewer, all completed
      const tree = stdout.slice(stdout.indexOf("\nAgents\n"), stdout.indexOf("\nResults"))
      assert.match(tree, /✓ general \[agent_\w+\] completed {2}steps 3 {2}tools 4/)
      assert.strictEqual(tree.match(/├─ ✓ explore|└─ ✓ explore/g)?.length, 3)
      assert.match(tree, /└─ ✓ review "Review the exploration"/)
      // the explorers really ran their tools here: the README and this package were found
      assert.include(stdout, "read_file:      1\t# Fibril")
      assert.include(stdout, "evidence: - glob: package.json")
      assert.include(stdout, "evidence: - grep: packages/core/src/SubAgentManager.ts")
      assert.include(stdout, "Final answer")
      assert.match(stdout, /Totals: 5 agents, \d+ tool calls, \d+ input \+ \d+ output tokens/)
      assert.include(stdout, "Model: scripted.")
    }).pipe(Effect.provide(NodeServices.layer)))
})
