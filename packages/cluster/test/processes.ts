// Real `fibril` processes for the cluster's integration tests (Postgres.test.ts, Sqlite.test.ts,
// ...): workerProcesses.ts's, started from the bundle of this checkout's sources made for this
// test run (scripts/test-bundle.ts).
import { inject } from "vitest"
import { fibrilAt, type Proc } from "./workerProcesses.ts"

export * from "./workerProcesses.ts"

export const bin = inject("fibrilBin")

export const fibril = (args: ReadonlyArray<string>, env: Record<string, string> = {}): Proc => fibrilAt(bin, args, env)
