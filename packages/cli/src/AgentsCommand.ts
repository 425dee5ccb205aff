/**
 * `fibril agents list [--all] [--json] | show <id> | cancel <id> | resume <id> | transcript <id>`
 * (and `questions` / `answer`, QuestionsCommand.ts)
 * over the store every process on the workspace shares (`.fibril/state/fibril.db`). An agent
 * is named by its id, its session name (`amber-heron`) or a run id; `transcript` also takes
 * its transcript handle. `show` prints the agent's run receipt (Receipt.ts): its runs, event
 * log, inputs, artifacts, provenance, and where to follow up or take over.
 *
 * `list`, `show`, `transcript` and `cancel` open the store only (no model, no manager):
 * records of processes that are gone are reconciled (they read `interrupted`) before
 * anything is shown, and an agent another live process runs is cancelled by a request that
 * process acts on. `resume` loads a manager, which takes the agent over and runs it here.
 *
 * With a cluster URL (`--cluster`, FIBRIL_CLUSTER_URL or `[cluster] url`) each command is a
 * client of the cluster instead (ClusterAgents.ts). The command tree is AgentsCli.ts, which
 * imports this module when a subcommand runs.
 */
import * as Receipt from "@fibril/core/Receipt"
import * as SubAgentManager from "@fibril/core/SubAgentManager"
import { agentOfRunId, currentRunId, isTerminal, type SubAgentRecord } from "@fibril/core/SubAgentRecord"
import * as SubAgentStore from "@fibril/core/SubAgentStore"
import * as TranscriptView from "@fibril/core/TranscriptView"
import * as Prompt from "effect/ai/Prompt"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Output from "./Output.ts"
import { withStore } from "./WorkspaceStore.ts"

export class AgentNotRecorded extends Schema.TaggedError<AgentNotRecorded>()("AgentNotRecorded", {
  agentId: Schema.String,
  dir: Schema.String
}) {
  override get message() {
    return `no agent "${this.agentId}" is recorded in ${this.dir}; \`fibril agents list --all\` shows the recorded ones`
  }
}

export class AgentUnreadable extends Schema.TaggedError<AgentUnreadable>()("AgentUnreadable", {
  agentId: Schema.String,
  dir: Schema.String,
  error: Schema.String
}) {
  override get message() {
    return `agent ${this.agentId} is recorded in ${this.dir}, but its record cannot be read: ${this.error}. ` +
      "It was written by another Fibril version or damaged; the row is kept as it is"
  }
}

/** Who runs (or ran) an agent, as seen from here. */
export interface OwnerView {
  readonly pid: number | null
  readonly host: string | null
  /** `alive`: another live process runs it (or ran it); `gone`: that process has ended. */
  readonly state: "alive" | "gone"
}

export interface TreeNode {
  readonly agent: SubAgentRecord
  readonly owner: OwnerView
  readonly children: ReadonlyArray<TreeNode>
}

export const ownerOf = (store: SubAgentStore.SubAgentStore["Service"], record: SubAgentRecord) =>
  Effect.map(store.liveness(record.session_boot_id), (liveness): OwnerView => ({
    pid: record.owner_pid ?? null,
    host: record.owner_host ?? null,
    state: liveness === "gone" ? "gone" : "alive"
  }))

/** Parent → children forests, oldest first; an agent whose parent is not listed is a root. */
export const forest = (agents: ReadonlyArray<SubAgentRecord>, owners: ReadonlyMap<string, OwnerView>) => {
  const ids = new Set(agents.map((agent) => agent.agent_id))
  const byParent = new Map<string | undefined, Array<SubAgentRecord>>()
  for (const agent of [...agents].sort((a, b) => a.created_at - b.created_at)) {
    const parent = agent.parent_id !== undefined && ids.has(agent.parent_id) ? agent.parent_id : undefined
    const siblings = byParent.get(parent) ?? []
    siblings.push(agent)
    byParent.set(parent, siblings)
  }
  const build = (agent: SubAgentRecord): TreeNode => ({
    agent,
    owner: owners.get(agent.agent_id) ?? { pid: null, host: null, state: "gone" },
    children: (byParent.get(agent.agent_id) ?? []).map(build)
  })
  return (byParent.get(undefined) ?? []).map(build)
}

