/**
 * `fibril agents list|show|transcript|cancel|resume|questions|answer` as a client of the cluster (`--cluster`,
 * FIBRIL_CLUSTER_URL or `[cluster] url`): the same commands over the cluster's agents instead
 * of the workspace's store. Loaded only when a cluster URL is given.
 */
import type * as StoreModule from "@fibril/cluster/ClusterStore"
import type { AgentRow } from "@fibril/cluster/ClusterStore"
import type * as Approvals from "@fibril/core/Approvals"
import * as TranscriptView from "@fibril/core/TranscriptView"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as ClusterCommand from "./ClusterCommand.ts"

const loadClient = Effect.promise(() => import("@fibril/cluster/ClusterClient"))
const loadStore = Effect.promise(() => import("@fibril/cluster/ClusterStore"))

// The same keys as `fibril agents show` prints for an embedded record where they mean the
// same: tokens by kind, the run's duration once it has ended.
const row = (r: AgentRow, { durationOf, tokensOf }: typeof StoreModule) => ({
  agent_id: r.agentId,
  ...(r.parentId === null ? {} : { parent_id: r.parentId }),
  root_id: r.rootId,
  depth: r.depth,
  role: r.role,
  description: r.description,
  status: r.status,
  run: r.run,
  steps: r.steps,
  tool_calls: r.toolCalls,
  tokens: tokensOf(r),
  ...(durationOf(r) === undefined ? {} : { duration_ms: durationOf(r) }),
  detached: r.detached,
  workspace: r.workspace,
  ...(r.reason === null ? {} : { reason: r.reason }),
  ...(r.text === null ? {} : { text: r.text }),
  // Its answer's claims checked against its transcript (the embedded record has them in `outcome.claims`).
  ...(r.claims === undefined ? {} : { claims: r.claims })
})

const line = (r: AgentRow) =>
  `${"  ".repeat(r.depth)}${r.agentId}  ${r.status.padEnd(9)} ${r.role.padEnd(8)} steps=${r.steps} ${
    JSON.stringify(r.description)
  }${r.reason === null ? "" : `  (${r.reason})`}`

/** Trees with an unfinished agent (every tree with `all`), each root then its descendants. */
export const list = (url: string, all: boolean, json: boolean) =>
  ClusterCommand.asClient(
    url,
    Effect.gen(function*() {
      const client = yield* loadClient
      const store = yield* loadStore
      const { ClusterStore, finished } = store
      const rows = yield* (yield* ClusterStore).list
      const roots = rows.filter((r) => r.parentId === null)
      const trees: Array<ReadonlyArray<AgentRow>> = []
      for (const root of roots) {
        const tree = yield* client.tree(root.agentId)
        if (all || tree.some((r) => !finished(r.status))) trees.push(tree)
      }
      if (json) {
        yield* Console.log(JSON.stringify({ agents: trees.flat().map((r) => row(r, store)) }))
      } else if (trees.length === 0) {
        yield* Console.log(all ? "no agents in the cluster" : "no running agents in the cluster (--all for every one)")
      } else {
        for (const tree of trees) for (const r of tree) yield* Console.log(line(r))
      }
      return 0
    })
  )

/**
 * The agent and its descendants, one JSON line each; with each one's approval decisions
 * (`approvals`: question, answer, who, when) and the questions it waits on (`questions`), the
 * keys of the embedded receipt.
 */
export const show = (url: string, agentId: string) =>
  ClusterCommand.asClient(
    url,
    Effect.gen(function*() {
      const client = yield* loadClient
      const rows = yield* client.tree(agentId)
      if (rows.length === 0) return yield* new client.AgentNotFound({ agentId })
      const store = yield* loadStore
      const questions = yield* loadQuestions
      const service = yield* questions.ClusterQuestions
      const stored = service === undefined ? [] : yield* service.ofAgents(rows.map((r) => r.agentId))
      for (const r of rows) {
        const decisions = questions.receiptFields(stored.filter((entry) => entry.question.agentId === r.agentId))
        yield* Console.log(JSON.stringify({ ...row(r, store), ...decisions }))
      }
      return 0
    })
  )

/** A page of the agent's transcript (every run), as `fibril agents transcript` prints one. */
export const transcript = (
  url: string,
  agentId: string,
  page: { readonly offset: number | undefined; readonly limit: number | undefined }
) =>
  ClusterCommand.asClient(
    url,
    Effect.gen(function*() {
      const client = yield* loadClient
      yield* client.status(agentId)
      const messages = yield* (yield* (yield* loadStore).ClusterStore).transcript(agentId)
      const view = TranscriptView.page(messages, { handle: agentId, agentId, ...page })
      for (const m of view.messages) {
        yield* Console.log(`[${m.index}] ${m.role}: ${m.text}${m.cut === undefined ? "" : ` …(${m.cut} more)`}`)
      }
      yield* Console.log(
        `(${view.messages.length} of ${view.total} messages${
          view.next_offset === undefined ? "" : `; next page: --offset ${view.next_offset}`
        })`
      )
      return 0
    })
  )

export const cancel = (url: string, agentId: string) =>
  ClusterCommand.asClient(
    url,
    Effect.gen(function*() {
      const client = yield* loadClient
      yield* client.cancel(agentId, "cancelled (fibril agents cancel)")
      yield* Console.log(`fibril: cancelled ${agentId} and its non-detached descendants`)
      return 0
    })
  )

/** A new run of a finished agent, waited for: exit 0 when it completes. */
export const resume = (url: string, agentId: string, message: string | undefined) =>
  ClusterCommand.asClient(
    url,
    Effect.gen(function*() {
      const client = yield* loadClient
      yield* client.resume(agentId, message ?? "Continue.")
      const outcome = yield* client.await_(agentId)
      yield* Console.log(outcome.text)
      return 0
    })
  )

const loadQuestions = Effect.promise(() => import("@fibril/cluster/ClusterQuestions"))

/** The approval questions waiting in the cluster (rows any process reads: ClusterQuestions). */
export const questions = (url: string, json: boolean) =>
  ClusterCommand.asClient(
    url,
    Effect.gen(function*() {
      const waiting = yield* (yield* (yield* loadQuestions).make()).pending
      if (json) {
        yield* Console.log(JSON.stringify(waiting, null, 2))
      } else if (waiting.length === 0) {
        yield* Console.log("no questions wait for an answer in the cluster")
      } else {
        for (const question of waiting) {
          yield* Console.log(
            `${question.id}  ${question.kind === "fan_out" ? "fan-out" : question.tool}  agent ${question.agentId} ` +
              `(${question.role}, depth ${question.depth})\n  why: ${question.reason}\n  arguments: ${question.arguments}`
          )
        }
        yield* Console.log(`answer with: fibril agents answer <id> allow|deny [--reason "…"] --cluster <url>`)
      }
      return 0
    })
  )

/** Answers a question in the cluster: the step waiting on it reads the answer within its poll. */
export const answer = (url: string, id: string, given: Approvals.Answer) =>
  ClusterCommand.asClient(
    url,
    Effect.gen(function*() {
      const service = yield* (yield* loadQuestions).make()
      const refused = yield* service.decide(id, given).pipe(
        Effect.match({ onFailure: (error) => error.message, onSuccess: () => undefined })
      )
      if (refused !== undefined) {
        yield* Console.error(`fibril: ${refused}`)
        return 1
      }
      yield* Console.log(`${id}: ${given.decision} written to the cluster; the waiting call reads it within a second`)
      return 0
    })
  )
