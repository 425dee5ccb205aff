// `fibril lab` as a person runs it (the real executable): a planted bug is found, shrunk and
// saved; the saved trace replays byte for byte; the report is an SVG with one lane per agent;
// the --config file of docs/lab.md is accepted and bad input is a usage error naming what is.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Path } from "effect"
import { fibril } from "./run.ts"

describe("fibril lab", () => {
  it.live("run finds a planted bug, replay reproduces it, report draws it", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = yield* fs.makeTempDirectoryScoped()
      const found = yield* fibril(
        ["lab", "run", "--runs", "200", "--seed", "7", "--tamper", "cap+1", "--invariants", "cap", "--out", "t.json"],
        { cwd: dir }
      )
      assert.strictEqual(found.exitCode, 1, found.stderr)
      assert.include(found.stdout, "FAILED cap: 2 sub-agents working at once (model calls in flight), cap 1")
      assert.include(found.stdout, "seed 7")
      assert.include(found.stderr, "200 experiments, seed 7")
      const trace = path.join(dir, "t.json")
      assert.isTrue(yield* fs.exists(trace))

      const replayed = yield* fibril(["lab", "replay", "t.json"], { cwd: dir })
      assert.include(replayed.stdout, "identical: the run replays byte for byte")
      assert.include(replayed.stdout, "invariant cap fails")
      assert.strictEqual(replayed.exitCode, 1)

      const report = yield* fibril(["lab", "report", "t.json", "--out", "run.svg"], { cwd: dir })
      assert.strictEqual(report.exitCode, 0, report.stderr)
      const svg = yield* fs.readFileString(path.join(dir, "run.svg"))
      assert.isTrue(svg.startsWith("<svg "))
      assert.strictEqual([...svg.matchAll(/<g class="lane" data-agent=/g)].length, 3) // n0, n1, n2
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 120_000)

  it.live(
    "the --config of docs/lab.md runs; an unknown invariant or key is a usage error",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const dir = yield* fs.makeTempDirectoryScoped()
        yield* fs.writeFileString(
          `${dir}/bounds.json`,
          `{ "maxNodes": 6, "maxOps": 6, "config": { "cap": 3, "admission": "queue" }, "faults": ["none", "hang"], "ops": ["cancel"] }`
        )
        const ok = yield* fibril(["lab", "run", "--runs", "10", "--seed", "1", "--config", "bounds.json"], { cwd: dir })
        assert.strictEqual(ok.exitCode, 0, ok.stdout + ok.stderr)
        assert.match(ok.stdout, /^passed: 10 experiments, 10 invariants, seed 1/)

        const unknown = yield* fibril(["lab", "run", "--runs", "5", "--invariants", "cap,fast"], { cwd: dir })
        assert.strictEqual(unknown.exitCode, 2)
        assert.include(unknown.stderr, `unknown invariant "fast"; the invariants are: cap, admission, terminal`)

        yield* fs.writeFileString(`${dir}/bad.json`, `{ "maxNode": 3 }`)
        const bad = yield* fibril(["lab", "run", "--runs", "5", "--config", "bad.json"], { cwd: dir })
        assert.strictEqual(bad.exitCode, 2)
        assert.include(bad.stderr, "maxNode")
        assert.include(bad.stderr, "accepted: maxNodes, maxOps")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    120_000
  )
})
