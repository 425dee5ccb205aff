/**
 * `node bench/install-startup.ts [N]`: `fibril --help` start-up from a global install against a
 * project install of the same tarballs, medians of N fresh processes each (default 9), side by
 * side with their ratio (goal: within 1.2x).
 *
 * A global install used to give each @fibril package its own copy of `effect` (five), which
 * doubled the start-up (1.57 s against 0.77 s) besides breaking `Redacted`. Both installs are
 * made here as the README makes them (`npm run tarballs`, then `npm install -g` of the CLI's
 * tarball, or `npm install` of every tarball in a project), with no network: npm's registry
 * is packages/cli/test/local-registry.ts. Not a timed test: the numbers go to
 * docs/performance.md.
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import { execFileSync, spawn, spawnSync } from "node:child_process"
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import * as LocalRegistry from "../packages/cli/test/local-registry.ts"
import { packAll } from "../scripts/pack.ts"

const root = fileURLToPath(new URL("..", import.meta.url))
const runs = Number(process.argv[2] ?? 9)
const work = mkdtempSync(join(tmpdir(), "fibril-install-bench-"))
const scope = Effect.runSync(Scope.make())

const median = (values: ReadonlyArray<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!

/** npm as a child that does not block this process (the registry answers from its event loop). */
const npm = (args: ReadonlyArray<string>, cwd: string) =>
  new Promise<void>((resolve, reject) => {
    const child = spawn("npm", [...args], { cwd, stdio: ["ignore", "ignore", "inherit"] })
    child.on("close", (code) => code === 0 ? resolve() : reject(new Error(`npm ${args.join(" ")}: exit ${code}`)))
  })

try {
  const packages = join(work, "packages")
  packAll(packages)
  const registry = await Effect.runPromise(Scope.provide(
    LocalRegistry.start({
      lock: JSON.parse(readFileSync(join(root, "package-lock.json"), "utf8")),
      published: []
    }),
    scope
  ))
  const flags = ["--registry", registry.url, "--cache", join(work, "npm-cache"), "--no-audit", "--no-fund"]
  const prefix = join(work, "prefix")
  await npm(["install", "-g", "--prefix", prefix, ...flags, join(packages, "fibril-cli-0.1.0.tgz")], work)
  const project = join(work, "project")
  mkdirSync(project)
  writeFileSync(join(project, "package.json"), JSON.stringify({ name: "bench-project", private: true }))
  await npm(["install", "--save-dev", ...flags, ...readdirSync(packages).map((file) => join(packages, file))], project)

  const env = { PATH: `${dirname(process.execPath)}:${process.env["PATH"] ?? ""}`, HOME: work, LANG: "C.UTF-8" }
  const time = (fibril: string) => {
    const started = process.hrtime.bigint()
    const result = spawnSync(fibril, ["--help"], { cwd: project, env, stdio: "ignore" })
    if (result.status !== 0) throw new Error(`${fibril} --help: exit ${result.status}`)
    return Number(process.hrtime.bigint() - started) / 1e6
  }
  const installs = { global: join(prefix, "bin", "fibril"), project: join(project, "node_modules", ".bin", "fibril") }
  time(installs.global) // the first process of each pays for the disk cache
  time(installs.project)
  const samples = { global: [] as Array<number>, project: [] as Array<number> }
  // Interleaved, each first in turn, so that a busy machine slows both alike.
  for (let i = 0; i < runs; i++) {
    const order = i % 2 === 0 ? (["global", "project"] as const) : (["project", "global"] as const)
    for (const which of order) samples[which].push(time(installs[which]))
  }
  const global = median(samples.global)
  const local = median(samples.project)
  const copies = execFileSync("find", [prefix, "-path", "*/node_modules/effect/package.json"], { encoding: "utf8" })
    .trim().split("\n").filter((line) => line !== "").length
  console.log(`fibril --help start-up, medians of ${runs} fresh processes (node ${process.version})`)
  console.log(
    `  global install ${global.toFixed(0)} ms | project install ${local.toFixed(0)} ms | ratio ${
      (global / local).toFixed(2)
    }x (goal <= 1.2x) | effect copies in the global install: ${copies}`
  )
} finally {
  await Effect.runPromise(Scope.close(scope, Exit.void))
  rmSync(work, { recursive: true, force: true })
}
