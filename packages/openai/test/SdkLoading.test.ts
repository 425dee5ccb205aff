// The `openai` SDK (about 240 modules, 100 ms to import) is loaded by a client's first request,
// not when the package is imported or a client is made: `fibril --help`, an MCP server on the
// scripted model, or one answering `tools/list` before its first task never loads it. Checked in
// a fresh process, which records every module it loads.
import { assert, describe, it } from "@effect/vitest"
import { execFileSync } from "node:child_process"
import { fileURLToPath } from "node:url"

const repo = fileURLToPath(new URL("../../..", import.meta.url))

// Records each loaded URL under node_modules/openai/, after the import, after making a client and
// after its first request (to a port where nothing listens: the SDK is loaded to send it).
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
const afterMake = loaded.length
const request = await Effect.runPromise(Effect.result(client.listModels))
console.log(JSON.stringify({ onImport, afterMake, afterRequest: loaded.length, request: request._tag, baseURL: client.baseURL }))
`

describe("the openai SDK", () => {
  it("is not loaded by importing @fibril/openai or making a client; the first request loads it", () => {
    // Evaluated as a module from the repository's root, where `@fibril/openai` resolves.
    const out = execFileSync(process.execPath, ["--input-type=module", "--eval", program], {
      cwd: repo,
      env: { ...process.env, NODE_OPTIONS: "--conditions=@fibril/source" },
      encoding: "utf8"
    })
    const report = JSON.parse(out.trim()) as {
      onImport: Array<string>
      afterMake: number
      afterRequest: number
      request: string
      baseURL: string
    }
    // The error classes only (`openai/core/error` and what it imports): a handful of modules.
    assert.isTrue(report.onImport.some((url) => url.startsWith("core/error.")), report.onImport.join(", "))
    assert.isBelow(report.onImport.length, 10, report.onImport.join(", "))
    assert.notInclude(report.onImport, "index.mjs")
    assert.notInclude(report.onImport, "client.mjs")
    // Making the client loads nothing more; its request does, and fails as a request does.
    assert.strictEqual(report.afterMake, report.onImport.length)
    assert.isAbove(report.afterRequest, 100)
    assert.strictEqual(report.request, "Failure")
    assert.strictEqual(report.baseURL, "http://127.0.0.1:9/v1")
  }, 30_000)
})
