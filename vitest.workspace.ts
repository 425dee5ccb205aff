// The list of test projects. Vitest 5 no longer reads this file by itself:
// vitest.config.ts imports it into `test.projects`.
//
// Most of the suite waits on the processes, servers and files it starts, so its files run two
// at a time (Vitest's default on a 2-core machine is one). The few files that assert on
// wall-clock timing (a terminal frame captured while agents run, an MCP answer within a bound,
// a shutdown within a bound) run afterwards, alone, in a group of their own.
const timed = [
  "packages/cli/test/Tty.test.ts",
  "packages/cli/test/McpResponsive.test.ts",
  "packages/cli/test/Shutdown.test.ts"
]
const parallel = { maxWorkers: 2, sequence: { groupOrder: 0 } }

export const projects = [
  { extends: true, test: { ...parallel, name: "core", include: ["packages/core/test/**/*.test.ts"] } },
  { extends: true, test: { ...parallel, name: "testkit", include: ["packages/testkit/test/**/*.test.ts"] } },
  {
    extends: true,
    test: { ...parallel, name: "openai", include: ["packages/openai/test/**/*.test.ts"], testTimeout: 30_000 }
  },
  {
    extends: true,
    test: { ...parallel, name: "cluster", include: ["packages/cluster/test/**/*.test.ts"], testTimeout: 60_000 }
  },
  {
    extends: true,
    test: {
      ...parallel,
      name: "cli",
      include: ["packages/cli/test/**/*.test.ts"],
      exclude: ["**/node_modules/**", ...timed],
      testTimeout: 60_000
    }
  },
  {
    extends: true,
    test: { ...parallel, name: "examples", include: ["examples/**/*.test.ts"], testTimeout: 60_000 }
  },
  { extends: true, test: { ...parallel, name: "bench", include: ["bench/**/*.test.ts"], testTimeout: 30_000 } },
  // The TypeScript blocks of README.md and docs/*.md marked <!-- runs --> (docs/docs.test.ts).
  { extends: true, test: { ...parallel, name: "docs", include: ["docs/**/*.test.ts"], testTimeout: 300_000 } },
  {
    extends: true,
    test: { name: "timed", include: timed, testTimeout: 60_000, maxWorkers: 1, sequence: { groupOrder: 1 } }
  }
]
