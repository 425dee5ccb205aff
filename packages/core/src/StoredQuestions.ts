/**
 * StoredQuestions — approval questions across the processes of one workspace, through the
 * store, as cross-process cancel goes.
 *
 * The process whose agent asks keeps the question in the agent's record (`questions`, written
 * at its next request poll) while it waits; any process lists them from the records
 * (`pending`) and answers with a request to the owner (`answer`: kind `answer`), which decides
 * it in its own `Approvals` at its next poll (within a second). A question whose owner is gone
 * is not listed: its call ended with its process.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { Answer, type Question, UnknownQuestion } from "./Approvals.ts"
import { isTerminal, type SubAgentRecord } from "./SubAgentRecord.ts"
import { SubAgentStore } from "./SubAgentStore.ts"

/** A waiting question with the record of the agent that asked it. */
export interface Pending {
  readonly question: Question
  readonly agent: SubAgentRecord
}

/** What an `answer` request carries. */
export const AnswerRequest = Schema.Struct({ id: Schema.String, answer: Answer })
export type AnswerRequest = typeof AnswerRequest.Type

const encode = Schema.encodeSync(Schema.fromJsonString(AnswerRequest))
/** The payload of an `answer` request, or undefined when it is not one (a newer or corrupt writer). */
export const decodeRequest = Schema.decodeUnknownOption(Schema.fromJsonString(AnswerRequest))

/** The questions waiting now in every live process on the store, oldest first. */
export const pending: Effect.Effect<ReadonlyArray<Pending>, never, SubAgentStore> = Effect.gen(function*() {
  const store = yield* SubAgentStore
  yield* store.reconcile
  const out: Array<Pending> = []
  for (const agent of yield* store.all) {
    if (isTerminal(agent.status)) continue
    for (const question of agent.questions ?? []) out.push({ question, agent })
  }
  return out.sort((a, b) => a.question.askedAt - b.question.askedAt)
})

/** Sends `answer` to the process whose agent asked question `id`; it decides it within a second. */
export const answer = Effect.fn("StoredQuestions.answer")(function*(id: string, given: Answer) {
  const store = yield* SubAgentStore
  const waiting = yield* pending
  const found = waiting.find((entry) => entry.question.id === id)
  if (found === undefined) {
    return yield* new UnknownQuestion({ id, pending: waiting.map((entry) => entry.question.id) })
  }
  yield* store.request(found.agent.session_boot_id, {
    agent_id: found.agent.agent_id,
    kind: "answer",
    payload: encode({ id, answer: given })
  })
  return found
})

/**
 * `answer` for a front end that reports only whether it went (the page, an MCP client): false
 * when the question waits no more (answered, withdrawn) or the request could not be written.
 */
export const answered = (id: string, given: Answer): Effect.Effect<boolean, never, SubAgentStore> =>
  answer(id, given).pipe(Effect.as(true), Effect.orElseSucceed(() => false))
