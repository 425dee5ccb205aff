// `fibril --version` answers before the CLI is loaded, from both entry points (the installed
// launcher, which must not need dist/ for it, and the sources), with the package's version.
import { assert, describe, it } from "@effect/vitest"
import { execFileSync } from "node:child_process"
import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { bin, sourceCondition } from "./run.ts"

const launcher = fileURLToPath(new URL("../bin/fibril.js", import.meta.url))
const { version } = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as {
  readonly version: string
}

describe("fibril --version", () => {
  it("the launcher and the sources print the package's version", () => {
    const expected = `fibril v${version}\n`
    assert.strictEqual(execFileSync(process.execPath, [launcher, "--version"], { encoding: "utf8" }), expected)
    assert.strictEqual(
      execFileSync(process.execPath, [sourceCondition, bin, "--version"], { encoding: "utf8" }),
      expected
    )
  })
})
