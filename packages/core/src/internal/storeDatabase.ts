/**
 * The embedded store's database file (`SqliteSubAgentStore`): its name and the names of the
 * files of Fibril 0.1 it imports, its tables and schema version, the statements built by size,
 * how a stored row is read back, and opening it (a busy file retried, a corrupt one moved aside,
 * another version's refused).
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Option from "effect/Option"
import * as Path from "effect/Path"
import * as Result from "effect/Result"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import { decodeStored, SubAgentRecord } from "../SubAgentRecord.ts"
import { StoreError } from "../SubAgentStore.ts"
import * as Sqlite from "./sqlite.ts"

export const databaseFileName = "fibril.db"
/** The state file of Fibril 0.1 (one JSON document), imported on first open. */
export const legacyRecordsFileName = "subagents.v1.json"
export const legacyTranscriptsDirName = "transcripts"

/** The schema version this Fibril reads and writes. */
export const schemaVersion = 1

/** The state directory (`.fibril/state`) exists but is not a directory. */
export class StateNotDirectory extends Schema.TaggedError<StateNotDirectory>()("StateNotDirectory", {
  path: Schema.String,
  found: Schema.String
}) {
  override get message() {
    return `${this.path} is a ${this.found}, not a directory: Fibril keeps its records there, in a directory ` +
      `(with ${databaseFileName} inside). Move or remove it, and Fibril creates the directory on its next run`
  }
}

/** Why a store could not be opened. */
export type OpenError = StoreError | StateNotDirectory

export const terminalList = "('completed','failed','cancelled','interrupted')"

const tables = `
CREATE TABLE IF NOT EXISTS fibril_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS fibril_agents (
  agent_id TEXT PRIMARY KEY,
  parent_id TEXT,
  status TEXT NOT NULL,
  owner_boot TEXT NOT NULL,
  handle TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  finished_at INTEGER,
  record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS fibril_agents_status ON fibril_agents (status, owner_boot);
CREATE TABLE IF NOT EXISTS fibril_owners (
  boot_id TEXT PRIMARY KEY,
  pid INTEGER NOT NULL,
  host TEXT NOT NULL,
  started_at INTEGER NOT NULL,
  lease_until INTEGER NOT NULL,
  proc_start TEXT
);
CREATE TABLE IF NOT EXISTS fibril_transcripts (
  id INTEGER PRIMARY KEY,
  handle TEXT NOT NULL,
  message TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS fibril_transcripts_handle ON fibril_transcripts (handle, id);
CREATE TABLE IF NOT EXISTS fibril_requests (
  id INTEGER PRIMARY KEY,
  owner_boot TEXT NOT NULL,
  agent_id TEXT NOT NULL,
  kind TEXT NOT NULL,
  payload TEXT NOT NULL,
  from_boot TEXT NOT NULL,
  created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS fibril_requests_owner ON fibril_requests (owner_boot, id);
INSERT OR IGNORE INTO fibril_meta (key, value) VALUES ('schema_version', '1');
`

/** Rows per multi-row insert of transcript lines. */
export const linesPerInsert = 32
export const insertLinesSqlCache: Array<string> = []
export const insertLinesSql = (rows: number): string =>
  insertLinesSqlCache[rows] ??= `INSERT INTO fibril_transcripts (handle, message) VALUES ${
    Array.from({ length: rows }, () => "(?, ?)").join(", ")
  }`

/** Rows per eviction `DELETE … WHERE … IN (…)`; each size's statement is prepared once. */
export const rowsPerDelete = 64
const deleteWhereInSqlCache = new Map<string, string>()
export const deleteWhereInSql = (table: string, column: string, rows: number): string => {
  const key = `${table}:${column}:${rows}`
  let sql = deleteWhereInSqlCache.get(key)
  if (sql === undefined) {
    sql = `DELETE FROM ${table} WHERE ${column} IN (${Array.from({ length: rows }, () => "?").join(", ")})`
    deleteWhereInSqlCache.set(key, sql)
  }
  return sql
}

/**
 * Adds the owners' `proc_start` column to a database created before it (the schema version
 * stays: older Fibrils write the row without it, and are then checked by pid alone).
 */
const addProcStart = (db: Sqlite.Database) => {
  if (db.all("PRAGMA table_info(fibril_owners)").some((column) => column["name"] === "proc_start")) return
  try {
    db.exec("ALTER TABLE fibril_owners ADD COLUMN proc_start TEXT")
  } catch (cause) {
    // Another process opening the database at the same moment added it first.
    if (!/duplicate column/i.test(Sqlite.describe(cause))) throw cause
  }
}

