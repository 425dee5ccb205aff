/**
 * Approval before a fan-out: one turn whose `task` / `agent_spawn` calls would start more
 * agents than `fan_out_max_agents`, or cost more than `fan_out_max_usd` by estimate, is one
 * question for the whole batch ("start 12 explore agents, est. 180k tokens ≈ $0.54?"). A
 * denial refuses every spawn of the batch (none starts) with the reason the model reads; the
 * turn's other calls run as usual.
 *
 * The estimate is what the token budgets would let the batch charge, counted as they count
 * (`Usage.total`: input + output; text the provider does not report, characters / 4 as
 * `Usage.estimate`): per agent its `max_tokens` budget when one is set (the budget stops an
 * agent past it), else 15k plus its prompt; the batch at most what is left of
 * `tree_max_tokens` (the tree's usage so far subtracted, as the tree budget checks it). Dollars
 * come from `usd_per_mtok` of the model the spawn names, else the caller's; without a price
 * the question shows tokens only and the dollar limit does not apply.
 */
import * as Effect from "effect/Effect"
import type { AgentEvent } from "../AgentEvents.ts"
import * as Approvals from "../Approvals.ts"
import type { ToolErrorLike } from "../ToolRegistry.ts"
import * as Usage from "../Usage.ts"
import type { ToolCall } from "./ResolveTurn.ts"

/** Where a call that asks reports its question and its answer (the session's events). */
export type Notify = (event: Omit<AgentEvent, "agent" | "at">) => void

/** Who spawns: an agent with its place in the tree (a `SessionState` is one). */
export interface Spawner extends Approvals.TreeNode {
  readonly role: string
  readonly depth: number
  readonly model: string
  readonly parent?: Spawner | undefined
  /** Its tree's usage so far (its root's is what `tree_max_tokens` is checked against). */
  readonly treeUsage?: Usage.Usage | undefined
}

/** Tokens the tree of `spawner` has charged so far: its root's tree usage. */
export const treeSpent = (spawner: Spawner): number => {
  let root = spawner
  while (root.parent !== undefined) root = root.parent
  return root.treeUsage === undefined ? 0 : Usage.total(root.treeUsage)
}

/** The tools whose calls start agents. */
export const spawnTools: ReadonlySet<string> = new Set(["task", "agent_spawn"])

export const defaultTokensPerAgent = 15_000

export interface Estimate {
  readonly agents: number
  /** Agents per role, in call order ("explore" -> 12). */
  readonly roles: ReadonlyMap<string, number>
  readonly tokens: number
  /** Undefined when a model of the batch has no price. */
  readonly usd: number | undefined
  /** The tokens are what is left of `tree_max_tokens` (the agents' own budgets would allow more). */
  readonly treeCapped: boolean
}

const argsOf = (params: unknown): Record<string, unknown> => {
  if (typeof params === "string") {
    try {
      const parsed: unknown = JSON.parse(params)
      return typeof parsed === "object" && parsed !== null ? parsed as Record<string, unknown> : {}
    } catch {
      return {}
    }
  }
  return typeof params === "object" && params !== null ? params as Record<string, unknown> : {}
}

const text = (value: unknown): string | undefined => typeof value === "string" ? value : undefined
const first = (args: Record<string, unknown>, keys: ReadonlyArray<string>): string | undefined => {
  for (const key of keys) {
    const value = text(args[key])
    if (value !== undefined && value !== "") return value
  }
  return undefined
}

/**
 * What the spawns of `calls` would start and charge, by estimate; `spent`: the tokens the
 * tree has charged so far (`treeSpent`).
 */
