import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, FileSystem, Layer, Option, Path } from "effect"
import { execFileSync } from "node:child_process"
import { writeFileSync } from "node:fs"
import * as Memory from "../src/Memory.ts"
import * as ToolRegistry from "../src/ToolRegistry.ts"
import * as Remember from "../src/tools/Remember.ts"
import * as Workspace from "../src/Workspace.ts"

const context: ToolRegistry.ToolCallContext = { sessionId: "session-1", callId: "call-1", role: "build", depth: 0 }

/** A real temp workspace with the file-backed Memory and the `remember` tool registered. */
const setup = Effect.fn("test.setup")(function*(options: { readonly path?: string } = {}) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
  const services = yield* Layer.build(
    Remember.layer.pipe(
      Layer.provideMerge(ToolRegistry.layer),
      Layer.provideMerge(Memory.layer(options)),
      Layer.provideMerge(Workspace.layer(root))
    )
  )
  const memory = Context.get(services, Memory.Memory)
  const registry = Context.get(services, ToolRegistry.ToolRegistry)
  const file = path.join(root, ".fibril", "memory.md")
  return { fs, path, root, file, memory, registry }
})

const provide = Effect.provide(NodeServices.layer)

describe("Memory (file)", () => {
  it.effect("remember appends one bullet per call", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      assert.strictEqual(h.memory.path, h.file)
      assert.strictEqual(yield* h.memory.remember("tests run with `npm test`"), "- tests run with `npm test`")
      assert.strictEqual(
        yield* h.memory.remember("  the CLI lives in packages/cli  "),
        "- the CLI lives in packages/cli"
      )
      const content = yield* h.fs.readFileString(h.file)
      assert.strictEqual(content, "- tests run with `npm test`\n- the CLI lives in packages/cli\n")
      assert.strictEqual(yield* h.memory.read, content)
    }).pipe(provide))

  it.effect("a .fibril linked to outside is refused, and a FIFO planted as the file is an error, not a hang", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const outside = yield* h.fs.realPath(yield* h.fs.makeTempDirectoryScoped())
      writeFileSync(h.path.join(outside, "memory.md"), "- a secret from outside\n")
      yield* h.fs.symlink(outside, h.path.join(h.root, ".fibril"))
      const read = yield* Effect.flip(h.memory.read)
      assert.include(read.message, "resolves outside the workspace")
      const write = yield* Effect.flip(h.memory.remember("leaked"))
      assert.include(write.message, "resolves outside the workspace")
      assert.deepStrictEqual(yield* h.fs.readDirectory(outside), ["memory.md"])
      assert.strictEqual(yield* h.fs.readFileString(h.path.join(outside, "memory.md")), "- a secret from outside\n")

      yield* h.fs.remove(h.path.join(h.root, ".fibril"))
      yield* h.fs.makeDirectory(h.path.join(h.root, ".fibril"))
      execFileSync("mkfifo", [h.file])
      assert.include((yield* Effect.flip(h.memory.read)).message, "not a regular file")
      assert.include((yield* Effect.flip(h.memory.remember("x"))).message, "not a regular file")
    }).pipe(provide))

  it.effect("creates the file and .fibril/ on first use", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      assert.isFalse(yield* h.fs.exists(h.path.join(h.root, ".fibril")))
      assert.strictEqual(yield* h.memory.read, "")
      yield* h.memory.remember("first")
      assert.strictEqual((yield* h.fs.stat(h.path.join(h.root, ".fibril"))).type, "Directory")
      assert.strictEqual(yield* h.fs.readFileString(h.file), "- first\n")
    }).pipe(provide))

  it.effect("collapses a multi-line note to one line", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const bullet = yield* h.memory.remember("line one\n\n  line\ttwo\r\n- line three\n")
      assert.strictEqual(bullet, "- line one line two - line three")
      assert.strictEqual(yield* h.memory.read, "- line one line two - line three\n")
    }).pipe(provide))

  it.effect("an empty or blank note fails and writes nothing", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      for (const note of ["", "   ", "\n\t\n"]) {
        const error = yield* Effect.flip(h.memory.remember(note))
        assert.strictEqual(error._tag, "MemoryError")
        assert.include(error.message, "empty")
      }
      assert.isFalse(yield* h.fs.exists(h.file))
    }).pipe(provide))

  it.effect("caps a note at 500 characters, ending in …", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const bullet = yield* h.memory.remember("é".repeat(600))
      assert.strictEqual(bullet, `- ${"é".repeat(499)}…`)
      assert.strictEqual(Array.from(bullet.slice(2)).length, Memory.maxNoteChars)
      const exact = "x".repeat(500)
      assert.strictEqual(yield* h.memory.remember(exact), `- ${exact}`)
    }).pipe(provide))

  it.effect("appends on a new line after a hand-edited file without a final newline", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.fs.makeDirectory(h.path.dirname(h.file), { recursive: true })
      yield* h.fs.writeFileString(h.file, "# Notes\n- by hand")
      yield* h.memory.remember("by the agent")
      assert.strictEqual(yield* h.fs.readFileString(h.file), "# Notes\n- by hand\n- by the agent\n")
    }).pipe(provide))

  it.effect("section is empty without a file (or with a blank one) and formatted with notes", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      assert.strictEqual(yield* h.memory.section, "")
      yield* h.fs.makeDirectory(h.path.dirname(h.file), { recursive: true })
      yield* h.fs.writeFileString(h.file, "\n  \n")
      assert.strictEqual(yield* h.memory.section, "")
      yield* h.memory.remember("use pnpm, not npm")
      yield* h.memory.remember("the API is in src/api")
      assert.strictEqual(
        yield* h.memory.section,
        "## Memory\n\nNotes remembered in earlier work (from .fibril/memory.md):\n\n- use pnpm, not npm\n- the API is in src/api"
      )
    }).pipe(provide))

  it.effect("section sees every hand change: same-size edit, replace by rename, delete, recreate", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const section = (notes: string) => notes === "" ? "" : Memory.formatSection(notes)
      yield* h.fs.makeDirectory(h.path.dirname(h.file), { recursive: true })
      yield* h.fs.writeFileString(h.file, "- aaaa\n")
      assert.strictEqual(yield* h.memory.section, section("- aaaa\n"))
      // Unchanged: the same section again (from what was read).
      assert.strictEqual(yield* h.memory.section, section("- aaaa\n"))
      // Rewritten in place with the same size: the times change.
      yield* h.fs.writeFileString(h.file, "- bbbb\n")
      assert.strictEqual(yield* h.memory.section, section("- bbbb\n"))
      // Replaced by a rename (a new inode), as editors save.
      const other = h.path.join(h.root, "memory.tmp")
      yield* h.fs.writeFileString(other, "- cccc\n")
      yield* h.fs.rename(other, h.file)
      assert.strictEqual(yield* h.memory.section, section("- cccc\n"))
      yield* h.fs.remove(h.file)
      assert.strictEqual(yield* h.memory.section, "")
      yield* h.fs.writeFileString(h.file, "- dddd\n")
      assert.strictEqual(yield* h.memory.section, section("- dddd\n"))
      // A note remembered here is in the next section.
      yield* h.memory.remember("eeee")
      assert.strictEqual(yield* h.memory.section, section("- dddd\n- eeee\n"))
    }).pipe(provide))

  // One stat per turn of the event loop: an edit is seen from the next turn on, however it
  // was made (here synchronously, in the very turn the section was last taken).
  it.effect("a hand edit made in the same turn as a look is seen from the next turn on", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.fs.makeDirectory(h.path.dirname(h.file), { recursive: true })
      yield* h.fs.writeFileString(h.file, "- aaaa\n")
      assert.strictEqual(yield* h.memory.section, Memory.formatSection("- aaaa\n"))
      writeFileSync(h.file, "- bbbb\n")
      yield* Effect.promise(() => new Promise((resolve) => setImmediate(resolve)))
      assert.strictEqual(yield* h.memory.section, Memory.formatSection("- bbbb\n"))
      assert.strictEqual(h.memory.knownSection(false), Memory.formatSection("- bbbb\n"))
    }).pipe(provide))

  it.effect("inheritedSection: the content last read or written, with every note remembered since", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      // Never read yet: it reads the file.
      yield* h.fs.makeDirectory(h.path.dirname(h.file), { recursive: true })
      yield* h.fs.writeFileString(h.file, "- by hand\n")
      assert.strictEqual(yield* h.memory.inheritedSection, Memory.formatSection("- by hand\n"))
      // Later reads do not touch the file: a hand edit shows up at the next `section`.
      yield* h.fs.writeFileString(h.file, "- edited\n")
      assert.strictEqual(yield* h.memory.inheritedSection, Memory.formatSection("- by hand\n"))
      assert.strictEqual(yield* h.memory.section, Memory.formatSection("- edited\n"))
      assert.strictEqual(yield* h.memory.inheritedSection, Memory.formatSection("- edited\n"))
      // A note remembered by this process is in it at once.
      yield* h.memory.remember("from the agent")
      assert.strictEqual(yield* h.memory.inheritedSection, Memory.formatSection("- edited\n- from the agent\n"))
    }).pipe(provide))

  it.effect("20 concurrent remember calls give 20 intact lines", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const notes = Array.from({ length: 20 }, (_, i) => `note ${i} ${"abc ".repeat(50).trim()}`)
      yield* Effect.forEach(notes, (note) => h.memory.remember(note), { concurrency: "unbounded" })
      const lines = (yield* h.fs.readFileString(h.file)).split("\n")
      assert.strictEqual(lines.pop(), "")
      assert.strictEqual(lines.length, 20)
      assert.deepStrictEqual([...lines].sort(), notes.map((note) => `- ${note}`).sort())
    }).pipe(provide))

  it.effect("options.path is resolved against the workspace root", () =>
    Effect.gen(function*() {
      const h = yield* setup({ path: "notes/agent.md" })
      assert.strictEqual(h.memory.path, h.path.join(h.root, "notes", "agent.md"))
      yield* h.memory.remember("elsewhere")
      assert.strictEqual(yield* h.fs.readFileString(h.memory.path), "- elsewhere\n")
      assert.include(yield* h.memory.section, "(from notes/agent.md)")
    }).pipe(provide))

  it.effect("a memory path that is a directory fails with a readable MemoryError", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.fs.makeDirectory(h.file, { recursive: true })
      const error = yield* Effect.flip(h.memory.read)
      assert.strictEqual(error._tag, "MemoryError")
      assert.include(error.message, "cannot read .fibril/memory.md")
      assert.strictEqual((yield* Effect.flip(h.memory.remember("x")))._tag, "MemoryError")
    }).pipe(provide))
})

