/**
 * The Effect floor of shared/BENCH.md: a minimal Effect 4.1 runtime with the structure Fibril
 * needs and nothing more, on the same script. Measured in the same run as Fibril and the
 * plain-Promise floor so that every report gives Fibril / Effect-floor ratios: what Fibril
 * costs beyond the Effect machinery its design requires.
 *
 * - a fiber per sub-agent, forked in its parent's fiber tree (the parent's turn runs its
 *   sub-agent calls with `Effect.forEach` unbounded): interrupting the parent interrupts every
 *   child and waits for it;
 * - a `Semaphore` cap (`withPermits(1)` around each child run, `cap` permits);
 * - a record per agent in a `Map`, updated at spawn, start, each step and tool call, and the end;
 * - lifecycle events (spawned, started, step, tool_call, terminal) on an unbounded `PubSub`;
 * - an Effect agent loop: the model call is an Effect, each tool call an Effect (`lookup` is
 *   `Effect.promise` with the fiber's abort signal), messages appended to an array.
 *
 * Implements the adapter interface of BENCH.md, like peer-adapter.ts and floor.ts.
 */
import * as LanguageModel from "effect/ai/LanguageModel"
import * as Prompt from "effect/ai/Prompt"
import * as Response from "effect/ai/Response"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as PubSub from "effect/PubSub"
import * as Semaphore from "effect/Semaphore"
import type { Call, ModelAnswer, Script } from "./script.ts"

export const meta = {
  name: "effect-floor",
  packages: [["effect"]],
  capHow: "a Semaphore with cap permits around each child's run",
  abortHow: "the AbortSignal given to Effect.runPromise interrupts the parent's fiber and so every child"
}

type Status = "pending" | "running" | "completed" | "failed" | "interrupted"

interface AgentRecord {
  readonly id: string
  readonly parentId: string | undefined
  status: Status
  steps: number
  toolCalls: number
  lastTool: string | undefined
}

type EventType = "spawned" | "started" | "step" | "tool_call" | Status

interface AgentEvent {
  readonly type: EventType
  readonly agentId: string
  readonly step: number
  readonly toolCalls: number
}

type Message =
  | { readonly role: "user" | "assistant"; readonly text: string }
  | { readonly role: "assistant"; readonly calls: ReadonlyArray<Call> }
  | { readonly role: "tool"; readonly id: string; readonly result: string }

/**
 * How a conversation is held and handed to the model. `plain` is `BENCH.md`'s Effect floor:
 * messages as plain objects, the script called on the tool-result strings. `ai` is its row
 * "with `effect/ai` Prompt/Response values per step" (bench/effect-ai-floor.ts): the history is
 * `Prompt.Message` values, each step hands the model a `Prompt` and gets a
 * `GenerateTextResponse` of `Response` parts, and the assistant's turn is appended as a
 * `Prompt` message, as any runtime on the `effect/ai` `LanguageModel` port must do.
 */
export interface Dialect<M> {
  readonly name: "plain" | "ai"
  readonly start: (prompt: string) => Array<M>
  /** One model step: the answer, with the assistant's message appended to `messages`. */
  readonly step: (messages: Array<M>, model: (toolResults: ReadonlyArray<string>) => ModelAnswer) => ModelAnswer
  readonly result: (call: Call, result: string) => M
}

const plain: Dialect<Message> = {
  name: "plain",
  start: (prompt) => [{ role: "user", text: prompt }],
  step: (messages, model) => {
    const toolResults: Array<string> = []
    for (const m of messages) if (m.role === "tool") toolResults.push(m.result)
    const answer = model(toolResults)
    messages.push(
      "text" in answer ? { role: "assistant", text: answer.text } : { role: "assistant", calls: answer.calls }
    )
    return answer
  },
  result: (call, result) => ({ role: "tool", id: call.id, result })
}

const usage = new Response.Usage({
  inputTokens: { total: 0, uncached: undefined, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 0, text: undefined, reasoning: undefined }
})

export const ai: Dialect<Prompt.Message> = {
  name: "ai",
  start: (prompt) => [Prompt.makeMessage("user", { content: [Prompt.makePart("text", { text: prompt })] })],
  step: (messages, model) => {
    // The request as a provider receives it, read back into what the script decides from.
    const request = Prompt.fromMessages(messages)
    const toolResults: Array<string> = []
    for (const message of request.content) {
      if (message.role !== "tool") continue
      for (const part of message.content) if (part.type === "tool-result") toolResults.push(part.result as string)
    }
    const answer = model(toolResults)
    const parts: Array<unknown> = "text" in answer
      ? [Response.makePart("text", { text: answer.text })]
      : answer.calls.map((call) =>
        Response.makePart("tool-call", { id: call.id, name: call.name, params: call.args, providerExecuted: false })
      )
    parts.push(
      Response.makePart("finish", { reason: "text" in answer ? "stop" : "tool-calls", usage, response: undefined })
    )
    const response = new LanguageModel.GenerateTextResponse(parts as Array<Response.Part<Record<string, never>>>)
    // The turn read back from the response and appended to the history.
    const calls = response.toolCalls
    if (calls.length === 0) {
      const text = response.text
      messages.push(Prompt.makeMessage("assistant", { content: [Prompt.makePart("text", { text })] }))
      return { text }
    }
    messages.push(Prompt.makeMessage("assistant", {
      content: calls.map((call) =>
        Prompt.makePart("tool-call", {
          id: call.id,
          name: call.name,
          params: call.params,
          providerExecuted: false
        })
      )
    }))
    return {
      calls: calls.map((call) => ({ id: call.id, name: call.name, args: call.params as Record<string, unknown> }))
    }
  },
  result: (call, result) =>
    Prompt.makeMessage("tool", {
      content: [Prompt.makePart("tool-result", {
        id: call.id,
        name: call.name,
        isFailure: false,
        result,
        providerExecuted: false
      })]
    })
}

