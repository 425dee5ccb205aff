// `fibril --version` answers before the CLI is loaded, from both entry points (the installed
// launcher, which must not need dist/ for it, and the sources), with the package's version.
import { assert, describe, it } from "@effect/vitest"
import { execFileSync, spawnSync } from "node:child_process"
import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { bin, sourceBin, sourceCondition } from "./run.ts"

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

// A command loads what it uses: `fibril --help` (like `fibril run` on the scripted model) loads
// neither the MCP server, nor the OTLP exporter, nor the openai SDK (together about 300
// modules and a third of the start-up). Nor does it load any command's handler: parsing and help
// need the command definitions only; a handler and what it uses (the runtime,
// the tools and re2js, the lab and its property-testing engine, the model providers) are
// imported when its command runs. Recorded by a module hook in a fresh process.
const recordLoads = `data:text/javascript,${
  encodeURIComponent(`
import { registerHooks } from "node:module"
const loaded = []
registerHooks({ load(url, context, next) { loaded.push(url); return next(url, context) } })
process.on("exit", () => process.stderr.write("LOADED " + JSON.stringify(loaded) + "\\n"))
`)
}`

describe("fibril --help", () => {
  it("loads the command definitions only: no handler, runtime, tool, lab, model provider or MCP server", () => {
    const { stderr, status } = spawnSync(process.execPath, [
      "--import",
      recordLoads,
      sourceCondition,
      sourceBin,
      "--help"
    ], {
      encoding: "utf8"
    })
    assert.strictEqual(status, 0, stderr)
    const line = stderr.split("\n").find((l) => l.startsWith("LOADED "))
    assert.isDefined(line, stderr)
    const loaded = JSON.parse(line!.slice("LOADED ".length)) as Array<string>
    // The hook sees the CLI itself load (so an empty list cannot pass).
    assert.isTrue(loaded.some((url) => url.endsWith("/cli/src/Cli.ts")), `${loaded.length} modules`)
    const unwanted = loaded.filter((url) =>
      /\/cli\/src\/(Mcp|Tracing)\.ts$/.test(url) || /\/effect\/dist\/(observability|rpc)\//.test(url) ||
      /\/node_modules\/openai\//.test(url) ||
      // The handlers' modules and what they use.
      /\/cli\/src\/(Runtime|Run|RunRecords|ModelSelection|Doctor|Demo|LabParallel|ClusterAgents|ClusterWorker)\.ts$/
        .test(
          url
        ) ||
      /\/core\/src\/(Fibril|SubAgentManager|BuiltinTools|Session)\.ts$/.test(url) ||
      // Grep and Glob's regular expressions, the lab and its property testing, the providers.
      /\/node_modules\/re2js\//.test(url) || /\/effect\/dist\/(internal\/arbitrary|Arbitrary)/.test(url) ||
      /\/(testkit|openai|cluster)\/src\//.test(url) || /\/effect\/dist\/ai\//.test(url)
    )
    assert.deepStrictEqual(unwanted, [])
  }, 30_000)
})
