/**
 * Memory — notes an agent keeps across runs, in `<workspace>/.fibril/memory.md`.
 *
 * The file is a plain Markdown list a person can read and edit: `remember` appends one
 * bullet per note, and `section` renders the file for the system prompt of later sessions.
 * A note is always one line (whitespace runs, newlines included, become one space) and at
 * most `maxNoteChars` characters, so one note can never break the list or flood a prompt.
 * Appends are serialised by a semaphore, so concurrent `remember` calls never interleave.
 *
 * `section` is the file as it is now (a new conversation sees a hand edit): it looks at the
 * file's identity, size and times (one synchronous `stat`, a few microseconds, no thread-pool
 * round trip) and reads the file again only when they changed since it was last read; `read`
 * always reads. Sub-agents use `inheritedSection` instead: the content this process last read
 * or wrote, so spawning a thousand children does not look at the file a thousand times; every
 * `remember` of this process is in it.
 *
 * @example
 * const memory = Memory.layer().pipe(Layer.provide([Workspace.layer(cwd), NodeServices.layer]))
 * const program = Memory.Memory.use((m) => m.remember("tests run with `npm test`"))
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Path from "effect/Path"
import * as Schema from "effect/Schema"
import * as Semaphore from "effect/Semaphore"
import { statSync } from "node:fs"
import { withSpan } from "./internal/span.ts"
import { Workspace } from "./Workspace.ts"

const decoder = new TextDecoder("utf-8")

/** Longest note kept, in characters (code points); longer notes end in "…". */
export const maxNoteChars = 500

/** Where the memory file lives, relative to the workspace root. */
export const defaultPath = ".fibril/memory.md"

export class MemoryError extends Schema.TaggedError<MemoryError>()("MemoryError", {
  reason: Schema.String
}) {
  override get message() {
    return `memory: ${this.reason}`
  }
}

export class Memory extends Context.Service<Memory, {
  /** Absolute path of the memory file. */
  readonly path: string
  /** The file's content ("" when it does not exist yet). */
  readonly read: Effect.Effect<string, MemoryError>
  /** Appends `note` as one bullet ("- <note>\n"); returns the bullet written, without the newline. */
  readonly remember: (note: string) => Effect.Effect<string, MemoryError>
  /** The system-prompt section with the file's notes; "" when there are none. */
  readonly section: Effect.Effect<string, MemoryError>
  /**
   * The section as this process last read or wrote the file (read now if it never was):
   * what a sub-agent inherits. Notes remembered by this process are always in it; a hand
   * edit shows up at the next `read` or `section`.
   */
  readonly inheritedSection: Effect.Effect<string, MemoryError>
  /**
   * What `section` (`inherited`: `inheritedSection`) would give, when it is known at once: the
   * file unchanged since it was last read (one `stat`), or, inherited, read or written before.
   * `undefined` when it has to be read: run the effect then. A new conversation asks this in
   * its own step instead of running a read that would find nothing to read.
   */
  readonly knownSection: (inherited: boolean) => string | undefined
}>()("@fibril/core/Memory") {}

/** A note made one line and capped; `note` is "" when nothing but whitespace was given. */
export const normalize = (note: string): { readonly note: string; readonly truncated: boolean } => {
  const line = note.replace(/\s+/g, " ").trim()
  const chars = Array.from(line)
  return chars.length <= maxNoteChars
    ? { note: line, truncated: false }
    : { note: chars.slice(0, maxNoteChars - 1).join("").trimEnd() + "…", truncated: true }
}

/** The prompt section for the file's `content` ("" when it holds nothing). */
export const formatSection = (content: string, shownPath: string = defaultPath): string => {
  const notes = content.trim()
  return notes === "" ? "" : `## Memory\n\nNotes remembered in earlier work (from ${shownPath}):\n\n${notes}`
}

/** How the notes are stored: read all, append text. */
interface Storage {
  readonly load: Effect.Effect<string, MemoryError>
  readonly append: (text: string) => Effect.Effect<void, MemoryError>
  /**
   * A cheap token that changes whenever the stored content may have changed (undefined: no
   * such token; `section` then loads every time).
   */
  readonly version?: (() => string | undefined) | undefined
}

const fromStorage = Effect.fnUntraced(function*(path: string, shownPath: string, storage: Storage) {
  const lock = yield* Semaphore.make(1)
  // The content last read or written, and its rendered section. `writes` counts appends, so
  // a read that started before an append finished cannot put back the older content.
  let known: { readonly content: string; readonly section: string } | undefined
  let writes = 0
  // The storage's version when `known` was loaded (undefined: load again before trusting it).
  let knownVersion: string | undefined
  const remembered = (content: string) => {
    known = { content, section: formatSection(content, shownPath) }
    return known
  }

  const remember = Effect.fn("Memory.remember")(function*(given: string) {
    const { note } = normalize(given)
    if (note === "") {
      return yield* new MemoryError({ reason: "the note is empty; give one line of text worth remembering" })
    }
    const bullet = `- ${note}`
    // Under the lock: the current content decides whether a newline is missing (a hand edit
    // may have left none), and no other append can land between this read and the write.
    yield* lock.withPermit(Effect.gen(function*() {
      const content = yield* storage.load
      const separator = content === "" || content.endsWith("\n") ? "" : "\n"
      const appended = `${separator}${bullet}\n`
      yield* storage.append(appended)
      writes++
      knownVersion = undefined
      remembered(content + appended)
    }))
    return bullet
  })

  const load = Effect.suspend(() => {
    const before = writes
    // Taken before the read: a change that lands during it makes the next look read again.
    const version = storage.version?.()
    return Effect.map(storage.load, (content) => {
      if (before !== writes) return { content, section: formatSection(content, shownPath) }
      knownVersion = version
      return remembered(content)
    })
  })

  /** What `section` gives: the known content while the storage's version is unchanged. */
  const current = Effect.suspend(() =>
    known !== undefined && knownVersion !== undefined && storage.version?.() === knownVersion
      ? Effect.succeed(known)
      : load
  )

  const read = load.pipe(Effect.map((loaded) => loaded.content), Effect.withSpan("Memory.read"))

  return Memory.of({
    path,
    read,
    remember,
    section: current.pipe(Effect.map((loaded) => loaded.section), withSpan("Memory.section")),
    inheritedSection: Effect.suspend(() =>
      known === undefined ? Effect.map(load, (loaded) => loaded.section) : Effect.succeed(known.section)
    ),
    knownSection: (inherited) =>
      known !== undefined && (inherited || (knownVersion !== undefined && storage.version?.() === knownVersion))
        ? known.section
        : undefined
  })
})

