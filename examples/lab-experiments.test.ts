// The two worked experiments of docs/lab.md run as written, give the figures the page reports,
// and produce their SVG figures.
import { NodeServices } from "@effect/platform-node"
import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import { heartbeat, plantedBug, starvation } from "./lab-experiments.ts"

const lanes = (svg: string) => [...svg.matchAll(/<g class="lane" data-agent="(n\d+)"/g)].map((m) => m[1])

it.effect(
  "experiment 1: under a cap of 3 with queue admission, trees of depth 1-3 complete; working agents never exceed the cap",
  () =>
    Effect.gen(function*() {
      const { rows, figure } = yield* starvation
      assert.deepStrictEqual(
        rows.map((r) => [r.depth, r.agents, r.completed, r.autoCancelled, r.neverStarted]),
        [[1, 2, 2, 0, 0], [2, 6, 6, 0, 0], [3, 14, 14, 0, 0]]
      )
      assert.deepStrictEqual(rows.map((r) => [r.peakWorking, r.peakRunning]), [[2, 2], [3, 5], [3, 8]])
      assert.deepStrictEqual(rows.map((r) => r.rootDoneMs), [2020, 7020, 18_020])
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

it.effect(
  "the picture of a failure: cap+1 at seed 7, the violation marked on n2 at 10 ms, the axis fitted to the run",
  () =>
    Effect.gen(function*() {
      const { figure, violation } = yield* plantedBug
      assert.deepStrictEqual([violation.invariant, violation.agent, violation.at], ["cap", "n2", 10])
      assert.include(figure, `<g class="violation" data-invariant="cap" data-agent="n2" data-at="10">`)
      assert.include(figure, `<g class="time-axis" data-t-max="30" `)
      assert.strictEqual(lanes(figure).length, 3)
    }).pipe(Effect.provide(NodeServices.layer)),
  60_000
)
