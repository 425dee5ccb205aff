// The list of test projects. Vitest 5 no longer reads this file by itself:
// vitest.config.ts imports it into `test.projects`.
export const projects = [
  { extends: true, test: { name: "core", include: ["packages/core/test/**/*.test.ts"] } },
  { extends: true, test: { name: "testkit", include: ["packages/testkit/test/**/*.test.ts"] } },
  { extends: true, test: { name: "openai", include: ["packages/openai/test/**/*.test.ts"], testTimeout: 30_000 } },
  { extends: true, test: { name: "cluster", include: ["packages/cluster/test/**/*.test.ts"], testTimeout: 60_000 } },
  { extends: true, test: { name: "cli", include: ["packages/cli/test/**/*.test.ts"], testTimeout: 60_000 } },
  { extends: true, test: { name: "examples", include: ["examples/**/*.test.ts"], testTimeout: 60_000 } },
  { extends: true, test: { name: "bench", include: ["bench/**/*.test.ts"], testTimeout: 30_000 } },
  // The TypeScript blocks of README.md and docs/*.md marked <!-- runs --> (docs/docs.test.ts).
  { extends: true, test: { name: "docs", include: ["docs/**/*.test.ts"], testTimeout: 300_000 } }
]
