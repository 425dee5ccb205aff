// An MCP server's `notifications/progress` during a call become `tool_progress` events of the
// calling agent. Against the real @modelcontextprotocol/server-everything, whose long-running
// tool reports each of its steps when the call carries a progress token (at its smallest
// duration: two steps of 50 ms, the server's own timers).
import { assert, describe, it } from "@effect/vitest"
import { Effect, PubSub } from "effect"
import { AgentEvents } from "../src/AgentEvents.ts"
import { Session } from "../src/Session.ts"
import { everything } from "./everything.ts"
import { provideNode, setup } from "./support.ts"

const server = everything("everything")

const tool = "mcp__everything__trigger-long-running-operation"

describe("MCP progress", () => {
  it.live(
    "each progress notification of a call is a tool_progress event of its agent, between its call and result",
    () =>
      Effect.gen(function*() {
        const { get } = yield* setup(
          {
            rules: [{
              respond: (conversation) =>
                conversation.turn === 0
                  ? { tool_calls: [{ name: tool, args: { duration: 0.1, steps: 2 } }] }
                  : { text: conversation.toolResults.map((result) => String(result.result)).join("") }
            }]
          },
          {},
          { mcpServers: [server] }
        )
        const session = get(Session)
        const subscription = yield* get(AgentEvents).subscribe
        const agent = yield* session.create()
        const answer = yield* session.prompt(agent.id, "go")
        assert.include(answer.text, "Long running operation completed")
        const events = (yield* PubSub.takeAll(subscription)).filter((event) => event.tool === tool)
        assert.deepStrictEqual(
          events.map((event) => [event.type, event.agent.agentId, event.progress]),
          [
            ["tool_call", agent.id, undefined],
            ["tool_progress", agent.id, { progress: 1, total: 2 }],
            ["tool_progress", agent.id, { progress: 2, total: 2 }],
            ["tool_result", agent.id, undefined]
          ]
        )
      }).pipe(provideNode),
    30_000
  )
})
