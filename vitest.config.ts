import { defineConfig } from "vitest/config"
import { projects } from "./vitest.workspace.ts"

export default defineConfig({
  test: {
    testTimeout: 20_000,
    projects
  }
})
