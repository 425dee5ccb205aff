/**
 * What `fibril ui` shows, read from where the agents are recorded: the workspace's store (every
 * process on the workspace writes it, so the page shows all of them), or a cluster's store
 * (UiCluster.ts). The page is a pure view of these JSON values; the server (UiServer.ts) only
 * carries them. A tree, an agent's detail (transcript, receipt, result), cancel, and the
 * approval questions that wait for a person (`ask` rules), answered from the page.
 */
import type * as Approvals from "@fibril/core/Approvals"
import * as Receipt from "@fibril/core/Receipt"
import * as StoredQuestions from "@fibril/core/StoredQuestions"
import * as SubAgentManager from "@fibril/core/SubAgentManager"
import { isTerminal, type SubAgentRecord } from "@fibril/core/SubAgentRecord"
import * as SubAgentStore from "@fibril/core/SubAgentStore"
import * as TranscriptView from "@fibril/core/TranscriptView"
import * as Prompt from "effect/ai/Prompt"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { ownerOf, type OwnerView, workspaceOf } from "./AgentsCommand.ts"

/** One agent as a row of the page's tree and a lane of its timeline. */
export interface AgentView {
  readonly id: string
  readonly parent_id: string | null
  readonly depth: number
  readonly role: string
  readonly model: string
  readonly description: string
  readonly status: string
  readonly reason: string | null
  readonly created_at: number
  readonly started_at: number | null
  readonly finished_at: number | null
  readonly steps: number
  readonly tool_calls: number
  readonly last_tool: string | null
  readonly tokens: { readonly input: number; readonly output: number; readonly cached: number }
  readonly owner: OwnerView
  /** Approval questions of its calls waiting for a person now (`ask` rules; a cluster's durable ones too). */
  readonly questions: ReadonlyArray<{
    readonly id: string
    readonly tool: string
    readonly reason: string
    readonly arguments: string
  }>
}

export interface Snapshot {
  /** When it was read (epoch ms): the page's "now" for running agents' elapsed time. */
  readonly at: number
  /** `subagents.max_concurrent`: the timeline draws it as a line. */
  readonly cap: number | null
  /** `[permissions.usd_per_mtok]`: dollars per million tokens by model; the page prices what it can. */
  readonly prices: Readonly<Record<string, number>>
  readonly agents: ReadonlyArray<AgentView>
}

/** An agent opened on the page. */
export interface Detail {
  readonly agent: AgentView
  /** Its run receipt, as `fibril agents show` prints it. */
  readonly receipt: unknown
  /** Its result once it has one: the text, its sections, and a typed `output` when asked for. */
  readonly result: unknown
  /** Every message, rendered as `fibril agents transcript` renders them (tool calls as `→ name {args}`). */
  readonly transcript: ReadonlyArray<TranscriptView.PagedMessage>
}

/** The page's data: the same three reads whatever the agents are recorded in. */
export interface UiData {
  readonly snapshot: Effect.Effect<Snapshot>
  readonly detail: (id: string) => Effect.Effect<Option.Option<Detail>>
  /** Cancels the agent wherever it runs; the record as it reads then (none when not recorded). */
  readonly cancel: (id: string) => Effect.Effect<Option.Option<AgentView>>
  /** Answers a waiting question in whichever process asked it; false when it waits no more. */
  readonly answer: (id: string, answer: Approvals.Answer) => Effect.Effect<boolean>
}

export const viewOf = (agent: SubAgentRecord, owner: OwnerView): AgentView => ({
  id: agent.agent_id,
  parent_id: agent.parent_id ?? null,
  depth: agent.depth,
  role: agent.role,
  model: agent.model,
  description: agent.description,
  status: agent.status,
  reason: agent.reason ?? null,
  created_at: agent.created_at,
  started_at: agent.started_at ?? null,
  finished_at: agent.finished_at ?? null,
  steps: agent.steps,
  tool_calls: agent.tool_calls,
  last_tool: agent.last_tool ?? null,
  tokens: agent.tokens,
  owner,
  questions: isTerminal(agent.status) ? [] : (agent.questions ?? []).map(questionView)
})

/** A waiting question as the page shows it (either engine's). */
export const questionView = (question: Approvals.Question): AgentView["questions"][number] => ({
  id: question.id,
  tool: question.kind === "fan_out" ? "fan-out" : question.tool,
  reason: question.reason,
  arguments: question.arguments
})

/** Every message of a transcript, each cut as a page cuts it (a page holds at most `maxLimit`). */
export const renderTranscript = (handle: string, messages: ReadonlyArray<Prompt.Message>) => {
  const all: Array<TranscriptView.PagedMessage> = []
  let offset: number | undefined = 0
  while (offset !== undefined) {
    const page = TranscriptView.page(messages, { handle, offset, limit: TranscriptView.maxLimit })
    all.push(...page.messages)
    offset = page.next_offset
  }
  return all
}

/** The workspace's store (its state dir `stateDir`), as the page reads it. */
export const fromStore = (
  store: SubAgentStore.SubAgentStore["Service"],
  options: {
    readonly stateDir: string
    readonly cap: number | undefined
    readonly prices?: Readonly<Record<string, number>> | undefined
  }
): UiData => {
  const withOwner = (record: SubAgentRecord) => Effect.map(ownerOf(store, record), (owner) => viewOf(record, owner))
  return {
    snapshot: Effect.gen(function*() {
      // Records of processes that are gone read `interrupted`, as `fibril agents list` shows them.
      yield* store.reconcile
      const records = yield* store.all
      return {
        at: yield* Clock.currentTimeMillis,
        cap: options.cap ?? null,
        prices: options.prices ?? {},
        agents: yield* Effect.forEach(records, withOwner)
      }
    }),
    detail: (id) =>
      Effect.gen(function*() {
        const found = yield* store.get(id)
        if (Option.isNone(found)) return Option.none()
        const agent = found.value
        const liveness = yield* store.liveness(agent.session_boot_id)
        const raw = yield* store.readTranscript(agent.transcript_handle).pipe(Effect.orElseSucceed(() => []))
        const messages = yield* Schema.decodeUnknownEffect(Schema.Array(Prompt.Message))(raw).pipe(
          Effect.orElseSucceed(() => [])
        )
        return Option.some({
          agent: yield* withOwner(agent),
          receipt: Receipt.workerRecord(agent, {
            workspace: workspaceOf(options.stateDir),
            durable: true,
            owner: liveness === "self" ? "alive" : liveness
          }),
          result: agent.outcome === undefined ? null : agent.outcome,
          transcript: renderTranscript(agent.transcript_handle, messages)
        })
      }),
    cancel: (id) =>
      Effect.gen(function*() {
        const found = yield* store.get(id)
        if (Option.isNone(found)) return Option.none()
        const after = yield* SubAgentManager.requestCancel(found.value, "Cancelled from fibril ui").pipe(
          Effect.provideService(SubAgentStore.SubAgentStore, store)
        )
        return Option.some(yield* withOwner(after))
      }),
    answer: (id, answer) =>
      StoredQuestions.answered(id, answer).pipe(Effect.provideService(SubAgentStore.SubAgentStore, store))
  }
}
