/**
 * safeFs — file access confined to a root, decided on what is opened rather than on a path.
 *
 * A path checked and then used is resolved twice by the kernel: once for the check, once for
 * the use. Anything that can rename inside the root between the two (an agent's own shell, in
 * the same turn) can swap a directory for a symlink to one outside, and the use lands there.
 * So nothing here uses a checked path again. A path is walked one component at a time from a
 * descriptor of the root: each directory is opened (`O_DIRECTORY`, relative to the descriptor
 * of its parent) and the descriptor's own real path (`readlink /proc/self/fd/N`) is checked to
 * be inside the root; the next component is looked up relative to that descriptor through the
 * magic path `/proc/self/fd/N/<name>` — `openat` semantics: a later swap of the path does not
 * move the directory the descriptor holds. Missing parents are created one component at a time
 * in the verified parent and opened and checked again. A symlink in the last component is never
 * followed by the kernel: its text is read and resolved here, refused when it leads outside,
 * and walked again from the root otherwise (at most `maxLinks` times).
 *
 * Files are opened `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY` and `fstat`ed on the descriptor: a FIFO,
 * socket or device (or a file swapped for one) is reported by its type and never read, so no
 * open or read can block a thread of libuv's pool. A replacement is written to a temporary file
 * created `O_CREAT | O_EXCL | O_NOFOLLOW` in the verified directory, given the mode of the file
 * it replaces, and renamed over the target within that same directory (both through its
 * descriptor): readers see the old or the new content, never a half-written one.
 *
 * Every descriptor is opened under a `Scope` (`acquireRelease`: the open itself is not
 * interruptible, and it never blocks), so it is closed when the caller's scope ends, on
 * interruption too.
 *
 * Without `/proc/self/fd` (macOS, a Linux without /proc) the same walk runs on real paths:
 * each opened directory's `realpath` is checked inside the root and compared (device and
 * inode) with what the descriptor holds, the last component is opened `O_NOFOLLOW`, and a
 * link in it is resolved here as above. That refuses a swap made before the check, but one
 * made between the check and the use of a path can still redirect that use (Node has no
 * `openat`); docs/security.md says so.
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type * as FileSystem from "effect/FileSystem"
import * as PlatformError from "effect/PlatformError"
import type * as Scope from "effect/Scope"
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as nodePath from "node:path"

const { O_CREAT, O_DIRECTORY, O_EXCL, O_NOCTTY, O_NOFOLLOW, O_NONBLOCK, O_RDONLY, O_WRONLY, O_APPEND } = fs.constants

/** Symlinks followed in one resolution at most (the kernel's own limit is 40). */
export const maxLinks = 40
/** Attempts at one component while something keeps swapping it (created, then gone again). */
const maxAttempts = 8

/** A failed system call: its errno code, what was called, and the path as the caller gave it. */
interface Errno {
  readonly code: string
  readonly syscall: string
}

const errnoOf = (error: NodeJS.ErrnoException): Errno => ({
  code: error.code ?? "UNKNOWN",
  syscall: error.syscall ?? "unknown"
})

const tagOf = (code: string): PlatformError.SystemErrorTag => {
  switch (code) {
    case "ENOENT":
      return "NotFound"
    case "EACCES":
    case "EPERM":
      return "PermissionDenied"
    case "EEXIST":
      return "AlreadyExists"
    case "EISDIR":
    case "ENOTDIR":
    case "ELOOP":
    case "ENXIO":
      return "BadResource"
    case "EBUSY":
      return "Busy"
    case "EAGAIN":
      return "WouldBlock"
    default:
      return "Unknown"
  }
}

/** The PlatformError the file tools already know how to word (`Common.describe`). */
const platformError = (method: string, path: string, errno: Errno, description?: string) =>
  PlatformError.systemError({
    _tag: tagOf(errno.code),
    module: "FileSystem",
    method,
    syscall: errno.syscall,
    pathOrDescriptor: path,
    description: description ?? errno.code
  })

// --- System calls, wrapped once ---
// Callback forms of node:fs (they run on libuv's pool); every one of them returns promptly
// for the flags used here, which is what keeps the pool free.

const call = <A>(register: (done: (error: NodeJS.ErrnoException | null, value: A) => void) => void) =>
  Effect.callback<A, Errno>((resume) => {
    register((error, value) => resume(error ? Effect.fail(errnoOf(error)) : Effect.succeed(value)))
  })

