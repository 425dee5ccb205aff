/**
 * SubAgentStore — sub-agent records and transcripts that outlive the process.
 *
 * Records are held in memory and persisted as one JSON file, `<dir>/subagents.v1.json`
 * (`{ "version": 1, "records": [...] }`), always replaced whole: the new content goes to a
 * temp file in the same directory, is fsynced, then renamed over the old one, so a crash at
 * any moment leaves either the old or the new file, never a mix. `put` is cheap (it marks the
 * store dirty); one writer fiber coalesces bursts into at most one write per `coalesceMs`,
 * and closing the layer's scope flushes what is left.
 *
 * The loader never throws data away silently: a file that is not valid JSON or has the wrong
 * shape is moved aside (`.corrupt-<epoch-ms>`); a single invalid record is dropped after a
 * copy of the whole file is kept the same way. Fields this version does not know (written by
 * a newer Fibril) are kept per record and written back on every rewrite.
 *
 * Transcripts are JSONL files, `<dir>/transcripts/<handle>`, appended to and never rewritten.
 * Terminal records older than `evictAfterMs`, or beyond `maxRecords`, are dropped together
 * with their transcripts; pending and running records are never dropped.
 */
import { Clock, Context, Effect, FileSystem, Latch, Layer, Option, Path, PlatformError, Random, Result, Schema, Semaphore } from "effect"
import { isTerminal, SubAgentRecord } from "./SubAgentRecord.ts"

export class StoreError extends Schema.TaggedError<StoreError>()("StoreError", {
  path: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `sub-agent store: ${this.path}: ${this.reason}`
  }
}

export class SubAgentStore extends Context.Service<SubAgentStore, {
  /** All records (as loaded at layer build, plus every put since, minus evictions). */
  readonly all: Effect.Effect<ReadonlyArray<SubAgentRecord>>
  readonly get: (agentId: string) => Effect.Effect<Option.Option<SubAgentRecord>>
  /** Upsert. Cheap: updates memory and marks the store dirty; the write is coalesced. */
  readonly put: (record: SubAgentRecord) => Effect.Effect<void>
  /** Writes pending changes now (also runs when the layer's scope closes). */
  readonly flush: Effect.Effect<void, StoreError>
  /** Appends values to a transcript (JSONL: one JSON value per line). */
  readonly appendTranscript: (handle: string, entries: ReadonlyArray<unknown>) => Effect.Effect<void, StoreError>
  /** The values of a transcript; empty if there is none. A truncated last line is ignored. */
  readonly readTranscript: (handle: string) => Effect.Effect<ReadonlyArray<unknown>, StoreError>
  /** Problems found when loading (e.g. a corrupt file moved aside), for the caller to log or show. */
  readonly warnings: ReadonlyArray<string>
  /** True when records outlive the process (the file store): transcripts are then appended as they grow. */
  readonly durable: boolean
}>()("@fibril/core/SubAgentStore") {}

export interface Limits {
  /** Minimum time between two writes of the records file. Default 50. */
  readonly coalesceMs?: number | undefined
  /** Terminal records whose `finished_at` is older than this are dropped. Default 7 days. */
  readonly evictAfterMs?: number | undefined
  /** Beyond this many records, the oldest terminal ones are dropped. Default 1000. */
  readonly maxRecords?: number | undefined
}

export interface FileOptions extends Limits {
  /** The state directory, e.g. `<cwd>/.fibril/state`; created on the first write. */
  readonly dir: string
}

export const defaultLimits = {
  coalesceMs: 50,
  evictAfterMs: 7 * 24 * 60 * 60 * 1000,
  maxRecords: 1000
} as const

export const recordsFileName = "subagents.v1.json"
export const transcriptsDirName = "transcripts"

// ---------------------------------------------------------------------------
// Records in memory
// ---------------------------------------------------------------------------

interface ResolvedLimits {
  readonly coalesceMs: number
  readonly evictAfterMs: number
  readonly maxRecords: number
}

/** A record plus the fields of its JSON object that this version does not know. */
interface Entry {
  readonly record: SubAgentRecord
  readonly extra: Readonly<Record<string, unknown>>
}

const knownKeys: ReadonlySet<string> = new Set(Object.keys(SubAgentRecord.fields))

