// `npm run tarballs -- <dir>`: every workspace package as an npm tarball in <dir>, the way the
// README installs them before the packages are published.
//
// The list is the root package.json's `workspaces`, never a hand-written one, so a new
// package cannot be left out (README.test.ts runs the README's lines against it).
//
// The CLI's tarball carries its @fibril packages inside it (`bundleDependencies`), so
// `npm install -g fibril-cli-<version>.tgz` alone works and resolves ONE `effect`. Why:
//  - npm installs every global package with the `shallow` strategy: each top-level global
//    package is an island with its own node_modules. Installing the five tarballs globally
//    therefore gives five copies of `effect` (and of everything else), and a `Redacted` made
//    by one copy cannot be read by another ("Unable to get redacted value").
//  - With the libraries inside the CLI, the only top-level global package is the CLI; their
//    imports of `effect` resolve to the CLI's own node_modules/effect.
//  - npm counts a dependency of a bundled package that dedupes to the bundler's level as part
//    of the bundle (arborist's `getBundler`), and then does not install it. So the bundled
//    copies declare no dependencies; the CLI's staged package.json declares the union of
//    theirs instead (the CLI's own pins win; two different pins of one package are an error).
// The library tarballs are unchanged (they are what a project installs, with `effect` as a
// peer dependency so a project's `effect` is theirs).
import { execFileSync } from "node:child_process"
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("..", import.meta.url))

interface Manifest {
  name: string
  version: string
  dependencies?: Record<string, string>
  peerDependencies?: Record<string, string>
  peerDependenciesMeta?: Record<string, unknown>
  bundleDependencies?: Array<string>
  [key: string]: unknown
}

const readJson = <A>(file: string): A => JSON.parse(readFileSync(file, "utf8")) as A

/** The workspace package directories, from the root package.json's `workspaces` globs. */
export const workspaces = (): Array<string> => {
  const globs = readJson<{ workspaces: Array<string> }>(join(root, "package.json")).workspaces
  return globs.flatMap((glob) => {
    if (!glob.endsWith("/*")) return [glob]
    const parent = glob.slice(0, -2)
    return readdirSync(join(root, parent), { withFileTypes: true })
      .filter((entry) => entry.isDirectory())
      .map((entry) => `${parent}/${entry.name}`)
  }).sort()
}

const npm = (args: ReadonlyArray<string>, cwd: string): string =>
  execFileSync("npm", [...args], { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] })

/** The CLI's dependencies once `bundled` packages travel inside it. */
const stagedDependencies = (cli: Manifest, bundled: ReadonlyArray<Manifest>): Record<string, string> => {
  const names = new Set(bundled.map((m) => m.name))
  // The bundled names stay: npm packs a bundled package only if it is also a dependency.
  const own = cli.dependencies ?? {}
  const merged: Record<string, string> = { ...own }
  for (const lib of bundled) {
    for (const [name, range] of Object.entries({ ...lib.peerDependencies, ...lib.dependencies })) {
      if (names.has(name) || own[name] !== undefined) continue
      const seen = merged[name]
      if (seen !== undefined && seen !== range) {
        throw new Error(`${name} is pinned twice (${seen} and ${range} in ${lib.name}); pin it once`)
      }
      merged[name] = range
    }
  }
  return Object.fromEntries(Object.entries(merged).sort(([a], [b]) => a.localeCompare(b)))
}

/** Packs every workspace into `destination`; returns the tarballs' file names by package. */
export const packAll = (destination: string): Record<string, string> => {
  mkdirSync(destination, { recursive: true })
  const work = mkdtempSync(join(tmpdir(), "fibril-pack-"))
  try {
    const plain = join(work, "plain")
    mkdirSync(plain)
    // Each package's `prepack` builds its dist/ (skipped when up to date).
    const listed = JSON.parse(
      npm(["pack", ...workspaces().flatMap((dir) => ["-w", dir]), "--pack-destination", plain, "--json"], root)
    ) as Array<{ name: string; filename: string }>
    const manifests = new Map(
      workspaces().map((dir) => {
        const manifest = readJson<Manifest>(join(root, dir, "package.json"))
        return [manifest.name, manifest] as const
      })
    )
    const cli = manifests.get("@fibril/cli")!
    const bundled = Object.keys(cli.dependencies ?? {}).filter((name) => manifests.has(name))
    const out: Record<string, string> = {}
    for (const pack of listed) {
      out[pack.name] = pack.filename
      if (pack.name !== cli.name) copyFileSync(join(plain, pack.filename), join(destination, pack.filename))
    }

    // The CLI, staged with its @fibril packages in node_modules, packed again as it is.
    const stage = join(work, "cli")
    mkdirSync(stage)
    execFileSync("tar", ["xzf", join(plain, out[cli.name]!), "-C", stage, "--strip-components=1"])
    for (const name of bundled) {
      const into = join(stage, "node_modules", name)
      mkdirSync(into, { recursive: true })
      execFileSync("tar", ["xzf", join(plain, out[name]!), "-C", into, "--strip-components=1"])
      const { dependencies: _d, peerDependencies: _p, peerDependenciesMeta: _m, ...rest } = readJson<Manifest>(
        join(into, "package.json")
      )
      writeFileSync(join(into, "package.json"), `${JSON.stringify(rest, null, 2)}\n`)
    }
    const staged: Manifest = {
      ...readJson<Manifest>(join(stage, "package.json")),
      dependencies: stagedDependencies(cli, bundled.map((name) => manifests.get(name)!)),
      bundleDependencies: bundled
    }
    writeFileSync(join(stage, "package.json"), `${JSON.stringify(staged, null, 2)}\n`)
    npm(["pack", "--ignore-scripts", "--pack-destination", resolve(destination), "--json"], stage)
    return out
  } finally {
    rmSync(work, { recursive: true, force: true })
  }
}

if (import.meta.main) {
  const destination = process.argv[2]
  if (destination === undefined) {
    process.stderr.write("usage: npm run tarballs -- <directory>\n")
    process.exit(2)
  }
  const packed = packAll(destination)
  for (const [name, file] of Object.entries(packed)) process.stdout.write(`${name}\t${join(destination, file)}\n`)
}