const time = (ms: number | undefined) =>
  ms === undefined ? "" : `${new Date(ms).toISOString().slice(0, 19).replace("T", " ")}Z`

const ownerText = (agent: SubAgentRecord, owner: OwnerView) => {
  const who = owner.pid === null ? "unknown process" : `pid ${owner.pid}${owner.host === null ? "" : `@${owner.host}`}`
  if (isTerminal(agent.status)) return who
  return `${who}, ${owner.state === "alive" ? "another live process" : "gone"}`
}

/** One agent as a line of the tree. */
export const nodeLine = (node: TreeNode): string => {
  const { agent } = node
  const times = agent.finished_at !== undefined
    ? `${time(agent.started_at ?? agent.created_at)} → ${time(agent.finished_at)}`
    : `since ${time(agent.started_at ?? agent.created_at)}`
  return `${agent.agent_id}  ${agent.status.padEnd(11)} ${agent.role.padEnd(11)} ${agent.description}  [${times}; ${
    ownerText(agent, node.owner)
  }]${agent.reason === undefined ? "" : `  — ${agent.reason}`}${worktreeText(agent)}`
}

/**
 * An isolated agent's worktree and branch (`isolation: "worktree"`): where it is while its
 * branch waits for agent_merge; once merged or discarded, that, and whether it is gone.
 */
const worktreeText = (agent: SubAgentRecord): string => {
  const worktree = agent.worktree
  if (worktree === undefined) return ""
  const counts = worktree.commits === undefined ?
    "" :
    ` (${plural(worktree.commits, "commit")}, ${plural(worktree.files_changed ?? 0, "file")} changed)`
  if (worktree.state === undefined) return `  worktree ${worktree.path} on ${worktree.branch}${counts}`
  const left = worktree.removed === true
    ? "worktree and branch removed"
    : `kept: worktree ${worktree.path} on ${worktree.branch}`
  return `  worktree ${worktree.state}${counts}; ${left}`
}

const plural = (count: number, word: string) => `${count} ${word}${count === 1 ? "" : "s"}`

/** A row that does not decode, as a line of `agents list`. */
export const unreadableLine = (row: SubAgentStore.Unreadable): string =>
  `${row.agent_id}  unreadable  [created ${time(row.created_at)}; status column ${row.status}]  — ${row.error}`

export const renderForest = (roots: ReadonlyArray<TreeNode>): ReadonlyArray<string> => {
  const lines: Array<string> = []
  const walk = (node: TreeNode, prefix: string, last: boolean, top: boolean) => {
    lines.push(top ? nodeLine(node) : `${prefix}${last ? "└─ " : "├─ "}${nodeLine(node)}`)
    const next = top ? "" : `${prefix}${last ? "   " : "│  "}`
    node.children.forEach((child, i) => walk(child, next, i === node.children.length - 1, false))
  }
  for (const root of roots) walk(root, "", true, true)
  return lines
}

const nodeJson = (node: TreeNode): unknown => ({
  ...node.agent,
  owner: node.owner,
  children: node.children.map(nodeJson)
})

/**
 * The agents as trees. Without `all`: every tree that still has a pending or running agent
 * (in any process); with it, every recorded tree.
 */
