// An npm registry on 127.0.0.1 made of what this machine already has, so that a test can
// `npm install -g` (or `npx`) the packed tarballs with no network.
//
// Why not `npm install -g --offline`: npm 11 resolves every dependency that no lock pins by
// its full packument (arborist's `fetchManifest` asks for `fullMetadata`), and a global install
// reads no lock; the repository's own `npm install` goes by its lock and never caches those
// packuments. So `--offline` works only on a machine that once installed the same packages
// globally with the network. Here the packuments are written from the repository's
// package-lock.json (every version it pins, with its dependencies, peers, engines and bin),
// and each tarball is read from npm's own cache by its integrity (cacache's content-v2 layout:
// `<cache>/_cacache/content-v2/sha512/<hex digest split 2/2/rest>`). A package the lock does not
// pin is a 404, and so is a tarball npm has not cached: the install fails, it never goes online.
import { Effect } from "effect"
import type { Scope } from "effect"
import { execFileSync } from "node:child_process"
import { createHash } from "node:crypto"
import { readFileSync } from "node:fs"
import * as Http from "node:http"
import type * as Net from "node:net"
import { join } from "node:path"

interface LockEntry {
  readonly version?: string
  readonly integrity?: string
  readonly link?: boolean
  readonly [key: string]: unknown
}

/** A package served from a file (the packed @fibril tarballs). */
export interface Published {
  readonly file: string
  readonly manifest: { readonly name: string; readonly version: string; readonly [key: string]: unknown }
}

export interface LocalRegistry {
  /** For `--registry`. */
  readonly url: string
  /** The package names npm asked for that are not here. */
  readonly missing: ReadonlyArray<string>
}

const manifestFields = [
  "dependencies",
  "optionalDependencies",
  "peerDependencies",
  "peerDependenciesMeta",
  "bundleDependencies",
  "engines",
  "bin",
  "os",
  "cpu",
  "license"
] as const

const hexOf = (integrity: string) => Buffer.from(integrity.slice("sha512-".length), "base64").toString("hex")

/** Serves `published` and every package version `lock` pins, until the scope closes. */
export const start = (options: {
  readonly lock: { readonly packages: Record<string, LockEntry> }
  readonly published: ReadonlyArray<Published>
}): Effect.Effect<LocalRegistry, never, Scope.Scope> =>
  Effect.gen(function*() {
    const cache = execFileSync("npm", ["config", "get", "cache"], { encoding: "utf8" }).trim()
    const versions = new Map<string, Map<string, Record<string, unknown>>>()
    const tarballs = new Map<string, () => Buffer>()
    const missing: Array<string> = []
    let base = ""
    const add = (
      name: string,
      version: string,
      fields: Record<string, unknown>,
      integrity: string,
      read: () => Buffer
    ) => {
      const hex = hexOf(integrity)
      tarballs.set(hex, read)
      const manifest: Record<string, unknown> = { name, version }
      for (const field of manifestFields) if (fields[field] !== undefined) manifest[field] = fields[field]
      manifest["dist"] = { integrity, tarball: `@@BASE@@/-/${hex}.tgz` }
      const byVersion = versions.get(name) ?? new Map()
      byVersion.set(version, manifest)
      versions.set(name, byVersion)
    }
    for (const [at, entry] of Object.entries(options.lock.packages)) {
      const cut = at.lastIndexOf("node_modules/")
      if (cut === -1 || entry.link === true || entry.version === undefined || entry.integrity === undefined) continue
      const hex = hexOf(entry.integrity)
      const file = join(cache, "_cacache", "content-v2", "sha512", hex.slice(0, 2), hex.slice(2, 4), hex.slice(4))
      add(at.slice(cut + "node_modules/".length), entry.version, entry, entry.integrity, () => readFileSync(file))
    }
    for (const { file, manifest } of options.published) {
      const bytes = readFileSync(file)
      const integrity = `sha512-${createHash("sha512").update(bytes).digest("base64")}`
      add(manifest.name, manifest.version, manifest, integrity, () => bytes)
    }

    const server = Http.createServer((request, response) => {
      const path = decodeURIComponent((request.url ?? "/").split("?")[0]!.slice(1))
      const tarball = /^-\/([0-9a-f]+)\.tgz$/.exec(path)
      try {
        if (tarball !== null) {
          const read = tarballs.get(tarball[1]!)
          if (read === undefined) throw new Error("no such tarball")
          response.writeHead(200, { "content-type": "application/octet-stream" }).end(read())
          return
        }
        const byVersion = versions.get(path)
        if (byVersion === undefined) {
          missing.push(path)
          response.writeHead(404, { "content-type": "application/json" }).end(`{"error":"not found"}`)
          return
        }
        const all = [...byVersion.values()]
        const latest = all[all.length - 1]!["version"]
        const body = JSON.stringify({
          name: path,
          "dist-tags": { latest },
          versions: Object.fromEntries(all.map((m) => [m["version"], m]))
        }).replaceAll("@@BASE@@", base)
        response.writeHead(200, { "content-type": "application/json" }).end(body)
      } catch {
        response.writeHead(404).end()
      }
    })
    yield* Effect.acquireRelease(
      Effect.callback<void>((resume) => {
        server.listen(0, "127.0.0.1", () => resume(Effect.void))
      }),
      () =>
        Effect.callback<void>((resume) => {
          server.closeAllConnections()
          server.close(() => resume(Effect.void))
        })
    )
    base = `http://127.0.0.1:${(server.address() as Net.AddressInfo).port}`
    return { url: `${base}/`, missing }
  })
