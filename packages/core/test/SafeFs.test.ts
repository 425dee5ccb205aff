// internal/safeFs.ts in both of its modes: descriptor-relative (Linux, /proc/self/fd) and the
// path-based fallback used where /proc is missing (macOS), run here on Linux by choosing it.
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFileSync } from "node:child_process"
import * as nodeFs from "node:fs"
import * as os from "node:os"
import * as nodePath from "node:path"
import * as SafeFs from "../src/internal/safeFs.ts"

const fixture = Effect.acquireRelease(
  Effect.sync(() => {
    const dir = nodeFs.realpathSync(nodeFs.mkdtempSync(nodePath.join(os.tmpdir(), "safefs-")))
    const root = nodePath.join(dir, "ws")
    const outside = nodePath.join(dir, "outside")
    nodeFs.mkdirSync(root)
    nodeFs.mkdirSync(outside)
    nodeFs.writeFileSync(nodePath.join(outside, "secret.txt"), "secret\n")
    nodeFs.mkdirSync(nodePath.join(root, "real"))
    nodeFs.writeFileSync(nodePath.join(root, "real", "a.sh"), "echo a\n", { mode: 0o755 })
    nodeFs.symlinkSync(nodePath.join(root, "real", "a.sh"), nodePath.join(root, "alias.sh"))
    nodeFs.symlinkSync(outside, nodePath.join(root, "out"))
    nodeFs.symlinkSync("../outside/secret.txt", nodePath.join(root, "secret-link"))
    execFileSync("mkfifo", [nodePath.join(root, "pipe")])
    return { dir, root, outside }
  }),
  ({ dir }) => Effect.sync(() => nodeFs.rmSync(dir, { recursive: true, force: true }))
)

const text = new TextEncoder()

describe("safeFs", () => {
  it("the descriptor-relative mode is the one found on this Linux", () => {
    assert.isTrue(SafeFs.probeDescriptorRelative(os.tmpdir() === "/tmp" ? "/tmp" : nodeFs.realpathSync(os.tmpdir())))
  })

  for (const descriptorRelative of [true, false]) {
    it.effect(`${descriptorRelative ? "descriptor-relative" : "path fallback"}: reads, writes, links and FIFOs`, () =>
      Effect.gen(function*() {
        const { root, outside } = yield* fixture
        const confined = SafeFs.make(root, descriptorRelative)
        const open = (relative: string, createParents = false) =>
          confined.open(nodePath.join(root, relative), { createParents })

        // A link to a file inside reads and writes that file, keeping its mode.
        const alias = yield* open("alias.sh")
        assert.strictEqual(alias.type, "File")
        assert.strictEqual(alias.real, nodePath.join(root, "real", "a.sh"))
        assert.strictEqual(new TextDecoder().decode(yield* alias.read), "echo a\n")
        yield* alias.replace(text.encode("echo b\n"))
        assert.strictEqual(nodeFs.readFileSync(nodePath.join(root, "real", "a.sh"), "utf8"), "echo b\n")
        assert.strictEqual(nodeFs.statSync(nodePath.join(root, "real", "a.sh")).mode & 0o777, 0o755)
        assert.isTrue(nodeFs.lstatSync(nodePath.join(root, "alias.sh")).isSymbolicLink(), "the link is kept")

        // Links out are refused, through a directory or as the file itself.
        for (const path of ["out/secret.txt", "out/new/deeper.txt", "secret-link"]) {
          const refused = yield* Effect.flip(open(path, true))
          assert.strictEqual(refused._tag, "Outside", path)
        }

        // Missing parents are created, inside.
        const nested = yield* open("x/y/z.txt", true)
        assert.strictEqual(nested.type, undefined)
        yield* nested.replace(text.encode("z"))
        assert.strictEqual(nodeFs.readFileSync(nodePath.join(root, "x/y/z.txt"), "utf8"), "z")
        yield* (yield* open("x/y/z.txt")).append(text.encode("z"))
        assert.strictEqual(nodeFs.readFileSync(nodePath.join(root, "x/y/z.txt"), "utf8"), "zz")

        // A FIFO is reported by its type and never read; a missing parent is "nothing there".
        assert.strictEqual((yield* open("pipe")).type, "FIFO")
        assert.strictEqual((yield* Effect.flip((yield* open("pipe")).read)).reason._tag, "Unknown")
        assert.strictEqual((yield* open("no/such/file")).type, undefined)

        // A directory lists through its handle; a child is opened without following links.
        const listing = yield* (yield* open(".")).entries
        assert.includeMembers(listing.map((entry) => entry.name), ["alias.sh", "out", "pipe", "real", "x"])
        const child = yield* (yield* open(".")).child("out")
        assert.strictEqual(child.type, "SymbolicLink")

        // Nothing outside changed; no temporary file was left behind.
        assert.deepStrictEqual(nodeFs.readdirSync(outside), ["secret.txt"])
        assert.deepStrictEqual(nodeFs.readdirSync(nodePath.join(root, "real")), ["a.sh"])
      }))
  }
})
