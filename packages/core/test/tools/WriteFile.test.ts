import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { provide, setup } from "./harness.ts"

describe("write_file", () => {
  it.effect("creates a file and its parent directories", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const out = yield* h.text("write_file", { path: "deep/er/new.txt", content: "héllo\n" })
      assert.strictEqual(out, "wrote 7 bytes to deep/er/new.txt")
      assert.strictEqual(yield* h.read("deep/er/new.txt"), "héllo\n")
    }).pipe(provide))

  it.effect("overwrites an existing file, also given as an absolute path inside", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("a.txt", "old content")
      const out = yield* h.text("write_file", { path: h.path.join(h.root, "a.txt"), content: "" })
      assert.strictEqual(out, "wrote 0 bytes to a.txt")
      assert.strictEqual(yield* h.read("a.txt"), "")
      assert.strictEqual(yield* h.text("write_file", { path: "a.txt", content: "x" }), "wrote 1 byte to a.txt")
    }).pipe(provide))

  it.effect("refuses to write over a directory", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("dir/f.txt", "")
      const error = yield* h.failure("write_file", { path: "dir", content: "x" })
      assert.strictEqual(error._tag, "ToolFailure")
      assert.include(error.message, `"dir" is a directory`)
    }).pipe(provide))

  it.effect("declares the path it touches for permission checks", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const tool = h.registry.get("write_file")
      assert.isTrue(tool._tag === "Some")
      if (tool._tag === "Some") {
        assert.strictEqual(tool.value.posture, "write")
        assert.deepStrictEqual(tool.value.paths({ path: "src/a.ts", content: "" }), ["src/a.ts"])
      }
    }).pipe(provide))
})