/** A shallow copy with only the schema's keys: callers may pass a wider object (a view) or mutate theirs later. */
const knownOnly = (record: SubAgentRecord): SubAgentRecord => {
  const { ...copy } = record
  // Deleting turns the copy into a slow dictionary object: only when there is a key to drop.
  const keys = Object.keys(copy)
  if (keys.some((key) => !knownKeys.has(key))) {
    for (const key of keys) if (!knownKeys.has(key)) Reflect.deleteProperty(copy, key)
  }
  return copy
}

/** The unknown fields of a raw record; `fromEntries` so a `__proto__` key stays a plain field. */
const unknownFields = (raw: object): Record<string, unknown> =>
  Object.fromEntries(Object.entries(raw).filter(([key]) => !knownKeys.has(key)))

const isValidRecord = Schema.is(SubAgentRecord)
const decodeRecord = Schema.decodeUnknownResult(SubAgentRecord)

/** Known fields first, then the unknown ones; the two sets are disjoint. */
const toJson = (entry: Entry): Record<string, unknown> => ({ ...entry.record, ...entry.extra })

/** One record per line: compact, and still readable in a diff. */
const serialize = (entries: Iterable<Entry>): string => {
  const lines = Array.from(entries, (entry) => JSON.stringify(toJson(entry)))
  return `{"version":1,"records":[${lines.length === 0 ? "" : `\n${lines.join(",\n")}\n`}]}\n`
}

/** The records to drop at `now`: terminal ones past the age limit, then the oldest terminal ones over the count. */
const evictionVictims = (
  records: ReadonlyArray<SubAgentRecord>,
  now: number,
  limits: ResolvedLimits
): ReadonlyArray<SubAgentRecord> => {
  // A terminal record without finished_at (should not happen) ages from its creation.
  const finishedAt = (r: SubAgentRecord) => r.finished_at ?? r.created_at
  const aged = records.filter((r) => isTerminal(r.status) && now - finishedAt(r) > limits.evictAfterMs)
  const agedIds = new Set(aged.map((r) => r.agent_id))
  const left = records.filter((r) => !agedIds.has(r.agent_id))
  const excess = left.length - limits.maxRecords
  if (excess <= 0) return aged
  const oldest = left
    .filter((r) => isTerminal(r.status))
    .sort((a, b) => finishedAt(a) - finishedAt(b))
    .slice(0, excess)
  return [...aged, ...oldest]
}

// ---------------------------------------------------------------------------
// Transcripts
// ---------------------------------------------------------------------------

/** Handles are plain file names inside the transcripts directory, nothing that could point elsewhere. */
const checkHandle = (handle: string): Effect.Effect<void, StoreError> =>
  handle === "" || handle === "." || handle.includes("/") || handle.includes("\\") || handle.includes("..") ||
    handle.includes("\0")
    ? Effect.fail(
      new StoreError({ path: handle, reason: "a transcript handle must be a plain file name (no '/', '\\' or '..')" })
    )
    : Effect.void

const toLines = (handle: string, entries: ReadonlyArray<unknown>): Effect.Effect<string, StoreError> =>
  Effect.forEach(entries, (entry, i) =>
    Effect.try({
      try: () => JSON.stringify(entry),
      catch: (cause) => new StoreError({ path: handle, reason: `entry ${i} is not JSON-serialisable: ${String(cause)}` })
    }).pipe(
      Effect.flatMap((line) =>
        // JSON.stringify returns undefined for undefined, functions and symbols.
        typeof line === "string"
          ? Effect.succeed(line)
          : Effect.fail(new StoreError({ path: handle, reason: `entry ${i} has no JSON representation` }))
      )
    )).pipe(Effect.map((lines) => lines.map((line) => `${line}\n`).join("")))

const parseJsonLine = Schema.decodeUnknownOption(Schema.fromJsonString(Schema.Unknown))

/**
 * Parses JSONL. A last line that does not parse is a crash in the middle of an append and is
 * ignored; a bad line before it means the file is damaged, and is an error.
 */
const parseTranscript = (path: string, text: string): Effect.Effect<ReadonlyArray<unknown>, StoreError> => {
  const lines = text.split("\n")
  let last = lines.length - 1
  while (last >= 0 && lines[last]!.trim() === "") last--
  const values: Array<unknown> = []
  for (let i = 0; i <= last; i++) {
    const line = lines[i]!
    if (line.trim() === "") continue
    const value = parseJsonLine(line)
    if (Option.isSome(value)) values.push(value.value)
    else if (i !== last) {
      return Effect.fail(new StoreError({ path, reason: `line ${i + 1} of the transcript is not valid JSON` }))
    }
  }
  return Effect.succeed(values)
}