describe("remember tool", () => {
  const call = (registry: ToolRegistry.ToolRegistry["Service"], args: unknown) =>
    Option.match(registry.get("remember"), {
      onNone: () => Effect.die("remember is not registered"),
      onSome: (tool) => Effect.flatMap(tool.decode(args), (params) => tool.handler(params, context))
    })

  it.effect("is registered with the memory posture and writes through the registry", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const tool = h.registry.get("remember")
      assert.isTrue(Option.isSome(tool))
      if (Option.isSome(tool)) {
        assert.strictEqual(tool.value.posture, "memory")
        assert.include(tool.value.description, ".fibril/memory.md")
      }
      assert.strictEqual(
        yield* call(h.registry, { note: "build with\n`npm run build`" }),
        "remembered: - build with `npm run build`"
      )
      assert.strictEqual(yield* h.fs.readFileString(h.file), "- build with `npm run build`\n")
    }).pipe(provide))

  it.effect("says when a note was shortened", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const out = yield* call(h.registry, { note: "y".repeat(700) })
      assert.strictEqual(out, `remembered (shortened to 500 characters): - ${"y".repeat(499)}…`)
    }).pipe(provide))

  it.effect("rejects bad arguments and reports an empty note", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const decodeError = yield* Effect.flip(call(h.registry, { note: "x", extra: 1 }))
      assert.strictEqual(decodeError._tag, "SchemaError")
      const missing = yield* Effect.flip(call(h.registry, {}))
      assert.strictEqual(missing._tag, "SchemaError")
      const empty = yield* Effect.flip(call(h.registry, { note: " " }))
      assert.strictEqual(empty._tag, "MemoryError")
      assert.isFalse(yield* h.fs.exists(h.file))
    }).pipe(provide))
})

