// Vitest's global setup (vitest.config.ts): the `fibril` executable the tests start, bundled
// from the sources once per test run (scripts/bundle.ts, `from: "src"`), in a directory of its
// own that is removed at the end.
//
// Why: a `fibril` process started from the TypeScript sources resolves and strips ~450 modules
// and takes about a second to start; the bundle starts in ~0.4 s, and the suite starts hundreds
// of them (the CLI, MCP servers, cluster workers, process-isolated children). The bundle is made
// from the sources of this checkout (no `npm run build` needed, never stale), with the same
// module places as the published bundle, so the tests also run what users run.
import { mkdtempSync, rmSync } from "node:fs"
import { join } from "node:path"
import type { TestProject } from "vitest/node"
import { bundle } from "./bundle.ts"

declare module "vitest" {
  export interface ProvidedContext {
    /** The test bundle's `bin.js` (packages/cli/test/run.ts). */
    readonly fibrilBin: string
  }
}

const cli = join(import.meta.dirname, "..", "packages", "cli")

export default async function setup(project: TestProject) {
  // Beside `src/` (the modules find `../package.json` and their assets from there), one per run:
  // two test runs in one checkout do not remove each other's.
  const outdir = mkdtempSync(join(cli, ".test-bundle-"))
  await bundle({ from: "src", outdir })
  project.provide("fibrilBin", join(outdir, "bin.js"))
  return () => rmSync(outdir, { recursive: true, force: true })
}
