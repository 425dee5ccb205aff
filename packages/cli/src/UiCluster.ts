/**
 * `fibril ui --cluster <url>`: the page over a cluster's agents (ClusterStore rows) instead of
 * the workspace's store; cancel goes through the cluster client as `fibril agents cancel` does,
 * and the questions waiting in the cluster (ClusterQuestions rows) are shown on their agents'
 * rows and answered from the page as `fibril agents answer --cluster` answers them.
 * Loaded only when a cluster URL is given.
 */
import * as ClusterClient from "@fibril/cluster/ClusterClient"
import { ClusterQuestions, receiptFields } from "@fibril/cluster/ClusterQuestions"
import { type AgentRow, ClusterStore, durationOf, tokensOf } from "@fibril/cluster/ClusterStore"
import type * as Approvals from "@fibril/core/Approvals"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as ClusterCommand from "./ClusterCommand.ts"
import type * as UiData from "./UiData.ts"
import { questionView, renderTranscript } from "./UiData.ts"
import * as UiServer from "./UiServer.ts"

/** A cluster row as the page's agent: workers, not processes, run it, so no pid is shown. */
const viewOf = (
  row: AgentRow,
  now: number,
  waiting: ReadonlyArray<Approvals.Question> = []
): UiData.AgentView => ({
  id: row.agentId,
  parent_id: row.parentId,
  depth: row.depth,
  role: row.role,
  model: row.model,
  description: row.description,
  status: row.status,
  reason: row.reason,
  created_at: row.startedAt ?? now,
  started_at: row.startedAt ?? null,
  finished_at: row.finishedAt ?? null,
  steps: row.steps,
  tool_calls: row.toolCalls,
  last_tool: null,
  tokens: tokensOf(row),
  owner: { pid: null, host: "cluster", state: "alive" },
  questions: waiting.filter((question) => question.agentId === row.agentId).map(questionView)
})

export const serve = (url: string, cap: number | undefined, prices: Readonly<Record<string, number>> = {}) =>
  ClusterCommand.asClient(
    url,
    Effect.gen(function*() {
      const store = yield* ClusterStore
      const questions = yield* ClusterQuestions
      const pending = questions === undefined ? Effect.succeed([]) : questions.pending
      const context = yield* Effect.context<ClusterStore | Effect.Services<ReturnType<typeof ClusterClient.cancel>>>()
      // Store failures read as "nothing to show" on the page: the next poll tries again.
      const data: UiData.UiData = {
        snapshot: Effect.gen(function*() {
          const now = yield* Clock.currentTimeMillis
          const rows = yield* store.list.pipe(Effect.orElseSucceed(() => []))
          const waiting = yield* pending
          return { at: now, cap: cap ?? null, prices, agents: rows.map((row) => viewOf(row, now, waiting)) }
        }),
        detail: (id) =>
          Effect.gen(function*() {
            const row = yield* store.get(id).pipe(Effect.orElseSucceed(() => undefined))
            if (row === undefined) return Option.none()
            const now = yield* Clock.currentTimeMillis
            const messages = yield* store.transcript(id).pipe(Effect.orElseSucceed(() => []))
            const duration = durationOf(row)
            return Option.some({
              agent: viewOf(row, now, yield* pending),
              receipt: {
                run: row.run,
                workspace: row.workspace,
                detached: row.detached,
                duration_ms: duration ?? null,
                // Its approval decisions, as `fibril agents show --cluster` prints them.
                ...(questions === undefined ? {} : receiptFields(yield* questions.ofAgents([id])))
              },
              result: row.text === null
                ? null
                : { text: row.text, ...(row.claims === undefined ? {} : { claims: row.claims }) },
              transcript: renderTranscript(id, messages)
            })
          }),
        cancel: (id) =>
          ClusterClient.cancel(id, "Cancelled from fibril ui").pipe(
            Effect.andThen(store.get(id)),
            Effect.map((row) => row === undefined ? Option.none() : Option.some(viewOf(row, Date.now()))),
            Effect.orElseSucceed(() => Option.none<UiData.AgentView>()),
            Effect.provideContext(context)
          ),
        // Written to the question's row: the waiting step reads it at its next look.
        answer: (id, given) =>
          questions === undefined
            ? Effect.succeed(false)
            : questions.decide(id, given).pipe(Effect.as(true), Effect.orElseSucceed(() => false))
      }
      yield* Effect.scoped(Effect.gen(function*() {
        yield* UiServer.announce(yield* UiServer.serve({ data }))
        return yield* Effect.never
      }))
      return 0
    })
  )
