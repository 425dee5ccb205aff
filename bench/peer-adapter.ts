/**
 * Fibril as a runtime of the shared orchestration harness (shared/BENCH.md, "Plugging a
 * runtime into another harness"). Runs under Node 24 as TypeScript.
 *
 * The real path: the root agent's `task` calls go through the SubAgentManager (cap, records,
 * AgentEvents), each child runs the agent loop with a `lookup` tool, and the model is a
 * `LanguageModel` backed by the harness's stateless script. Layers are built once per script.
 */
import * as NodeServices from "@effect/platform-node/NodeServices"
import * as Fibril from "@fibril/core/Fibril"
import { Session } from "@fibril/core/Session"
import * as ToolRegistry from "@fibril/core/ToolRegistry"
import * as LanguageModel from "effect/ai/LanguageModel"
import * as Prompt from "effect/ai/Prompt"
import * as Response from "effect/ai/Response"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Schema from "effect/Schema"
import type { ModelAnswer, Script } from "./script.ts"

export const meta = {
  name: "fibril",
  packages: [["@fibril/core"], ["effect"]],
  capHow: "SubAgentManager maxConcurrent (a Semaphore) with admission = queue",
  abortHow: "the AbortSignal interrupts the root agent's fiber (ManagedRuntime.runPromise({ signal }))"
}

const headerPattern = /^Fibril agent: role=(\S+) depth=(\d+)/

const textOf = (result: unknown) => typeof result === "string" ? result : JSON.stringify(result)

/**
 * What the harness's parent model receives for a sub-agent call: the child's summary text,
 * as the harness checks (Fibril's `task` result carries it in `summary`).
 */
const summaryOf = (result: unknown): string =>
  typeof result === "object" && result !== null && "summary" in result && typeof result.summary === "string"
    ? result.summary
    : textOf(result)

/** What the script needs from a request: depth, the first user message, tool-result texts. */
const readPrompt = (prompt: Prompt.Prompt) => {
  let depth = 0
  let first: string | undefined
  const toolResults: Array<string> = []
  for (const message of prompt.content) {
    if (message.role === "system") {
      const match = headerPattern.exec(message.content)
      if (match !== null) depth = Number(match[2])
    } else if (message.role === "user" && first === undefined) {
      for (const part of message.content) if (part.type === "text") first = part.text
    } else if (message.role === "tool") {
      for (const part of message.content) {
        if (part.type === "tool-result") {
          toolResults.push(part.name === "task" ? summaryOf(part.result) : textOf(part.result))
        }
      }
    }
  }
  return { depth, prompt: first ?? "", toolResults }
}

const usage = new Response.Usage({
  inputTokens: { total: 0, uncached: undefined, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 0, text: undefined, reasoning: undefined }
})

const toParts = (answer: ModelAnswer, depth: number): Array<Response.Part<Record<string, never>>> => {
  if ("text" in answer) {
    return [
      Response.makePart("text", { text: answer.text }),
      Response.makePart("finish", { reason: "stop", usage, response: undefined })
    ] as Array<Response.Part<Record<string, never>>>
  }
  const parts: Array<unknown> = answer.calls.map((call) =>
    Response.makePart("tool-call", {
      id: call.id,
      // The parent's sub-agent calls (the harness names its tool `subagent`) become Fibril
      // `task` calls for a lookup-only child.
      name: depth === 0 ? "task" : call.name,
      params: depth === 0
        ? {
          description: call.args["prompt"],
          prompt: call.args["prompt"],
          subagent_type: "custom",
          allowed_tools: ["lookup"]
        }
        : call.args,
      providerExecuted: false
    })
  )
  parts.push(Response.makePart("finish", { reason: "tool-calls", usage, response: undefined }))
  return parts as Array<Response.Part<Record<string, never>>>
}

/**
 * The script as an `effect/ai` LanguageModel. It implements the service directly (a model
 * answering in-process has no wire format to decode), so what is measured is Fibril, not
 * `LanguageModel.make`'s response decoding.
 */
