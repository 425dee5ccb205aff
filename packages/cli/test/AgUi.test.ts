// AgUi.translator: for any tree of agents and any interleaving of their events, what it emits
// is a stream `@ag-ui/client`'s own checks (verifyEvents) accept, with one start and one end
// per sub-agent, the run's start first and its end last.
import { verifyEvents } from "@ag-ui/client"
import type { AGUIEvent } from "@ag-ui/core"
import { assert, describe, it } from "@effect/vitest"
import type { AgentEvent, EventType } from "@fibril/core/AgentEvents"
import { Arbitrary, Schema } from "effect"
import { from, lastValueFrom, type OperatorFunction, toArray } from "rxjs"
import * as AgUi from "../src/AgUi.ts"

const Child = Schema.Struct({
  /** Its parent: this index modulo the agents before it (0 is the root). */
  parent: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 20 })),
  tools: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 3 })),
  texts: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 3 })),
  end: Schema.Literals(["completed", "failed", "cancelled", "interrupted"]),
  detached: Schema.Boolean
})
const Case = Schema.Struct({
  children: Schema.Array(Child).check(Schema.isMaxLength(6)),
  rootEnd: Schema.Literals(["completed", "failed", "cancelled"]),
  /** Which runnable agent moves next, each step (wrapping around). */
  schedule: Schema.Array(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 50 }))).check(
    Schema.isMinLength(1),
    Schema.isMaxLength(40)
  )
})

interface Agent {
  readonly id: string
  readonly parent: number | undefined
  readonly depth: number
  readonly detached: boolean
  /** Its own events, in order; its end last. */
  readonly script: Array<EventType>
  at: number
}

const scriptOf = (tools: number, texts: number, end: EventType): Array<EventType> => [
  "spawned",
  "started",
  "step",
  ...Array.from({ length: tools }, (): Array<EventType> => ["tool_call", "tool_result"]).flat(),
  "step",
  ...Array.from({ length: texts }, (): EventType => "text"),
  end
]

/** The events of one interleaving: a child is spawned once its parent started; a parent ends after its attached children. */
const interleave = (c: typeof Case.Type): Array<AgentEvent> => {
  const agents: Array<Agent> = [{
    id: "root",
    parent: undefined,
    depth: 0,
    detached: false,
    script: scriptOf(1, 1, c.rootEnd),
    at: 0
  }]
  c.children.forEach((child, i) => {
    const parent = child.parent % agents.length
    agents.push({
      id: `child${i}`,
      parent,
      depth: agents[parent]!.depth + 1,
      detached: child.detached,
      script: scriptOf(child.tools, child.texts, child.end),
      at: 0
    })
  })
  const done = (agent: Agent) => agent.at >= agent.script.length
  const runnable = (agent: Agent) => {
    if (done(agent)) return false
    if (agent.parent !== undefined && agent.at === 0 && agents[agent.parent]!.at < 2) return false
    const last = agent.at === agent.script.length - 1
    return !last || agents.every((other) => other.parent !== agents.indexOf(agent) || other.detached || done(other))
  }
  const out: Array<AgentEvent> = []
  let tick = 0
  while (true) {
    const ready = agents.filter(runnable)
    if (ready.length === 0) break
    const agent = ready[c.schedule[tick % c.schedule.length]! % ready.length]!
    const type = agent.script[agent.at++]!
    out.push({
      type,
      at: tick++,
      agent: {
        agentId: agent.id,
        parentId: agent.parent === undefined ? undefined : agents[agent.parent]!.id,
        depth: agent.depth,
        role: "explore",
        model: "scripted",
        description: agent.id,
        step: 0,
        toolCalls: 0,
        lastTool: undefined,
        usage: { input: 0, output: 0, cached: 0 }
      },
      ...(type === "tool_call" || type === "tool_result" ? { tool: "list_dir" } : {}),
      ...(type === "text" ? { text: "some text" } : {})
    })
  }
  return out
}

describe("AgUi.translator", () => {
  it.prop(
    "any tree, any interleaving: @ag-ui/client's checks hold; one start and one end per sub-agent; run start first, run end last",
    [Arbitrary.schema(Case)],
    async ([c]) => {
      const translate = AgUi.translator()
      const events = interleave(c).flatMap((event) => [...translate(event)])
      // verifyEvents throws (errors the observable) on the first event out of order.
      // @ag-ui/client has its own copy of rxjs (7.8.1): the same operator, typed by the other copy.
      const verify = verifyEvents() as unknown as OperatorFunction<AGUIEvent, AGUIEvent>
      const checked = await lastValueFrom(from(events).pipe(verify, toArray()))
      assert.strictEqual(checked.length, events.length)
      assert.strictEqual(events[0]!.type, "RUN_STARTED")
      assert.isTrue(AgUi.isEnd(events.at(-1)!))
      const starts = events.filter((e) => e.type === "SUBAGENT_STARTED")
      const ends = events.filter((e) => e.type === "SUBAGENT_FINISHED" || e.type === "SUBAGENT_ERROR")
      assert.strictEqual(starts.length, ends.length)
      assert.strictEqual(new Set(starts.map((e) => "subagentRunId" in e ? e.subagentRunId : "")).size, starts.length)
    },
    { arbitrary: { runs: 200 } }
  )
})
