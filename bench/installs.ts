/**
 * Fibril installed the way a user installs it, for the start-up benchmarks
 * (bench/install-startup.ts, bench/startup.ts): `npm run tarballs`, then `npm install` of every
 * tarball in a fresh project and, when asked, `npm install -g` of the CLI's tarball into a
 * prefix of its own, with no network (npm's registry is packages/cli/test/local-registry.ts).
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import { spawn } from "node:child_process"
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import * as LocalRegistry from "../packages/cli/test/local-registry.ts"
import { packAll } from "../scripts/pack.ts"

const root = fileURLToPath(new URL("..", import.meta.url))

export interface Installs {
  /** The scratch directory everything lives in (the HOME of the processes measured). */
  readonly work: string
  /** The project the tarballs are installed in (the cwd of the processes measured). */
  readonly project: string
  /** `node_modules/.bin/fibril` of the project install. */
  readonly projectBin: string
  /** `<prefix>/bin/fibril` of the global install, when one was asked for. */
  readonly globalBin: string | undefined
  /** `<prefix>`, when a global install was asked for. */
  readonly prefix: string | undefined
  /**
   * A user's environment: this Node first on PATH, a HOME of its own, and nothing of the
   * repository's (no NODE_OPTIONS, whose `@fibril/source` condition names files a tarball lacks).
   */
  readonly env: Record<string, string>
}

/** npm as a child that does not block this process (the registry answers from its event loop). */
const npm = (args: ReadonlyArray<string>, cwd: string) =>
  new Promise<void>((resolve, reject) => {
    const child = spawn("npm", [...args], { cwd, stdio: ["ignore", "ignore", "inherit"] })
    child.on("close", (code) => code === 0 ? resolve() : reject(new Error(`npm ${args.join(" ")}: exit ${code}`)))
  })

/** Packs and installs, runs `f`, and removes everything. */
export const withInstalls = async <A>(
  options: { readonly global: boolean },
  f: (installs: Installs) => Promise<A> | A
): Promise<A> => {
  const work = mkdtempSync(join(tmpdir(), "fibril-install-bench-"))
  const scope = Effect.runSync(Scope.make())
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
    const prefix = options.global ? join(work, "prefix") : undefined
    if (prefix !== undefined) {
      await npm(["install", "-g", "--prefix", prefix, ...flags, join(packages, "fibril-cli-0.1.0.tgz")], work)
    }
    const project = join(work, "project")
    mkdirSync(project)
    writeFileSync(join(project, "package.json"), JSON.stringify({ name: "bench-project", private: true }))
    await npm(
      ["install", "--save-dev", ...flags, ...readdirSync(packages).map((file) => join(packages, file))],
      project
    )
    return await f({
      work,
      project,
      projectBin: join(project, "node_modules", ".bin", "fibril"),
      globalBin: prefix === undefined ? undefined : join(prefix, "bin", "fibril"),
      prefix,
      env: { PATH: `${dirname(process.execPath)}:${process.env["PATH"] ?? ""}`, HOME: work, LANG: "C.UTF-8" }
    })
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    rmSync(work, { recursive: true, force: true })
  }
}

export const median = (values: ReadonlyArray<number>) =>
  [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!