export const estimate = (
  calls: ReadonlyArray<ToolCall>,
  callerModel: string,
  limits: Approvals.FanOutLimits,
  spent = 0
): Estimate => {
  const roles = new Map<string, number>()
  let tokens = 0
  let usd: number | undefined = 0
  for (const call of calls) {
    const args = argsOf(call.params)
    // The spellings the spawn tools accept (tools/Agents.ts).
    const role = first(args, ["subagent_type", "type", "agent_type"]) ?? "general"
    roles.set(role, (roles.get(role) ?? 0) + 1)
    const prompt = first(args, ["prompt", "message", "input", "objective"]) ?? ""
    const own = limits.tokensPerAgent ?? (defaultTokensPerAgent + Usage.tokensOfChars(prompt.length))
    tokens += own
    const price = limits.usdPerMtok?.[text(args["model"]) ?? callerModel]
    usd = usd === undefined || price === undefined ? undefined : usd + (own / 1_000_000) * price
  }
  const left = limits.treeMaxTokens === undefined ? tokens : Math.max(0, limits.treeMaxTokens - spent)
  if (left >= tokens) return { agents: calls.length, roles, tokens, usd, treeCapped: false }
  // The tree budget stops the batch at what is left of it: the dollars shrink with the tokens.
  return {
    agents: calls.length,
    roles,
    tokens: left,
    usd: usd === undefined || tokens === 0 ? usd : usd * (left / tokens),
    treeCapped: true
  }
}

const thousands = (tokens: number): string => tokens >= 1000 ? `${Math.round(tokens / 1000)}k` : String(tokens)

/** The question's words: "start 12 explore agents, est. 180k tokens ≈ $0.54" and which limit it passes. */
export const describe = (plan: Estimate, limits: Approvals.FanOutLimits): string | undefined => {
  const overAgents = limits.maxAgents !== undefined && plan.agents > limits.maxAgents
  const overUsd = limits.maxUsd !== undefined && plan.usd !== undefined && plan.usd > limits.maxUsd
  if (!overAgents && !overUsd) return undefined
  const who = [...plan.roles].map(([role, count]) => `${count} ${role}`).join(", ")
  const cost = plan.usd === undefined ? "" : ` ≈ $${plan.usd.toFixed(2)}`
  const over = [
    ...(overAgents ? [`more than fan_out_max_agents = ${limits.maxAgents}`] : []),
    ...(overUsd ? [`more than fan_out_max_usd = $${limits.maxUsd}`] : [])
  ].join(" and ")
  const capped = plan.treeCapped ? " (what is left of tree_max_tokens)" : ""
  return `start ${plan.agents} agents (${who}), est. ${thousands(plan.tokens)} tokens${capped}${cost}: ${over}`
}

/**
 * The turn's spawns, asked about as one batch when they pass a limit: undefined when they run
 * (no limit passed, or allowed), else the error each of them fails with.
 */
export const gate = (
  caller: Spawner,
  calls: ReadonlyArray<ToolCall>,
  notify: Notify | undefined
): Effect.Effect<ToolErrorLike | undefined> =>
  Effect.flatMap(Effect.service(Approvals.Approvals), (approvals) => {
    const spawns = calls.filter((call) => spawnTools.has(call.name))
    const limits = approvals.fanOut
    if (spawns.length === 0 || limits === undefined) return Effect.succeed(undefined)
    const reason = describe(estimate(spawns, caller.model, limits, treeSpent(caller)), limits)
    if (reason === undefined) return Effect.succeed(undefined)
    const tool = spawns[0]!.name
    return Effect.map(
      approvals.ask({
        kind: "fan_out",
        agentId: caller.id,
        path: Approvals.pathOf(caller),
        role: caller.role,
        depth: caller.depth,
        tool,
        posture: "spawn",
        arguments: Approvals.boundArguments(spawns.map((call) => ({ tool: call.name, arguments: call.params }))),
        reason
      }, (question) => notify?.({ type: "question", tool, question })),
      (decided) => {
        notify?.({ type: "answered", tool, question: decided.question, answer: decided.answer })
        return decided.answer.decision === "allow" ? undefined : new Approvals.ApprovalDenied({
          tool,
          asked: `this turn would ${reason}`,
          reason: `${decided.answer.reason ?? "denied"}; none of the ${spawns.length} agents was started`,
          by: decided.answer.by
        })
      }
    )
  })