const openRaw = (path: string, flags: number, mode = 0o666) => call<number>((done) => fs.open(path, flags, mode, done))
const close = (fd: number) => Effect.callback<void>((resume) => fs.close(fd, () => resume(Effect.void)))
/** A descriptor closed when the scope ends (the open is uninterruptible, and never blocks). */
const open = (path: string, flags: number, mode?: number): Effect.Effect<number, Errno, Scope.Scope> =>
  Effect.acquireRelease(openRaw(path, flags, mode), close)
const fstat = (fd: number) => call<fs.Stats>((done) => fs.fstat(fd, done))
const lstat = (path: string) => call<fs.Stats>((done) => fs.lstat(path, done))
const stat = (path: string) => call<fs.Stats>((done) => fs.stat(path, done))
const readlink = (path: string) => call<string>((done) => fs.readlink(path, done))
const realpath = (path: string) => call<string>((done) => fs.realpath(path, done))
const mkdir = (path: string) => call<string | undefined>((done) => fs.mkdir(path, 0o777, done))
const rename = (from: string, to: string) =>
  call<void>((done) => fs.rename(from, to, (error) => done(error, undefined)))
const unlink = (path: string) => call<void>((done) => fs.unlink(path, (error) => done(error, undefined)))
const fchmod = (fd: number, mode: number) =>
  call<void>((done) => fs.fchmod(fd, mode, (error) => done(error, undefined)))
const readAt = (fd: number, buffer: Buffer, offset: number, position: number) =>
  call<number>((done) => fs.read(fd, buffer, offset, buffer.length - offset, position, done))
/** The whole file from offset 0 (positional reads: a second `read` of a handle reads it all again). */
const readAll = (fd: number): Effect.Effect<Uint8Array, Errno> =>
  Effect.gen(function*() {
    const info = yield* fstat(fd)
    // One byte more than the size: a file that grew since is read on to its end.
    let buffer = Buffer.allocUnsafe(Number(info.size) + 1)
    let length = 0
    while (true) {
      if (length === buffer.length) {
        const larger = Buffer.allocUnsafe(buffer.length * 2)
        buffer.copy(larger, 0, 0, length)
        buffer = larger
      }
      const read = yield* readAt(fd, buffer, length, length)
      if (read === 0) return buffer.subarray(0, length)
      length += read
    }
  })
const writeAll = (fd: number, bytes: Uint8Array) =>
  call<void>((done) => fs.writeFile(fd, bytes, (error) => done(error, undefined)))
const readdir = (path: string) => call<Array<fs.Dirent>>((done) => fs.readdir(path, { withFileTypes: true }, done))

const typeOfStats = (stats: fs.Stats): FileSystem.File.Type =>
  stats.isFile()
    ? "File"
    : stats.isDirectory()
    ? "Directory"
    : stats.isSymbolicLink()
    ? "SymbolicLink"
    : stats.isFIFO()
    ? "FIFO"
    : stats.isSocket()
    ? "Socket"
    : stats.isCharacterDevice()
    ? "CharacterDevice"
    : stats.isBlockDevice()
    ? "BlockDevice"
    : "Unknown"

const typeOfDirent = (entry: fs.Dirent): FileSystem.File.Type =>
  entry.isFile()
    ? "File"
    : entry.isDirectory()
    ? "Directory"
    : entry.isSymbolicLink()
    ? "SymbolicLink"
    : entry.isFIFO()
    ? "FIFO"
    : entry.isSocket()
    ? "Socket"
    : entry.isCharacterDevice()
    ? "CharacterDevice"
    : entry.isBlockDevice()
    ? "BlockDevice"
    : "Unknown"

// --- Handles ---

