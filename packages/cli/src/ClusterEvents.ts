/**
 * The events of a tree of agents running in the cluster, for `fibril run --cluster`'s live
 * tree and `fibril mcp --cluster`'s progress. Any worker writes an agent's steps to the store
 * in the step's own transaction (transcript rows with a sequence number, agent rows with a
 * change number); a client follows the tree by asking the store what changed after its cursor
 * (two indexed queries), every `pollMs`, and turns the changes into the same `AgentEvent`s the
 * embedded runtime publishes (spawned, started, step, tool_call, tool_result, the end), and
 * the tree's approval questions (their durable rows: ClusterQuestions) into `question` and
 * `answered` events.
 */
import * as ClusterQuestions from "@fibril/cluster/ClusterQuestions"
import type { ClusterStore as Store, TreeChanges } from "@fibril/cluster/ClusterStore"
import { ClusterStore, startCursor } from "@fibril/cluster/ClusterStore"
import type { AgentEvent, AgentSnapshot, EventType } from "@fibril/core/AgentEvents"
import * as McpServer from "effect/ai/McpServer"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Semaphore from "effect/Semaphore"
import * as Mcp from "./Mcp.ts"

export interface Known {
  snapshot: AgentSnapshot
  status: string
  /** Was its `started` published? (Once: when it is seen running, or its first message.) */
  started: boolean
  /** Its own tokens, as its row last said. */
  own: number
}

/**
 * Turns the store's changes into events, remembering what each agent was (`known`), in the
 * order the embedded runtime publishes them (`fibril run --json` prints the same stream from
 * either engine): every agent, the root included, is `spawned` and then `started`; a child
 * right after the parent's `tool_call` that asked for it; an answer's text as one `text` event
 * before its `step` (`text`: false, as `--no-stream`, leaves them out).
 */
export const eventsOf = (
  changes: TreeChanges,
  known: Map<string, Known>,
  at: number,
  options: { readonly text: boolean } = { text: true }
): Array<AgentEvent> => {
  const out: Array<AgentEvent> = []
  // An event carries its agent's tree's tokens (as the embedded runtime's do); the cluster keeps
  // one total per agent, reported as output.
  const treeTokens = (agentId: string): number =>
    (known.get(agentId)?.own ?? 0) +
    [...known.values()].filter((k) => k.snapshot.parentId === agentId).reduce(
      (n, k) => n + treeTokens(k.snapshot.agentId),
      0
    )
  const emit = (type: EventType, k: Known, extra: Partial<AgentEvent> = {}) =>
    out.push({
      type,
      agent: { ...k.snapshot, usage: { input: 0, output: treeTokens(k.snapshot.agentId), cached: 0 } },
      at,
      ...extra
    })
  const start = (k: Known) => {
    if (k.started) return
    k.started = true
    emit("started", k)
  }
  const last = new Map<string, number>()
  changes.messages.forEach((m, i) => last.set(m.agentId, i))
  // A child new in this batch whose parent answered in it: its `spawned` (and what follows
  // before its own messages) waits for that answer's `tool_call`s, as the embedded runtime
  // spawns a child while running the call; or for the child's own first message, if earlier.
  const asking = new Set(
    changes.messages.filter((m) => m.message.role === "assistant").map((m) => m.agentId)
  )
  const opening = new Map<string, { readonly parentId: string; readonly events: Array<() => void> }>()
  const later = (agentId: string, parentId: string, event: () => void) => {
    let queued = opening.get(agentId)
    if (queued === undefined) opening.set(agentId, queued = { parentId, events: [] })
    queued.events.push(event)
  }
  const open = (agentId: string) => {
    const queued = opening.get(agentId)
    opening.delete(agentId)
    for (const event of queued?.events ?? []) event()
  }
  // An agent's end comes right after its last step of this batch (so before the steps of a
  // parent that read its result), or before every step when it has none in the batch.
  const ends = new Map<string, () => void>()
  for (const row of changes.agents) {
    let k = known.get(row.agentId)
    // Steps and tool calls are counted from the transcript (every message is read, from the
    // start), so a row's totals are not added to them.
    const snapshot = (previous: AgentSnapshot | undefined): AgentSnapshot => ({
      agentId: row.agentId,
      parentId: row.parentId ?? undefined,
      depth: row.depth,
      role: row.role,
      model: row.model,
      description: row.description,
      step: previous?.step ?? 0,
      toolCalls: previous?.toolCalls ?? 0,
      lastTool: previous?.lastTool,
      usage: { input: 0, output: 0, cached: 0 }
    })
    const deferred = k === undefined && row.parentId !== null && asking.has(row.parentId)
    const now = (event: () => void) => deferred ? later(row.agentId, row.parentId!, event) : event()
    if (k === undefined) {
      const agent: Known = { snapshot: snapshot(undefined), status: "pending", started: false, own: row.tokens }
      k = agent
      known.set(row.agentId, agent)
      now(() => emit("spawned", agent))
    } else {
      k.snapshot = snapshot(k.snapshot)
      k.own = row.tokens
    }
    const was = k.status
    k.status = row.status
    const agent = k
    if (row.status === "running") now(() => start(agent))
    if (row.status !== was) {
      if (row.status === "completed" || row.status === "failed" || row.status === "cancelled") {
        // A completed row's checked claims: how many its record does not back, as the embedded event says.
        const unverified = row.claims === undefined ? 0 : row.claims.checked - row.claims.verified
        const end = () =>
          emit(row.status as EventType, agent, {
            ...(row.reason === null ? {} : { reason: row.reason }),
            ...(row.status === "completed" && unverified > 0 ? { unverified } : {})
          })
        if (last.has(row.agentId)) ends.set(row.agentId, end)
        else now(end)
      }
    }
  }
  changes.messages.forEach((m, i) => {
    const k = known.get(m.agentId)
    if (k === undefined) return
    open(m.agentId)
    // An agent first seen already ended (it ran between two looks) started all the same:
    // its first message says so, before its steps.
    start(k)
    if (m.message.role === "assistant") {
      k.snapshot = { ...k.snapshot, step: Math.max(k.snapshot.step, m.at.step + 1) }
      const text = m.message.content.flatMap((part) => part.type === "text" ? [part.text] : []).join("")
      // The cluster does not stream: the answer's text arrives whole, at its step.
      if (options.text && text !== "") emit("text", k, { text })
      emit("step", k)
      for (const part of m.message.content) {
        if (part.type !== "tool-call") continue
        k.snapshot = { ...k.snapshot, toolCalls: k.snapshot.toolCalls + 1, lastTool: part.name }
        emit("tool_call", k, { tool: part.name })
      }
      for (const [child, queued] of opening) if (queued.parentId === m.agentId) open(child)
    } else if (m.message.role === "tool") {
      for (const part of m.message.content) {
        if (part.type !== "tool-result") continue
        emit("tool_result", k, {
          tool: part.name,
          isFailure: part.isFailure,
          ...(part.isFailure ? { reason: JSON.stringify(part.result).slice(0, 200) } : {})
        })
      }
    }
    if (last.get(m.agentId) === i) ends.get(m.agentId)?.()
  })
  for (const child of opening.keys()) open(child)
  return out
}