interface Runtime {
  readonly records: Map<string, AgentRecord>
  readonly events: PubSub.PubSub<AgentEvent>
  readonly semaphore: Semaphore.Semaphore | undefined
  next: number
}

const runtimes = new WeakMap<Script, Map<string, Runtime>>()

/** Built once per script, dialect and cap, as a runtime's layers would be. */
const runtimeFor = (dialect: "plain" | "ai", s: Script, cap: number | null): Runtime => {
  const key = `${dialect}:${cap}`
  let byCap = runtimes.get(s)
  if (byCap === undefined) runtimes.set(s, byCap = new Map())
  let runtime = byCap.get(key)
  if (runtime === undefined) {
    runtime = {
      records: new Map(),
      events: Effect.runSync(PubSub.unbounded<AgentEvent>()),
      semaphore: cap === null ? undefined : Semaphore.makeUnsafe(cap),
      next: 0
    }
    byCap.set(key, runtime)
  }
  return runtime
}

const publish = (rt: Runtime, record: AgentRecord, type: EventType) =>
  PubSub.publish(rt.events, { type, agentId: record.id, step: record.steps, toolCalls: record.toolCalls })

/**
 * One agent's loop: model call, tool calls (concurrently), append, until the model answers
 * with text. `tool` runs one call of this agent.
 */
const agentLoop = <M>(
  dialect: Dialect<M>,
  rt: Runtime,
  record: AgentRecord,
  model: (toolResults: ReadonlyArray<string>) => ModelAnswer,
  tool: (call: Call) => Effect.Effect<string>,
  prompt: string
): Effect.Effect<string> =>
  Effect.gen(function*() {
    const messages = dialect.start(prompt)
    record.status = "running"
    yield* publish(rt, record, "started")
    for (;;) {
      const answer = yield* Effect.sync(() => dialect.step(messages, model))
      record.steps++
      yield* publish(rt, record, "step")
      if ("text" in answer) return answer.text
      const results = yield* Effect.forEach(answer.calls, (call) =>
        Effect.gen(function*() {
          record.toolCalls++
          record.lastTool = call.name
          yield* publish(rt, record, "tool_call")
          return dialect.result(call, yield* tool(call))
        }), { concurrency: "unbounded" })
      for (const result of results) messages.push(result)
    }
  })

/** Runs an agent with its record and terminal event; the record ends with how the run ended. */
const runAgent = (
  rt: Runtime,
  parentId: string | undefined,
  body: (record: AgentRecord) => Effect.Effect<string>
): Effect.Effect<string> =>
  Effect.suspend(() => {
    const record: AgentRecord = {
      id: `agent-${++rt.next}`,
      parentId,
      status: "pending",
      steps: 0,
      toolCalls: 0,
      lastTool: undefined
    }
    rt.records.set(record.id, record)
    return Effect.andThen(
      publish(rt, record, "spawned"),
      Effect.onExit(body(record), (exit) => {
        record.status = Exit.isSuccess(exit) ? "completed" : Exit.hasInterrupts(exit) ? "interrupted" : "failed"
        return publish(rt, record, record.status)
      })
    )
  })

const child = <M>(
  dialect: Dialect<M>,
  rt: Runtime,
  s: Script,
  parentId: string,
  prompt: string
): Effect.Effect<string> => {
  const run = runAgent(rt, parentId, (record) =>
    agentLoop(
      dialect,
      rt,
      record,
      (toolResults) => s.childModel({ prompt, toolResults }),
      (call) => Effect.promise((signal) => s.lookup(call.args as { key: string }, signal)),
      prompt
    ))
  return rt.semaphore === undefined ? run : rt.semaphore.withPermits(1)(run)
}

const parentRun = <M>(dialect: Dialect<M>, s: Script, cap: number | null) =>
  Effect.suspend(() => {
    const rt = runtimeFor(dialect.name, s, cap)
    return Effect.map(
      runAgent(rt, undefined, (record) =>
        agentLoop(
          dialect,
          rt,
          record,
          (toolResults) => s.parentModel({ toolResults }),
          // The harness's `subagent` tool: a child agent whose answer is the tool result.
          (call) => child(dialect, rt, s, record.id, String(call.args["prompt"])),
          "bench"
        )),
      (final) => ({ final })
    )
  })

/** The adapter interface of BENCH.md over one dialect. */
export const adapter = <M>(dialect: Dialect<M>) => ({
  runW1: async ({ cap, s }: { K: number; M: number; cap: number | null; s: Script }) =>
    Effect.runPromise(parentRun(dialect, s, cap)),
  runW2: async ({ signal, s }: { K: number; M: number; signal: AbortSignal; s: Script }) =>
    Effect.runPromise(parentRun(dialect, s, null), { signal }),
  runW3: async ({ s }: { K: number; M: number; s: Script }) => Effect.runPromise(parentRun(dialect, s, null)),
  /** Releases what was built for `s`. */
  dispose: async (s: Script) => {
    for (const rt of runtimes.get(s)?.values() ?? []) {
      rt.records.clear()
      await Effect.runPromise(PubSub.shutdown(rt.events))
    }
    runtimes.delete(s)
  }
})

export const { dispose, runW1, runW2, runW3 } = adapter(plain)
