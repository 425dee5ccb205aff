/**
 * Approvals — a person in the loop: the questions `ask` rules raise, and their answers.
 *
 * A call whose rules say `ask` (Permission, rule 5) waits here, alone: `ask` suspends the
 * calling fiber only, so the agent's other calls and every sibling keep running. A question
 * carries the agent's path in the tree (root first), its role, the tool, its arguments
 * (bounded) and why the rule asked. It ends in exactly one of: an answer (`decide`), the
 * timeout (a denial with that reason), or the asking fiber's interruption (a cancelled tree
 * withdraws its questions: they leave `pending`).
 *
 * An "always" answer allows later asks of the same tool in a subtree (`Standing`). It is only
 * ever consulted for a call whose rules say `ask` (`gate`): a denial never reaches it, so no
 * answer widens what a subtree's rules allow.
 *
 * The default (`Approvals`, a `Context.Reference`) denies every question with a reason, so an
 * embedder that provides nothing never hangs. `layer` keeps questions in memory for a front end
 * that answers in this process (an embedder's UI, MCP elicitation); `SqliteApprovals`-like
 * backings (a store row, a cluster `DurableDeferred`) implement the same four members: `ask`
 * becomes "write the row, wait for its answer", `decide` "write the answer".
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as PubSub from "effect/PubSub"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Ids from "./Ids.ts"
import type * as Permission from "./Permission.ts"

/** One question: a call (or a turn's fan-out) that waits for a person. */
export const Question = Schema.Struct({
  id: Schema.String,
  /** `tool`: one call an ask rule matched; `fan_out`: a turn's spawns over the configured limits. */
  kind: Schema.Literals(["tool", "fan_out"]),
  agentId: Schema.String,
  /** The agent's ancestors' ids and its own, root first. */
  path: Schema.Array(Schema.String),
  role: Schema.String,
  depth: Schema.Int,
  tool: Schema.String,
  /** The tool's posture (`spawn` for a fan-out): what `--approve=allow-reads` reads. */
  posture: Schema.String,
  /** The call's arguments as JSON, cut at `maxArgumentChars`. */
  arguments: Schema.String,
  /** Why it asks: the rule, or the fan-out's count and estimate. */
  reason: Schema.String,
  /** Epoch ms. */
  askedAt: Schema.Number
})
export type Question = typeof Question.Type

export const Answer = Schema.Struct({
  decision: Schema.Literals(["allow", "deny"]),
  /** Allow this tool for the rest of the run in `subtree` (default: the whole tree) without asking. */
  always: Schema.optionalKey(Schema.Boolean),
  /** An agent id on the question's path: whose subtree an `always` covers. */
  subtree: Schema.optionalKey(Schema.String),
  /** A deny's reason, which the model reads. */
  reason: Schema.optionalKey(Schema.String),
  /** Who decided: "terminal", "mcp client", "process 1234", "timeout", "standing answer", "policy". */
  by: Schema.String
})
export type Answer = typeof Answer.Type

/** A question and how it ended, as a receipt and an event keep it. */
export const Decided = Schema.Struct({ question: Question, answer: Answer, at: Schema.Number })
export type Decided = typeof Decided.Type

/** An "always" answer: `tool` runs without asking anywhere under `subtree` (an agent id). */
export interface Standing {
  readonly subtree: string
  readonly tool: string
}

export class UnknownQuestion extends Schema.TaggedError<UnknownQuestion>()("UnknownQuestion", {
  id: Schema.String,
  pending: Schema.Array(Schema.String)
}) {
  override get message() {
    return `there is no pending question "${this.id}" (answered, timed out or withdrawn already?); pending: ${
      this.pending.join(", ") || "none"
    }`
  }
}

/** A call that was asked about and not allowed: what the model reads. */
export class ApprovalDenied extends Schema.TaggedError<ApprovalDenied>()("ApprovalDenied", {
  tool: Schema.String,
  asked: Schema.String,
  reason: Schema.String,
  by: Schema.String
}) {
  override get message() {
    return `"${this.tool}" was not approved (${this.by}): ${this.reason}. It needed approval because ${this.asked}. ` +
      `Nothing was executed; do without it, or ask the person to allow it.`
  }
}

export const maxArgumentChars = 2000

/** Arguments as a question shows them: JSON, cut at `maxArgumentChars`. */
export const boundArguments = (params: unknown): string => {
  let text: string
  try {
    text = typeof params === "string" ? params : JSON.stringify(params) ?? ""
  } catch {
    text = String(params)
  }
  return text.length <= maxArgumentChars ? text : `${text.slice(0, maxArgumentChars)}… (${text.length} chars)`
}

/** Does a standing answer cover `tool` for the agent at `path`? */
export const covers = (standing: ReadonlyArray<Standing>, path: ReadonlyArray<string>, tool: string): boolean =>
  standing.some((answer) => answer.tool === tool && path.includes(answer.subtree))

