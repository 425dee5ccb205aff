/**
 * An agent's worktree isolation in the embedded engine (`isolation: "worktree"`; "process" is
 * ProcessRun's): its worktree made when
 * it is created, its run confined to it (Workspace.Isolated on the run's fiber, so the agents
 * it starts work there too), and what it changed committed when its run ends.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { IsolationUnavailable } from "../../SubAgentErrors.ts"
import type { Isolation } from "../../SubAgentManager.ts"
import type { SubAgentRecord } from "../../SubAgentRecord.ts"
import * as Workspace from "../../Workspace.ts"
import * as Worktrees from "../../Worktrees.ts"
import type { Mutable } from "./AgentTable.ts"
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
