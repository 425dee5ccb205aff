import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { provide, setup } from "./harness.ts"

const lines = (n: number) => Array.from({ length: n }, (_, i) => `line ${i + 1}`).join("\n") + "\n"

describe("read_file", () => {
  it.effect("numbers lines like cat -n", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("a.txt", "alpha\nbeta\n")
      assert.strictEqual(yield* h.text("read_file", { path: "a.txt" }), "     1\talpha\n     2\tbeta")
    }).pipe(provide))

  it.effect("offset and limit select a window and say how to continue", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("big.txt", lines(10))
      const out = yield* h.text("read_file", { path: "big.txt", offset: 3, limit: 2 })
      assert.strictEqual(out, "     3\tline 3\n     4\tline 4\n... 6 more lines; use offset=5 to continue")
      const tail = yield* h.text("read_file", { path: "big.txt", offset: 9 })
      assert.strictEqual(tail, "     9\tline 9\n    10\tline 10")
    }).pipe(provide))

  it.effect("defaults to 2000 lines", () =>
    Effect.gen(function*() {
      const h = yield* setup({ maxOutputChars: 1_000_000 })
      yield* h.write("long.txt", lines(2005))
      const out = (yield* h.text("read_file", { path: "long.txt" })).split("\n")
      assert.strictEqual(out.length, 2001)
      assert.strictEqual(out[1999], "  2000\tline 2000")
      assert.strictEqual(out[2000], "... 5 more lines; use offset=2001 to continue")
    }).pipe(provide))

  it.effect("stops at maxOutputChars with a continuation note", () =>
    Effect.gen(function*() {
      const h = yield* setup({ maxOutputChars: 60 })
      yield* h.write("big.txt", lines(10))
      const out = yield* h.text("read_file", { path: "big.txt" })
      // each numbered line is 13-14 chars + newline: four fit in 60
      assert.strictEqual(out.split("\n").at(-1), "... 6 more lines; use offset=5 to continue")
    }).pipe(provide))

  it.effect("truncates very long lines with a marker", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("wide.txt", "x".repeat(2500) + "\nshort\n")
      const [first, second] = (yield* h.text("read_file", { path: "wide.txt" })).split("\n")
      assert.strictEqual(first, `     1\t${"x".repeat(2000)} [... line truncated, 500 more chars]`)
      assert.strictEqual(second, "     2\tshort")
    }).pipe(provide))

  it.effect("handles CRLF, no final newline and empty files", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("crlf.txt", "a\r\nb")
      assert.strictEqual(yield* h.text("read_file", { path: "crlf.txt" }), "     1\ta\n     2\tb")
      yield* h.write("empty.txt", "")
      assert.strictEqual(yield* h.text("read_file", { path: "empty.txt" }), "(empty.txt is empty)")
    }).pipe(provide))

  it.effect("fails clearly on a missing file, a directory, a binary file and an offset past the end", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("sub/a.txt", "one\ntwo\n")
      yield* h.write("bin.dat", new Uint8Array([1, 2, 0, 3]))

      const missing = yield* h.failure("read_file", { path: "nope.txt" })
      assert.strictEqual(missing._tag, "ToolFailure")
      assert.strictEqual(missing.message, `read_file: file not found: "nope.txt"`)

      const directory = yield* h.failure("read_file", { path: "sub" })
      assert.include(directory.message, `"sub" is a directory; use list_dir`)

      const binary = yield* h.failure("read_file", { path: "bin.dat" })
      assert.include(binary.message, "binary")

      const past = yield* h.failure("read_file", { path: "sub/a.txt", offset: 5 })
      assert.include(past.message, "offset 5 is past the end")
      assert.include(past.message, "2 lines")
    }).pipe(provide))

  it.effect("rejects invalid arguments at decoding", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("a.txt", "x\n")
      const zero = yield* h.failure("read_file", { path: "a.txt", offset: 0 })
      assert.strictEqual(zero._tag, "SchemaError")
      const fraction = yield* h.failure("read_file", { path: "a.txt", limit: 1.5 })
      assert.strictEqual(fraction._tag, "SchemaError")
      const extra = yield* h.failure("read_file", { path: "a.txt", bogus: 1 })
      assert.strictEqual(extra._tag, "SchemaError")
    }).pipe(provide))
})
