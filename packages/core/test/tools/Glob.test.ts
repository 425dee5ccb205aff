import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Glob from "../../src/tools/Glob.ts"
import { provide, setup } from "./harness.ts"

describe("glob", () => {
  const tree = (h: Effect.Success<ReturnType<typeof setup>>) =>
    Effect.forEach(
      [
        "package.json",
        "README.md",
        "src/index.ts",
        "src/util/a.ts",
        "src/util/a.test.ts",
        "src/b.js",
        "docs/guide.md",
        ".github/workflows/ci.yml",
        "node_modules/dep/index.ts",
        ".git/HEAD",
        "packages/x/package.json"
      ],
      (file) => h.write(file, "")
    )

  it.effect("matches patterns and returns sorted workspace-relative files", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* tree(h)
      assert.strictEqual(
        yield* h.text("glob", { pattern: "**/*.ts" }),
        "src/index.ts\nsrc/util/a.test.ts\nsrc/util/a.ts"
      )
      assert.strictEqual(yield* h.text("glob", { pattern: "*.md" }), "README.md")
      assert.strictEqual(yield* h.text("glob", { pattern: "**/*.test.ts" }), "src/util/a.test.ts")
      assert.strictEqual(yield* h.text("glob", { pattern: "**/package.json" }), "package.json\npackages/x/package.json")
      assert.strictEqual(
        yield* h.text("glob", { pattern: "src/**/*.{js,ts}" }),
        "src/b.js\nsrc/index.ts\nsrc/util/a.test.ts\nsrc/util/a.ts"
      )
      assert.strictEqual(yield* h.text("glob", { pattern: ".github/**/*.yml" }), ".github/workflows/ci.yml")
    }).pipe(provide))

  it.effect("a path narrows the search; the pattern is relative to it", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* tree(h)
      assert.strictEqual(
        yield* h.text("glob", { pattern: "*.ts", path: "src/util" }),
        "src/util/a.test.ts\nsrc/util/a.ts"
      )
      assert.strictEqual(yield* h.text("glob", { pattern: "src/util/a.ts", path: "src" }), "src/util/a.ts")
    }).pipe(provide))

  it.effect("never lists node_modules or .git", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* tree(h)
      const all = yield* h.text("glob", { pattern: "**" })
      assert.notInclude(all, "node_modules")
      assert.notInclude(all, ".git/")
      assert.include(all, "src/index.ts")
    }).pipe(provide))

  it.effect("reports no match and a missing path", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* tree(h)
      assert.strictEqual(yield* h.text("glob", { pattern: "**/*.rs" }), `No files match "**/*.rs" under .`)
      const error = yield* h.failure("glob", { pattern: "*", path: "nope" })
      assert.include(error.message, `path not found: "nope"`)
    }).pipe(provide))

  it.effect("caps the list with a note", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* Effect.forEach(
        Array.from({ length: Glob.maxResults + 5 }, (_, i) => `f/${String(i).padStart(4, "0")}.txt`),
        (f) => h.write(f, "")
      )
      const out = (yield* h.text("glob", { pattern: "**/*.txt" })).split("\n")
      assert.strictEqual(out.length, Glob.maxResults + 1)
      assert.strictEqual(out[0], "f/0000.txt")
      assert.include(out.at(-1), `showing the first ${Glob.maxResults} matches`)
    }).pipe(provide))
})

describe("glob patterns a backtracking matcher chokes on", () => {
  it.effect("a catastrophic pattern returns promptly; extended globs and long patterns are tool errors", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write(`${"a".repeat(200)}.txt`, "")
      yield* h.write("a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/x.txt", "")
      const started = Date.now()
      // With path.matchesGlob, the first takes minutes per file name.
      assert.strictEqual(
        yield* h.text("glob", { pattern: `${"*a".repeat(30)}*b` }),
        `No files match "${"*a".repeat(30)}*b" under .`
      )
      assert.strictEqual(
        yield* h.text("glob", { pattern: "**/a/**/a/**/a/**/a/**/a/**/a/**/y.txt" }),
        `No files match "**/a/**/a/**/a/**/a/**/a/**/a/**/y.txt" under .`
      )
      assert.isBelow(Date.now() - started, 2_000)
      const extended = yield* h.failure("glob", { pattern: "+(a|b).txt" })
      assert.include(
        extended.message,
        `pattern "+(a|b).txt" is refused: extended glob syntax "+(...)" is not supported`
      )
      const long = yield* h.failure("grep", { pattern: "x", include: "*".repeat(1001) })
      assert.include(long.message, `include "${"*".repeat(1001)}" is refused: the pattern is 1001 characters long`)
    }).pipe(provide))
})