/** What a path named once it was opened: an existing entry, or the place a new one would go. */
export interface Handle {
  /** What is there (`undefined`: nothing yet). A link is resolved, so never `SymbolicLink` from `open`. */
  readonly type: FileSystem.File.Type | undefined
  /** Real absolute path (through the verified directory; not re-resolved). */
  readonly real: string
  /** Size in bytes, from the descriptor (0 when nothing is there). */
  readonly size: number
  /** The whole file, read through the descriptor (a `File` only). */
  readonly read: Effect.Effect<Uint8Array, PlatformError.PlatformError>
  /**
   * Replaces the file with `bytes` (a `File`, or nothing yet): a temporary file in the same
   * verified directory, given the current file's mode, renamed over it.
   */
  readonly replace: (bytes: Uint8Array) => Effect.Effect<void, PlatformError.PlatformError>
  /** Appends `bytes` (a `File`, or nothing yet: created), through a descriptor opened without following links. */
  readonly append: (bytes: Uint8Array) => Effect.Effect<void, PlatformError.PlatformError>
  /** The entries of a `Directory`, listed through its descriptor. */
  readonly entries: Effect.Effect<ReadonlyArray<FileSystem.DirectoryEntry>, PlatformError.PlatformError>
  /**
   * The entry `name` of a `Directory`, opened without following a link (a link's handle has
   * type `SymbolicLink` and reads nothing): what a walk uses, with no path in between.
   */
  readonly child: (name: string) => Effect.Effect<Handle, PlatformError.PlatformError, Scope.Scope>
}

/** `given` resolves outside the root (through `..`, an absolute path or a link). */
export interface Outside {
  readonly _tag: "Outside"
}
const outside: Outside = { _tag: "Outside" }

export interface Confined {
  /** The real root. */
  readonly root: string
  /** Does `/proc/self/fd` give descriptor-relative access (Linux)? */
  readonly descriptorRelative: boolean
  /**
   * Opens `absolute` (already lexically inside the root): links resolved and checked, the
   * result verified inside the root. `createParents`: missing directories are made on the way.
   */
  readonly open: (
    absolute: string,
    options?: { readonly createParents?: boolean }
  ) => Effect.Effect<Handle, Outside | PlatformError.PlatformError, Scope.Scope>
}

/** A directory held open and verified inside the root; `at` addresses its entries. */
interface Dir {
  readonly fd: number
  readonly real: string
  readonly at: (name: string) => string
}

