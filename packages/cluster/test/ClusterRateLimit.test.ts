// Cluster workers share the rate limiter through their store: two connections to one SQLite
// file are two workers (the PostgreSQL case runs in ClusterStore.test.ts, on its server).
import { afterAll, describe, it } from "@effect/vitest"
import { mkdtempSync, rmSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Sqlite from "../src/Sqlite.ts"
import { workersShare } from "./rateLimitShared.ts"

const dir = mkdtempSync(path.join(os.tmpdir(), "fibril-ratelimit-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

describe("ClusterRateLimit on SQLite", () => {
  it.effect("a 429 one worker got holds the other worker's calls until its retry-after, and teaches it the limit", () => {
    const file = path.join(dir, "cluster.db")
    return workersShare(Sqlite.layer(file), Sqlite.layer(file))
  })
})
