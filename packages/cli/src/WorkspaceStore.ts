/** The workspace's store (`.fibril/state`) for a command that only reads it or leaves requests. */
import * as SqliteSubAgentStore from "@fibril/core/SqliteSubAgentStore"
import * as SubAgentStore from "@fibril/core/SubAgentStore"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Path from "effect/Path"

/** Runs `f` on the workspace's store; nothing is created when the workspace has none yet. */
export const withStore = <A, E, R>(
  stateDir: string,
  empty: A,
  f: (store: SubAgentStore.SubAgentStore["Service"]) => Effect.Effect<A, E, R>
) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const exists = (name: string) => fs.exists(path.join(stateDir, name)).pipe(Effect.orElseSucceed(() => false))
    // A file in the place of the directory is said as such, not read as "no agents recorded".
    const found = yield* fs.stat(stateDir).pipe(Effect.option)
    if (Option.isSome(found) && found.value.type !== "Directory") {
      return yield* new SqliteSubAgentStore.StateNotDirectory({
        path: stateDir,
        found: found.value.type === "File" ? "file" : found.value.type.toLowerCase()
      })
    }
    if (
      !(yield* exists(SqliteSubAgentStore.databaseFileName)) &&
      !(yield* exists(SqliteSubAgentStore.legacyRecordsFileName))
    ) {
      return empty
    }
    return yield* SubAgentStore.SubAgentStore.use(f).pipe(
      Effect.provide(SqliteSubAgentStore.layerSqlite({ dir: stateDir }).pipe(Layer.fresh))
    )
  })