/** A confined view of `root` (a real, absolute path). */
export const make = (root: string, descriptorRelative: boolean): Confined => {
  const inside = (absolute: string) => absolute === root || absolute.startsWith(root + nodePath.sep)

  const dirAt = (fd: number, real: string): Dir => ({
    fd,
    real,
    at: descriptorRelative
      ? (name) => `/proc/self/fd/${fd}/${name}`
      : (name) => (real === nodePath.sep ? `${real}${name}` : `${real}${nodePath.sep}${name}`)
  })

  /** The real path of an opened directory, checked against the descriptor on the fallback. */
  const realOf = (fd: number, opened: string): Effect.Effect<string, Errno> =>
    descriptorRelative
      ? readlink(`/proc/self/fd/${fd}`)
      : Effect.gen(function*() {
        const real = yield* realpath(opened)
        const [held, there] = yield* Effect.all([fstat(fd), stat(real)])
        // A swap between the open and the realpath: the path no longer names what was opened.
        if (held.dev !== there.dev || held.ino !== there.ino) {
          return yield* Effect.fail<Errno>({ code: "EAGAIN", syscall: "realpath" })
        }
        return real
      })

  const openRoot = (absolute: string) =>
    open(root, O_RDONLY | O_DIRECTORY | O_NONBLOCK).pipe(
      Effect.map((fd) => dirAt(fd, root)),
      Effect.mapError((errno) => platformError("open", absolute, errno))
    )

  /**
   * The directory `name` of `parent`, opened (following a link: the result is checked) and
   * verified inside the root; created first when missing and `create` is set.
   */
  const enter = (
    parent: Dir,
    name: string,
    create: boolean,
    absolute: string
  ): Effect.Effect<Dir, Outside | PlatformError.PlatformError, Scope.Scope> =>
    Effect.gen(function*() {
      for (let attempt = 0; attempt < maxAttempts; attempt++) {
        const opened = parent.at(name)
        const result = yield* Effect.result(open(opened, O_RDONLY | O_DIRECTORY | O_NONBLOCK))
        if (result._tag === "Success") {
          const fd = result.success
          const real = yield* realOf(fd, opened).pipe(Effect.mapError((e) => platformError("open", absolute, e)))
          if (!inside(real)) return yield* Effect.fail(outside)
          return dirAt(fd, real)
        }
        const errno = result.failure
        if (errno.code === "ENOENT" && create) {
          const made = yield* Effect.result(mkdir(opened))
          if (made._tag === "Failure" && made.failure.code !== "EEXIST") {
            return yield* Effect.fail(platformError("makeDirectory", absolute, made.failure))
          }
          continue // open what is there now, and check it again
        }
        if (errno.code === "EAGAIN") continue
        return yield* Effect.fail(platformError("open", absolute, errno))
      }
      return yield* Effect.fail(
        platformError("open", absolute, { code: "EAGAIN", syscall: "open" }, "it kept changing while being opened")
      )
    })

  /** Walks `components` from the root; the last directory reached. */
  const walk = (components: ReadonlyArray<string>, create: boolean, absolute: string) =>
    Effect.gen(function*() {
      let dir = yield* openRoot(absolute)
      for (const component of components) dir = yield* enter(dir, component, create, absolute)
      return dir
    })

  /** A handle on entry `name` of the verified `dir` (not following a link), given its lstat. */
  const handleAt = (
    dir: Dir,
    name: string,
    absolute: string
  ): Effect.Effect<Handle, PlatformError.PlatformError, Scope.Scope> =>
    Effect.gen(function*() {
      const where = dir.at(name)
      const real = nodePath.join(dir.real, name)
      const fail = (method: string) => (errno: Errno) => platformError(method, absolute, errno)
      const info = yield* Effect.result(lstat(where))
      if (info._tag === "Failure") {
        if (info.failure.code !== "ENOENT") return yield* Effect.fail(fail("stat")(info.failure))
        return fileHandle(dir, name, real, absolute, undefined, undefined)
      }
      const listed = typeOfStats(info.success)
      // Only what cannot block or act on open is opened: a regular file or a directory. A
      // FIFO, socket or device is reported by its type and never opened.
      if (listed === "Directory") {
        const fd = yield* open(where, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK).pipe(
          Effect.mapError(fail("open"))
        )
        return directoryHandle(dirAt(fd, real), absolute)
      }
      if (listed !== "File") return typeOnly(listed, real, absolute, Number(info.success.size))
      const fd = yield* open(where, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY).pipe(Effect.mapError(fail("open")))
      // Swapped between the lstat and the open? The descriptor says what was opened.
      const held = yield* fstat(fd).pipe(Effect.mapError(fail("stat")))
      const type = typeOfStats(held)
      if (type === "Directory") return directoryHandle(dirAt(fd, real), absolute)
      if (type !== "File") return typeOnly(type, real, absolute, Number(held.size))
      return fileHandle(dir, name, real, absolute, fd, held)
    })

  const notA = (what: string, method: string, absolute: string) =>
    Effect.fail(platformError(method, absolute, { code: "EINVAL", syscall: method }, `not ${what}`))

  const typeOnly = (type: FileSystem.File.Type, real: string, absolute: string, size: number): Handle => ({
    type,
    real,
    size,
    read: notA("a regular file", "readFile", absolute),
    replace: () => notA("a regular file", "writeFile", absolute),
    append: () => notA("a regular file", "writeFile", absolute),
    entries: notA("a directory", "readDirectory", absolute),
    child: () => notA("a directory", "readDirectory", absolute)
  })

  const missing = (real: string, absolute: string): Handle => ({
    ...typeOnly("File", real, absolute, 0),
    type: undefined,
    read: Effect.fail(platformError("readFile", absolute, { code: "ENOENT", syscall: "open" })),
    replace: () => Effect.fail(platformError("writeFile", absolute, { code: "ENOENT", syscall: "open" })),
    append: () => Effect.fail(platformError("writeFile", absolute, { code: "ENOENT", syscall: "open" }))
  })

  const directoryHandle = (dir: Dir, absolute: string): Handle => ({
    ...typeOnly("Directory", dir.real, absolute, 0),
    entries: readdir(descriptorRelative ? `/proc/self/fd/${dir.fd}` : dir.real).pipe(
      Effect.map((entries) => entries.map((entry) => ({ name: entry.name, type: typeOfDirent(entry) }))),
      Effect.mapError((errno) => platformError("readDirectory", absolute, errno))
    ),
    child: (name) => handleAt(dir, name, nodePath.join(absolute, name))
  })

  const fileHandle = (
    dir: Dir,
    name: string,
    real: string,
    absolute: string,
    fd: number | undefined,
    held: fs.Stats | undefined
  ): Handle => ({
    ...typeOnly("File", real, absolute, Number(held?.size ?? 0)),
    type: fd === undefined ? undefined : "File",
    read: fd === undefined
      ? Effect.fail(platformError("readFile", absolute, { code: "ENOENT", syscall: "open" }))
      : readAll(fd).pipe(Effect.mapError((errno) => platformError("readFile", absolute, errno))),
    replace: (bytes) => replaceIn(dir, name, absolute, held === undefined ? undefined : held.mode & 0o7777, bytes),
    append: (bytes) =>
      Effect.scoped(Effect.gen(function*() {
        const target = yield* open(dir.at(name), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY)
        const info = yield* fstat(target)
        if (!info.isFile()) return yield* Effect.fail<Errno>({ code: "EINVAL", syscall: "open" })
        yield* writeAll(target, bytes)
      })).pipe(Effect.mapError((errno) => platformError("writeFile", absolute, errno)))
  })

  /** A temporary file in `dir`, written and renamed over `name` (removed again if anything fails). */
  const replaceIn = (dir: Dir, name: string, absolute: string, mode: number | undefined, bytes: Uint8Array) => {
    const temporary = `.fibril-${randomBytes(6).toString("hex")}.tmp`
    const write = Effect.scoped(Effect.gen(function*() {
      const fd = yield* open(dir.at(temporary), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK, 0o666)
      yield* writeAll(fd, bytes)
      if (mode !== undefined) yield* fchmod(fd, mode)
    }))
    return write.pipe(
      Effect.andThen(rename(dir.at(temporary), dir.at(name))),
      Effect.onExit((exit) => Exit.isFailure(exit) ? Effect.ignore(unlink(dir.at(temporary))) : Effect.void),
      Effect.mapError((errno) => platformError("writeFile", absolute, errno))
    )
  }

  const openPath = (
    absolute: string,
    options: { readonly createParents?: boolean } = {}
  ): Effect.Effect<Handle, Outside | PlatformError.PlatformError, Scope.Scope> =>
    Effect.gen(function*() {
      const create = options.createParents === true
      let target = absolute
      for (let hops = 0; hops <= maxLinks; hops++) {
        if (!inside(target)) return yield* Effect.fail(outside)
        const components = nodePath.relative(root, target).split(nodePath.sep).filter((part) => part !== "")
        const last = components.pop()
        const walked = yield* Effect.result(walk(components, create, absolute))
        if (walked._tag === "Failure") {
          const error = walked.failure
          // A missing parent: nothing is there (what a stat of the path would have said).
          if (error._tag === "PlatformError" && error.reason._tag === "NotFound") return missing(target, absolute)
          return yield* Effect.fail(error)
        }
        const dir = walked.success
        if (last === undefined) return directoryHandle(dir, absolute)
        const where = dir.at(last)
        const link = yield* Effect.result(readlink(where))
        if (link._tag === "Success") {
          // A link is never followed by the kernel: its text is resolved here and walked again.
          target = nodePath.resolve(dir.real, link.success)
          continue
        }
        // EINVAL: not a link; ENOENT: nothing there yet. Anything else is a real failure.
        if (link.failure.code !== "EINVAL" && link.failure.code !== "ENOENT") {
          return yield* Effect.fail(platformError("open", absolute, link.failure))
        }
        const handle = yield* Effect.result(handleAt(dir, last, absolute))
        if (handle._tag === "Success") return handle.success
        // ELOOP: the entry became a link between the readlink and the open; resolve it again.
        if (handle.failure.reason._tag === "BadResource" && handle.failure.reason.description === "ELOOP") continue
        return yield* Effect.fail(handle.failure)
      }
      return yield* Effect.fail(
        platformError("open", absolute, { code: "ELOOP", syscall: "open" }, "too many levels of symbolic links")
      )
    })

  return { root, descriptorRelative, open: openPath }
}

/**
 * Whether `/proc/self/fd/N` names what descriptor N holds, and gives descriptor-relative
 * access (Linux with /proc mounted): checked once on the root itself.
 */
export const probeDescriptorRelative = (root: string): boolean => {
  let fd: number | undefined
  try {
    fd = fs.openSync(root, O_RDONLY | O_DIRECTORY)
    return fs.readlinkSync(`/proc/self/fd/${fd}`) === root && fs.statSync(`/proc/self/fd/${fd}/.`).isDirectory()
  } catch {
    return false
  } finally {
    if (fd !== undefined) fs.closeSync(fd)
  }
}
