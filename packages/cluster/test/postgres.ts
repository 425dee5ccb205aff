// A throwaway PostgreSQL for tests: initdb in a temp directory, started on 127.0.0.1 on a
// free port with trust authentication, stopped (immediate) and deleted afterwards. Uses the
// Debian package's binaries (/usr/lib/postgresql/<version>/bin, `apt-get install postgresql`)
// or PG_BIN. As root (CI), the server runs as the `postgres` user (initdb refuses root).
import { execFileSync, spawnSync } from "node:child_process"
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"

/** The directory of initdb and pg_ctl, or undefined when Postgres is not installed. */
export const findBin = (): string | undefined => {
  const candidates = [
    process.env["PG_BIN"],
    ...(existsSync("/usr/lib/postgresql")
      ? readdirSync("/usr/lib/postgresql").sort((a, b) => Number(b) - Number(a)).map((v) =>
        `/usr/lib/postgresql/${v}/bin`
      )
      : [])
  ]
  return candidates.find((dir) => dir !== undefined && existsSync(path.join(dir, "initdb")))
}

/** Why the Postgres tests are skipped here, or undefined when they can run. */
export const skipReason = (): string | undefined =>
  findBin() === undefined
    ? "PostgreSQL is not installed (apt-get install -y postgresql, or set PG_BIN to the directory of initdb and pg_ctl)"
    : undefined

export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      server.close(() => resolve(typeof address === "object" && address !== null ? address.port : 0))
    })
  })

/**
 * CPU seconds (user + system) used by the processes `select` picks, from /proc (Linux; 0
 * elsewhere). Processes that exited are not counted.
 */
export const processCpuSeconds = (select: (pid: number, ppid: number) => boolean): number => {
  if (!existsSync("/proc/self/stat")) return 0
  let ticks = 0
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const fields = readFileSync(`/proc/${entry}/stat`, "utf8").split(") ")[1]!.split(" ")
      if (select(Number(entry), Number(fields[1]))) ticks += Number(fields[11]) + Number(fields[12])
    } catch {
      // exited meanwhile
    }
  }
  return ticks / 100
}

export interface Postgres {
  readonly port: number
  readonly dir: string
  /** The URL of database `db` (created by `createDatabase`). */
  readonly url: (db: string) => string
  readonly createDatabase: (db: string) => void
  readonly psql: (db: string, query: string) => string
  readonly stop: () => void
  /** CPU seconds the server's processes (the postmaster and its children alive now) have used. */
  readonly cpuSeconds: () => number
  /** The server's log file (statements are logged there with `log_statement=all`). */
  readonly log: string
}

export const start = async (
  options: { readonly fsync?: boolean; readonly settings?: ReadonlyArray<string> } = {}
): Promise<Postgres> => {
  const bin = findBin()
  if (bin === undefined) throw new Error(skipReason())
  const root = process.getuid?.() === 0
  const dir = mkdtempSync(path.join(os.tmpdir(), "fibril-pg-"))
  const as = (command: string, args: ReadonlyArray<string>) => {
    const full = path.join(bin, command)
    return root ? ["runuser", ["-u", "postgres", "--", full, ...args]] as const : [full, args] as const
  }
  const run = (command: string, args: ReadonlyArray<string>) => {
    const [file, argv] = as(command, args)
    return execFileSync(file, [...argv], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] })
  }
  if (root) {
    const uid = Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim())
    const gid = Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim())
    chownSync(dir, uid, gid)
  }
  const data = path.join(dir, "data")
  run("initdb", ["-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync"])
  const port = await freePort()
  const settings = [
    `-h 127.0.0.1 -p ${port} -k ${dir}`,
    "-c max_connections=300",
    options.fsync === true ? "" : "-c fsync=off -c synchronous_commit=off -c full_page_writes=off",
    ...(options.settings ?? []).map((setting) => `-c ${setting}`)
  ].join(" ")
  run("pg_ctl", ["-D", data, "-l", path.join(dir, "pg.log"), "-w", "-o", settings, "start"])
  const url = (db: string) => `postgres://postgres@127.0.0.1:${port}/${db}`
  const psql = (db: string, query: string) =>
    execFileSync("psql", ["-h", "127.0.0.1", "-p", String(port), "-U", "postgres", "-d", db, "-Atc", query], {
      encoding: "utf8"
    }).trim()
  return {
    port,
    dir,
    url,
    psql,
    log: path.join(dir, "pg.log"),
    cpuSeconds: () => {
      const postmaster = Number(readFileSync(path.join(data, "postmaster.pid"), "utf8").split("\n")[0])
      return processCpuSeconds((pid, ppid) => pid === postmaster || ppid === postmaster)
    },
    createDatabase: (db) => void psql("postgres", `CREATE DATABASE ${db}`),
    stop: () => {
      const [file, argv] = as("pg_ctl", ["-D", data, "-m", "immediate", "-w", "stop"])
      spawnSync(file, [...argv], { stdio: "ignore" })
      rmSync(dir, { recursive: true, force: true })
    }
  }
}
