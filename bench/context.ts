/**
 * The figures beyond the peers' (one fresh process, `node bench/context.ts`, one JSON line):
 *
 * - delegation: on the W1 script (K = 10, M = 3), what one delegated task adds to the parent's
 *   next request (its `task` call and the structured result) against the child's whole
 *   conversation (every message of its last request, plus its final answer) — what the
 *   parent would carry if it had done the work itself or received the transcript;
 * - fork_context: the share of a forked child's first request that is a byte-identical
 *   prefix of the parent's request (what a provider's prefix cache can reuse), after the
 *   parent has done M = 3 lookups.
 *
 * Sizes are bytes of the JSON-encoded messages; tokens are estimated as bytes / 4 (the bench
 * model reports no usage, and no tokenizer is involved).
 */
import { Session } from "@fibril/core/Session"
import { ScriptedModel } from "@fibril/testkit"
import * as LanguageModel from "effect/ai/LanguageModel"
import * as Prompt from "effect/ai/Prompt"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ManagedRuntime from "effect/ManagedRuntime"
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
const fork = async () => {
  const M = 3
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
    prefix_share: prefix / child.length
  }
}

const result = { workload: "context", ok: true, delegation: await delegation(), fork: await fork() }
process.stdout.write(JSON.stringify(result) + "\n")
