/**
 * The figures beyond the peers' (one fresh process, `node bench/context.ts`, one JSON line):
 *
 * - delegation: on the W1 script (K = 10, M = 3), what one delegated task adds to the parent's
 *   next request (its `task` call and the structured result) against the child's whole
 *   conversation (every message of its last request, plus its final answer) — what the
 *   parent would carry if it had done the work itself or received the transcript;
 * - fork_context: the share of a forked child's first request that is a byte-identical
 *   prefix of the parent's request (what a provider's prefix cache can reuse), after the
 *   parent has done M = 3 lookups (`fork`) and M = 50 (`fork_at_scale`, ~20k tokens of
 *   context): the child adds a fixed ~1.7 KB after the parent's whole request (the fork marker,
 *   its role prompt and output contract, its task), so the share grows with the parent's context;
 *   `parent_share_reused` is how much of the parent's request the prefix covers.
 *
 * - economy (issue 38's scorecard): a child that reads ~50k tokens of tool output (seven real
 *   files through `read_file`) and answers in the five-section contract: what the parent gains
 *   per delegated task, and what the child costs beyond its task (system prompt, the tool
 *   definitions as an OpenAI request carries them, its result).
 * - typed_economy: the same child work, the `task` called with a three-field `output_schema` and
 *   the child answering through the `final_answer` tool: what the parent gains when the result
 *   is the decoded JSON (`output`) instead of five sections, split into its `task` call (with
 *   the schema) and the result around the output.
 *
 * Sizes are bytes of the JSON-encoded messages; tokens are estimated as bytes / 4 (the bench
 * model reports no usage, and no tokenizer is involved).
 */
import * as NodeServices from "@effect/platform-node/NodeServices"
import * as Fibril from "@fibril/core/Fibril"
import { Session } from "@fibril/core/Session"
import { ScriptedModel } from "@fibril/testkit"
import * as LanguageModel from "effect/ai/LanguageModel"
import * as Prompt from "effect/ai/Prompt"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ManagedRuntime from "effect/ManagedRuntime"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { toMessages, toTools } from "../packages/openai/src/OpenAiModel.ts"
import { layerFor, parentRun, scriptModel } from "./peer-adapter.ts"
import { makeScript, PAYLOAD } from "./script.ts"

const encode = (messages: ReadonlyArray<Prompt.Message>) => `[${messages.map((m) => JSON.stringify(m)).join(",")}]`

const commonPrefix = (a: string, b: string) => {
  const n = Math.min(a.length, b.length)
  let i = 0
  while (i < n && a.charCodeAt(i) === b.charCodeAt(i)) i++
  return i
}