// ---------------------------------------------------------------------------
// The store over a backend
// ---------------------------------------------------------------------------

/** Where the store's bytes go: the file system, or memory. */
interface Backend {
  /** Survives the process: worth writing transcripts as they grow. */
  readonly durable: boolean
  /** Replaces the persisted records with `json` (atomically); undefined when records are not persisted. */
  readonly persist: ((json: string) => Effect.Effect<void, StoreError>) | undefined
  readonly append: (handle: string, text: string) => Effect.Effect<void, StoreError>
  /** The transcript's text, or undefined when it does not exist. */
  readonly read: (handle: string) => Effect.Effect<string | undefined, StoreError>
  /** Best effort. */
  readonly remove: (handle: string) => Effect.Effect<void>
}

interface Loaded {
  readonly entries: ReadonlyArray<Entry>
  readonly warnings: ReadonlyArray<string>
  /** The persisted file differs from what was loaded (a record was dropped) and should be rewritten. */
  readonly rewrite: boolean
}

/** A failed background write is retried after this long (or at the next put/flush). */
const retryAfter = "1 second"

const make = Effect.fnUntraced(function*(backend: Backend, loaded: Loaded, options: Limits) {
  const limits: ResolvedLimits = {
    coalesceMs: options.coalesceMs ?? defaultLimits.coalesceMs,
    evictAfterMs: options.evictAfterMs ?? defaultLimits.evictAfterMs,
    maxRecords: options.maxRecords ?? defaultLimits.maxRecords
  }
  const entries = new Map<string, Entry>(loaded.entries.map((entry) => [entry.record.agent_id, entry]))
  let dirty = loaded.rewrite
  /** Transcripts of evicted records, deleted once the records file no longer lists them. */
  const pendingRemovals: Array<string> = []
  /** Open while there may be something to write; the writer waits on it. */
  const wake = yield* Latch.make(false)
  /** One write of the records file at a time (writer fiber and flush). */
  const writeLock = yield* Semaphore.make(1)
  /** Appends to one transcript are serialised; different transcripts proceed in parallel. */
  const transcriptLocks = new Map<string, Semaphore.Semaphore>()
  const lockOf = (handle: string) => {
    const existing = transcriptLocks.get(handle)
    if (existing !== undefined) return existing
    const created = Semaphore.makeUnsafe(1)
    transcriptLocks.set(handle, created)
    return created
  }

  const evict = Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    const victims = evictionVictims(Array.from(entries.values(), (entry) => entry.record), now, limits)
    for (const victim of victims) {
      entries.delete(victim.agent_id)
      pendingRemovals.push(victim.transcript_handle)
    }
    if (victims.length > 0) dirty = true
  })

  const writeNow = writeLock.withPermits(1)(Effect.gen(function*() {
    if (!dirty) return
    dirty = false
    yield* evict
    // Serialising every record is the cost of a write: skipped when nothing is persisted.
    if (backend.persist !== undefined) {
      yield* backend.persist(serialize(entries.values())).pipe(
        Effect.tapError(() => Effect.sync(() => void (dirty = true)))
      )
    }
    const removals = pendingRemovals.splice(0)
    // The lock goes with the transcript, or the map would keep one per agent ever evicted.
    yield* Effect.forEach(removals, (handle) =>
      checkHandle(handle).pipe(
        Effect.andThen(lockOf(handle).withPermits(1)(backend.remove(handle))),
        Effect.ignore,
        Effect.ensuring(Effect.sync(() => void transcriptLocks.delete(handle)))
      ), { discard: true })
  }))

  const flush = writeNow.pipe(Effect.withSpan("SubAgentStore.flush"))

  // The single writer: wait for a put, let the burst accumulate for coalesceMs, write once.
  const writer = Effect.gen(function*() {
    yield* wake.await
    yield* wake.close
    yield* Effect.sleep(limits.coalesceMs)
    yield* writeNow.pipe(
      Effect.catch((error) =>
        Effect.logWarning(`${error.message}; retrying in ${retryAfter}`).pipe(
          Effect.andThen(Effect.sleep(retryAfter)),
          Effect.andThen(wake.open)
        )
      )
    )
  })

  yield* evict
  if (dirty) yield* wake.open
  yield* Effect.forkScoped(Effect.forever(writer))
  // Registered after the fork, so it runs before the writer is interrupted.
  yield* Effect.addFinalizer(() =>
    writeNow.pipe(Effect.catch((error) => Effect.logError(`sub-agent records not saved: ${error.message}`)))
  )

  const put = Effect.fnUntraced(function*(record: SubAgentRecord) {
    // The type cannot say "integer"; a record that breaks the schema would be lost at the next load.
    const valid: boolean = !backend.durable || isValidRecord(record)
    if (!valid) {
      yield* Effect.logWarning(
        `sub-agent record ${record.agent_id} does not match the SubAgentRecord schema; it will be dropped when loaded`
      )
    }
    const previous = entries.get(record.agent_id)
    entries.set(record.agent_id, { record: knownOnly(record), extra: previous?.extra ?? {} })
    dirty = true
    wake.openUnsafe()
  })

  const appendTranscript = Effect.fn("SubAgentStore.appendTranscript")(function*(
    handle: string,
    values: ReadonlyArray<unknown>
  ) {
    yield* checkHandle(handle)
    if (values.length === 0) return
    const text = yield* toLines(handle, values)
    yield* lockOf(handle).withPermits(1)(backend.append(handle, text))
  })

  const readTranscript = Effect.fn("SubAgentStore.readTranscript")(function*(handle: string) {
    yield* checkHandle(handle)
    const text = yield* lockOf(handle).withPermits(1)(backend.read(handle))
    return text === undefined ? [] : yield* parseTranscript(handle, text)
  })

  return SubAgentStore.of({
    all: Effect.sync(() => Array.from(entries.values(), (entry) => entry.record)),
    get: (agentId) => Effect.sync(() => Option.fromNullishOr(entries.get(agentId)?.record)),
    put,
    flush,
    appendTranscript,
    readTranscript,
    warnings: loaded.warnings,
    durable: backend.durable
  })
})

