// `npm run build`: every package to JavaScript with type declarations, in dependency order.
//
// Each package's `src/` is compiled by `tsc -p tsconfig.build.json` into `dist/` (`.ts`
// imports rewritten to `.js`, `.d.ts` beside each module), and the text assets the code reads
// at run time (role prompts and tool descriptions, `src/**/*.md`) are copied beside the
// modules that read them. A package whose `dist/` is newer than all its inputs and those of
// the packages it depends on is skipped, so `npm pack --workspaces` (each package's
// `prepack` runs this) builds once. Builds are serialised across processes by a lock
// directory, so concurrent test runs never read a half-written `dist/`.
//
// The CLI is also bundled (scripts/bundle.ts, `packages/cli/bundle/`): the `fibril` command runs
// that, for its start-up time.
//
//   node scripts/build.ts              build what is out of date
//   node scripts/build.ts --force      rebuild everything
import { execFileSync } from "node:child_process"
import { copyFileSync, existsSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs"
import { dirname, join, relative } from "node:path"
import { fileURLToPath } from "node:url"
import * as Bundle from "./bundle.ts"

const root = fileURLToPath(new URL("..", import.meta.url))
/** Dependencies before dependents. */
export const order = ["core", "testkit", "openai", "cluster", "cli"] as const
const dependsOn: Record<(typeof order)[number], ReadonlyArray<(typeof order)[number]>> = {
  core: [],
  testkit: ["core"],
  openai: ["core"],
  cluster: ["core"],
  cli: ["core", "openai", "cluster", "testkit"]
}

const files = (dir: string): Array<string> =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = join(dir, entry.name)
    return entry.isDirectory() ? files(full) : [full]
  })

/**
 * Pages of docs/ a package ships (repository path -> path in the package): the CLI's messages
 * point at the script format, so an installed CLI carries it (packages/cli/src/ModelSelection.ts).
 */
const docsOf: Partial<Record<string, Record<string, string>>> = {
  cli: { "docs/script-format.md": "dist/docs/script-format.md" }
}

const newestInput = (name: string): number => {
  const dir = join(root, "packages", name)
  const inputs = [
    ...files(join(dir, "src")),
    join(dir, "package.json"),
    join(dir, "tsconfig.build.json"),
    join(root, "tsconfig.json"),
    ...Object.keys(docsOf[name] ?? {}).map((doc) => join(root, doc))
  ]
  return Math.max(...inputs.map((file) => statSync(file).mtimeMs))
}

const stamp = (name: string) => join(root, "packages", name, "dist", ".built")
const builtAt = (name: string): number => existsSync(stamp(name)) ? statSync(stamp(name)).mtimeMs : 0

const upToDate = (name: (typeof order)[number]): boolean =>
  builtAt(name) > newestInput(name) && dependsOn[name].every((dep) => builtAt(dep) <= builtAt(name)) &&
  (name !== "cli" || existsSync(join(Bundle.outdir, "bin.js")))

const tsc = join(root, "node_modules", "typescript", "bin", "tsc")

const build = async (name: (typeof order)[number]) => {
  const dir = join(root, "packages", name)
  rmSync(join(dir, "dist"), { recursive: true, force: true })
  execFileSync(process.execPath, [tsc, "-p", join(dir, "tsconfig.build.json")], { stdio: "inherit" })
  for (const file of files(join(dir, "src")).filter((f) => !f.endsWith(".ts"))) {
    const target = join(dir, "dist", relative(join(dir, "src"), file))
    mkdirSync(dirname(target), { recursive: true })
    copyFileSync(file, target)
  }
  for (const [doc, target] of Object.entries(docsOf[name] ?? {})) {
    mkdirSync(dirname(join(dir, target)), { recursive: true })
    copyFileSync(join(root, doc), join(dir, target))
  }
  if (name === "cli") await Bundle.bundle()
  writeFileSync(stamp(name), `${new Date().toISOString()}\n`)
}

const withLock = async (f: () => Promise<void>) => {
  const lock = join(root, "node_modules", ".fibril-build.lock")
  const deadline = Date.now() + 120_000
  while (true) {
    try {
      mkdirSync(lock)
      break
    } catch {
      // A lock left by a build that died long ago is taken over.
      if (existsSync(lock) && Date.now() - statSync(lock).mtimeMs > 120_000) {
        rmSync(lock, { recursive: true, force: true })
      }
      if (Date.now() > deadline) throw new Error(`fibril build: ${lock} is held by another build`)
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 100)
    }
  }
  try {
    await f()
  } finally {
    rmSync(lock, { recursive: true, force: true })
  }
}

if (import.meta.main) {
  const force = process.argv.includes("--force")
  await withLock(async () => {
    for (const name of order) {
      if (!force && upToDate(name)) continue
      const started = Date.now()
      await build(name)
      console.error(`built @fibril/${name} (${Date.now() - started} ms)`)
    }
  })
}
