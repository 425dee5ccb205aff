/**
 * Fibril's AgentEvents as AG-UI 1.0 events (`@ag-ui/core` types): what `/agui` of
 * `fibril run --ui` streams and `fibril run --agui` prints, one JSON object per line.
 *
 * The run's root is the AG-UI run (RUN_STARTED … RUN_FINISHED, or RUN_ERROR); every other agent
 * is a sub-agent segment (SUBAGENT_STARTED … SUBAGENT_FINISHED, or SUBAGENT_ERROR), its id the
 * agent id, nested by `parentSubagentRunId`. An agent's streamed answer is a text message, its
 * tool calls are TOOL_CALL_START/END with a TOOL_CALL_RESULT; each carries the `subagentRunId`
 * of the agent it belongs to. The events carry no tool arguments or results (AgentEvents do
 * not): the transcript has them (`fibril agents transcript`).
 */
import { type AGUIEvent, EventType } from "@ag-ui/core"
import { type AgentEvent, AgentEvents, isTerminal } from "@fibril/core/AgentEvents"
import { runId } from "@fibril/core/SubAgentRecord"
import * as Effect from "effect/Effect"
import * as PubSub from "effect/PubSub"
import * as Stream from "effect/Stream"

/** Events kept for a client that connects late: it sees the run from its start. */
export const replayLimit = 100_000

/**
 * A stateful translation: each AgentEvent of one run (the first depth-0 agent it sees is the
 * root) to the AG-UI events it means, in order, so that `@ag-ui/client`'s checks hold.
 */
export const translator = () => {
  let root: { readonly id: string; readonly runId: string } | undefined
  let ended = false
  const active = new Set<string>()
  const openText = new Map<string, string>()
  const openCalls = new Map<string, Array<string>>()
  let sequence = 0
  const next = (prefix: string) => `${prefix}_${++sequence}`

  const scope = (agentId: string) => agentId === root?.id ? {} : { subagentRunId: agentId }
  const closeText = (agentId: string, at: number): Array<AGUIEvent> => {
    const messageId = openText.get(agentId)
    if (messageId === undefined) return []
    openText.delete(agentId)
    return [{ type: EventType.TEXT_MESSAGE_END, messageId, timestamp: at, ...scope(agentId) }]
  }

  return (event: AgentEvent): ReadonlyArray<AGUIEvent> => {
    const { agent, at } = event
    const id = agent.agentId
    if (ended) return []
    if (root === undefined) {
      if (agent.depth !== 0) return []
      root = { id, runId: runId(id, 1) }
      return [{ type: EventType.RUN_STARTED, threadId: id, runId: root.runId, timestamp: at }]
    }
    const known = id === root.id || active.has(id)
    switch (event.type) {
      case "spawned":
      case "started": {
        if (known) return []
        active.add(id)
        const parent = agent.parentId !== undefined && active.has(agent.parentId) ? agent.parentId : undefined
        return [{
          type: EventType.SUBAGENT_STARTED,
          subagentRunId: id,
          name: agent.role,
          ...(agent.description === undefined ? {} : { description: agent.description }),
          ...(parent === undefined ? {} : { parentSubagentRunId: parent }),
          timestamp: at
        }]
      }
      case "text": {
        if (!known || event.text === undefined || event.text === "") return []
        const out: Array<AGUIEvent> = []
        let messageId = openText.get(id)
        if (messageId === undefined) {
          messageId = next("msg")
          openText.set(id, messageId)
          out.push({ type: EventType.TEXT_MESSAGE_START, messageId, role: "assistant", timestamp: at, ...scope(id) })
        }
        out.push({ type: EventType.TEXT_MESSAGE_CONTENT, messageId, delta: event.text, timestamp: at, ...scope(id) })
        return out
      }
      case "step":
      case "retry":
        return known ? closeText(id, at) : []
      case "tool_call": {
        if (!known) return []
        const toolCallId = next("call")
        const key = `${id}\u0000${event.tool ?? ""}`
        openCalls.set(key, [...(openCalls.get(key) ?? []), toolCallId])
        return [
          ...closeText(id, at),
          {
            type: EventType.TOOL_CALL_START,
            toolCallId,
            toolCallName: event.tool ?? "tool",
            timestamp: at,
            ...scope(id)
          },
          { type: EventType.TOOL_CALL_END, toolCallId, timestamp: at, ...scope(id) }
        ]
      }
      case "tool_result": {
        const key = `${id}\u0000${event.tool ?? ""}`
        const [toolCallId, ...rest] = openCalls.get(key) ?? []
        if (!known || toolCallId === undefined) return []
        openCalls.set(key, rest)
        return [{
          type: EventType.TOOL_CALL_RESULT,
          messageId: `${toolCallId}_result`,
          toolCallId,
          content: event.isFailure === true ? "failed" : "done",
          timestamp: at,
          ...scope(id)
        }]
      }
      default: {
        if (!isTerminal(event.type) || !known) return []
        const reason = event.reason ?? event.type
        if (id !== root.id) {
          active.delete(id)
          return [
            ...closeText(id, at),
            event.type === "completed"
              ? { type: EventType.SUBAGENT_FINISHED, subagentRunId: id, outcome: { type: "success" }, timestamp: at }
              : { type: EventType.SUBAGENT_ERROR, subagentRunId: id, message: reason, code: event.type, timestamp: at }
          ]
        }
        ended = true
        // Detached agents still running when the root ends: their segments end here, said so.
        const open = [...active].reverse().flatMap((other): Array<AGUIEvent> => [
          ...closeText(other, at),
          {
            type: EventType.SUBAGENT_ERROR,
            subagentRunId: other,
            message: "still running when the run's root agent ended",
            code: "detached",
            timestamp: at
          }
        ])
        active.clear()
        const end: AGUIEvent = event.type === "completed"
          ? {
            type: EventType.RUN_FINISHED,
            threadId: root.id,
            runId: root.runId,
            outcome: { type: "success" },
            timestamp: at
          }
          : event.type === "cancelled" || event.type === "interrupted"
          ? {
            type: EventType.RUN_FINISHED,
            threadId: root.id,
            runId: root.runId,
            outcome: { type: "cancelled" },
            timestamp: at
          }
          : { type: EventType.RUN_ERROR, message: reason, code: event.type, timestamp: at }
        return [...closeText(id, at), ...open, end]
      }
    }
  }
}

/** Whether an AG-UI event ends the run's stream. */
export const isEnd = (event: AGUIEvent): boolean =>
  event.type === EventType.RUN_FINISHED || event.type === EventType.RUN_ERROR

/**
 * This process's run as AG-UI events, from now on (call it before the root starts): a stream
 * every client can read from the run's start (replayed) to its end.
 */
export const record = Effect.gen(function*() {
  const events = yield* AgentEvents
  const subscription = yield* events.subscribe
  const hub = yield* PubSub.unbounded<AGUIEvent>({ replay: replayLimit })
  const translate = translator()
  yield* Stream.fromSubscription(subscription).pipe(
    Stream.flatMap((event) => Stream.fromIterable(translate(event))),
    Stream.takeUntil(isEnd),
    Stream.runForEach((event) => PubSub.publish(hub, event)),
    Effect.forkScoped
  )
  return Stream.fromPubSub(hub).pipe(Stream.takeUntil(isEnd))
})
