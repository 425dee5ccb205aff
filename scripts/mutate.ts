// `npm run mutate -- [<file or folder> ...] [--tests <glob> ...] [--full] [--concurrency <n>]`: StrykerJS over the
// given sources (default: every file under packages/{core,openai,cli}/src, from
// stryker.config.json), reports in reports/mutation/ (HTML, JSON), incremental by default so a
// second run re-tests only mutants whose code or covering tests changed (`--full` starts over).
//
//   npm run mutate -- packages/core/src/Permission.ts
//   npm run mutate -- packages/core/src/loop --tests 'packages/core/test/Loop.test.ts'
//
// A folder means every `.ts` file under it. `--tests` narrows the tests run against each mutant
// (Stryker's `testFiles`); without it, Vitest's related mode picks the tests that import the file.
// `--concurrency <n>` overrides the config's number of test runners (2): on a shared machine, 1.
import { spawnSync } from "node:child_process"
import { existsSync, statSync } from "node:fs"
import { fileURLToPath } from "node:url"

const args = process.argv.slice(2)
const mutate: Array<string> = []
const tests: Array<string> = []
let full = false
let concurrency: string | undefined
for (let i = 0; i < args.length; i++) {
  const arg = args[i]!
  if (arg === "--tests") {
    const value = args[++i]
    if (value === undefined) fail("--tests needs a glob, e.g. --tests 'packages/core/test/Permission.test.ts'")
    tests.push(value)
  } else if (arg === "--concurrency") {
    const value = args[++i]
    if (value === undefined || !/^[1-9][0-9]*$/.test(value)) {
      fail(
        `--concurrency needs a positive whole number of test runners, e.g. --concurrency 1; got ${value ?? "nothing"}`
      )
    }
    concurrency = value
  } else if (arg === "--full") full = true
  else if (arg.startsWith("-")) {
    fail(`unknown option ${arg}; accepted: <file or folder> ..., --tests <glob>, --full, --concurrency <n>`)
  } else {
    const path = arg.replace(/\/+$/, "")
    if (!existsSync(path)) {
      fail(`${arg} does not exist; give a source file or folder, e.g. packages/core/src/Permission.ts`)
    }
    mutate.push(statSync(path).isDirectory() ? `${path}/**/*.ts` : path)
  }
}

function fail(message: string): never {
  process.stderr.write(`mutate: ${message}\n`)
  process.exit(2)
}

const stryker = fileURLToPath(new URL("../node_modules/@stryker-mutator/core/bin/stryker.js", import.meta.url))
const strykerArgs = [
  stryker,
  "run",
  "stryker.config.json",
  ...(mutate.length > 0 ? ["--mutate", mutate.join(",")] : []),
  ...(tests.length > 0 ? ["--testFiles", tests.join(",")] : []),
  ...(concurrency !== undefined ? ["--concurrency", concurrency] : []),
  ...(full ? ["--force"] : [])
]
const result = spawnSync(process.execPath, strykerArgs, { stdio: "inherit" })
process.exit(result.status ?? 1)
