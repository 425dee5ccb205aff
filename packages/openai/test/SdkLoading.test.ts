// The `openai` SDK (about 240 modules, 100 ms to import) is loaded when a client is made, not
// when the package is imported: `fibril --help`, or an MCP server on the scripted model, never
// loads it. Checked in a fresh process, which records every module it loads.
import { assert, describe, it } from "@effect/vitest"
import { execFileSync } from "node:child_process"
import { fileURLToPath } from "node:url"

const repo = fileURLToPath(new URL("../../..", import.meta.url))

// Records each loaded URL under node_modules/openai/, after the import and after making a client.
const program = `
import { registerHooks } from "node:module"
const loaded = []
registerHooks({
  load(url, context, next) {
    const at = url.indexOf("/node_modules/openai/")
    if (at >= 0) loaded.push(url.slice(at + "/node_modules/openai/".length))
    return next(url, context)
  }
})
const { OpenAiClient } = await import("@fibril/openai")
const { Effect, Redacted } = await import("effect")
const onImport = [...loaded]
const client = await Effect.runPromise(OpenAiClient.make({ apiKey: Redacted.make("sk-test"), baseURL: "http://127.0.0.1:9/v1" }))
console.log(JSON.stringify({ onImport, afterMake: loaded.length, baseURL: client.baseURL }))
`

describe("the openai SDK", () => {
  it("is not loaded by importing @fibril/openai; making a client loads it", () => {
    // Evaluated as a module from the repository's root, where `@fibril/openai` resolves.
    const out = execFileSync(process.execPath, ["--input-type=module", "--eval", program], {
      cwd: repo,
      env: { ...process.env, NODE_OPTIONS: "--conditions=@fibril/source" },
      encoding: "utf8"
    })
    const report = JSON.parse(out.trim()) as { onImport: Array<string>; afterMake: number; baseURL: string }
    // The error classes only (`openai/core/error` and what it imports): a handful of modules.
    assert.isTrue(report.onImport.some((url) => url.startsWith("core/error.")), report.onImport.join(", "))
    assert.isBelow(report.onImport.length, 10, report.onImport.join(", "))
    assert.notInclude(report.onImport, "index.mjs")
    assert.notInclude(report.onImport, "client.mjs")
    // The client works: the SDK is there once it is made.
    assert.isAbove(report.afterMake, 100)
    assert.strictEqual(report.baseURL, "http://127.0.0.1:9/v1")
  }, 30_000)
})
