import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as ClusterClient from "../src/ClusterClient.ts"
import { provideNode, setup } from "./support.ts"

describe("cluster mode on TestRunner", () => {
  it.live("task runs a child workflow and waits: its answer is the task's tool result; transcripts are stored", () =>
    Effect.gen(function*() {
      const built = yield* setup({
        rules: [
          {
            match: { depth: 1 },
            turns: [{ tool_calls: [{ name: "list_dir", args: {} }] }, { text: "child found 0 files" }]
          },
          {
            match: { depth: 0 },
            turns: [
              { tool_calls: [{ name: "task", args: { prompt: "count the files", description: "count" } }] },
              { text: "root: done" }
            ]
          }
        ]
      })
      const outcome = yield* built.provide(
        ClusterClient.run({ prompt: "go", workspace: built.root })
      )
      assert.strictEqual(outcome.text, "root: done")
      assert.strictEqual(outcome.steps, 2)
      const rows = yield* built.store.list
      assert.strictEqual(rows.length, 2)
      const child = rows.find((r) => r.depth === 1)!
      assert.strictEqual(child.status, "completed")
      assert.strictEqual(child.text, "child found 0 files")
      const transcript = yield* built.store.transcript(outcome.agentId)
      assert.deepStrictEqual(transcript.map((m) => m.role), ["user", "assistant", "tool", "assistant"])
      const childTranscript = yield* built.store.transcript(child.agentId)
      assert.deepStrictEqual(childTranscript.map((m) => m.role), ["user", "assistant", "tool", "assistant"])
    }).pipe(Effect.scoped, provideNode))
})
