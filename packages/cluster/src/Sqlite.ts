/**
 * An effect/sql `SqlClient` over Node's built-in `node:sqlite`: the cluster on one machine with
 * no database server (`--cluster sqlite:<file>`). One connection per process, shared through a
 * semaphore (effect/sql's SQLite acquirers); the file in WAL mode with `synchronous = FULL`, so a
 * commit is on disk when it returns; every transaction `BEGIN IMMEDIATE` (it takes the file's
 * write lock at once: several processes on one file wait for each other, `busy_timeout`, instead
 * of failing when a reader turns writer). `@effect/sql-sqlite-node` does not load with effect
 * 4.1.0, hence this.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Reactivity from "effect/reactivity/Reactivity"
import * as Semaphore from "effect/Semaphore"
import { SqlClient, SqlConnection, SqlError, Statement } from "effect/sql"
import * as Stream from "effect/Stream"
import { DatabaseSync, type StatementSync } from "node:sqlite"

/** How long a statement waits for another process's write lock before it fails. */
const busyTimeoutMs = 10_000

type Param = null | number | bigint | string | Uint8Array

const bindable = (params: ReadonlyArray<unknown>): Array<Param> =>
  params.map((p) =>
    p === undefined || p === null
      ? null
      : typeof p === "boolean"
      ? (p ? 1 : 0)
      : p instanceof Date
      ? p.getTime()
      : typeof p === "number" || typeof p === "bigint" || typeof p === "string" || p instanceof Uint8Array
      ? p
      : JSON.stringify(p)
  )

const failure = (sql: string) => (cause: unknown) =>
  new SqlError.SqlError({
    reason: new SqlError.UnknownError({
      cause,
      message: `${cause instanceof Error ? cause.message : String(cause)} (in: ${sql.slice(0, 120)})`
    })
  })

/** A client on the database file at `filename` (created if missing). */
export const make = (filename: string) =>
  Effect.gen(function*() {
    const db = yield* Effect.acquireRelease(
      Effect.try({
        try: () => {
          const opened = new DatabaseSync(filename)
          opened.exec(`PRAGMA busy_timeout = ${busyTimeoutMs}; PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL`)
          return opened
        },
        catch: failure(`open ${filename}`)
      }),
      (opened) => Effect.sync(() => opened.close())
    )
    const prepared = new Map<string, StatementSync>()
    const prepare = (sql: string) => {
      let statement = prepared.get(sql)
      if (statement === undefined) prepared.set(sql, statement = db.prepare(sql))
      return statement
    }
    const rows = (sql: string, params: ReadonlyArray<unknown>) =>
      Effect.try({
        try: (): ReadonlyArray<Record<string, unknown>> => {
          const statement = prepare(sql)
          if (statement.columns().length === 0) {
            statement.run(...bindable(params))
            return []
          }
          return statement.all(...bindable(params)) as Array<Record<string, unknown>>
        },
        catch: failure(sql)
      })
    const values = (sql: string, params: ReadonlyArray<unknown>) =>
      Effect.map(rows(sql, params), (all) => all.map((row) => Object.values(row)))
    const execute = (
      sql: string,
      params: ReadonlyArray<unknown>,
      transformRows: (<A extends object>(rows: ReadonlyArray<A>) => ReadonlyArray<A>) | undefined
    ) => transformRows === undefined ? rows(sql, params) : Effect.map(rows(sql, params), transformRows)
    const connection: SqlConnection.Connection = {
      execute,
      executeRaw: rows,
      executeStream: (sql, params, transformRows) =>
        Stream.fromIterableEffect(
          execute(sql, params, transformRows) as Effect.Effect<ReadonlyArray<any>, SqlError.SqlError>
        ),
      executeValues: values,
      executeValuesUnprepared: values,
      executeUnprepared: execute
    }
    const acquirers = SqlClient.makeSqliteAcquirers({
      connection: Effect.succeed(connection),
      semaphore: yield* Semaphore.make(1),
      isTransaction: () => db.isTransaction
    })
    return yield* SqlClient.make({
      ...acquirers,
      compiler: Statement.makeCompilerSqlite(),
      driver: "node-sqlite",
      beginTransaction: "BEGIN IMMEDIATE",
      spanAttributes: [["db.system.name", "sqlite"]]
    })
  })

/** The client as a layer; the file is closed when the layer is released. */
export const layer = (filename: string): Layer.Layer<SqlClient.SqlClient, SqlError.SqlError> =>
  Layer.effect(SqlClient.SqlClient, make(filename)).pipe(Layer.provide(Reactivity.layer))

/** The file a `sqlite:<path>` URL names, or undefined for any other URL. */
export const fileOf = (url: string): string | undefined => {
  if (!url.startsWith("sqlite:")) return undefined
  const rest = url.slice("sqlite:".length)
  return rest.startsWith("//") ? rest.slice(2) : rest
}
