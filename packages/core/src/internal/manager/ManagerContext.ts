/**
 * ManagerContext — what every part of the embedded SubAgentManager works on, named once and
 * passed as the first argument (instead of a dozen locals shared by one closure).
 */
import * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { AgentEvents } from "../../AgentEvents.ts"
import type { RunObserver, Session } from "../../Session.ts"
import type * as SpawnPlan from "../../SpawnPlan.ts"
import type { Options } from "../../SubAgentManager.ts"
import type { SubAgentStore } from "../../SubAgentStore.ts"
import type { Workspace } from "../../Workspace.ts"
import type { Worktrees } from "../../Worktrees.ts"
import type * as Permits from "../permits.ts"
import type { AgentTable, Target } from "./AgentTable.ts"

export interface ManagerContext {
  readonly config: Options
  readonly session: Session["Service"]
  readonly store: SubAgentStore["Service"]
  readonly events: AgentEvents["Service"]
  /** What spawn requests are planned against (SpawnPlan): the models, the tools, the settings. */
  readonly plans: SpawnPlan.Context
  /** `maxConcurrent` sub-agent permits (internal/permits.ts). */
  readonly permits: Permits.Permits
  readonly table: AgentTable
  /** This process, as records name their owner. */
  readonly bootId: string
  /** The manager's scope: detached agents, roots and the watchdog live in it. */
  readonly scope: Scope.Scope
  /** Bound on each part of a result and on reasons. */
  readonly maxResultChars: number
  /** The workspace root: where a process child (isolation "process") starts. */
  readonly workspaceRoot: string | undefined
  /** How the manager takes part in the runs of the sessions it creates (given at creation). */
  readonly observer: RunObserver
  /** The root workspace, and worktrees for `isolation: "worktree"` (both absent: no isolation here). */
  readonly workspace: Workspace["Service"] | undefined
  readonly worktrees: Option.Option<Worktrees["Service"]>
}

/**
 * `waiting`, in the run of agent `callerId`: with queue admission its permit is lent meanwhile
 * to one of `targets` that is queued (internal/permits.ts).
 */
export const lendWhile = <A, E>(
  ctx: Pick<ManagerContext, "permits" | "table">,
  callerId: string | undefined,
  targets: ReadonlyArray<Target>,
  waiting: Effect.Effect<A, E>
): Effect.Effect<A, E> =>
  Effect.suspend(() => {
    const lender = callerId === undefined ? undefined : ctx.table.agents.get(callerId)
    return lender === undefined ? waiting : ctx.permits.lendWhile(lender, new Set(targets), waiting)
  })
