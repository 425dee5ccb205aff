/**
 * LabBugs — deliberately broken runtimes (`Simulation.Tamper`), one per built-in invariant, to
 * show that each invariant catches what it claims to: `Lab.check({ tamper: LabBugs.capPlusOne })`
 * must fail on `cap`, shrink, and replay from its seed.
 *
 * Where the bug sits matters when reading a result: `capPlusOne`, `stepBudgetPlusTwo`,
 * `leakModelCalls`, `resultCarriesTranscript` and `storeDropsToolCalls` break a real part of the
 * runtime (the manager's or session's options, the model layer, the wait tool agents call, the
 * store); `duplicateTerminalEvents` and `cancelSkipsGrandchildren` break the events
 * layer (the lab sees agents through their events, so an end that is never reported is
 * indistinguishable from one that never happened); `widenChildTools` and
 * `resumeRewritesTranscript` break what the simulation observes (the tools offered to
 * sub-agents; the transcript read back after a resume).
 */
import { AgentTools, SubAgentManager, ToolRegistry } from "@fibril/core"
import { type AgentEvent, withEmit } from "@fibril/core/AgentEvents"
import * as Effect from "effect/Effect"
import type { Tamper } from "./SimulationTrace.ts"

const isEnd = (event: AgentEvent) =>
  event.type === "completed" || event.type === "failed" || event.type === "cancelled" ||
  event.type === "interrupted"

/** The manager admits one more sub-agent than its cap. */
export const capPlusOne: Tamper = {
  name: "cap+1",
  subagents: (config) => ({ maxConcurrent: config.cap + 1 })
}

/** Reject admission refuses spawns one agent before the cap (the manager's cap is one lower). */
export const rejectBelowCap: Tamper = {
  name: "reject-below-cap",
  subagents: (config) => ({ maxConcurrent: Math.max(1, config.cap - 1), admission: "reject" })
}

/** Every sub-agent's end is published twice. */
export const duplicateTerminalEvents: Tamper = {
  name: "duplicate-terminal",
  events: (events) =>
    withEmit(events, (event) => {
      events.emit(event)
      if (event.agent.depth > 0 && isEnd(event)) events.emit(event)
    })
}

/** A cancellation never reaches agents at depth 2 or deeper: their ends are lost. */
export const cancelSkipsGrandchildren: Tamper = {
  name: "cancel-skips-grandchildren",
  events: (events) =>
    withEmit(events, (event) => {
      if (event.agent.depth < 2 || (event.type !== "cancelled" && event.type !== "interrupted")) events.emit(event)
    })
}

/** Model calls are answered from a fiber nobody owns: interrupting the caller leaves it running. */
export const leakModelCalls: Tamper = { name: "leak-model-calls", leakModelCalls: true }

/** Sub-agents are offered a tool their parent does not have. */
export const widenChildTools: Tamper = { name: "widen-child-tools", childTools: ["lab_escalate"] }

/** A broken `agent_wait`: the results it returns carry each child's transcript. */
const leakyWait = ToolRegistry.define({
  ...AgentTools.wait,
  name: "agent_wait_leaky",
  handler: (params, context) =>
    Effect.gen(function*() {
      const result = (yield* AgentTools.wait.handler(params, context)) as {
        readonly completed: ReadonlyArray<{ readonly agent_id: string; readonly summary: string }>
      }
      const manager = yield* SubAgentManager.SubAgentManager
      const completed = yield* Effect.forEach(result.completed, (agent) =>
        Effect.map(
          Effect.option(manager.readTranscript(agent.agent_id, {})),
          (page) => ({
            ...agent,
            summary: `${agent.summary}\n${JSON.stringify(page._tag === "Some" ? page.value.messages : [])}`
          })
        ))
      return { ...result, completed }
    })
})

/** Agents wait for their children with a broken `agent_wait` that hands over the children's transcripts. */
export const resultCarriesTranscript: Tamper = {
  name: "result-carries-transcript",
  tools: [leakyWait],
  waitTool: "agent_wait_leaky"
}

/** The store loses a record's tool-call count. */
export const storeDropsToolCalls: Tamper = {
  name: "store-drops-tool-calls",
  store: (store) => ({ ...store, put: (record) => store.put({ ...record, tool_calls: 0 }) })
}

/** After a resume, an agent's transcript is read without its first message (history rewritten). */
export const resumeRewritesTranscript: Tamper = (() => {
  const resumed = new Set<string>()
  return {
    name: "resume-rewrites-transcript",
    manager: (manager) => ({
      ...manager,
      resume: (caller, id, message) =>
        Effect.tap(manager.resume(caller, id, message), () => Effect.sync(() => void resumed.add(id))),
      readTranscript: (handle, page) =>
        Effect.map(
          manager.readTranscript(handle, page),
          (read) => (resumed.has(handle) ? { ...read, messages: read.messages.slice(1) } : read)
        )
    })
  }
})()

/** Sub-agents get two more model steps than their budget. */
export const stepBudgetPlusTwo: Tamper = {
  name: "step-budget+2",
  session: (config) => ({ childMaxSteps: config.maxSteps + 2 })
}

/** A model call is given an hour instead of the lab's 60 s: a hung child outlives the liveness bound. */
export const noRequestTimeout: Tamper = {
  name: "no-request-timeout",
  session: () => ({ apiTimeoutSecs: 3600 })
}

/** Every tool call of a sub-agent's work runs twice (seen, as the lab sees everything, through its event). */
export const toolCallsRunTwice: Tamper = {
  name: "tool-calls-run-twice",
  events: (events) =>
    withEmit(events, (event) => {
      events.emit(event)
      if (event.agent.depth > 0 && event.type === "tool_call" && event.tool === "lab_probe") events.emit(event)
    })
}

/** Every planted bug with the invariant that must catch it. */
export const all: ReadonlyArray<{ readonly tamper: Tamper; readonly invariant: string }> = [
  { tamper: capPlusOne, invariant: "cap" },
  { tamper: rejectBelowCap, invariant: "admission" },
  { tamper: duplicateTerminalEvents, invariant: "terminal" },
  { tamper: cancelSkipsGrandchildren, invariant: "cancel-cascade" },
  { tamper: leakModelCalls, invariant: "nothing-left" },
  { tamper: widenChildTools, invariant: "permissions" },
  { tamper: resultCarriesTranscript, invariant: "result-once" },
  { tamper: storeDropsToolCalls, invariant: "round-trip" },
  { tamper: stepBudgetPlusTwo, invariant: "budgets" },
  { tamper: resumeRewritesTranscript, invariant: "resume-extends" },
  { tamper: noRequestTimeout, invariant: "liveness" },
  { tamper: toolCallsRunTwice, invariant: "no-rerun" }
]
