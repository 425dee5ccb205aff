import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { provide, setup } from "./harness.ts"

describe("edit_file", () => {
  it.effect("replaces a unique occurrence", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("a.ts", "const a = 1\nconst b = 2\n")
      const out = yield* h.text("edit_file", { path: "a.ts", old_string: "b = 2", new_string: "b = 3" })
      assert.strictEqual(out, "replaced 1 occurrence in a.ts")
      assert.strictEqual(yield* h.read("a.ts"), "const a = 1\nconst b = 3\n")
    }).pipe(provide))

  it.effect("inserts new_string literally ($ patterns are not special)", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("a.txt", "price: X\n")
      yield* h.call("edit_file", { path: "a.txt", old_string: "X", new_string: "$& $1 $$" })
      assert.strictEqual(yield* h.read("a.txt"), "price: $& $1 $$\n")
    }).pipe(provide))

  it.effect("refuses several matches without replace_all, and replaces them all with it", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("a.txt", "foo bar foo baz foo\n")
      const error = yield* h.failure("edit_file", { path: "a.txt", old_string: "foo", new_string: "qux" })
      assert.strictEqual(error._tag, "ToolFailure")
      assert.include(error.message, "occurs 3 times in a.txt")
      assert.include(error.message, "replace_all")
      assert.strictEqual(yield* h.read("a.txt"), "foo bar foo baz foo\n") // untouched

      const out = yield* h.text("edit_file", { path: "a.txt", old_string: "foo", new_string: "qux", replace_all: true })
      assert.strictEqual(out, "replaced 3 occurrences in a.txt")
      assert.strictEqual(yield* h.read("a.txt"), "qux bar qux baz qux\n")
    }).pipe(provide))

  it.effect("fails when old_string is absent, identical to new_string, or empty", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("a.txt", "hello\n")
      const absent = yield* h.failure("edit_file", { path: "a.txt", old_string: "bye", new_string: "x" })
      assert.strictEqual(absent.message, "edit_file: old_string not found in a.txt")
      const same = yield* h.failure("edit_file", { path: "a.txt", old_string: "hello", new_string: "hello" })
      assert.include(same.message, "identical")
      const empty = yield* h.failure("edit_file", { path: "a.txt", old_string: "", new_string: "x" })
      assert.include(empty.message, "old_string is empty")
      assert.strictEqual(yield* h.read("a.txt"), "hello\n")
    }).pipe(provide))

  it.effect("fails on a missing file and on a directory", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("d/x", "")
      const missing = yield* h.failure("edit_file", { path: "nope.txt", old_string: "a", new_string: "b" })
      assert.include(missing.message, `file not found: "nope.txt"; use write_file`)
      const directory = yield* h.failure("edit_file", { path: "d", old_string: "a", new_string: "b" })
      assert.include(directory.message, "not a regular file")
    }).pipe(provide))
})
