// The `fibril` command as a few bundled files (`packages/cli/bundle/`), made by `npm run build`
// after the packages' `dist/`: what the published `bin/fibril.js` runs.
//
// Why: start-up. Node spends most of `fibril --help` and `fibril mcp`'s first answer resolving
// and reading ~450 separate modules (docs/performance.md, start-up); one bundle halves the CPU.
// The sources and `dist/` stay as they are: the tests run the sources (`@fibril/source`) and the
// library entry points (`@fibril/core`, ...) are still the per-module `dist/`.
//
// Layout. Three entry points, each a process or thread the CLI starts: `bin.js` (the command),
// `ChildHost.js` (a process-isolated child, `ChildHost.modulePath`) and `LabWorker.js` (a lab
// worker thread, `LabParallel`). Code shared by them is split into chunks beside them, and so is
// what the CLI imports late (`import()`: the openai SDK at the first model request).
//
// Modules that find files next to themselves (`import.meta.url`: role prompts and tool
// descriptions, the CLI's `package.json`, the child host's own path) are given the place they
// would have in the bundle directory: a CLI module `dist/X.js` is `bundle/X.js` (so
// `../package.json` is still the CLI's, and `./LabWorker.js` / `./ChildHost.js` are the
// entries), a module of another package `packages/<pkg>/dist/X.js` is `bundle/<pkg>/X.js`; the
// text assets of each package's `dist/` are copied to the same places. `import.meta.main` (the
// child host runs its `main` only when started as a program) is asked of that place too, since
// the module's code may sit in a shared chunk.
import type * as Esbuild from "esbuild"
import { copyFileSync, mkdirSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join, relative, sep } from "node:path"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("..", import.meta.url))
const cli = join(root, "packages", "cli")
export const outdir = join(cli, "bundle")

const files = (dir: string): Array<string> =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = join(dir, entry.name)
    return entry.isDirectory() ? files(full) : [full]
  })

/**
 * `packages/<pkg>/<from>/<rel>` -> its place in the bundle directory, relative to it, or
 * undefined; a source module `X.ts` has the place of its build, `X.js`.
 */
const placeOf = (from: From, file: string): string | undefined => {
  const parts = relative(join(root, "packages"), file).split(sep)
  if (parts.length < 3 || parts[0]!.startsWith("..") || parts[1] !== from) return undefined
  const rest = parts.slice(2).join("/").replace(/\.ts$/, ".js")
  return parts[0] === "cli" ? rest : `${parts[0]}/${rest}`
}

const isAsset = (file: string) => !/\.(js|ts|map)$/.test(file) && !file.endsWith(".built")

/**
 * What is bundled: `dist` (the packages' build: what is published) or `src` (the sources, under
 * the `@fibril/source` condition: what the tests start as `fibril`, bundled by
 * scripts/test-bundle.ts in a second or two, without a build).
 */
export type From = "dist" | "src"

export const bundle = async (options: { readonly from: From; readonly outdir: string } = { from: "dist", outdir }) => {
  const { from } = options
  // esbuild is the CLI package's build dependency, not the root's.
  const esbuild = createRequire(join(cli, "package.json"))("esbuild") as typeof Esbuild
  rmSync(options.outdir, { recursive: true, force: true })
  const extension = from === "dist" ? "js" : "ts"
  const result = await esbuild.build({
    entryPoints: ["bin", "ChildHost", "LabWorker"].map((name) => join(cli, from, `${name}.${extension}`)),
    outdir: options.outdir,
    ...(from === "src" ? { conditions: ["@fibril/source"] } : {}),
    bundle: true,
    splitting: true,
    format: "esm",
    platform: "node",
    target: "node22",
    // Native or optional modules some dependencies try to load (pg's native binding).
    external: ["pg-native"],
    // Chunks bundle CommonJS dependencies: their `require` of Node's modules needs one.
    banner: {
      js: "import { createRequire as __fibrilCreateRequire } from \"node:module\"; " +
        "const require = __fibrilCreateRequire(import.meta.url);"
    },
    logLevel: "warning",
    metafile: true,
    plugins: [{
      name: "fibril-module-places",
      setup(build) {
        const filter = new RegExp(`[\\\\/]packages[\\\\/][^\\\\/]+[\\\\/]${from}[\\\\/].*\\.${extension}$`)
        build.onLoad({ filter }, (args) => {
          const place = placeOf(from, args.path)
          const source = readFileSync(args.path, "utf8")
          if (place === undefined || !source.includes("import.meta")) return undefined
          const url = `new URL(${JSON.stringify(`./${place}`)}, import.meta.url).href`
          const contents = source
            .replaceAll("import.meta.url", url)
            .replaceAll(
              "import.meta.main",
              `(process.argv[1] !== undefined && ${url} === __fibrilFileUrl(process.argv[1]).href)`
            )
          // After a `#!` line, which must stay first.
          const [, hashbang = "", body = contents] = /^(#![^\n]*\n)?([\s\S]*)$/.exec(contents) ?? []
          return {
            contents: `${hashbang}import { pathToFileURL as __fibrilFileUrl } from "node:url";\n${body}`,
            loader: extension
          }
        })
      }
    }]
  })
  // The text assets beside the modules that read them.
  for (const pkg of readdirSync(join(root, "packages"))) {
    const dir = join(root, "packages", pkg, from)
    for (const file of files(dir).filter(isAsset)) {
      const target = join(options.outdir, placeOf(from, file)!)
      mkdirSync(dirname(target), { recursive: true })
      copyFileSync(file, target)
    }
  }
  return result
}

if (import.meta.main) {
  const result = await bundle()
  for (const [file, output] of Object.entries(result.metafile.outputs)) {
    if (output.entryPoint !== undefined) console.error(`${file}: ${Math.round(output.bytes / 1024)} KiB`)
  }
}
