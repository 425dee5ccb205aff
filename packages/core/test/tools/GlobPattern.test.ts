import { assert, describe, it } from "@effect/vitest"
import { Arbitrary, Result, Schema } from "effect"
import { posix } from "node:path"
import * as GlobPattern from "../../src/tools/GlobPattern.ts"

const matcher = (pattern: string) => {
  const compiled = GlobPattern.compile(pattern)
  assert.isTrue(Result.isSuccess(compiled), `${pattern}: ${Result.isFailure(compiled) ? compiled.failure : ""}`)
  return Result.isSuccess(compiled) ? compiled.success : { test: () => false }
}

const refusal = (pattern: string): string => {
  const compiled = GlobPattern.compile(pattern)
  return Result.isFailure(compiled) ? compiled.failure : "accepted"
}

describe("GlobPattern", () => {
  it("matches like path.matchesGlob on the documented syntax", () => {
    const cases: ReadonlyArray<readonly [string, string, boolean]> = [
      ["**/*.ts", "src/util/a.ts", true],
      ["**/*.ts", "a.ts", true],
      ["*.md", "docs/guide.md", false],
      ["src/**/*.{js,ts}", "src/b.js", true],
      ["src/**/*.{js,ts}", "src/x/y/z.ts", true],
      [".github/**/*.yml", ".github/workflows/ci.yml", true],
      ["**/*.yml", ".github/workflows/ci.yml", false],
      ["*", ".env", false],
      [".*", ".env", true],
      ["a/**", "a", false],
      ["a/**", "a/b/c", true],
      ["a/**/b", "a/b", true],
      ["**", "a/b", true],
      ["a?c", "abc", true],
      ["[[:alpha:]]", "a", true],
      ["[!a]", "b", true],
      ["[!a]", "a", false],
      ["a\\*b", "a*b", false],
      ["a\\*b", "a/xb", true],
      ["[*]", "*", true],
      ["/a", "a", false],
      ["{src,test}/*.ts", "test/a.ts", true],
      ["{.github,src}/*.yml", ".github/ci.yml", true],
      ["{a/b,c}/d", "a/b/d", true],
      ["a/b", "a//b", true]
    ]
    for (const [pattern, path, expected] of cases) {
      assert.strictEqual(posix.matchesGlob(path, pattern), expected, `matchesGlob(${path}, ${pattern})`)
      assert.strictEqual(matcher(pattern).test(path), expected, `${pattern} on ${path}`)
    }
  })

  it("patterns that make backtracking matchers take minutes are linear", () => {
    const started = Date.now()
    assert.isFalse(matcher(`${"*a".repeat(40)}*b`).test("a".repeat(255)))
    assert.isFalse(matcher("**/a/**/a/**/a/**/a/**/a/**/b").test(Array.from({ length: 60 }, () => "a").join("/")))
    assert.isTrue(matcher("{a,b}".repeat(30)).test("ab".repeat(15)))
    assert.isBelow(Date.now() - started, 1_000)
  })

  it("refuses extended globs, over-long patterns and brace explosions across /, with a reason", () => {
    assert.include(refusal("+(a|b)"), `extended glob syntax "+(...)" is not supported`)
    assert.include(refusal("x".repeat(1001)), "at most 1000 are accepted")
    assert.include(refusal("{a/x,b/y}".repeat(9)), "more than 256 alternatives")
    assert.include(refusal("src/../*.ts"), `".." is not supported in a glob`)
  })

  const piece = Schema.Literals([
    "a",
    "b",
    ".",
    "*",
    "**",
    "?",
    "/",
    "{a,b}",
    "[ab]",
    "[!a]",
    "x",
    "-",
    "{,a}",
    "[a-b]",
    "{a,{b,x}}",
    "{a/b,x}",
    "{.a,b}",
    "[[:alpha:]]",
    "\\",
    "{a,b/x}",
    "[^b]",
    "..",
    "/.."
  ])
  const patterns = Arbitrary.array(Arbitrary.schema(piece), { minLength: 1, maxLength: 8 })
    .pipe(Arbitrary.map((pieces) => pieces.join("")))
  const names = Schema.Literals(["a", "b", "ab", ".a", "x", "ba", "aa", "a-b"])
  const paths = Arbitrary.array(Arbitrary.schema(names), { minLength: 1, maxLength: 4 })
    .pipe(Arbitrary.map((segments) => segments.join("/")))

  it.prop("agrees with path.matchesGlob on random patterns and paths", [patterns, paths], ([pattern, path]) => {
    const compiled = GlobPattern.compile(pattern)
    if (Result.isFailure(compiled)) return
    // matchesGlob itself throws on a few patterns ("-[[:alpha:]]" compiles to an invalid RegExp).
    const expected = Result.try(() => posix.matchesGlob(path, pattern))
    if (Result.isFailure(expected)) return
    assert.strictEqual(compiled.success.test(path), expected.success, `${pattern} on ${path}`)
  }, { arbitrary: { runs: 5000 } })
})