const median = (values: ReadonlyArray<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!

/** The W1 script's model, recording every request: the parent's in order, each child's last. */
const delegation = async () => {
  const K = 10
  const M = 3
  const s = makeScript({ K, M, blocking: false })
  const inner = scriptModel(s)
  const parentRequests: Array<ReadonlyArray<Prompt.Message>> = []
  const childLast = new Map<string, { messages: ReadonlyArray<Prompt.Message>; answer: string }>()
  const recording = {
    ...inner,
    generateText: (options: { readonly prompt: Prompt.RawInput }) =>
      Effect.map(inner.generateText(options as never), (response) => {
        const messages = Prompt.make(options.prompt).content
        const system = messages[0]?.role === "system" ? messages[0].content : ""
        const user = messages.find((m) => m.role === "user")
        const task = user === undefined ? "" : JSON.stringify(user.content)
        if (/depth=0/.test(system)) parentRequests.push(messages)
        else childLast.set(task, { messages, answer: response.text })
        return response
      })
  } as unknown as LanguageModel.LanguageModel
  const runtime = ManagedRuntime.make(
    layerFor(s, null, "memory", Layer.succeed(LanguageModel.LanguageModel, recording))
  )
  const { final } = await runtime.runPromise(parentRun as Effect.Effect<{ final: string }, unknown, Session>)
  await runtime.dispose()
  const [first, second] = parentRequests
  if (
    final !== `final: received ${K} summaries` || first === undefined || second === undefined || childLast.size !== K
  ) {
    throw new Error(
      `delegation run did not check out: ${final}, ${parentRequests.length} parent requests, ${childLast.size} children`
    )
  }
  const addedPerTask = (encode(second).length - encode(first).length) / K
  const childBytes = median(
    [...childLast.values()].map((c) => encode(c.messages).length + JSON.stringify(c.answer).length)
  )
  return {
    K,
    M,
    parent_bytes_added_per_task: Math.round(addedPerTask),
    child_conversation_bytes: childBytes,
    parent_tokens_added_per_task_est: Math.round(addedPerTask / 4),
    child_conversation_tokens_est: Math.round(childBytes / 4),
    child_to_parent_ratio: childBytes / addedPerTask
  }
}

/** The parent does M lookups, then spawns a forked child and waits for it. */
const fork = async (M: number) => {
  const s = makeScript({ K: 1, M, blocking: false })
  let parentRequest: ReadonlyArray<Prompt.Message> = []
  let childRequest: ReadonlyArray<Prompt.Message> = []
  const model = ScriptedModel.layer({
    rules: [
      {
        match: { depth: 0 },
        respond: (c) => {
          if (c.turn < M) return { tool_calls: [{ name: "lookup", args: { key: `parent/${c.turn}` } }] }
          if (c.turn === M) {
            parentRequest = c.messages
            return {
              tool_calls: [{
                name: "agent_spawn",
                args: {
                  prompt: "task-0",
                  description: "forked",
                  fork_context: true,
                  type: "custom",
                  allowed_tools: ["lookup"]
                }
              }]
            }
          }
          return c.turn === M + 1 ? { tool_calls: [{ name: "agent_wait", args: {} }] } : { text: "done" }
        }
      },
      {
        respond: (c) => {
          if (c.turn === 0) childRequest = c.messages
          return { text: `SUMMARY:\nforked child done` }
        }
      }
    ]
  })
  const program = Effect.gen(function*() {
    const session = yield* Session
    const root = yield* session.create({ role: "general", allowedTools: ["lookup", "agent_spawn", "agent_wait"] })
    return (yield* session.prompt(root.id, "bench")).text
  })
  const runtime = ManagedRuntime.make(layerFor(s, null, "memory", model))
  const answer = await runtime.runPromise(program as Effect.Effect<string, unknown, Session>)
  await runtime.dispose()
  const parent = encode(parentRequest)
  const child = encode(childRequest)
  if (answer !== "done" || !parent.includes(PAYLOAD) || childRequest.length === 0) {
    throw new Error(`fork run did not check out: ${answer}`)
  }
  const prefix = commonPrefix(parent, child)
  return {
    parent_request_bytes: parent.length,
    child_first_request_bytes: child.length,
    identical_prefix_bytes: prefix,
    // The byte prefix stops at the array's last message boundary: count whole messages too.
    identical_prefix_messages: childRequest.findIndex((m, i) => JSON.stringify(m) !== JSON.stringify(parentRequest[i])),
    prefix_share: prefix / child.length,
    /** The byte prefix ends before the parent request's closing bracket: the whole of it, as messages. */
    parent_share_reused: prefix / (parent.length - 1),
    child_added_bytes: child.length - prefix
  }
}

/** The five-section answer a child gives (docs/subagents.md): what the parent receives. */
const fiveSections = [
  "SUMMARY:\nRead the seven module files; the retry policy lives in one place and every caller goes through it.",
  "CHANGES:\nnone (read-only task)",
  "EVIDENCE:\nmodule-0.txt..module-6.txt: one retry helper, two callers each; no caller sleeps on its own.",
  "RISKS:\nthe backoff cap is read at start-up only: a config change needs a restart.",
  "BLOCKERS:\nnone"
].join("\n\n")

/**
 * A parent delegates one task; its child reads seven real files of ~29 KB (about 50k tokens in
 * all, each under read_file's 30,000-character cut) and answers in five sections.
 */
/** A typed answer (`output_schema`): the child answers through `final_answer`, the parent gets its JSON. */
export interface Typed {
  readonly schema: Record<string, unknown>
  readonly answer: Record<string, unknown>
}

const economy = async (typed?: Typed) => {
  const files = 7
  const cwd = mkdtempSync(path.join(os.tmpdir(), "fibril-bench-economy-"))
  for (let i = 0; i < files; i++) {
    const line = `export const retry${i} = (attempt: number) => Math.min(30_000, 500 * 2 ** attempt) // policy\n`
    writeFileSync(path.join(cwd, `module-${i}.txt`), line.repeat(Math.floor(29_000 / line.length)))
  }
  const task = "Read module-0.txt to module-6.txt and report where the retry policy lives."
  const parent: Array<ReadonlyArray<Prompt.Message>> = []
  const child: Array<{ messages: ReadonlyArray<Prompt.Message>; toolBytes: number }> = []
  const script = ScriptedModel.layer({
    rules: [
      {
        match: { depth: 0 },
        respond: (c) =>
          c.turn === 0
            ? {
              tool_calls: [{
                name: "task",
                args: {
                  description: "find the retry policy",
                  prompt: task,
                  ...(typed === undefined ? {} : { output_schema: typed.schema })
                }
              }]
            }
            : { text: "done" }
      },
      {
        respond: (c) =>
          c.turn < files
            ? { tool_calls: [{ name: "read_file", args: { path: `module-${c.turn}.txt` } }] }
            : typed === undefined
            ? { text: fiveSections }
            : { tool_calls: [{ name: "final_answer", args: typed.answer }] }
      }
    ]
  })
  // Records each request as the provider would get it: the messages and the tool definitions.
  const recording = Layer.effect(
    LanguageModel.LanguageModel,
    Effect.map(Effect.service(LanguageModel.LanguageModel), (inner) =>
      ({
        ...inner,
        generateText: (options: { readonly prompt: Prompt.RawInput; readonly toolkit?: unknown }) => {
          const messages = Prompt.make(options.prompt).content
          const system = messages[0]?.role === "system" ? messages[0].content : ""
          const tools = (options.toolkit as { readonly tools?: Record<string, never> } | undefined)?.tools ?? {}
          if (/depth=0/.test(system)) parent.push(messages)
          else child.push({ messages, toolBytes: JSON.stringify(toTools(Object.values(tools))).length })
          return inner.generateText(options as never)
        }
      }) as unknown as LanguageModel.LanguageModel)
  ).pipe(Layer.provide(script))
  const layer = Fibril.layer({ cwd }).pipe(Layer.provide(recording), Layer.provide(NodeServices.layer))
  const program = Effect.gen(function*() {
    const session = yield* Session
    const root = yield* session.create({ role: "general", allowedTools: ["task", "read_file"] })
    return (yield* session.prompt(root.id, "bench")).text
  })
  const runtime = ManagedRuntime.make(layer)
  const answer = await runtime.runPromise(program as Effect.Effect<string, unknown, Session>)
  await runtime.dispose()
  rmSync(cwd, { recursive: true, force: true })
  const [first, second] = parent
  const firstChild = child[0]
  const lastChild = child.at(-1)
  if (answer !== "done" || first === undefined || second === undefined || firstChild === undefined || !lastChild) {
    throw new Error(
      `economy run did not check out: ${answer}, ${parent.length} parent and ${child.length} child requests`
    )
  }
  // What the child read: every tool result of its last request.
  const readBytes = lastChild.messages.filter((m) => m.role === "tool").reduce(
    (n, m) => n + JSON.stringify(m).length,
    0
  )
  const gained = encode(second).length - encode(first).length
  // A typed run must have handed the parent the answer's compact JSON, not sections.
  if (typed !== undefined && !encode(second).includes(`"output":${JSON.stringify(typed.answer)}`)) {
    throw new Error(`typed economy run: the parent did not receive the typed output: ${encode(second).slice(-600)}`)
  }
  const systemBytes = firstChild.messages.filter((m) => m.role === "system").reduce(
    (n, m) => n + JSON.stringify(m).length,
    0
  )
  // Where the gain goes: the parent's own `task` call, and the result envelope around the answer.
  const added = second.slice(first.length)
  const bytesOf = (role: string) =>
    added.filter((m) => m.role === role).reduce((n, m) => n + JSON.stringify(m).length, 0)
  // The same gain as an OpenAI request carries it (no Prompt bookkeeping keys), for comparison.
  const wire = async (messages: ReadonlyArray<Prompt.Message>) =>
    JSON.stringify(await Effect.runPromise(toMessages(Prompt.fromMessages(messages)))).length
  const wireGained = (await wire(second)) - (await wire(first))
  return {
    parent_wire_bytes_gained: wireGained,
    parent_wire_tokens_gained_est: Math.round(wireGained / 4),
    parent_call_bytes: bytesOf("assistant"),
    parent_result_bytes: bytesOf("tool"),
    ...(typed === undefined ? {} : { output_bytes: JSON.stringify(typed.answer).length }),
    child_read_bytes: readBytes,
    child_read_tokens_est: Math.round(readBytes / 4),
    parent_bytes_gained: gained,
    parent_tokens_gained_est: Math.round(gained / 4),
    child_system_bytes: systemBytes,
    child_tool_definition_bytes: firstChild.toolBytes,
    /** Beyond its task: its system prompt, the tool definitions and the result the parent carries. */
    overhead_tokens_est: Math.round((systemBytes + firstChild.toolBytes + gained) / 4)
  }
}

/** The same task with a small `output_schema` (issue 38's typed-result row): three fields. */
const typedRetry: Typed = {
  schema: {
    type: "object",
    properties: {
      file: { type: "string" },
      callers: { type: "integer" },
      restart_needed: { type: "boolean" }
    },
    required: ["file", "callers", "restart_needed"],
    additionalProperties: false
  },
  answer: { file: "module-0.txt", callers: 2, restart_needed: true }
}

const result = {
  workload: "context",
  ok: true,
  delegation: await delegation(),
  fork: await fork(3),
  fork_at_scale: await fork(50),
  economy: await economy(),
  typed_economy: await economy(typedRetry)
}
process.stdout.write(JSON.stringify(result) + "\n")
