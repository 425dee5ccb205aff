import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { provide, setup } from "./harness.ts"

describe("grep", () => {
  it.effect("prints relpath:line: text in name order", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("src/b.ts", "const needle = 1\nother\n")
      yield* h.write("src/a.ts", "x\ny\nneedle()\n")
      yield* h.write("README.md", "no match here\n")
      const out = yield* h.text("grep", { pattern: "needle" })
      assert.strictEqual(out, "src/a.ts:3: needle()\nsrc/b.ts:1: const needle = 1")
    }).pipe(provide))

  it.effect("skips node_modules, .git and binary files", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("node_modules/pkg/index.js", "needle\n")
      yield* h.write(".git/config", "needle\n")
      yield* h.write("sub/node_modules/x.js", "needle\n")
      yield* h.write("bin.dat", new Uint8Array([...new TextEncoder().encode("needle"), 0, 1]))
      yield* h.write("ok.txt", "needle\n")
      assert.strictEqual(yield* h.text("grep", { pattern: "needle" }), "ok.txt:1: needle")
    }).pipe(provide))

  it.effect("path, include and ignore_case narrow the search", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("src/a.ts", "Needle\n")
      yield* h.write("src/deep/b.ts", "needle\n")
      yield* h.write("src/c.js", "needle\n")
      yield* h.write("docs/d.ts", "needle\n")
      assert.strictEqual(
        yield* h.text("grep", { pattern: "needle", path: "src", include: "**/*.ts" }),
        "src/deep/b.ts:1: needle"
      )
      assert.strictEqual(
        yield* h.text("grep", { pattern: "needle", include: "*.ts", ignore_case: true }),
        "docs/d.ts:1: needle\nsrc/a.ts:1: Needle\nsrc/deep/b.ts:1: needle"
      )
      assert.strictEqual(yield* h.text("grep", { pattern: "needle", path: "src/c.js" }), "src/c.js:1: needle")
    }).pipe(provide))

  it.effect("caps matches and output with a note", () =>
    Effect.gen(function*() {
      const h = yield* setup({ maxOutputChars: 200 })
      yield* h.write("a.txt", Array.from({ length: 50 }, (_, i) => `hit ${i}`).join("\n"))
      const capped = (yield* h.text("grep", { pattern: "hit", max_matches: 3 })).split("\n")
      assert.deepStrictEqual(capped.slice(0, 3), ["a.txt:1: hit 0", "a.txt:2: hit 1", "a.txt:3: hit 2"])
      assert.include(capped[3], "stopped after 3 matches")
      const chars = yield* h.text("grep", { pattern: "hit" })
      assert.isAtMost(chars.length, 200 + 120)
      assert.include(chars, "output truncated at 200 characters")
    }).pipe(provide))

  it.effect("no match is a result, not a failure", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("a.txt", "x\n")
      assert.strictEqual(yield* h.text("grep", { pattern: "zzz" }), "No matches for /zzz/ under .")
    }).pipe(provide))

  it.effect("an invalid regex fails naming the pattern and the error", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const error = yield* h.failure("grep", { pattern: "foo(" })
      assert.strictEqual(error._tag, "ToolFailure")
      assert.include(error.message, `invalid regular expression "foo("`)
      assert.include(error.message, "missing closing )")
    }).pipe(provide))

  it.effect("patterns are RE2: classes, inline flags, \\x{...} and named groups work", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("a.txt", "id: 42\nName: Ada\nsmile \u263A\n")
      assert.strictEqual(yield* h.text("grep", { pattern: "^id: \\d+$" }), "a.txt:1: id: 42")
      assert.strictEqual(yield* h.text("grep", { pattern: "(?i)name: (?P<who>\\w+)" }), "a.txt:2: Name: Ada")
      assert.strictEqual(yield* h.text("grep", { pattern: "\\x{263A}" }), "a.txt:3: smile \u263A")
    }).pipe(provide))

  it.effect("backreferences, lookaround and \\u escapes are tool errors naming what RE2 lacks", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("a.txt", "abab\n")
      const cases: ReadonlyArray<readonly [string, string]> = [
        ["(ab)\\1", "backreferences"],
        ["(?<n>ab)\\k<n>", "backreferences"],
        ["a(?=b)", "lookahead"],
        ["a(?!c)", "lookahead"],
        ["(?<=a)b", "lookbehind"],
        ["(?<!c)b", "lookbehind"],
        ["\\u0061", "\\uXXXX escapes are not supported; write \\x{XXXX}"]
      ]
      for (const [pattern, named] of cases) {
        const error = yield* h.failure("grep", { pattern })
        assert.strictEqual(error._tag, "ToolFailure", pattern)
        assert.include(error.message, `unsupported regular expression syntax in "${pattern}"`)
        assert.include(error.message, named)
        assert.include(error.message, "RE2")
      }
    }).pipe(provide))

  // With JavaScript's backtracking RegExp, this one line takes minutes (2^35 paths).
  it.live("a catastrophic-backtracking pattern returns promptly", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const line = `${"a".repeat(34)}b`
      yield* h.write("evil.txt", `${line}\n${"a".repeat(35)}\n`)
      const started = Date.now()
      assert.strictEqual(yield* h.text("grep", { pattern: "(a+)+$" }), `evil.txt:2: ${"a".repeat(35)}`)
      assert.isBelow(Date.now() - started, 1_000)
    }).pipe(provide))

  it.effect("a pattern over the length cap is a tool error, not a crash", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("a.txt", "x\n")
      const error = yield* h.failure("grep", { pattern: "a".repeat(100_000) })
      assert.strictEqual(error._tag, "ToolFailure")
      assert.include(error.message, "pattern is 100000 characters long; at most 1000 are accepted")
      assert.strictEqual(
        yield* h.text("grep", { pattern: "x".repeat(1000) }),
        `No matches for /${"x".repeat(1000)}/ under .`
      )
    }).pipe(provide))

  it.live("a search over a large file yields to other fibers and can be interrupted", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      // 4 MiB of lines a backtracking engine would choke on; RE2 takes ~200 ms over them.
      yield* h.write("big.txt", `${"a".repeat(34)}b\n`.repeat(120_000))
      const ticks: Array<number> = []
      const ticker = yield* Effect.forkChild(
        Effect.forever(Effect.andThen(Effect.sleep("1 millis"), Effect.sync(() => ticks.push(Date.now()))))
      )
      const started = Date.now()
      const out = yield* h.text("grep", { pattern: "(a+)+$|(x+x+)+y" })
      const ended = Date.now()
      yield* Fiber.interrupt(ticker)
      assert.include(out, "No matches")
      // The timer kept firing while grep worked. The search yields about 60 times inside the
      // file (every 64 KiB), each a chance for the 1 ms timer: here about 34 ticks in a 90 ms
      // search. Without those yields the timer fires only while the file is read: 6 or 7.
      // A count, not the longest gap between ticks: a loaded machine that stops this process
      // for a while makes one gap long, but not the count small. (At most one tick a
      // millisecond: a search much faster than this machine's is held to less.)
      const during = ticks.filter((t) => t >= started && t <= ended).length
      const least = Math.min(20, (ended - started) / 3)
      assert.isAtLeast(during, least, `${during} ticks in a ${ended - started} ms search`)

      // Interrupting a search in flight ends it promptly.
      const fiber = yield* Effect.forkChild(h.text("grep", { pattern: "(a+)+$" }))
      yield* Effect.sleep("20 millis")
      const interrupted = Date.now()
      yield* Fiber.interrupt(fiber)
      assert.isBelow(Date.now() - interrupted, 1_000)
    }).pipe(provide))

  it.effect("a missing path fails", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const error = yield* h.failure("grep", { pattern: "x", path: "nope" })
      assert.include(error.message, `path not found: "nope"`)
    }).pipe(provide))
})
