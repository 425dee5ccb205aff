/**
 * An agent's worktree isolation in the embedded engine (`isolation: "worktree"`; "process" is
 * ProcessRun's): its worktree made when
 * it is created, its run confined to it (Workspace.Isolated on the run's fiber, so the agents
 * it starts work there too), what it changed committed when its run ends, and its branch
 * merged or discarded by its parent (`agent_merge`), its record saying so.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Semaphore from "effect/Semaphore"
import { type AgentNotFound, IsolationUnavailable, NotOwned } from "../../SubAgentErrors.ts"
import type { Isolation } from "../../SubAgentManager.ts"
import { isTerminal, type SubAgentRecord } from "../../SubAgentRecord.ts"
import * as Workspace from "../../Workspace.ts"
import * as Worktrees from "../../Worktrees.ts"
import { isLive, type Mutable } from "./AgentTable.ts"
import type { ManagerContext } from "./ManagerContext.ts"

/** The isolation modes this manager can give: what an IsolationUnavailable says is accepted. */
export const accepted = (ctx: ManagerContext): Array<Isolation> => [
  ...(Option.isSome(ctx.worktrees) && ctx.workspace !== undefined ? ["worktree" as const] : []),
  ...(ctx.config.processIsolation?.host !== undefined && ctx.workspaceRoot !== undefined ? ["process" as const] : [])
]

/** The worktree of a new isolated agent, started from the tree its parent works in now. */
export const prepare = (
  ctx: ManagerContext,
  isolation: Isolation | undefined,
  agentId: string
): Effect.Effect<
  { readonly info: Worktrees.Info; readonly workspace: Workspace.Workspace["Service"] } | undefined,
  Worktrees.WorktreeError | IsolationUnavailable
> => {
  // "process": a process of its own, run by ProcessRun (no worktree).
  if (isolation === undefined || isolation === "process") return Effect.succeed(undefined)
  if (Option.isNone(ctx.worktrees) || ctx.workspace === undefined) {
    return Effect.fail(
      new IsolationUnavailable({
        mode: "worktree",
        reason: "this runtime has no workspace with worktrees (Worktrees.layer is not provided)",
        accepted: accepted(ctx)
      })
    )
  }
  const worktrees = ctx.worktrees.value
  const base = ctx.workspace
  return Effect.flatMap(Workspace.current(base), (from) => worktrees.create(from.root, agentId))
}

/** `run` confined to the agent's worktree, when it has one. */
export const confine = <A, E, R>(
  ctx: ManagerContext,
  record: SubAgentRecord,
  run: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> => {
  const info = record.worktree
  if (info === undefined || Option.isNone(ctx.worktrees)) return run
  return Effect.flatMap(
    ctx.worktrees.value.workspaceOf(info),
    (workspace) => Effect.provideService(run, Workspace.Isolated, workspace)
  )
}

/** At the end of a run: what the agent changed, committed on its branch, counted in its record. */
export const commit = (ctx: ManagerContext, record: Mutable<SubAgentRecord>) => {
  const info = record.worktree
  if (info === undefined || Option.isNone(ctx.worktrees)) return Effect.void
  const message = record.outcome?.summary || `${record.description} (${record.status})`
  return ctx.worktrees.value.finish(info, `${message}\n\nfibril agent ${record.agent_id}`).pipe(
    Effect.map((finished) => {
      record.worktree = finished
    }),
    Effect.catch((error) =>
      Effect.logWarning(`agent ${record.agent_id}: its worktree was not committed: ${error.message}`)
    )
  )
}

/**
 * `agent_merge`: the isolated agent's branch merged into the caller's tree (`into`, its
 * workspace) or discarded, and the outcome written to the agent's record (`worktree.state`,
 * `removed`), so `agent_list`, results and `fibril agents list` stop showing a branch that
 * is gone. Only its parent may do it (the client, for a top-level agent): a branch goes into
 * the tree of the agent that asked for the work.
 */
export const merge = (
  ctx: ManagerContext,
  request: Parameters<typeof mergeOnce>[1]
) => {
  // One merge at a time per manager: two agent_merge calls of one agent in one model turn (tool
  // calls run concurrently) would both pass the `state` check, and the second fail in git.
  let lock = locks.get(ctx.table)
  if (lock === undefined) {
    lock = Semaphore.makeUnsafe(1)
    locks.set(ctx.table, lock)
  }
  return lock.withPermits(1)(mergeOnce(ctx, request))
}

const locks = new WeakMap<object, Semaphore.Semaphore>()

const mergeOnce = (
  ctx: ManagerContext,
  request: {
    readonly callerId: string | undefined
    readonly agentId: string
    readonly into: string
    readonly action: "merge" | "discard"
  }
): Effect.Effect<
  Worktrees.MergeResult,
  | AgentNotFound
  | NotOwned
  | IsolationUnavailable
  | Worktrees.NotMergeable
  | Worktrees.NotTheParent
  | Worktrees.WorktreeError
> =>
  Effect.gen(function*() {
    if (Option.isNone(ctx.worktrees)) {
      return yield* new IsolationUnavailable({
        mode: "worktree",
        reason: "this runtime has no workspace with worktrees, so there is nothing to merge",
        accepted: accepted(ctx)
      })
    }
    const target = yield* ctx.table.lookupAny(request.agentId)
    if (!isLive(target)) {
      return yield* new NotOwned({ agentId: target.agent_id, owner: ownerOf(target) })
    }
    const record = target.record
    const agentId = record.agent_id
    const info = record.worktree
    if (info === undefined) {
      return yield* new Worktrees.NotMergeable({ agentId, reason: "it was not spawned with isolation \"worktree\"" })
    }
    if (record.parent_id !== request.callerId) {
      return yield* new Worktrees.NotTheParent({
        agentId,
        ...(record.parent_id === undefined ? {} : { parentId: record.parent_id }),
        ...(request.callerId === undefined ? {} : { callerId: request.callerId })
      })
    }
    if (info.state !== undefined) {
      return yield* new Worktrees.NotMergeable({
        agentId,
        reason: `its branch ${info.branch} was ${info.state} already${
          info.removed === true ? " and removed" : " (kept: see it with git)"
        }`
      })
    }
    if (!isTerminal(record.status)) {
      return yield* new Worktrees.NotMergeable({
        agentId,
        reason: `it is ${record.status}; wait for it (agent_wait) so its changes are committed first`
      })
    }
    const worktrees = ctx.worktrees.value
    const result = request.action === "discard"
      ? yield* worktrees.discard(agentId, info)
      : yield* worktrees.merge(request.into, agentId, info)
    record.worktree = Worktrees.settled(info, result)
    yield* ctx.store.put(record)
    return result
  })

const ownerOf = (record: SubAgentRecord) =>
  `pid ${record.owner_pid ?? "unknown"}${record.owner_host === undefined ? "" : ` on ${record.owner_host}`}`