export const list = Effect.fn("fibril.agents.list")(function*(
  stateDir: string,
  all: boolean,
  json: boolean,
  output: Output.Output
) {
  const { roots, unreadable } = yield* withStore(
    stateDir,
    { roots: [] as ReadonlyArray<TreeNode>, unreadable: [] as ReadonlyArray<SubAgentStore.Unreadable> },
    (store) =>
      Effect.gen(function*() {
        yield* store.reconcile
        const records = yield* store.all
        const owners = new Map<string, OwnerView>()
        for (const record of records) owners.set(record.agent_id, yield* ownerOf(store, record))
        const trees = forest(records, owners)
        const live = (node: TreeNode): boolean => !isTerminal(node.agent.status) || node.children.some(live)
        // Rows that do not decode are shown (without --all, those whose status column is live).
        const shown = (yield* store.unreadable).filter((row) =>
          all || row.status === "pending" || row.status === "running"
        )
        return { roots: all ? trees : trees.filter(live), unreadable: shown }
      })
  )
  if (json) {
    return yield* output.line(JSON.stringify([
      ...roots.map(nodeJson),
      ...unreadable.map((row) => ({ ...row, unreadable: true, children: [] }))
    ]))
  }
  for (const row of unreadable) yield* output.line(unreadableLine(row))
  if (roots.length === 0 && unreadable.length > 0) return
  if (roots.length === 0) {
    return yield* output.line(
      all ? `No agents recorded in ${stateDir}.` : "No agent is running; --all shows every recorded one."
    )
  }
  for (const line of renderForest(roots)) yield* output.line(line)
})

/** The agent named by an id, a session name (the most recent such), a run id or a transcript handle. */
const find = (store: SubAgentStore.SubAgentStore["Service"], stateDir: string, id: string) =>
  Effect.gen(function*() {
    yield* store.reconcile
    const direct = yield* store.get(id)
    if (Option.isSome(direct)) return direct.value
    const run = agentOfRunId(id)
    let found: SubAgentRecord | undefined
    for (const record of yield* store.all) {
      const matches = record.agent_id === run || record.transcript_handle === id || Receipt.sessionName(record) === id
      if (matches && (found === undefined || record.created_at >= found.created_at)) found = record
    }
    if (found === undefined) {
      const unreadable = (yield* store.unreadable).find((row) => row.agent_id === id || row.agent_id === run)
      if (unreadable !== undefined) {
        return yield* new AgentUnreadable({ agentId: unreadable.agent_id, dir: stateDir, error: unreadable.error })
      }
      return yield* new AgentNotRecorded({ agentId: id, dir: stateDir })
    }
    return found
  })

/** The workspace of a state dir (`<workspace>/.fibril/state`). */
export const workspaceOf = (stateDir: string) => stateDir.replace(/\/\.fibril\/state\/?$/, "")

const notRecorded = (stateDir: string, id: string) => Effect.fail(new AgentNotRecorded({ agentId: id, dir: stateDir }))

/**
 * The agent's record and its receipt as seen from here: runs, events, inputs, artifacts,
 * usage and verification provenance, follow-up and takeover.
 */
export const show = Effect.fn("fibril.agents.show")(function*(stateDir: string, id: string, output: Output.Output) {
  const shown = yield* withStore(
    stateDir,
    undefined,
    (store) =>
      Effect.flatMap(
        find(store, stateDir, id),
        (agent) =>
          Effect.map(store.liveness(agent.session_boot_id), (liveness) => {
            const worker = Receipt.workerRecord(agent, {
              workspace: workspaceOf(stateDir),
              durable: true,
              owner: liveness === "self" ? "alive" : liveness
            })
            return {
              ...agent,
              ...worker,
              owner: { ...worker.owner, state: liveness === "gone" ? "gone" : "alive" }
            }
          })
      )
  )
  if (shown === undefined) return yield* notRecorded(stateDir, id)
  yield* output.line(JSON.stringify(shown, null, 2))
})

