import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
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
      assert.include(error.message, "Unterminated group")
    }).pipe(provide))

  it.effect("a missing path fails", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const error = yield* h.failure("grep", { pattern: "x", path: "nope" })
      assert.include(error.message, `path not found: "nope"`)
    }).pipe(provide))
})