/** The questions already told: asked (a `question` event), and answered. */
export interface Told {
  readonly asked: Set<string>
  readonly answered: Set<string>
}

/**
 * The tree's questions as the embedded runtime publishes them: `question` when one waits for a
 * person, `answered` when it is decided (at its answer's time, with who decided). A question
 * decided as it was asked (a standing "always" answer) is only `answered`, as embedded.
 */
export const questionEventsOf = (
  stored: ReadonlyArray<ClusterQuestions.Stored>,
  known: ReadonlyMap<string, Known>,
  told: Told
): Array<AgentEvent> => {
  const out: Array<AgentEvent> = []
  for (const { answer, answeredAt, question } of stored) {
    const k = known.get(question.agentId)
    if (k === undefined) continue
    const agent = k.snapshot
    const decidedAtOnce = answer !== undefined && answeredAt === question.askedAt
    if (!told.asked.has(question.id)) {
      told.asked.add(question.id)
      if (!decidedAtOnce) out.push({ type: "question", agent, at: question.askedAt, tool: question.tool, question })
    }
    if (answer !== undefined && !told.answered.has(question.id)) {
      told.answered.add(question.id)
      out.push({ type: "answered", agent, at: answeredAt ?? question.askedAt, tool: question.tool, question, answer })
    }
  }
  return out
}

/**
 * Follows the tree of `rootId`: `onEvent` gets each event, in order, until interrupted.
 * Returns `drain`, which reads what changed since the last look (call it once the run is over).
 */
export const follow = (
  rootId: string,
  onEvent: (event: AgentEvent) => Effect.Effect<void>,
  pollMs = 100,
  options: { readonly text: boolean } = { text: true }
) =>
  Effect.gen(function*() {
    const store: Store["Service"] = yield* ClusterStore
    const questions = yield* ClusterQuestions.ClusterQuestions
    const known = new Map<string, Known>()
    const told: Told = { asked: new Set(), answered: new Set() }
    let cursor = startCursor
    const look = Effect.gen(function*() {
      const changes = yield* store.changes(rootId, cursor)
      cursor = changes.cursor
      const now = yield* Clock.currentTimeMillis
      yield* Effect.forEach(eventsOf(changes, known, now, options), onEvent, { discard: true })
      if (questions === undefined) return
      const stored = yield* questions.ofTree(rootId)
      yield* Effect.forEach(questionEventsOf(stored, known, told), onEvent, { discard: true })
    }).pipe(Effect.ignore)
    // One look at a time: the loop and the final drain never interleave their events.
    const lock = Semaphore.makeUnsafe(1)
    const once = lock.withPermits(1)(look)
    const fiber = yield* Effect.forkChild(Effect.forever(Effect.andThen(once, Effect.sleep(Duration.millis(pollMs)))))
    return { drain: once, stop: Fiber.interrupt(fiber) }
  })

/**
 * For a `task` call whose request carried a progress token: sends the tree's events as
 * `notifications/progress` while it runs. Returns what to run when the call is done (a last
 * look, then the follower stops).
 */
export const mcpProgress = (server: McpServer.McpServer["Service"], rootId: string) =>
  Effect.gen(function*() {
    const progressToken = yield* Mcp.currentProgressToken
    if (progressToken === undefined) return Effect.void
    let progress = 0
    const send = (event: AgentEvent) => {
      progress += 1
      return server.notifications["notifications/progress"]({ progressToken, progress, message: Mcp.describe(event) })
        .pipe(Effect.ignore)
    }
    // MCP progress is the tree's steps, not the answer's text (the embedded server does not stream).
    const follower = yield* follow(rootId, send, 100, { text: false })
    return Effect.andThen(follower.drain, follower.stop)
  })
