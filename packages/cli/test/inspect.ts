// What a test looks at after real `fibril` processes ran: the workspace's store, read
// straight from its database file, and the host's processes.
import { readdirSync, readFileSync } from "node:fs"
import { DatabaseSync } from "node:sqlite"

/** Every agent record in the workspace's store (`<dir>/.fibril/state/fibril.db`), as stored. */
export const storedRecords = <A = Record<string, unknown>>(dir: string): Array<A> => {
  const db = new DatabaseSync(`${dir}/.fibril/state/fibril.db`)
  try {
    return db.prepare("SELECT record FROM fibril_agents").all().map((row) => JSON.parse(String(row["record"])) as A)
  } finally {
    db.close()
  }
}

/**
 * Host pids of processes with `marker` among their arguments: a sandboxed shell runs in a pid
 * namespace of its own, where `$$` is not a host pid.
 */
export const pidsWith = (marker: string): Array<number> =>
  readdirSync("/proc").filter((entry) => /^\d+$/.test(entry)).flatMap((entry) => {
    try {
      return readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0").includes(marker) ? [Number(entry)] : []
    } catch {
      return []
    }
  })
