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
 *
 * A `task` call whose tree had a question nobody answered (a client without elicitation:
 * `--approve` decided it, or the timeout did) gets a second text block in its result
 * (`explainingDenials`): what needed approval (agent, path, tool, arguments) and how to grant
 * it, so the client's model and its user see why the work came back incomplete.
 */
import { type AgentEvent, AgentEvents, isTerminal } from "@fibril/core/AgentEvents"
import * as Approvals from "@fibril/core/Approvals"
import { type AgentView, SubAgentManager } from "@fibril/core/SubAgentManager"
import type { ApprovalEntry } from "@fibril/core/SubAgentRecord"
import * as McpSchema from "effect/ai/McpSchema"
import * as McpServer from "effect/ai/McpServer"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as PubSub from "effect/PubSub"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as McpRuntime from "./McpRuntime.ts"

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

// --- Explaining denials nobody answered ---

/** A denial no person gave: the `--approve` policy's, the default's, or the timeout's. */
export const unanswered = (entry: ApprovalEntry): boolean =>
  entry.decision === "deny" && (entry.by === "policy" || entry.by === "timeout" || entry.by.startsWith("--approve="))

/** How a person grants what a `fibril mcp` denied because nobody could be asked. */
export const howToGrant = "How to grant it: (1) use an MCP client that supports elicitation: it is then asked; " +
  "(2) start `fibril mcp --approve=wait` and answer from a shell in the workspace with `fibril agents questions` " +
  "and `fibril agents answer <question-id> allow` (or start it with --approve=allow-reads or --approve=allow); " +
  "(3) change the rules: take the tool out of `[permissions] ask`, or add it to `[permissions] allow` in " +
  "~/.fibril/config.toml (that answers its questions with allow; it never allows a call the rules deny)."

/**
 * What `agentId`'s tree (from `agents`, any order) needed approval for and did not get from a
 * person, with how to grant it; undefined when nothing was denied that way.
 */
export const explanation = (agents: ReadonlyArray<AgentView>, agentId: string): string | undefined => {
  const byId = new Map(agents.map((agent) => [agent.agent_id, agent]))
  const pathOf = (agent: AgentView): ReadonlyArray<string> => {
    const path: Array<string> = []
    for (
      let at: AgentView | undefined = agent;
      at !== undefined && path.length <= 64;
      at = byId.get(at.parent_id ?? "")
    ) {
      path.unshift(at.agent_id)
    }
    return path
  }
  const lines: Array<string> = []
  for (const agent of agents) {
    const path = pathOf(agent)
    if (!path.includes(agentId)) continue
    for (const entry of agent.approvals ?? []) {
      if (!unanswered(entry)) continue
      lines.push(
        `- ${entry.kind === "fan_out" ? `a fan-out (${entry.tool})` : entry.tool} by the ${agent.role} agent ` +
          `${agent.agent_id} (depth ${agent.depth}, path ${path.join(" > ")}): denied by ${entry.by}` +
          `${entry.reason === undefined ? "" : ` (${entry.reason})`}. Asked because ${entry.question}. ` +
          `Arguments: ${entry.arguments}`
      )
    }
  }
  if (lines.length === 0) return undefined
  return [
    "Needed approval and did not get it (nobody was asked: this MCP client does not support elicitation, " +
    "or no answer came in time); nothing of it was executed:",
    ...lines,
    howToGrant
  ].join("\n")
}

const agentIdOf = (content: unknown): string | undefined =>
  typeof content === "object" && content !== null && "agent_id" in content && typeof content.agent_id === "string"
    ? content.agent_id
    : undefined

/** The McpServer as the toolkit registers with it: a `task` result says what its tree was denied unasked. */
export const explainingDenials = Layer.effect(
  McpServer.McpServer,
  Effect.map(Effect.all([McpServer.McpServer, McpRuntime.McpRuntime]), ([server, runtime]) => {
    // The runtime is built by the time a `task` call has a result.
    const listed = McpRuntime.use(
      Effect.flatMap(Effect.service(SubAgentManager), (manager) => manager.list({ includeArchived: true }))
    ).pipe(Effect.provideService(McpRuntime.McpRuntime, runtime))
    return McpServer.McpServer.of({
      ...server,
      addTool: (options) =>
        options.tool.name !== "task" ? server.addTool(options) : server.addTool({
          ...options,
          handle: (payload: unknown) =>
            Effect.flatMap(options.handle(payload), (result) => {
              const agentId = result instanceof McpSchema.CallToolResult
                ? agentIdOf(result.structuredContent)
                : undefined
              if (!(result instanceof McpSchema.CallToolResult) || agentId === undefined) return Effect.succeed(result)
              return Effect.map(listed, (agents) => {
                const text = explanation(agents, agentId)
                return text === undefined
                  ? result
                  : new McpSchema.CallToolResult({ ...result, content: [...result.content, { type: "text", text }] })
              })
            })
        })
    })
  })
)
