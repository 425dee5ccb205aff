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

interface Runtime {
  readonly records: Map<string, AgentRecord>
  readonly events: PubSub.PubSub<AgentEvent>
  readonly semaphore: Semaphore.Semaphore | undefined
  next: number
}

const runtimes = new WeakMap<Script, Map<string, Runtime>>()

/** Built once per script and cap, as a runtime's layers would be. */
const runtimeFor = (s: Script, cap: number | null): Runtime => {
  const key = String(cap)
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

const toolResults = (messages: ReadonlyArray<Message>): Array<string> => {
  const out: Array<string> = []
  for (const m of messages) if (m.role === "tool") out.push(m.result)
  return out
}

/**
 * One agent's loop: model call, tool calls (concurrently), append, until the model answers
 * with text. `tool` runs one call of this agent.
 */
const agentLoop = (
  rt: Runtime,
  record: AgentRecord,
  model: (messages: ReadonlyArray<Message>) => ModelAnswer,
  tool: (call: Call) => Effect.Effect<string>,
  prompt: string
): Effect.Effect<string> =>
  Effect.gen(function*() {
    const messages: Array<Message> = [{ role: "user", text: prompt }]
    record.status = "running"
    yield* publish(rt, record, "started")
    for (;;) {
      const answer = yield* Effect.sync(() => model(messages))
      record.steps++
      yield* publish(rt, record, "step")
      if ("text" in answer) {
        messages.push({ role: "assistant", text: answer.text })
        return answer.text
      }
      messages.push({ role: "assistant", calls: answer.calls })
      const results = yield* Effect.forEach(answer.calls, (call) =>
        Effect.gen(function*() {
          record.toolCalls++
          record.lastTool = call.name
          yield* publish(rt, record, "tool_call")
          return { role: "tool" as const, id: call.id, result: yield* tool(call) }
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

const child = (rt: Runtime, s: Script, parentId: string, prompt: string): Effect.Effect<string> => {
  const run = runAgent(rt, parentId, (record) =>
    agentLoop(
      rt,
      record,
      (messages) => s.childModel({ prompt, toolResults: toolResults(messages) }),
      (call) => Effect.promise((signal) => s.lookup(call.args as { key: string }, signal)),
      prompt
    ))
  return rt.semaphore === undefined ? run : rt.semaphore.withPermits(1)(run)
}

const parentRun = (s: Script, cap: number | null) =>
  Effect.suspend(() => {
    const rt = runtimeFor(s, cap)
    return Effect.map(
      runAgent(rt, undefined, (record) =>
        agentLoop(
          rt,
          record,
          (messages) => s.parentModel({ toolResults: toolResults(messages) }),
          // The harness's `subagent` tool: a child agent whose answer is the tool result.
          (call) => child(rt, s, record.id, String(call.args["prompt"])),
          "bench"
        )),
      (final) => ({ final })
    )
  })

export async function runW1({ cap, s }: { K: number; M: number; cap: number | null; s: Script }) {
  return Effect.runPromise(parentRun(s, cap))
}

export async function runW2({ signal, s }: { K: number; M: number; signal: AbortSignal; s: Script }) {
  return Effect.runPromise(parentRun(s, null), { signal })
}

export async function runW3({ s }: { K: number; M: number; s: Script }) {
  return Effect.runPromise(parentRun(s, null))
}

/** Releases what was built for `s`. */
export async function dispose(s: Script) {
  for (const rt of runtimes.get(s)?.values() ?? []) {
    rt.records.clear()
    await Effect.runPromise(PubSub.shutdown(rt.events))
  }
  runtimes.delete(s)
}
