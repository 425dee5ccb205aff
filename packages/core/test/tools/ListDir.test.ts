import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { provide, setup } from "./harness.ts"

describe("list_dir", () => {
  it.effect("lists the root by default, sorted, directories with a slash", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("b.txt", "")
      yield* h.write("a/x.txt", "")
      yield* h.write(".hidden", "")
      yield* h.write("c/d/e.txt", "")
      assert.strictEqual(yield* h.text("list_dir", {}), ".hidden\na/\nb.txt\nc/")
      assert.strictEqual(yield* h.text("list_dir", { path: "c" }), "d/")
      assert.strictEqual(yield* h.text("list_dir", { path: "./c/d" }), "e.txt")
    }).pipe(provide))

  it.effect("marks a symlink to a directory inside the workspace as a directory", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("real/f.txt", "")
      yield* h.fs.symlink(h.path.join(h.root, "real"), h.path.join(h.root, "alias"))
      assert.strictEqual(yield* h.text("list_dir", {}), "alias/\nreal/")
    }).pipe(provide))

  it.effect("says when a directory is empty", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.fs.makeDirectory(h.path.join(h.root, "empty"))
      assert.strictEqual(yield* h.text("list_dir", { path: "empty" }), "(empty is empty)")
    }).pipe(provide))

  it.effect("fails on a missing path and on a file", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("f.txt", "x")
      const missing = yield* h.failure("list_dir", { path: "nope" })
      assert.strictEqual(missing.message, `list_dir: directory not found: "nope"`)
      const file = yield* h.failure("list_dir", { path: "f.txt" })
      assert.include(file.message, "is not a directory; use read_file")
    }).pipe(provide))
})
