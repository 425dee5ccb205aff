// The two worked experiments of docs/lab.md run as written, give the figures the page reports,
// and produce their SVG figures.
import { NodeServices } from "@effect/platform-node"
import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import { heartbeat, starvation } from "./lab-experiments.ts"

const lanes = (svg: string) => [...svg.matchAll(/<g class="lane" data-agent="(n\d+)">/g)].map((m) => m[1])

it.effect(
  "experiment 1: under a cap of 3 with queue admission, a tree of depth 3 starves until the heartbeat",
  () =>
    Effect.gen(function*() {
      const { rows, figure } = yield* starvation
      assert.deepStrictEqual(rows.map((r) => [r.depth, r.agents, r.completed]), [[1, 2, 2], [2, 6, 6], [3, 14, 4]])
      const deep = rows[2]!
      assert.strictEqual(
        deep.autoCancelled,
        2,
        "the parents waiting on queued children only, cancelled by the watchdog"
      )
      assert.strictEqual(deep.neverStarted, 8)
      assert.isAtLeast(deep.virtualMs, 300_000)
      assert.strictEqual(lanes(figure).length, 7)
    }).pipe(Effect.provide(NodeServices.layer)),
  60_000
)

it.effect(
  "experiment 2: a heartbeat shorter than the children's work no longer cancels a waiting coordinator",
  () =>
    Effect.gen(function*() {
      const { rows, figure } = yield* heartbeat
      assert.deepStrictEqual(rows.map((r) => [r.heartbeatSecs, r.completed, r.autoCancelled]), [
        [5, 4, 0],
        [10, 4, 0],
        [30, 4, 0],
        [300, 4, 0]
      ])
      assert.strictEqual(lanes(figure).length, 5)
    }).pipe(Effect.provide(NodeServices.layer)),
  60_000
)