describe("Memory.layerMemory", () => {
  it.effect("keeps notes in memory with the same rules", () =>
    Effect.gen(function*() {
      const memory = yield* Memory.Memory
      assert.strictEqual(yield* memory.section, "")
      yield* memory.remember("a\nb")
      yield* Effect.forEach(["c", "d", "e"], (note) => memory.remember(note), { concurrency: "unbounded" })
      assert.strictEqual(yield* memory.read, "- a b\n- c\n- d\n- e\n")
      assert.strictEqual(
        yield* memory.section,
        "## Memory\n\nNotes remembered in earlier work (from .fibril/memory.md):\n\n- a b\n- c\n- d\n- e"
      )
      assert.strictEqual((yield* Effect.flip(memory.remember(""))).reason.length > 0, true)
    }).pipe(Effect.provide(Memory.layerMemory)))

  it.effect("each build starts empty; makeMemory seeds content", () =>
    Effect.gen(function*() {
      const fresh = yield* Memory.Memory.use((m) => m.read).pipe(Effect.provide(Memory.layerMemory, { local: true }))
      assert.strictEqual(fresh, "")
      const seeded = yield* Memory.makeMemory("- known")
      yield* seeded.remember("new")
      assert.strictEqual(yield* seeded.read, "- known\n- new\n")
    }))
})
