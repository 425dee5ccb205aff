/**
 * `node bench/openai-step.ts [calls]`: what a model step through `OpenAiModel` costs beyond the
 * `openai` SDK itself. Both paths send the same request through the SDK with the same `fetch`:
 * the first call goes to the in-process fake server (FakeOpenAiServer), and its reply is
 * then answered from memory, byte for byte, so neither path pays for a server or sockets
 * (their noise was larger than the difference measured). (a) `OpenAiModel.generateText` as the
 * agent loop calls it (a prompt with a system message, a user message and two tools; the reply
 * is a tool call), through `LanguageModel.make`, Fibril's request building and response mapping
 * and the SDK; (b) the SDK's `chat.completions.create` with the body (a) sent. The difference of
 * CPU per call is Fibril's and `effect/ai`'s. Interleaved batches; prints one JSON line with
 * the medians.
 */
import { OpenAiClient, OpenAiModel } from "@fibril/openai"
import { FakeOpenAiServer } from "@fibril/testkit"
import * as Prompt from "effect/ai/Prompt"
import * as Tool from "effect/ai/Tool"
import type * as Toolkit from "effect/ai/Toolkit"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import OpenAI from "openai"

const calls = Number(process.argv[2] ?? 300)
const rounds = 7

const toolkit: Toolkit.WithHandler<Record<string, Tool.Any>> = {
  tools: {
    read_file: Tool.make("read_file", {
      description: "Read a file",
      parameters: Schema.Struct({ path: Schema.String })
    }),
    grep: Tool.make("grep", { description: "Search files", parameters: Schema.Struct({ pattern: Schema.String }) })
  },
  handle: () => Effect.die("not run here")
}

const prompt = Prompt.fromMessages([
  Prompt.makeMessage("system", { content: "Fibril agent: role=explore depth=1\n\nYou explore." }),
  Prompt.makeMessage("user", { content: [Prompt.makePart("text", { text: "Where is the config loaded?" })] })
])

const scope = Effect.runSync(Scope.make())
const server = await Effect.runPromise(
  Scope.provide(scope)(FakeOpenAiServer.start({
    script: {
      rules: [{ turns: [{ tool_calls: [{ name: "read_file", args: { path: "src/config.ts" } }] }], repeat_last: true }]
    }
  }))
)
// The server's first reply, then the same bytes from memory for every later request.
let canned: string | undefined
const cannedFetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
  if (canned !== undefined) {
    return new Response(canned, { status: 200, headers: { "content-type": "application/json" } })
  }
  const response = await fetch(input, init)
  canned = await response.clone().text()
  return response
}
const client = await Effect.runPromise(
  OpenAiClient.make({ apiKey: Redacted.make("sk-bench"), baseURL: server.url, fetch: cannedFetch })
)
const model = await Effect.runPromise(OpenAiModel.makeWith(client, { model: "scripted" }))
const step = model.generateText({
  prompt,
  toolkit,
  disableToolCallResolution: true,
  toolCallValidation: "deferred"
}) as Effect.Effect<unknown>

await Effect.runPromise(step)
const body = server.requests.at(-1)!.body as OpenAI.ChatCompletionCreateParamsNonStreaming
const sdk = new OpenAI({ apiKey: "sk-bench", baseURL: server.url, maxRetries: 0, fetch: cannedFetch })

const cpu = () => {
  const u = process.cpuUsage()
  return u.user + u.system
}
const viaFibril = async () => {
  for (let i = 0; i < calls; i++) await Effect.runPromise(step)
}
const viaSdk = async () => {
  for (let i = 0; i < calls; i++) await sdk.chat.completions.create(body)
}
const perCall = async (run: () => Promise<void>) => {
  const c0 = cpu()
  await run()
  return (cpu() - c0) / calls
}
// Warm both paths.
await viaFibril()
await viaSdk()
const fibril: Array<number> = []
const raw: Array<number> = []
for (let r = 0; r < rounds; r++) {
  fibril.push(await perCall(viaFibril))
  raw.push(await perCall(viaSdk))
}
const median = (xs: Array<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const diffs = fibril.map((f, i) => f - raw[i]!)
process.stdout.write(
  JSON.stringify({
    calls_per_batch: calls,
    rounds,
    openai_model_cpu_us_per_call: median(fibril),
    sdk_cpu_us_per_call: median(raw),
    beyond_sdk_cpu_us_per_call: median(diffs)
  }) + "\n"
)
await Effect.runPromise(Scope.close(scope, Exit.void))
