// Every path parameter goes through Workspace.resolve: `..`, absolute paths outside the
// root, and symlinks (to directories or files) pointing out are refused with
// OutsideWorkspace, and nothing outside is read, created or modified.
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { provide, setup } from "./harness.ts"

type Harness = Effect.Success<ReturnType<typeof setup>>

const secret = "TOPSECRET contents\n"

/** `<dir>/outside/secret.txt`, plus two links inside the workspace pointing at it and its directory. */
const prepare = Effect.fn("prepare")(function*(h: Harness) {
  yield* h.fs.writeFileString(h.path.join(h.outside, "secret.txt"), secret)
  yield* h.fs.symlink(h.outside, h.path.join(h.root, "linkdir"))
  yield* h.fs.symlink(h.path.join(h.outside, "secret.txt"), h.path.join(h.root, "linkfile.txt"))
  yield* h.write("inside.txt", "TOPSECRET is only a word here\n")
})

const refused = Effect.fn("refused")(function*(h: Harness, tool: string, args: Record<string, unknown>) {
  const error = yield* h.failure(tool, args)
  assert.strictEqual(error._tag, "OutsideWorkspace", `${tool} ${JSON.stringify(args)}: ${error.message}`)
  assert.include(error.message, "only paths inside the workspace are accepted")
})

/** The outside directory is exactly as `prepare` left it. */
const outsideUntouched = Effect.fn("outsideUntouched")(function*(h: Harness) {
  assert.deepStrictEqual((yield* h.fs.readDirectory(h.outside)).sort(), ["secret.txt"])
  assert.strictEqual(yield* h.fs.readFileString(h.path.join(h.outside, "secret.txt")), secret)
})

describe("workspace confinement", () => {
  it.effect("`..` paths are refused by every path-taking tool", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* prepare(h)
      yield* refused(h, "read_file", { path: "../outside/secret.txt" })
      yield* refused(h, "list_dir", { path: ".." })
      yield* refused(h, "list_dir", { path: "sub/../../outside" })
      yield* refused(h, "grep", { pattern: "TOPSECRET", path: "../outside" })
      yield* refused(h, "glob", { pattern: "*", path: "../outside" })
      yield* refused(h, "write_file", { path: "../outside/new.txt", content: "x" })
      yield* refused(h, "edit_file", { path: "../outside/secret.txt", old_string: "TOPSECRET", new_string: "x" })
      yield* outsideUntouched(h)
    }).pipe(provide))

  it.effect("absolute paths outside the root are refused", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* prepare(h)
      const outsideFile = h.path.join(h.outside, "secret.txt")
      yield* refused(h, "read_file", { path: outsideFile })
      yield* refused(h, "read_file", { path: "/etc/passwd" })
      yield* refused(h, "list_dir", { path: h.dir })
      yield* refused(h, "list_dir", { path: "/" })
      yield* refused(h, "grep", { pattern: "root", path: "/etc" })
      yield* refused(h, "write_file", { path: h.path.join(h.outside, "new.txt"), content: "x" })
      yield* refused(h, "edit_file", { path: outsideFile, old_string: "TOPSECRET", new_string: "x" })
      yield* outsideUntouched(h)
    }).pipe(provide))

  it.effect("a symlinked directory pointing outside is refused, and writing through it creates nothing", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* prepare(h)
      yield* refused(h, "read_file", { path: "linkdir/secret.txt" })
      yield* refused(h, "list_dir", { path: "linkdir" })
      yield* refused(h, "grep", { pattern: "TOPSECRET", path: "linkdir" })
      yield* refused(h, "glob", { pattern: "*", path: "linkdir" })
      yield* refused(h, "write_file", { path: "linkdir/new.txt", content: "x" })
      yield* refused(h, "write_file", { path: "linkdir/deeper/new.txt", content: "x" })
      yield* refused(h, "edit_file", { path: "linkdir/secret.txt", old_string: "TOPSECRET", new_string: "x" })
      yield* outsideUntouched(h)
    }).pipe(provide))

  it.effect("a symlinked file pointing outside is refused for reading, writing and editing", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* prepare(h)
      yield* refused(h, "read_file", { path: "linkfile.txt" })
      yield* refused(h, "grep", { pattern: "TOPSECRET", path: "linkfile.txt" })
      yield* refused(h, "write_file", { path: "linkfile.txt", content: "overwritten" })
      yield* refused(h, "edit_file", { path: "linkfile.txt", old_string: "TOPSECRET", new_string: "x" })
      yield* outsideUntouched(h)
    }).pipe(provide))

  it.effect("walking the workspace never reads through links pointing outside", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* prepare(h)
      assert.strictEqual(yield* h.text("grep", { pattern: "TOPSECRET" }), "inside.txt:1: TOPSECRET is only a word here")
      assert.strictEqual(yield* h.text("glob", { pattern: "**" }), "inside.txt")
      // list_dir shows the names (they are inside) without following them out
      assert.strictEqual(
        yield* h.text("list_dir", {}),
        "inside.txt\nlinkdir (symlink to outside the workspace)\nlinkfile.txt (symlink to outside the workspace)"
      )
    }).pipe(provide))

  it.effect("links that stay inside the workspace work; `..` that stays inside is fine", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write("real/a.txt", "hello\n")
      yield* h.fs.symlink(h.path.join(h.root, "real/a.txt"), h.path.join(h.root, "alias.txt"))
      assert.strictEqual(yield* h.text("read_file", { path: "alias.txt" }), "     1\thello")
      assert.strictEqual(yield* h.text("grep", { pattern: "hello" }), "alias.txt:1: hello\nreal/a.txt:1: hello")
      assert.strictEqual(yield* h.text("write_file", { path: "real/../b.txt", content: "b" }), "wrote 1 byte to b.txt")
      assert.strictEqual(yield* h.read("b.txt"), "b")
    }).pipe(provide))
})
