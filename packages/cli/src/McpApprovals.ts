/**
 * McpApprovals — under `fibril mcp`, a question of an `ask` rule (Approvals) raised anywhere in
 * the agent tree of a plain `task` call goes to that call's client as an MCP elicitation, when
 * the client declared `elicitation` (revisions 2025-06-18 and later, initialized); its answer
 * decides the question.
 *
 * How: while such a call runs, its agent is registered here (`Registry`); the process's
 * approval policy (`policy`) leaves a question under a registered agent to a person (it waits)
 * and decides every other one as `--approve` says (by default a denial that says what needs
 * approval and how to grant it, so a client without elicitation never hangs). The call's
 * watcher reads the process's questions, elicits each one of its tree, and decides it. A
 * declined or cancelled elicitation is a denial.
 */
import { type AgentEvent, AgentEvents, isTerminal } from "@fibril/core/AgentEvents"
import * as Approvals from "@fibril/core/Approvals"
import type { AgentView } from "@fibril/core/SubAgentManager"
import * as McpSchema from "effect/ai/McpSchema"
import * as McpServer from "effect/ai/McpServer"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as PubSub from "effect/PubSub"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"

/** The agents whose calls' clients answer their tree's questions (counted: a call may be retried). */
export class Registry extends Context.Service<Registry, Map<string, number>>()("@fibril/cli/McpApprovals/Registry") {}

export const covers = (registry: Map<string, number>, path: ReadonlyArray<string>): boolean =>
  path.some((id) => registry.has(id))

/** `--approve`'s policy, except for questions a client will be asked (they wait for it). */
export const policy = (
  registry: Map<string, number>,
  mode: Approvals.ApproveMode
): Approvals.Options["policy"] => {
  const base = Approvals.policyOf(mode)
  return (question) => covers(registry, question.path) ? undefined : base?.(question)
}

/** The form a person fills in. */
export const Decision = Schema.Struct({
  decision: Schema.Literals(["allow", "deny"]).annotate({ description: "allow runs the call; deny refuses it" }),
  reason: Schema.optionalKey(
    Schema.String.annotate({ description: "Why (a deny's reason is what the agent's model reads)" })
  )
})

export const messageOf = (question: Approvals.Question): string =>
  `${question.kind === "fan_out" ? "Approve a fan-out" : `Allow ${question.tool}`} for ${question.role} agent ` +
  `${question.agentId} (depth ${question.depth}, path ${question.path.join(" > ")})? Why asked: ${question.reason}. ` +
  `Arguments: ${question.arguments}`

const by = "MCP client (elicitation)"

/** One question elicited and decided (a decline, a cancel or a failed request: a denial with the reason). */
const elicitOne = (approvals: Approvals.Service, question: Approvals.Question) =>
  McpServer.elicit({ message: messageOf(question), schema: Decision }).pipe(
    Effect.map((form): Approvals.Answer => ({ ...form, by })),
    Effect.catch((error) =>
      Effect.succeed<Approvals.Answer>({
        decision: "deny",
        reason: `the MCP client did not approve (${error._tag === "ElicitationDeclined" ? "declined" : error._tag})`,
        by
      })
    ),
    Effect.onInterrupt(() =>
      Effect.ignore(approvals.decide(question.id, { decision: "deny", reason: "cancelled", by }))
    ),
    Effect.flatMap((answer) => Effect.ignore(approvals.decide(question.id, answer)))
  )

/**
 * For a plain `task` call: when its client can be elicited, subscribes to the agent events
 * before the agent is spawned, then (once it exists) registers it and elicits its tree's
 * questions until its terminal event. Undefined otherwise (the policy decides).
 */
export const watch: Effect.Effect<
  ((agent: AgentView) => Effect.Effect<void>) | undefined,
  never,
  Scope.Scope | Registry | AgentEvents
> = Effect.gen(function*() {
  const client = yield* Effect.serviceOption(McpSchema.McpServerClient)
  if (Option.isNone(client) || client.value.clientCapabilities.elicitation === undefined) return undefined
  const registry = yield* Registry
  const approvals = yield* Approvals.Approvals
  const events = yield* AgentEvents
  const subscription = yield* events.subscribe
  const context = Context.make(McpSchema.McpServerClient, client.value)
  return (agent: AgentView) =>
    Effect.gen(function*() {
      const id = agent.agent_id
      registry.set(id, (registry.get(id) ?? 0) + 1)
      const ended = yield* Deferred.make<void>()
      const untilEnd = Effect.gen(function*() {
        while (true) {
          const event: AgentEvent = yield* PubSub.take(subscription)
          if (event.agent.agentId === id && isTerminal(event.type)) return yield* Deferred.succeed(ended, undefined)
        }
      })
      yield* Effect.forkChild(untilEnd, { startImmediately: true })
      yield* approvals.questions.pipe(
        Stream.filter((question) => question.path.includes(id)),
        Stream.runForEach((question) => Effect.provideContext(elicitOne(approvals, question), context)),
        Effect.raceFirst(Deferred.await(ended))
      )
    }).pipe(
      Effect.ensuring(Effect.sync(() => {
        const left = (registry.get(agent.agent_id) ?? 1) - 1
        if (left <= 0) registry.delete(agent.agent_id)
        else registry.set(agent.agent_id, left)
      }))
    )
})
