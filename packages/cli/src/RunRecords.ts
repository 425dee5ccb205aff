/**
 * What `fibril run` (and `fibril mcp`) owe the records of their agents once the work is done:
 * every record committed, or a clear error naming the one that is not; and a word when another
 * process took one of this process's agents over while it still ran it.
 *
 * Exit codes (docs/cli.md): 3 when a record could not be saved (a full disk: the answer was
 * printed, the store does not have it), 4 when an agent's record was taken over while this
 * process ran it (its end is kept in the record, with the takeover in its events).
 */
import * as SubAgentStore from "@fibril/core/SubAgentStore"
import * as Config from "effect/Config"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as ModelSelection from "./ModelSelection.ts"

/** The exit code of a run whose record could not be saved. */
export const recordNotSaved = 3
/** The exit code of a run whose agent was taken over by another process while it ran it. */
export const recordTakenOver = 4

/** `FIBRIL_STORE_LEASE_MS`: how long this process's lease lasts (tests shorten it); 100..3600000. */
export const leaseVariable = "FIBRIL_STORE_LEASE_MS"

/** The store's limits from the environment: only the lease, and only when the variable is set. */
export const storeLimits = (env: Readonly<Record<string, string | undefined>>) =>
  Config.Int(leaseVariable).pipe(Config.option).parse(ConfigProvider.fromEnvRecord({ ...env })).pipe(
    Effect.mapError(() =>
      new ModelSelection.UsageError({
        problem: `${leaseVariable}=${env[leaseVariable]} is not a whole number of milliseconds (100..3600000)`
      })
    ),
    Effect.flatMap((lease) => {
      if (Option.isNone(lease)) return Effect.succeed({})
      if (lease.value < 100 || lease.value > 3_600_000) {
        return Effect.fail(
          new ModelSelection.UsageError({
            problem: `${leaseVariable}=${lease.value} is out of range: a lease is 100..3600000 ms`
          })
        )
      }
      return Effect.succeed({ leaseMs: lease.value })
    })
  )

/** The message of a record that could not be saved, after the answer was printed. */
export const notSavedMessage = (error: SubAgentStore.StoreWriteFailed, answered: boolean) =>
  `fibril: ${error.message}${answered ? "; its answer is printed above" : ""}`

/**
 * Once the run is done: commits its records (retrying), then says what went wrong with them
 * on stderr. The exit code: `code` when all is well, else `recordNotSaved` / `recordTakenOver`.
 */
export const settle = (code: number, answered: boolean) =>
  Effect.gen(function*() {
    const store = yield* SubAgentStore.SubAgentStore
    const saved = yield* Effect.result(store.settle)
    if (saved._tag === "Failure") {
      yield* Console.error(notSavedMessage(saved.failure, answered))
      return recordNotSaved
    }
    const taken = yield* store.takenOver
    for (const agent of taken) {
      yield* Console.error(
        `fibril: the record of ${agent.agent_id} was taken over by another process while this one ran it (${agent.by}); ${
          agent.kept
            ? `its end is recorded all the same, with the takeover in its events (fibril agents show ${agent.agent_id})`
            : "its end could not be recorded over the other process's"
        }`
      )
    }
    return taken.length > 0 ? recordTakenOver : code
  })
