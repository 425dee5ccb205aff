// `fibril lab` as a person runs it (the real executable): a planted bug is found, shrunk and
// saved; the saved trace replays byte for byte; the report is an SVG with one lane per agent;
// the --config file of docs/lab.md is accepted and bad input is a usage error naming what is.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import * as Invariants from "@fibril/testkit/Invariants"
import * as LabBugs from "@fibril/testkit/LabBugs"
import { Effect, FileSystem, Path } from "effect"
import * as LabNames from "../src/LabNames.ts"
import { fibril } from "./run.ts"

// `fibril lab run --help` names the invariants and planted bugs without loading the lab
// (LabNames.ts): the lists it prints are the lab's own.
describe("fibril lab --help", () => {
  it("names the lab's invariants and planted bugs, in order", () => {
    assert.deepStrictEqual(LabNames.invariants, Invariants.all.map((invariant) => invariant.name))
    assert.deepStrictEqual(LabNames.plantedBugs, LabBugs.all.map((bug) => bug.tamper.name))
  })
})

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
      // The picture shows the failure: the invariant in its title, the violation marked on n2 at
      // 10 ms, and a time axis fitted to the 30 ms of activity (not the 30 s the run idled to).
      assert.include(report.stdout, "marks cap on n2 at 10 ms")
      assert.match(svg, /<title>invariant cap violated: 2 sub-agents working at once/)
      assert.match(svg, /<g class="violation" data-invariant="cap" data-agent="n2" data-at="10">/)
      assert.match(svg, /<g class="time-axis" data-t-max="30" /)
      assert.match(svg, /class="y-tick">2<\/text>/)
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), 120_000)

  it.live(
    "an invariant of your own (--invariants-from): its counterexample printed with its evidence, and pictured",
    () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const dir = yield* fs.makeTempDirectoryScoped()
        // Plain data and a function, as docs/lab.md writes one: no import from Fibril needed.
        yield* fs.writeFileString(
          `${dir}/mine.mjs`,
          [
            `export const early = {`,
            `  name: "early",`,
            `  description: "no sub-agent calls its model after 5 ms",`,
            `  check: (trace) => {`,
            `    const late = trace.requests.find((request) => request.agent !== "n0" && request.t > 5)`,
            `    return late === undefined ? undefined : {`,
            `      message: late.agent + " called its model at " + late.t + " ms",`,
            `      agent: late.agent,`,
            `      at: late.t,`,
            `      evidence: { turn: late.turn, working: late.working }`,
            `    }`,
            `  }`,
            `}`
          ].join("\n")
        )
        // Fields of its own are its evidence; with no agent or time, no empty counterexample line.
        yield* fs.writeFileString(
          `${dir}/quiet.mjs`,
          `export default [{ name: "quiet", description: "nobody spawns", check: (trace) =>\n` +
            `  trace.events.some((e) => e.type === "spawned" && e.agent !== "n0") ? { message: "a spawn", spawns: 1 } : undefined }]\n`
        )
        const found = yield* fibril(
          [
            "lab",
            "run",
            "--runs",
            "20",
            "--seed",
            "3",
            "--invariants",
            "cap",
            "--invariants-from",
            "mine.mjs",
            "--out",
            "t.json"
          ],
          { cwd: dir }
        )
        assert.strictEqual(found.exitCode, 1, found.stdout + found.stderr)
        assert.include(
          found.stdout,
          `FAILED early: n1 called its model at 10 ms\n  counterexample: agent n1 at 10 ms (virtual)\n  evidence: {"turn":0,"working":1}\n`
        )
        assert.notInclude(found.stdout, "agent -")
        assert.include(found.stdout, `picture: fibril lab report ${dir}/t.json --invariants-from ${dir}/mine.mjs`)

        const replayed = yield* fibril(["lab", "replay", "t.json", "--invariants-from", "mine.mjs"], { cwd: dir })
        assert.include(
          replayed.stdout,
          `invariant early fails: n1 called its model at 10 ms\n  counterexample: agent n1 at 10 ms`
        )
        const report = yield* fibril(["lab", "report", "t.json", "--invariants-from", "mine.mjs", "--out", "run.svg"], {
          cwd: dir
        })
        assert.include(report.stdout, "marks early on n1 at 10 ms")
        const svg = yield* fs.readFileString(`${dir}/run.svg`)
        assert.match(svg, /<g class="violation" data-invariant="early" data-agent="n1" data-at="10">/)

        const quiet = yield* fibril(
          ["lab", "run", "--runs", "20", "--seed", "3", "--invariants", "cap", "--invariants-from", "quiet.mjs"],
          { cwd: dir }
        )
        assert.strictEqual(quiet.exitCode, 1, quiet.stdout + quiet.stderr)
        assert.include(quiet.stdout, `FAILED quiet: a spawn\n  evidence: {"spawns":1}\n  seed 3`)

        const threads = yield* fibril(
          ["lab", "run", "--runs", "5", "--invariants-from", "quiet.mjs", "--workers", "2"],
          { cwd: dir }
        )
        assert.strictEqual(threads.exitCode, 2)
        assert.include(threads.stderr, "--invariants-from runs in one thread")

        const missing = yield* fibril(["lab", "run", "--runs", "5", "--invariants-from", "missing.mjs"], { cwd: dir })
        assert.strictEqual(missing.exitCode, 2)
        assert.include(missing.stderr, `--invariants-from ${dir}/missing.mjs: cannot load it`)
        yield* fs.writeFileString(`${dir}/none.mjs`, `export const answer = 42\n`)
        const none = yield* fibril(["lab", "run", "--runs", "5", "--invariants-from", "none.mjs"], { cwd: dir })
        assert.strictEqual(none.exitCode, 2)
        assert.include(
          none.stderr,
          "exports no invariant; expected exports (or a default array) of { name, description, check(trace) }"
        )
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    120_000
  )

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
        assert.match(ok.stdout, /^passed: 10 experiments, 12 invariants, seed 1/)

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