// ---------------------------------------------------------------------------
// File backend
// ---------------------------------------------------------------------------

const RecordsFile = Schema.fromJsonString(Schema.Struct({
  version: Schema.Literal(1),
  records: Schema.Array(Schema.Unknown)
}))
const decodeRecordsFile = Schema.decodeUnknownResult(RecordsFile)
const decodeAgentId = Schema.decodeUnknownOption(Schema.Struct({ agent_id: Schema.String }))

const oneLine = (text: string) => text.replace(/\s*\n\s*/g, " ")

const isNotFound = (error: PlatformError.PlatformError) => error.reason._tag === "NotFound"

/** The platform error without its path (StoreError carries that): `rename failed (NotFound): …`. */
const describe = ({ reason }: PlatformError.PlatformError): string =>
  `${reason.method} failed (${reason._tag})${reason.description === undefined ? "" : `: ${reason.description}`}`

/** The file store over `options.dir`. Needs a Scope: the writer fiber and the final flush live in it. */
export const makeFile = Effect.fn("SubAgentStore.makeFile")(function*(options: FileOptions) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const dir = options.dir
  const recordsPath = path.join(dir, recordsFileName)
  const transcriptsDir = path.join(dir, transcriptsDirName)
  const transcriptPath = (handle: string) => path.join(transcriptsDir, handle)
  const failed = (file: string) => (error: PlatformError.PlatformError) =>
    new StoreError({ path: file, reason: describe(error) })

  let dirReady = false
  let transcriptsReady = false
  const ensureDir = Effect.suspend(() =>
    dirReady ? Effect.void : fs.makeDirectory(dir, { recursive: true }).pipe(
      Effect.tap(() => Effect.sync(() => void (dirReady = true)))
    )
  )
  // Under a lock, so the first appends of a burst of new agents make the directory once.
  const transcriptsDirLock = Semaphore.makeUnsafe(1)
  const ensureTranscriptsDir = Effect.suspend(() =>
    transcriptsReady ? Effect.void : transcriptsDirLock.withPermits(1)(Effect.suspend(() =>
      transcriptsReady ? Effect.void : fs.makeDirectory(transcriptsDir, { recursive: true }).pipe(
        Effect.tap(() => Effect.sync(() => void (transcriptsReady = true)))
      )
    ))
  )

  // Best effort: makes the rename itself durable. Opening a directory fails on some platforms.
  const syncDir = Effect.scoped(Effect.flatMap(fs.open(dir, { flag: "r" }), (handle) => handle.sync)).pipe(
    Effect.ignore
  )

  const persist = (json: string): Effect.Effect<void, StoreError> =>
    Effect.gen(function*() {
      const suffix = (yield* Random.nextInt).toString(36) + (yield* Random.nextInt).toString(36)
      const tmp = `${recordsPath}.tmp-${suffix}`
      yield* Effect.gen(function*() {
        yield* ensureDir
        yield* Effect.scoped(Effect.gen(function*() {
          // "wx": never reuse (and so never truncate) a file another writer may be filling.
          const file = yield* fs.open(tmp, { flag: "wx" })
          yield* file.writeAll(new TextEncoder().encode(json))
          yield* file.sync
        }))
        yield* fs.rename(tmp, recordsPath)
        yield* syncDir
      }).pipe(
        Effect.tapError(() =>
          Effect.sync(() => void (dirReady = false)).pipe(Effect.andThen(Effect.ignore(fs.remove(tmp))))
        ),
        Effect.mapError(failed(tmp))
      )
    })

  /** Handles whose file is known to end with a newline (checked once per process). */
  const cleanTails = new Set<string>()

  // A crash in the middle of an append leaves a partial last line; the next append would glue
  // its first line to it and turn it into a bad line in the middle. Cut the partial line first.
  const repairTail = (file: string) =>
    Effect.gen(function*() {
      const size = yield* fs.stat(file).pipe(
        Effect.map((info): bigint => info.size),
        Effect.catchIf(isNotFound, () => Effect.succeed(0n))
      )
      if (size === 0n) return
      const lastByte = yield* Effect.scoped(
        Effect.flatMap(fs.open(file, { flag: "r" }), (opened) => opened.readAlloc(1, { position: size - 1n }))
      )
      if (Option.exists(lastByte, (byte) => byte[0] === 0x0a)) return
      const bytes = yield* fs.readFile(file)
      yield* Effect.logWarning(`transcript ${file} ends with a partial line (interrupted write); cutting it`)
      yield* fs.truncate(file, bytes.lastIndexOf(0x0a) + 1)
    })

  const append = (handle: string, text: string): Effect.Effect<void, StoreError> => {
    const file = transcriptPath(handle)
    return Effect.gen(function*() {
      yield* ensureTranscriptsDir
      if (!cleanTails.has(handle)) {
        yield* repairTail(file)
        cleanTails.add(handle)
      }
      // One call (open, write all, close): a durable store appends on every step of every agent.
      yield* fs.writeFileString(file, text, { flag: "a" })
    }).pipe(
      Effect.tapError(() =>
        Effect.sync(() => {
          cleanTails.delete(handle)
          transcriptsReady = false
        })
      ),
      Effect.mapError(failed(file))
    )
  }

  const read = (handle: string): Effect.Effect<string | undefined, StoreError> => {
    const file = transcriptPath(handle)
    return fs.readFileString(file).pipe(
      Effect.catchIf(isNotFound, () => Effect.succeed(undefined)),
      Effect.mapError(failed(file))
    )
  }

  const remove = (handle: string): Effect.Effect<void> =>
    fs.remove(transcriptPath(handle), { force: true }).pipe(
      Effect.ignore,
      Effect.andThen(Effect.sync(() => void cleanTails.delete(handle)))
    )

  /** `<file>.corrupt-<epoch-ms>`, or with a counter if that exists already. */
  const corruptPath = Effect.gen(function*() {
    const base = `${recordsPath}.corrupt-${yield* Clock.currentTimeMillis}`
    let candidate = base
    for (let n = 1; yield* fs.exists(candidate).pipe(Effect.orElseSucceed(() => false)); n++) {
      candidate = `${base}-${n}`
    }
    return candidate
  })

  // Temp files of writes killed before their rename. Only those older than this process:
  // a newer one may belong to another process writing right now.
  const removeStaleTemps = Effect.gen(function*() {
    const names = yield* fs.readDirectory(dir)
    const prefix = `${recordsFileName}.tmp-`
    yield* Effect.forEach(names.filter((name) => name.startsWith(prefix)), (name) => {
      const file = path.join(dir, name)
      return fs.stat(file).pipe(
        Effect.flatMap((info) =>
          Option.exists(info.mtime, (mtime) => mtime.getTime() < performance.timeOrigin)
            ? fs.remove(file)
            : Effect.void
        ),
        Effect.ignore
      )
    }, { discard: true })
  }).pipe(Effect.ignore)

  const load = Effect.gen(function*() {
    yield* removeStaleTemps
    const text = yield* fs.readFileString(recordsPath).pipe(
      Effect.map(Option.some),
      Effect.catchIf(isNotFound, () => Effect.succeed(Option.none<string>())),
      Effect.mapError(failed(recordsPath))
    )
    if (Option.isNone(text)) return { entries: [], warnings: [], rewrite: false } satisfies Loaded

    const file = decodeRecordsFile(text.value)
    if (Result.isFailure(file)) {
      const aside = yield* corruptPath
      yield* fs.rename(recordsPath, aside).pipe(Effect.mapError(failed(recordsPath)))
      const warning = `${recordsPath} is unreadable (${
        oneLine(file.failure.message)
      }); moved it aside to ${aside} and started with no sub-agent records`
      return { entries: [], warnings: [warning], rewrite: false } satisfies Loaded
    }

    const entries: Array<Entry> = []
    const dropped: Array<string> = []
    file.success.records.forEach((raw, i) => {
      const object = typeof raw === "object" && raw !== null ? raw : undefined
      const decoded = decodeRecord(raw)
      if (Result.isSuccess(decoded) && object !== undefined) {
        entries.push({ record: decoded.success, extra: unknownFields(object) })
      } else {
        const id = Option.match(decodeAgentId(raw), { onNone: () => "", onSome: ({ agent_id }) => ` "${agent_id}"` })
        const why = Result.isFailure(decoded) ? oneLine(decoded.failure.message) : "not an object"
        dropped.push(`#${i}${id} (${why})`)
      }
    })
    if (dropped.length === 0) return { entries, warnings: [], rewrite: false } satisfies Loaded

    // Keep the original bytes before the next write replaces the file without these records.
    const copy = yield* corruptPath
    yield* fs.copyFile(recordsPath, copy).pipe(Effect.mapError(failed(recordsPath)))
    const warning = `${recordsPath}: dropped ${dropped.length} invalid record(s): ${
      dropped.join("; ")
    }; the original file is kept as ${copy}`
    return { entries, warnings: [warning], rewrite: true } satisfies Loaded
  })

  const loaded = yield* load
  yield* Effect.forEach(loaded.warnings, (warning) => Effect.logWarning(warning), { discard: true })
  return yield* make({ durable: true, persist, append, read, remove }, loaded, options)
})