/**
 * What happens to a call: `deny` whatever was answered before, `run`, or `ask` a person.
 * Standing answers turn `ask` into `run`, never `deny` into anything else.
 */
export const gate = (
  judgement: Permission.Judgement,
  standing: ReadonlyArray<Standing>,
  path: ReadonlyArray<string>,
  tool: string
): "run" | "ask" | "deny" =>
  judgement.outcome === "deny"
    ? "deny"
    : judgement.outcome === "allow" || covers(standing, path, tool)
    ? "run"
    : "ask"

/**
 * What an answer leaves standing: for an "always" allow, its tool in `subtree` (an agent on the
 * question's path; by default its root: the whole tree). Both engines read answers through it.
 */
export const standingOf = (question: Question, answer: Answer): Standing | undefined =>
  answer.decision === "allow" && answer.always === true
    ? {
      subtree: answer.subtree !== undefined && question.path.includes(answer.subtree)
        ? answer.subtree
        : question.path[0] ?? question.agentId,
      tool: question.tool
    }
    : undefined

/** An agent as a question's path sees it: its id and its parent. */
export interface TreeNode {
  readonly id: string
  readonly parent?: TreeNode | undefined
}

/** The ids of an agent's ancestors and its own, root first. */
export const pathOf = (agent: TreeNode): ReadonlyArray<string> => {
  const path: Array<string> = []
  for (let at: TreeNode | undefined = agent; at !== undefined; at = at.parent) path.unshift(at.id)
  return path
}

/** Approval before a fan-out (loop/FanOut.ts): one turn's spawns past these limits ask once. */
export interface FanOutLimits {
  readonly maxAgents?: number | undefined
  readonly maxUsd?: number | undefined
  /** model id -> US dollars per million tokens. */
  readonly usdPerMtok?: Readonly<Record<string, number>> | undefined
  /**
   * The `max_tokens` budget each spawned agent runs under (`[subagents] max_tokens`): the most
   * the budget lets one charge. Unset: an agent is expected to use 15k besides its prompt.
   */
  readonly tokensPerAgent?: number | undefined
  /** `[subagents] tree_max_tokens`: the estimate is at most what is left of it. */
  readonly treeMaxTokens?: number | undefined
}

/** What `ask` is given: a question without its id and time. */
export type Ask = Omit<Question, "id" | "askedAt">

export interface Service {
  /**
   * Waits for the answer (a denial on timeout); interrupting it withdraws the question.
   * `onAsked` is called once the question waits for a person (not for one decided at once).
   */
  readonly ask: (request: Ask, onAsked?: (question: Question) => void) => Effect.Effect<Decided>
  readonly decide: (id: string, answer: Answer) => Effect.Effect<void, UnknownQuestion>
  /** The questions waiting now, oldest first. */
  readonly pending: Effect.Effect<ReadonlyArray<Question>>
  /** The questions waiting when it is run, then every new one as it is asked. */
  readonly questions: Stream.Stream<Question>
  /** Is the agent waiting on a person? (The heartbeat does not count that as a stall.) */
  readonly waiting: (agentId: string) => boolean
  /** Limits past which one turn's spawns ask first; undefined: a fan-out never asks. */
  readonly fanOut?: FanOutLimits | undefined
}

const decidedNow = (question: Question, answer: Answer) =>
  Effect.map(Clock.currentTimeMillis, (at): Decided => ({ question, answer, at }))

const questionOf = (request: Ask) =>
  Effect.map(Clock.currentTimeMillis, (askedAt): Question => ({ ...request, id: Ids.next("q"), askedAt }))

/** The reason the default gives: nobody here can answer. */
export const noApprover =
  "nobody can answer approval questions here (no front end with a person is attached: run `fibril run` on a " +
  "terminal, `fibril mcp` with a client that supports elicitation, or answer with `fibril agents answer`), and " +
  "the default is to deny"

/** Denies every question at once, with `noApprover`: the default, which never hangs. */
export const denyAll: Service = {
  ask: (request) =>
    Effect.flatMap(
      questionOf(request),
      (question) => decidedNow(question, { decision: "deny", reason: noApprover, by: "policy" })
    ),
  decide: (id) => Effect.fail(new UnknownQuestion({ id, pending: [] })),
  pending: Effect.succeed([]),
  questions: Stream.empty,
  waiting: () => false
}

/** The approver in use; by default `denyAll`. */
export const Approvals: Context.Reference<Service> = Context.Reference<Service>("@fibril/core/Approvals", {
  defaultValue: () => denyAll
})