/** The memory file at `options.path` (relative to the workspace root), or `.fibril/memory.md`. */
export const make = Effect.fn("Memory.make")(function*(options: { readonly path?: string | undefined } = {}) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const workspace = yield* Workspace
  const file = path.resolve(workspace.root, options.path ?? defaultPath)
  const shown = workspace.containsLexically(file) ? workspace.relative(file) : file

  // Inside the workspace, the file is reached through `Workspace.open` like every file tool's:
  // an agent's shell that swaps `.fibril` for a link to outside cannot make `remember` append
  // there, nor a FIFO planted as the file hang the read. A file configured outside the
  // workspace (a user's own choice) is used by its path.
  const confined = workspace.containsLexically(file)
  const utf8 = new TextEncoder()
  const readConfined = Effect.scoped(Effect.gen(function*() {
    const handle = yield* workspace.open(file)
    if (handle.type === undefined) return ""
    if (handle.type !== "File") return yield* new MemoryError({ reason: `cannot read ${shown}: not a regular file` })
    return decoder.decode(yield* handle.read)
  }))
  const load = confined
    ? readConfined.pipe(
      Effect.catchTags({
        OutsideWorkspace: (error) => Effect.fail(new MemoryError({ reason: `cannot read ${shown}: ${error.message}` })),
        PlatformError: (error) => Effect.fail(new MemoryError({ reason: `cannot read ${shown}: ${error.message}` }))
      })
    )
    : fs.readFileString(file).pipe(
      Effect.catch((error) =>
        error.reason._tag === "NotFound"
          ? Effect.succeed("")
          : Effect.fail(new MemoryError({ reason: `cannot read ${shown}: ${error.message}` }))
      )
    )

  const append = (text: string) =>
    confined
      ? Effect.scoped(Effect.gen(function*() {
        const handle = yield* workspace.open(file, { createParents: true })
        if (handle.type !== undefined && handle.type !== "File") {
          return yield* new MemoryError({ reason: `cannot write ${shown}: not a regular file` })
        }
        yield* handle.append(utf8.encode(text))
      })).pipe(
        Effect.catchTags({
          OutsideWorkspace: (error) =>
            Effect.fail(new MemoryError({ reason: `cannot write ${shown}: ${error.message}` })),
          PlatformError: (error) => Effect.fail(new MemoryError({ reason: `cannot write ${shown}: ${error.message}` }))
        })
      )
      : fs.makeDirectory(path.dirname(file), { recursive: true }).pipe(
        Effect.andThen(fs.writeFileString(file, text, { flag: "a" })),
        Effect.mapError((error) => new MemoryError({ reason: `cannot write ${shown}: ${error.message}` }))
      )

  // Identity, size and times: a write in place, a replace (new inode) or a delete changes it.
  const stat = (): string | undefined => {
    try {
      const found = statSync(file, { throwIfNoEntry: false })
      return found === undefined ? "absent" : `${found.ino}:${found.size}:${found.mtimeMs}:${found.ctimeMs}`
    } catch {
      return undefined // no version: `section` reads the file (and reports why it cannot)
    }
  }
  // One `stat` per turn of the event loop: nothing outside this process's synchronous code can
  // be seen to change the file within a turn (a hand edit that lands during it is the same as
  // one just after it), and a write through `remember` is known anyway. Conversations created
  // one after another with no I/O between them (a harness's loop, the benchmark's round
  // trips) share the turn's look; one started by a request (its own turn) looks again.
  let turnVersion: string | undefined
  const version = (): string | undefined => {
    if (turnVersion !== undefined) return turnVersion
    const current = stat()
    if (current !== undefined) {
      turnVersion = current
      // Unref'd: it never keeps a process alive on its own.
      setImmediate(() => (turnVersion = undefined)).unref()
    }
    return current
  }

  return yield* fromStorage(file, shown, { load, append, version })
})

/** Memory kept in a string, starting from `initial`; nothing touches the disk. */
export const makeMemory = (initial = ""): Effect.Effect<Memory["Service"]> =>
  Effect.suspend(() => {
    let content = initial
    return fromStorage(`/${defaultPath}`, defaultPath, {
      load: Effect.sync(() => content),
      append: (text) => Effect.sync(() => void (content += text))
    })
  })

/** The workspace's memory file (`<root>/.fibril/memory.md` unless `options.path` says otherwise). */
export const layer = (
  options: { readonly path?: string | undefined } = {}
): Layer.Layer<Memory, never, Workspace | FileSystem.FileSystem | Path.Path> => Layer.effect(Memory, make(options))

/** An empty in-memory store per build, for tests. */
export const layerMemory: Layer.Layer<Memory> = Layer.effect(Memory, makeMemory())
