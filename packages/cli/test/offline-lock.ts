// A package-lock.json for a project that installs the packed @fibril tarballs, so that
// `npm install --offline` needs nothing but npm's cache: every registry package is pinned to
// the version and integrity the repository's own lock installed (npm keeps those tarballs in
// its cache by integrity), and no registry metadata has to be fetched.
import { createHash } from "node:crypto"
import { readFileSync } from "node:fs"
import { basename } from "node:path"

interface LockEntry {
  readonly version?: string
  readonly integrity?: string
  readonly dependencies?: Record<string, string>
  readonly optionalDependencies?: Record<string, string>
  readonly peerDependencies?: Record<string, string>
  readonly peerDependenciesMeta?: Record<string, { readonly optional?: boolean }>
  readonly [key: string]: unknown
}

interface Manifest {
  readonly name: string
  readonly version: string
  readonly dependencies?: Record<string, string>
  readonly bin?: Record<string, string>
  readonly engines?: Record<string, string>
}

/** The lock of a project depending on `tarballs` (paths), built from `repoLock`'s entries. */
export const offlineLock = (
  projectName: string,
  tarballs: ReadonlyArray<{ readonly file: string; readonly manifest: Manifest }>,
  repoLock: { readonly packages: Record<string, LockEntry> }
) => {
  const packages: Record<string, unknown> = {}
  const byName = new Map(tarballs.map((t) => [t.manifest.name, t]))
  /** Where Node would find `dep` from the package installed at `from` (a lock path). */
  const locate = (from: string, dep: string): string | undefined => {
    let base = from
    while (true) {
      const candidate = `${base === "" ? "" : `${base}/`}node_modules/${dep}`
      if (repoLock.packages[candidate] !== undefined && !("link" in repoLock.packages[candidate]!)) return candidate
      if (base === "") return undefined
      const cut = base.lastIndexOf("/node_modules/")
      base = cut === -1 ? "" : base.slice(0, cut)
    }
  }
  const visit = (from: string, deps: Record<string, string>) => {
    for (const dep of Object.keys(deps)) {
      if (byName.has(dep)) continue
      const at = locate(from, dep)
      if (at === undefined) {
        throw new Error(`${dep} (needed by ${from || "the project"}) is not in the repository's lock`)
      }
      if (packages[at] !== undefined) continue
      const { dev: _dev, devOptional: _devOptional, peer: _peer, ...entry } = repoLock.packages[at]!
      packages[at] = entry
      const required = Object.fromEntries(
        Object.entries(entry.peerDependencies ?? {}).filter(([name]) =>
          entry.peerDependenciesMeta?.[name]?.optional !== true
        )
      )
      visit(at, { ...entry.dependencies, ...required })
    }
  }
  const root = Object.fromEntries(tarballs.map((t) => [t.manifest.name, `file:${basename(t.file)}`]))
  packages[""] = { name: projectName, dependencies: root }
  for (const { file, manifest } of tarballs) {
    packages[`node_modules/${manifest.name}`] = {
      version: manifest.version,
      resolved: `file:${basename(file)}`,
      integrity: `sha512-${createHash("sha512").update(readFileSync(file)).digest("base64")}`,
      ...(manifest.dependencies === undefined ? {} : { dependencies: manifest.dependencies }),
      ...(manifest.bin === undefined ? {} : { bin: manifest.bin }),
      ...(manifest.engines === undefined ? {} : { engines: manifest.engines })
    }
    visit(`node_modules/${manifest.name}`, manifest.dependencies ?? {})
  }
  return {
    packageJson: { name: projectName, private: true, dependencies: root },
    lock: { name: projectName, lockfileVersion: 3, requires: true, packages }
  }
}
