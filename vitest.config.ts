import { defineConfig } from "vitest/config"
import { projects } from "./vitest.workspace.ts"

// Tests run on the sources: each package's `exports` name its `src/*.ts` under the
// `@fibril/source` condition (its `dist/` build is what a published package runs). Vite
// resolves with that condition, and every Node process a test starts (fixtures, the `fibril`
// executable) gets it through NODE_OPTIONS.
const source = "@fibril/source"
const nodeOptions = [process.env["NODE_OPTIONS"], `--conditions=${source}`].filter(Boolean).join(" ")

export default defineConfig({
  resolve: { conditions: [source, "module", "node", "development|production"] },
  ssr: { resolve: { conditions: [source, "module", "node", "development|production"] } },
  test: {
    testTimeout: 20_000,
    env: { NODE_OPTIONS: nodeOptions },
    // The `fibril` the tests start: bundled from these sources once per run.
    globalSetup: ["./scripts/test-bundle.ts"],
    projects
  }
})
