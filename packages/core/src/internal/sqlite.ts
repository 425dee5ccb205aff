/**
 * The embedded database: one SQLite file opened through Node's built-in `node:sqlite`.
 *
 * WAL mode lets any number of processes on the machine read while one writes; writers
 * wait for each other (`busy_timeout`) instead of failing. `synchronous = NORMAL` commits
 * without an fsync: a commit survives the process being killed (the bytes are in the
 * operating system), and only a power cut can lose the last commits — never corrupt the
 * file. Statements are prepared once and run synchronously: a write is done when the call
 * returns, which is what lets the store promise "durable before the next model call".
 */
import { DatabaseSync, type SQLInputValue, type StatementSync } from "node:sqlite"

export type Value = SQLInputValue
export type Row = Record<string, unknown>

export interface Database {
  readonly file: string
  /** Runs DDL or several statements. */
  readonly exec: (sql: string) => void
  /** A statement prepared once per database and reused. */
  readonly run: (sql: string, ...params: ReadonlyArray<Value>) => { readonly changes: number | bigint }
  readonly all: (sql: string, ...params: ReadonlyArray<Value>) => ReadonlyArray<Row>
  readonly get: (sql: string, ...params: ReadonlyArray<Value>) => Row | undefined
  /** `BEGIN IMMEDIATE` … `COMMIT` around `f` (rolled back if it throws): other writers wait. */
  readonly transaction: <A>(f: () => A) => A
  readonly close: () => void
}

export const open = (file: string, busyTimeoutMs = 10_000): Database => {
  const db = new DatabaseSync(file, { timeout: busyTimeoutMs })
  const statements = new Map<string, StatementSync>()
  const prepared = (sql: string) => {
    let statement = statements.get(sql)
    if (statement === undefined) statements.set(sql, statement = db.prepare(sql))
    return statement
  }
  try {
    db.exec(
      "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = OFF; PRAGMA wal_autocheckpoint = 10000;"
    )
  } catch (cause) {
    db.close()
    throw cause
  }
  let depth = 0
  return {
    file,
    exec: (sql) => db.exec(sql),
    run: (sql, ...params) => prepared(sql).run(...params),
    all: (sql, ...params) => prepared(sql).all(...params) as ReadonlyArray<Row>,
    get: (sql, ...params) => prepared(sql).get(...params) as Row | undefined,
    transaction: <A>(f: () => A): A => {
      if (depth > 0) return f()
      db.exec("BEGIN IMMEDIATE")
      depth++
      try {
        const result = f()
        db.exec("COMMIT")
        return result
      } catch (cause) {
        if (db.isTransaction) db.exec("ROLLBACK")
        throw cause
      } finally {
        depth--
      }
    },
    close: () => {
      statements.clear()
      if (db.isOpen) db.close()
    }
  }
}

/**
 * SQLite's "busy": another connection holds the lock. Most waits go through the busy timeout;
 * this is what is left, e.g. two processes creating the same new database at once, where
 * SQLite refuses one of them at once rather than risk a deadlock (its busy handler is not
 * called). Opening again a moment later succeeds.
 */
export const isBusy = (cause: unknown): boolean => {
  const text = String(cause instanceof Error ? cause.message : cause)
  return /database is locked|SQLITE_BUSY/i.test(text)
}

/** SQLite's words for a file that is not (or no longer) a database. */
export const isCorruption = (cause: unknown): boolean => {
  const text = String(cause instanceof Error ? cause.message : cause)
  return /file is not a database|database disk image is malformed|SQLITE_NOTADB|SQLITE_CORRUPT/i.test(text)
}

export const describe = (cause: unknown): string =>
  cause instanceof Error ? cause.message.replace(/\s*\n\s*/g, " ") : String(cause)

/** SQLite's reason in a person's words where it has a plain one ("disk full"), else as it is. */
export const plainReason = (reason: string): string =>
  /database or disk is full|SQLITE_FULL/i.test(reason)
    ? `disk full (${reason})`
    : /attempt to write a readonly database|SQLITE_READONLY/i.test(reason)
    ? `the database is read-only (${reason})`
    : reason

/** A failure that may pass (a full disk, an I/O error, a lock held too long): worth trying again. */
export const isTransient = (cause: unknown): boolean => {
  const text = String(cause instanceof Error ? cause.message : cause)
  return /database or disk is full|SQLITE_FULL|disk I\/O error|SQLITE_IOERR|database is locked|SQLITE_BUSY/i.test(text)
}
