/**
 * What the sandbox reads from and does to this host's processes through /proc and the
 * cgroup file system (Linux). Small synchronous reads of kernel files, so plain `node:fs`
 * inside `Effect.sync`; every function tolerates a process that is gone meanwhile.
 */
import { closeSync, mkdirSync, openSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs"

// --- Inherited descriptors ---

/** `O_CLOEXEC` in the octal `flags:` line of /proc/self/fdinfo/N. */
const O_CLOEXEC = 0o2000000

/**
 * The descriptors above 2 this process would pass to a child it starts: those without
 * close-on-exec. Node opens its own with close-on-exec, so these are the ones its parent
 * left open (a jobserver's pipe, a CI runner's log, an MCP host's socket), which libuv's
 * fork/exec hands on to every child unchanged.
 */
export const inheritableFds = (): ReadonlyArray<number> => {
  const found: Array<number> = []
  let entries: Array<string>
  try {
    entries = readdirSync("/proc/self/fd")
  } catch {
    return found
  }
  for (const entry of entries) {
    const fd = Number(entry)
    if (!Number.isInteger(fd) || fd <= 2) continue
    try {
      const flags = /^flags:\s*([0-7]+)/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, "utf8"))
      if (flags !== null && (Number.parseInt(flags[1]!, 8) & O_CLOEXEC) === 0) found.push(fd)
    } catch {
      // the directory's own descriptor, closed by now
    }
  }
  return found.sort((a, b) => a - b)
}

// --- Processes marked by an environment variable ---

/** The pids (not this process) whose environment holds `entry` (`NAME=value`). */
export const pidsWithEnv = (entry: string): Array<number> => {
  const found: Array<number> = []
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue
    try {
      if (readFileSync(`/proc/${name}/environ`, "utf8").split("\0").includes(entry)) found.push(Number(name))
    } catch {
      // gone, or not ours to read
    }
  }
  return found
}

const kill = (pid: number) => {
  try {
    process.kill(pid, "SIGKILL")
  } catch {
    // already gone
  }
}

/**
 * SIGKILLs every process whose environment holds `entry`, again until a scan finds none
 * (a process may fork between a scan and its kill) or `rounds` scans were made. Returns
 * how many were still found by the last scan (0: all gone).
 */
export const killWithEnv = (entry: string, rounds = 20): number => {
  let found = pidsWithEnv(entry)
  for (let round = 0; round < rounds && found.length > 0; round++) {
    found.forEach(kill)
    found = pidsWithEnv(entry).filter(isLive)
  }
  return found.length
}

/** A zombie still has its /proc entry (and environment) until reaped: not a live process. */
const isLive = (pid: number): boolean => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z"
  } catch {
    return false
  }
}

// --- cgroups ---

/** A cgroup directory under which this process may create children with limits. */
export interface CgroupParent {
  readonly version: 1 | 2
  /** The controller it bounds: `pids` or `memory`. */
  readonly controller: "pids" | "memory"
  readonly dir: string
}

const cgroupRoot = "/sys/fs/cgroup"

/** This process's cgroup directories for the `pids` and `memory` controllers (v1 or v2). */
const ownCgroups = (): ReadonlyArray<CgroupParent> => {
  let lines: Array<string>
  try {
    lines = readFileSync("/proc/self/cgroup", "utf8").trim().split("\n")
  } catch {
    return []
  }
  const found: Array<CgroupParent> = []
  for (const line of lines) {
    const [, controllers = "", path = ""] = line.split(":")
    for (const controller of ["pids", "memory"] as const) {
      if (controllers.split(",").includes(controller)) {
        found.push({ version: 1, controller, dir: `${cgroupRoot}/${controller}${path === "/" ? "" : path}` })
      }
    }
  }
  if (found.length > 0) return found
  const unified = lines.find((line) => line.startsWith("0::"))
  if (unified === undefined) return []
  const path = unified.slice(3)
  const dir = `${cgroupRoot}${path === "/" ? "" : path}`
  return (["pids", "memory"] as const).map((controller) => ({ version: 2 as const, controller, dir }))
}

/**
 * The parents under which a child cgroup with a `pids` limit (and a memory limit, where
 * that controller is there too) can be made: tried for real, by making and removing one.
 * Empty where cgroups are not writable (an ordinary user without delegation), or where a
 * v2 parent does not hand the controllers to its children.
 */
export const probeCgroups = (name: string): ReadonlyArray<CgroupParent> => {
  const usable: Array<CgroupParent> = []
  for (const parent of ownCgroups()) {
    const dir = `${parent.dir}/${name}`
    try {
      mkdirSync(dir)
    } catch {
      continue
    }
    const limitFile = parent.controller === "pids"
      ? "pids.max"
      : parent.version === 1
      ? "memory.limit_in_bytes"
      : "memory.max"
    try {
      closeSync(openSync(`${dir}/${limitFile}`, "r+"))
      usable.push(parent)
    } catch {
      // the controller is not enabled for children here
    } finally {
      removeCgroup(dir)
    }
  }
  return usable.some((parent) => parent.controller === "pids") ? usable : []
}

/** Makes `name` under each parent with the limits; the directories made. */
export const makeCgroups = (
  parents: ReadonlyArray<CgroupParent>,
  name: string,
  limits: { readonly maxProcesses: number; readonly memoryBytes: number }
): ReadonlyArray<string> =>
  parents.flatMap((parent, index) => {
    const dir = `${parent.dir}/${name}`
    // Under v2 both controllers share one directory.
    const made = parents.findIndex((other) => other.dir === parent.dir) !== index
    if (!made) mkdirSync(dir)
    if (parent.controller === "pids") writeFileSync(`${dir}/pids.max`, String(limits.maxProcesses))
    else if (parent.version === 1) writeFileSync(`${dir}/memory.limit_in_bytes`, String(limits.memoryBytes))
    else writeFileSync(`${dir}/memory.max`, String(limits.memoryBytes))
    return made ? [] : [dir]
  })

/** Removes an empty cgroup; false while processes (or zombies not yet reaped) are in it. */
export const removeCgroup = (dir: string): boolean => {
  try {
    rmdirSync(dir)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "ENOENT"
  }
}