export const scriptModel = (s: Script): LanguageModel.LanguageModel => {
  const generateText = (options: { readonly prompt: Prompt.RawInput }) =>
    Effect.sync(() => {
      const request = readPrompt(Prompt.make(options.prompt))
      const answer = request.depth === 0
        ? s.parentModel({ toolResults: request.toolResults })
        : s.childModel({ prompt: request.prompt, toolResults: request.toolResults })
      return new LanguageModel.GenerateTextResponse(toParts(answer, request.depth))
    })
  const unsupported = Effect.die("the benchmark model only answers generateText")
  return {
    [LanguageModel.TypeId]: LanguageModel.TypeId,
    generateText,
    generateObject: () => unsupported,
    streamText: () => Effect.die("unsupported") as never
  } as unknown as LanguageModel.LanguageModel
}

const LookupParameters = Schema.Struct({ key: Schema.String })

export const lookupTool = (s: Script) =>
  Layer.effectDiscard(ToolRegistry.ToolRegistry.use((registry) =>
    registry.register(ToolRegistry.define({
      name: "lookup",
      description: "Look a key up.",
      parameters: LookupParameters,
      posture: "read",
      // The signal is aborted when the calling fiber is interrupted, which clears the timer.
      handler: (params) => Effect.promise((signal) => s.lookup(params, signal))
    }))
  ))

export type Store = "memory" | "file"

const runtimes = new WeakMap<Script, Map<string, ManagedRuntime.ManagedRuntime<Session, unknown>>>()

/**
 * Fibril's layer for the script: the lookup tool, the standard services, the script's model,
 * in a temporary workspace removed when the layer is released.
 */
export const layerFor = (
  s: Script,
  cap: number | null,
  store: Store = "memory",
  model: Layer.Layer<LanguageModel.LanguageModel> = Layer.succeed(LanguageModel.LanguageModel, scriptModel(s))
) =>
  Layer.unwrap(Effect.map(
    FileSystem.FileSystem.use((fs) => fs.makeTempDirectoryScoped({ prefix: "fibril-bench-" })),
    (cwd) =>
      lookupTool(s).pipe(
        Layer.provideMerge(Fibril.layer({
          cwd,
          store,
          subagents: { maxConcurrent: cap ?? 1_000_000, admission: "queue" },
          session: { maxSteps: 1000 }
        })),
        Layer.provide(model)
      )
  )).pipe(Layer.provide(NodeServices.layer))

export const runtimeFor = (s: Script, cap: number | null, store: Store = "memory") => {
  const key = `${cap}:${store}`
  let byKey = runtimes.get(s)
  if (byKey === undefined) runtimes.set(s, byKey = new Map())
  let runtime = byKey.get(key)
  if (runtime === undefined) {
    runtime = ManagedRuntime.make(layerFor(s, cap, store)) as ManagedRuntime.ManagedRuntime<Session, unknown>
    byKey.set(key, runtime)
  }
  return runtime
}

export const parentRun = Effect.gen(function*() {
  const session = yield* Session
  // Tools allowed below are inherited as a ceiling: the children need `lookup`.
  const root = yield* session.create({ role: "general", allowedTools: ["task", "lookup"] })
  const answer = yield* session.prompt(root.id, "bench")
  yield* session.dispose(root.id)
  return { final: answer.text }
})

export async function runW1({ cap, s, store }: { K: number; M: number; cap: number | null; s: Script; store?: Store }) {
  return runtimeFor(s, cap, store).runPromise(parentRun)
}

export async function runW2(
  { signal, s, store }: { K: number; M: number; signal: AbortSignal; s: Script; store?: Store }
) {
  return runtimeFor(s, null, store).runPromise(parentRun, { signal })
}

export async function runW3({ s, store }: { K: number; M: number; s: Script; store?: Store }) {
  return runtimeFor(s, null, store).runPromise(parentRun)
}

/** Releases the layers built for `s` (the file store flushes). */
export async function dispose(s: Script) {
  for (const runtime of runtimes.get(s)?.values() ?? []) await runtime.dispose()
}
