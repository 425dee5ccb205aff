// `fibril lab run --workers N`: the runs spread over worker threads in seeded chunks. What a
// run finds depends on its seed and runs, not on the number of workers; a failure names its
// chunk's seed, which finds and shrinks the same failure in one thread; every run is counted.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Invariants, Lab, LabBugs } from "@fibril/testkit"
import { Effect, Fiber, FileSystem } from "effect"
import * as LabParallel from "../src/LabParallel.ts"
import { fibril } from "./run.ts"

const bounds = { maxNodes: 3, maxOps: 3 }

describe("the lab on worker threads", () => {
  it("chunk seeds are fixed by the run's seed and the chunk's index, and differ between chunks", () => {
    const seeds = Array.from({ length: 64 }, (_, chunk) => LabParallel.chunkSeed(42, chunk))
    assert.strictEqual(new Set(seeds).size, 64)
    assert.deepStrictEqual(seeds, Array.from({ length: 64 }, (_, chunk) => LabParallel.chunkSeed(42, chunk)))
    for (const seed of seeds) assert.isTrue(Number.isInteger(seed) && seed >= 0 && seed < 2 ** 31)
    assert.notStrictEqual(LabParallel.chunkSeed(42, 0), LabParallel.chunkSeed(43, 0))
  })

  it.live(
    "a planted bug is found in the same chunk whatever the number of workers, and again in one thread",
    () =>
      Effect.gen(function*() {
        let progress = 0
        const two = yield* LabParallel.check({
          runs: 1000,
          seed: 11,
          workers: 2,
          bounds,
          invariants: ["cap"],
          tamper: LabBugs.capPlusOne.name,
          onProgress: (done) => void (progress = Math.max(progress, done))
        })
        const three = yield* LabParallel.check({
          runs: 1000,
          seed: 11,
          workers: 3,
          bounds,
          invariants: ["cap"],
          tamper: LabBugs.capPlusOne.name
        })
        assert.strictEqual(two.result._tag, "Failed")
        assert.strictEqual(three.result._tag, "Failed")
        if (two.result._tag !== "Failed" || three.result._tag !== "Failed") return
        assert.strictEqual(two.result.violation.invariant, "cap")
        assert.isTrue(progress > 0)
        assert.deepStrictEqual(three.chunk, two.chunk)
        assert.deepStrictEqual(three.result.shrunk, two.result.shrunk)
        assert.strictEqual(two.chunk!.seed, LabParallel.chunkSeed(11, two.chunk!.index))
        // The chunk's own check, in this thread, finds and shrinks the same failure.
        const alone = yield* Lab.check({
          runs: two.chunk!.runs,
          seed: two.chunk!.seed,
          bounds,
          invariants: Invariants.all.filter((invariant) => invariant.name === "cap"),
          tamper: LabBugs.capPlusOne
        })
        assert.strictEqual(alone._tag, "Failed")
        if (alone._tag === "Failed") assert.deepStrictEqual(alone.shrunk, two.result.shrunk)
      }).pipe(Effect.provide(NodeServices.layer)),
    120_000
  )

  it.live("interrupted, it stops its workers: nothing more is reported", () =>
    Effect.gen(function*() {
      const seen = { progress: 0 }
      const fiber = yield* Effect.forkChild(
        LabParallel.check({
          runs: 100_000,
          seed: 1,
          workers: 2,
          bounds,
          onProgress: (done) => void (seen.progress = done)
        })
      )
      while (seen.progress === 0) yield* Effect.sleep("50 millis")
      yield* Fiber.interrupt(fiber)
      const stopped = seen.progress
      yield* Effect.sleep("1 second")
      assert.strictEqual(seen.progress, stopped, "no progress after the interruption")
      assert.isBelow(stopped, 100_000)
    }), 60_000)

  it.live(
    "every run is counted; the CLI's --workers runs it and refuses a negative count",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const dir = yield* fs.makeTempDirectoryScoped()
        const ok = yield* fibril(["lab", "run", "--runs", "600", "--seed", "3", "--workers", "2"], { cwd: dir })
        assert.strictEqual(ok.exitCode, 0, ok.stdout + ok.stderr)
        assert.match(ok.stdout, /^passed: 600 experiments, 12 invariants, seed 3/)
        assert.include(ok.stderr, "600 experiments, seed 3, 2 worker threads")
        assert.include(ok.stderr, "600/600")

        const found = yield* fibril(
          ["lab", "run", "--runs", "500", "--seed", "7", "--tamper", "cap+1", "--invariants", "cap", "--workers", "2"],
          { cwd: dir }
        )
        assert.strictEqual(found.exitCode, 1, found.stderr)
        assert.include(found.stdout, "FAILED cap:")
        assert.match(found.stdout, /found in chunk \d+ of this run: fibril lab run --seed \d+ --runs \d+ --workers 1/)

        const negative = yield* fibril(["lab", "run", "--runs", "5", "--workers", "-1"], { cwd: dir })
        assert.strictEqual(negative.exitCode, 2)
        assert.include(negative.stderr, "--workers must be 0 (one per core) or more (got -1)")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    180_000
  )
})