/** Cancels an agent wherever it runs: another live process is asked to (it acts within a second). */
export const cancel = Effect.fn("fibril.agents.cancel")(function*(stateDir: string, id: string, output: Output.Output) {
  const node = yield* withStore(stateDir, undefined, (store) =>
    Effect.gen(function*() {
      const agent = yield* find(store, stateDir, id)
      const after = yield* SubAgentManager.requestCancel(agent, "Cancelled from the command line").pipe(
        Effect.provideService(SubAgentStore.SubAgentStore, store)
      )
      return { agent: after, owner: yield* ownerOf(store, after), children: [] } satisfies TreeNode
    }))
  if (node === undefined) return yield* notRecorded(stateDir, id)
  yield* output.line(nodeLine(node))
  if (!isTerminal(node.agent.status)) {
    yield* output.line(
      `  the process that runs it (pid ${node.agent.owner_pid ?? "unknown"}) has not acted on the request yet`
    )
  }
})

/** Continues a finished agent here and waits for it; 0 when the resumed run completes, 1 otherwise. */
export const resume = Effect.fn("fibril.agents.resume")(function*(
  id: string,
  message: string | undefined,
  output: Output.Output
) {
  const manager = yield* SubAgentManager.SubAgentManager
  const resumed = yield* manager.resume(undefined, id, message)
  yield* output.line(`resuming ${resumed.agent_id} (${Receipt.sessionName(resumed)}) as run ${currentRunId(resumed)}`)
  const agent = yield* manager.result(resumed.agent_id, { block: true })
  yield* output.line(
    nodeLine({
      agent,
      owner: { pid: agent.owner_pid ?? null, host: agent.owner_host ?? null, state: "alive" },
      children: []
    })
  )
  if (agent.outcome !== undefined) {
    for (const text of agent.outcome.text.split("\n")) yield* output.line(`  ${text}`)
  }
  const previous = agent.runs?.at(-2)
  if (agent.status !== "completed" && previous !== undefined) {
    yield* output.line(
      `  its previous run ${previous.run_id} (${previous.status}) is kept in the record's runs: fibril agents show ${agent.agent_id}`
    )
  }
  return agent.status === "completed" ? 0 : 1
})

/**
 * An agent's transcript (by id, session name, run id or handle): every message, or with
 * `offset` / `limit` one page of them, followed by where the next page starts.
 */
export const transcript = Effect.fn("fibril.agents.transcript")(function*(
  stateDir: string,
  id: string,
  output: Output.Output,
  page: { readonly offset?: number | undefined; readonly limit?: number | undefined } = {}
) {
  const found = yield* withStore(
    stateDir,
    undefined,
    (store) =>
      Effect.flatMap(
        find(store, stateDir, id),
        (agent) => Effect.map(store.readTranscript(agent.transcript_handle), (raw) => ({ agent, raw }))
      )
  )
  if (found === undefined) return yield* notRecorded(stateDir, id)
  const messages = yield* Schema.decodeUnknownEffect(Schema.Array(Prompt.Message))(found.raw)
  const paged = page.offset !== undefined || page.limit !== undefined
  const pageAt = (offset: number | undefined) =>
    TranscriptView.page(messages, {
      handle: found.agent.transcript_handle,
      agentId: found.agent.agent_id,
      offset,
      limit: paged ? page.limit : TranscriptView.maxLimit
    })
  let shown = pageAt(page.offset)
  while (true) {
    for (const message of shown.messages) {
      yield* output.line(`[${message.role}] #${message.index}`)
      for (const text of message.text.split("\n")) yield* output.line(`  ${text}`)
      if (message.cut !== undefined) yield* output.line(`  [... ${message.cut} more characters]`)
    }
    // Without a page asked for, every page.
    if (paged || shown.next_offset === undefined) break
    shown = pageAt(shown.next_offset)
  }
  if (paged) {
    const last = shown.messages.at(-1)
    yield* output.line(
      shown.messages.length === 0
        ? `no messages from ${shown.offset} (${shown.total} in all)`
        : `messages ${shown.offset}–${last!.index} of ${shown.total}${
          shown.next_offset === undefined ? "" : `; next page: --offset ${shown.next_offset}`
        }`
    )
  }
})
