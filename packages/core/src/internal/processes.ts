/**
 * The processes of this host, as the store's liveness check sees them: is a pid running, and
 * since when. The start time tells a reused pid from the process that registered it.
 *
 * On Linux the start time is field 22 of `/proc/<pid>/stat` (clock ticks since boot): the same
 * for the life of a process, different for the next one to get its pid. Elsewhere only
 * `kill(pid, 0)` is asked, and the start time is unknown (a reused pid then reads alive).
 */
import { readFileSync } from "node:fs"

/** What is known of a pid on this host. `start` is undefined when it cannot be read. */
export type ProcessState =
  | { readonly alive: false }
  | { readonly alive: true; readonly start: string | undefined }

/** Asks the host about a pid (injected in tests that simulate several processes in one). */
export type Probe = (pid: number) => ProcessState

const killZero = (pid: number): ProcessState => {
  try {
    process.kill(pid, 0)
    return { alive: true, start: undefined }
  } catch (error) {
    // EPERM: it exists, owned by someone else.
    return (error as { code?: unknown }).code === "EPERM" ? { alive: true, start: undefined } : { alive: false }
  }
}

/** The state letter and start time in a `/proc/<pid>/stat` line, or undefined if it is not one. */
export const parseStat = (stat: string): { readonly state: string; readonly start: string } | undefined => {
  // Field 2 (the command) is in parentheses and may hold spaces or ')': the rest follows the last ')'.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  // fields[0] is field 3 (the state); field 22 (the start time) is fields[19].
  const state = fields[0]
  const start = fields[19]
  return state === undefined || start === undefined || !/^\d+$/.test(start) ? undefined : { state, start }
}

const hasProc = (() => {
  try {
    return parseStat(readFileSync("/proc/self/stat", "utf8")) !== undefined
  } catch {
    return false
  }
})()

/** This host's answer: `/proc` where there is one (a zombie is dead: it only waits to be reaped). */
export const probe: Probe = (pid) => {
  if (!Number.isInteger(pid) || pid <= 0) return { alive: false }
  if (!hasProc) return killZero(pid)
  let stat: string
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8")
  } catch (error) {
    return (error as { code?: unknown }).code === "ENOENT" ? { alive: false } : killZero(pid)
  }
  const parsed = parseStat(stat)
  if (parsed === undefined) return killZero(pid)
  return parsed.state === "Z" || parsed.state === "X" ? { alive: false } : { alive: true, start: parsed.start }
}

/** The start time of this process, as `probe` reads it (undefined where it cannot). */
export const selfStart = (): string | undefined => {
  const state = probe(process.pid)
  return state.alive ? state.start : undefined
}