/**
 * The store persisted under `options.dir`.
 *
 * @example
 * ```ts
 * const StoreLive = SubAgentStore.layerFile({ dir: `${cwd}/.fibril/state` })
 * ```
 */
export const layerFile = (options: FileOptions): Layer.Layer<SubAgentStore, StoreError, FileSystem.FileSystem | Path.Path> =>
  Layer.effect(SubAgentStore, makeFile(options))

// ---------------------------------------------------------------------------
// Memory backend
// ---------------------------------------------------------------------------

/** The same store (coalescing, eviction, JSONL transcripts) with nothing on disk. */
export const makeMemory = Effect.fn("SubAgentStore.makeMemory")(function*(options: Limits = {}) {
  const transcripts = new Map<string, Array<string>>()
  const backend: Backend = {
    durable: false,
    persist: undefined,
    append: (handle, text) =>
      Effect.sync(() => {
        const chunks = transcripts.get(handle)
        if (chunks === undefined) transcripts.set(handle, [text])
        else chunks.push(text)
      }),
    read: (handle) => Effect.sync(() => transcripts.get(handle)?.join("")),
    remove: (handle) => Effect.sync(() => void transcripts.delete(handle))
  }
  return yield* make(backend, { entries: [], warnings: [], rewrite: false }, options)
})

export const layerMemory: Layer.Layer<SubAgentStore> = Layer.effect(SubAgentStore, makeMemory())
