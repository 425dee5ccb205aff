/**
 * Import of Fibril 0.1's state (`subagents.v1.json` and its JSONL transcripts) into the
 * embedded store's database, on its first open; the old files are then renamed `.migrated`.
 */
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Option from "effect/Option"
import * as Path from "effect/Path"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import { decodeStored, isTerminal, type SubAgentRecord } from "../SubAgentRecord.ts"
import { StoreError } from "../SubAgentStore.ts"
import * as Sqlite from "./sqlite.ts"
import { databaseFileName, legacyRecordsFileName, legacyTranscriptsDirName } from "./storeDatabase.ts"

const LegacyFile = Schema.fromJsonString(
  Schema.Struct({ version: Schema.Literal(1), records: Schema.Array(Schema.Unknown) })
)
const decodeLegacy = Schema.decodeUnknownResult(LegacyFile)

/**
 * Imports `subagents.v1.json` and its JSONL transcripts into the database, then renames them
 * `.migrated`. Under the database's write lock, so two processes starting at once import once.
 * Records it cannot read are reported; the file is kept either way.
 */
export const importLegacy = (db: Sqlite.Database, dir: string, now: number) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const legacy = path.join(dir, legacyRecordsFileName)
    if (!(yield* fs.exists(legacy).pipe(Effect.orElseSucceed(() => false)))) return []
    const text = yield* fs.readFileString(legacy).pipe(Effect.option)
    if (Option.isNone(text)) return [`${legacy} could not be read; it was left in place and not imported`]
    const transcriptsDir = path.join(dir, legacyTranscriptsDirName)
    const decoded = decodeLegacy(text.value)
    const warnings: Array<string> = []
    const records: Array<{ record: SubAgentRecord; raw: object }> = []
    if (Result.isFailure(decoded)) {
      warnings.push(`${legacy} is not a readable v1 state file; renamed it ${legacy}.corrupt and imported nothing`)
    } else {
      for (const raw of decoded.success.records) {
        const record = decodeStored(raw)
        if (Result.isSuccess(record) && typeof raw === "object" && raw !== null) {
          records.push({ record: record.success, raw })
        } else {warnings.push(
            `${legacy}: a record could not be read and was not imported: ${JSON.stringify(raw).slice(0, 200)}`
          )}
      }
    }
    const transcripts = new Map<string, ReadonlyArray<string>>()
    for (const { record } of records) {
      const body = yield* fs.readFileString(path.join(transcriptsDir, record.transcript_handle)).pipe(Effect.option)
      if (Option.isSome(body)) {
        // A crash could cut the last line short: keep the lines that parse.
        transcripts.set(
          record.transcript_handle,
          body.value.split("\n").filter((line) => {
            if (line.trim() === "") {
              return false
            }
            try {
              JSON.parse(line)
              return true
            } catch {
              return false
            }
          })
        )
      }
    }
    const imported = yield* Effect.try({
      try: () =>
        db.transaction(() => {
          let count = 0
          for (const { record, raw } of records) {
            const live = !isTerminal(record.status)
            const json = {
              ...raw,
              ...(live ? { status: "interrupted", reason: "Interrupted by process restart", finished_at: now } : {})
            }
            const inserted = db.run(
              `INSERT INTO fibril_agents (agent_id, parent_id, status, owner_boot, handle, created_at, finished_at, record)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (agent_id) DO NOTHING`,
              record.agent_id,
              record.parent_id ?? null,
              live ? "interrupted" : record.status,
              record.session_boot_id,
              record.transcript_handle,
              record.created_at,
              live ? now : record.finished_at ?? null,
              JSON.stringify(json)
            )
            if (Number(inserted.changes) === 0) continue
            count++
            for (const line of transcripts.get(record.transcript_handle) ?? []) {
              db.run("INSERT INTO fibril_transcripts (handle, message) VALUES (?, ?)", record.transcript_handle, line)
            }
          }
          return count
        }),
      catch: (cause) => new StoreError({ path: legacy, reason: Sqlite.describe(cause) })
    })
    const suffix = Result.isFailure(decoded) ? ".corrupt" : ".migrated"
    yield* fs.rename(legacy, `${legacy}${suffix}`).pipe(Effect.ignore)
    if (yield* fs.exists(transcriptsDir).pipe(Effect.orElseSucceed(() => false))) {
      yield* fs.rename(transcriptsDir, `${transcriptsDir}${suffix}`).pipe(Effect.ignore)
    }
    if (Result.isSuccess(decoded)) {
      warnings.push(
        `imported ${imported} sub-agent record(s) from ${legacy} into ${databaseFileName}; the old file is kept as ${legacy}.migrated`
      )
    }
    return warnings
  })