export interface Options {
  /** How long a question waits before it is a denial; default 300 s. */
  readonly timeout?: Duration.Input | undefined
  /**
   * Decides a question before anyone is asked (`--approve=allow-reads`, say); undefined leaves
   * it to a person.
   */
  readonly policy?: ((question: Question) => Answer | undefined) | undefined
  readonly fanOut?: FanOutLimits | undefined
  /**
   * Tool names and postures answered "allow" without asking (`[permissions] allow`,
   * AllowAlways.ts). Consulted only for a question, that is a call whose rules say ask: never
   * for a denied call, and never for a fan-out (each is asked about).
   */
  readonly allow?: ReadonlyArray<string> | undefined
}

/** Who answers a question `[permissions] allow` covers. */
export const allowedByConfig = "[permissions] allow"

/**
 * How a process without a person decides (`fibril run --approve=…`): `deny` every question
 * (the default off a terminal), `allow-reads` (allow read-posture calls, deny the rest), `allow`
 * everything, or `wait` for an answer from another process (`fibril agents answer`) until the
 * timeout. Never a hang: each ends within the timeout at most.
 */
export const ApproveMode = Schema.Literals(["deny", "allow-reads", "allow", "wait"])
export type ApproveMode = typeof ApproveMode.Type

export const policyOf = (mode: ApproveMode): Options["policy"] => {
  if (mode === "wait") return undefined
  const by = `--approve=${mode}`
  return (question) =>
    mode === "allow" || (mode === "allow-reads" && question.posture === "read")
      ? { decision: "allow", by }
      : {
        decision: "deny",
        by,
        reason: `no one approves here: this process runs with ${by}${
          mode === "deny" ? " (the default without a terminal)" : ", which allows only read tools"
        }; run with --approve=wait and answer with \`fibril agents answer\`, or allow the tool in the rules`
      }
}

/** Questions kept in this process, answered by `decide`. */
export const make = Effect.fnUntraced(function*(options: Options = {}) {
  const timeout = Duration.fromInputUnsafe(options.timeout ?? Duration.seconds(300))
  const pending = new Map<string, { readonly question: Question; readonly answer: Deferred.Deferred<Answer> }>()
  const standing: Array<Standing> = []
  const asked = yield* PubSub.unbounded<Question>()
  const timedOut = (): Answer => ({
    decision: "deny",
    reason: `no answer within ${Duration.format(timeout)}`,
    by: "timeout"
  })

  const ask = Effect.fn("Approvals.ask")(function*(request: Ask, onAsked?: (question: Question) => void) {
    const question = yield* questionOf(request)
    if (covers(standing, question.path, question.tool)) {
      return yield* decidedNow(question, { decision: "allow", by: "standing answer" })
    }
    if (
      question.kind === "tool" &&
      (options.allow?.includes(question.tool) === true || options.allow?.includes(question.posture) === true)
    ) {
      return yield* decidedNow(question, { decision: "allow", by: allowedByConfig })
    }
    const decided = options.policy?.(question)
    if (decided !== undefined) return yield* decidedNow(question, decided)
    const answer = yield* Deferred.make<Answer>()
    pending.set(question.id, { question, answer })
    yield* PubSub.publish(asked, question)
    onAsked?.(question)
    const given = yield* Deferred.await(answer).pipe(
      Effect.timeoutOrElse({ duration: timeout, orElse: () => Effect.succeed(timedOut()) }),
      Effect.ensuring(Effect.sync(() => pending.delete(question.id)))
    )
    const always = standingOf(question, given)
    if (always !== undefined) standing.push(always)
    return yield* decidedNow(question, given)
  })

  const decide = Effect.fn("Approvals.decide")(function*(id: string, answer: Answer) {
    const entry = pending.get(id)
    if (entry === undefined) return yield* new UnknownQuestion({ id, pending: [...pending.keys()] })
    pending.delete(id)
    yield* Deferred.succeed(entry.answer, answer)
  })

  const service: Service = {
    ask,
    decide,
    pending: Effect.sync(() => [...pending.values()].map((entry) => entry.question)),
    questions: Stream.unwrap(Effect.gen(function*() {
      // Subscribe first: a question asked between the two is then seen (once, as new).
      const subscription = yield* PubSub.subscribe(asked)
      const now = [...pending.values()].map((entry) => entry.question)
      return Stream.concat(Stream.fromIterable(now), Stream.fromSubscription(subscription))
    })),
    waiting: (agentId) => {
      for (const entry of pending.values()) if (entry.question.agentId === agentId) return true
      return false
    },
    fanOut: options.fanOut
  }
  return service
})

/** Questions kept in memory, answered in this process through `decide`. */
export const layer = (options: Options = {}): Layer.Layer<never> => Layer.effect(Approvals, make(options))

/** The default made explicit: every question denied with a reason. */
export const layerDeny: Layer.Layer<never> = Layer.succeed(Approvals, denyAll)