const describeType = (type: FileSystem.File.Type): string =>
  type === "File" ? "file" : type === "SymbolicLink" ? "symbolic link" : type.toLowerCase()

/** The schema version this Fibril reads and writes. */

/** Characters kept of a decode error shown for an unreadable row. */
const maxDecodeError = 500

/** The known record in a stored JSON object, or why it does not decode. */
export const readJson = (json: unknown): SubAgentRecord | { readonly error: string } => {
  if (typeof json !== "string") return { error: "the stored record is not text" }
  let raw: unknown
  try {
    raw = JSON.parse(json)
  } catch (cause) {
    return { error: `the stored record is not JSON: ${Sqlite.describe(cause)}`.slice(0, maxDecodeError) }
  }
  const decoded = decodeStored(raw)
  if (Result.isFailure(decoded)) {
    return {
      error: `the stored record does not match SubAgentRecord: ${decoded.failure.message}`.slice(0, maxDecodeError)
    }
  }
  // Decoding keeps only known keys; the stored row keeps the rest.
  return decoded.success
}

export const isDecodeError = (read: SubAgentRecord | { readonly error: string }): read is { readonly error: string } =>
  "error" in read && !("agent_id" in read)

/** The known record in a stored JSON object, or undefined when it does not decode. */
export const fromJson = (json: unknown): SubAgentRecord | undefined => {
  const read = readJson(json)
  return isDecodeError(read) ? undefined : read
}

/**
 * Opens (creating it and its directory if need be) `<dir>/fibril.db`; `warnings` gets what a
 * person should know (a corrupt file moved aside). Closed with the scope.
 */
export const open = Effect.fnUntraced(function*(dir: string, warnings: Array<string>) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const file = path.join(dir, databaseFileName)
  const failed = (reason: unknown) => new StoreError({ path: file, reason: Sqlite.describe(reason) })

  // A file where the directory should be would otherwise read as "no records" to a reader and
  // fail with a bare AlreadyExists here.
  const found = yield* fs.stat(dir).pipe(Effect.option)
  if (Option.isSome(found) && found.value.type !== "Directory") {
    return yield* new StateNotDirectory({ path: dir, found: describeType(found.value.type) })
  }
  yield* fs.makeDirectory(dir, { recursive: true }).pipe(
    Effect.mapError((error) => new StoreError({ path: dir, reason: error.message }))
  )

  /** Opens the file and creates the tables; the schema version found, to check before use. */
  const openDb = Effect.try({
    try: () => {
      const db = Sqlite.open(file)
      try {
        db.exec(tables)
        addProcStart(db)
        return { db, version: Number(db.get("SELECT value FROM fibril_meta WHERE key = 'schema_version'")?.["value"]) }
      } catch (cause) {
        db.close()
        throw cause
      }
    },
    catch: (cause) => cause
  })

  // Opening a new database while other processes open it too can be refused at once (busy):
  // tried again every 20 ms, for up to 10 s (the busy timeout's own bound).
  // A file that is not a database is moved aside (never overwritten), and a new one started.
  const opened = yield* openDb.pipe(
    Effect.retry({ while: Sqlite.isBusy, schedule: Schedule.spaced("20 millis"), times: 500 }),
    Effect.catch((cause) => {
      if (!Sqlite.isCorruption(cause)) return Effect.fail(failed(cause))
      return Effect.gen(function*() {
        const aside = `${file}.corrupt-${yield* Clock.currentTimeMillis}`
        yield* fs.rename(file, aside).pipe(Effect.mapError((e) => new StoreError({ path: file, reason: e.message })))
        for (const suffix of ["-wal", "-shm"]) yield* Effect.ignore(fs.remove(`${file}${suffix}`, { force: true }))
        warnings.push(
          `${file} is not a readable database (${
            Sqlite.describe(cause)
          }); moved it aside to ${aside} and started a new one`
        )
        return yield* Effect.mapError(openDb, failed)
      })
    })
  )
  const db = opened.db
  if (opened.version !== schemaVersion) {
    db.close()
    return yield* new StoreError({
      path: file,
      reason: `schema version ${opened.version} is not the one this Fibril uses (${schemaVersion}); ` +
        "the database was written by a different Fibril version"
    })
  }
  yield* Effect.addFinalizer(() => Effect.sync(() => db.close()))
  return { db, file }
})
