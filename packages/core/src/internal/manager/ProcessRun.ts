/**
 * ProcessRun — the run of an `isolation: "process"` agent: instead of prompting its session in
 * this process, the manager starts a child process (ProcessIsolation) whose engine runs the
 * prompt, and takes its events and end back. Everything else of the run (admission, the
 * record, the one terminal event, cancel through the run's fiber) is AgentRun's, unchanged.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { AgentSnapshot } from "../../AgentEvents.ts"
import * as AgentEvents from "../../AgentEvents.ts"
import * as ProcessIsolation from "../../ProcessIsolation.ts"
import * as Receipt from "../../Receipt.ts"
import type { PromptResult } from "../../Session.ts"
import { IsolationUnavailable } from "../../SubAgentErrors.ts"
import * as Usage from "../../Usage.ts"
import { firstSnapshot, type LiveAgent } from "./AgentTable.ts"
import { accepted } from "./isolation.ts"
import type { ManagerContext } from "./ManagerContext.ts"

/** The host and workspace a process child needs, or why this manager cannot run one. */
const ready = (
  ctx: ManagerContext
): { readonly host: ProcessIsolation.Host; readonly cwd: string } | IsolationUnavailable => {
  const host = ctx.config.processIsolation?.host
  const cwd = ctx.workspaceRoot
  if (host === undefined) {
    return new IsolationUnavailable({
      mode: "process",
      reason: "this runtime has no host program for child processes (the fibril CLI provides one)",
      accepted: accepted(ctx)
    })
  }
  if (cwd === undefined) {
    return new IsolationUnavailable({
      mode: "process",
      reason: "this runtime has no workspace for a child process to start in",
      accepted: accepted(ctx)
    })
  }
  return { host, cwd }
}

/** Why this manager cannot run a process child (refused at spawn, before anything is created), if it cannot. */
export const unavailable = (ctx: ManagerContext): IsolationUnavailable | undefined => {
  const readiness = ready(ctx)
  return readiness instanceof IsolationUnavailable ? readiness : undefined
}

/**
 * The child's budgets as this engine's createChild gave them, but a tree budget is what the
 * tree has left now: the child's process counts only its own tree.
 */
const budgetsOf = (ctx: ManagerContext, agentId: string) =>
  Effect.gen(function*() {
    const derived = Option.getOrUndefined(yield* Effect.option(ctx.session.info(agentId)))
    if (derived === undefined) return undefined
    const { treeMaxTokens, ...own } = derived.budgets
    if (treeMaxTokens === undefined) return own
    let root = derived
    for (let parent = root.parentId; parent !== undefined;) {
      const up = Option.getOrUndefined(yield* Effect.option(ctx.session.info(parent)))
      if (up === undefined) break
      root = up
      parent = up.parentId
    }
    return { ...own, treeMaxTokens: Math.max(0, treeMaxTokens - Usage.total(root.treeUsage)) }
  })

export const prompt = (
  ctx: ManagerContext,
  agent: LiveAgent,
  message: string,
  /** The model the request named (undefined: the child's catalog chooses, as its parent's would). */
  model: string | undefined
): Effect.Effect<PromptResult, ProcessIsolation.ChildProcessFailed | IsolationUnavailable> =>
  Effect.suspend((): Effect.Effect<
    PromptResult,
    ProcessIsolation.ChildProcessFailed | IsolationUnavailable
  > => {
    const options = ctx.config.processIsolation ?? ProcessIsolation.defaults
    const readiness = ready(ctx)
    if (readiness instanceof IsolationUnavailable) return Effect.fail(readiness)
    const { cwd, host } = readiness
    const record = agent.record
    const as: AgentSnapshot = firstSnapshot(record)
    let rootId: string | undefined
    // What the child's tree appended to its transcripts, in order; its root's handle is the first.
    const appended: Array<{ readonly handle: string; readonly messages: ReadonlyArray<unknown> }> = []
    const relativize = ctx.workspace?.relativize ?? ((path: string) => path)
    // What its run did, from its end line (an error end too: a failed run spent tokens).
    let counts: ProcessIsolation.RunCounts | undefined
    // What this engine derived for the child (its session here is its bookkeeping): the child's
    // process holds its root to the same rules, budgets and output schema.
    return Effect.flatMap(budgetsOf(ctx, record.agent_id), (budgets) =>
      ProcessIsolation.run({
        host,
        maxOldSpaceMb: ProcessIsolation.capFor(options, record.role),
        start: {
          prompt: message,
          role: record.role,
          ...(model === undefined ? {} : { model }),
          description: record.description,
          cwd,
          maxDepth: options.nestedDepth,
          ...(record.permissions === undefined ? {} : { rules: record.permissions }),
          ...(budgets === undefined ? {} : { budgets }),
          ...(record.output_schema === undefined ? {} : { outputSchema: record.output_schema })
        },
        onEvent: (event) => {
          if (event.agent.depth === 0) rootId ??= event.agent.agentId
          // The run's one terminal event is AgentRun.finish's: it also covers a child that died.
          if (event.agent.depth === 0 && (AgentEvents.isTerminal(event.type) || event.type === "spawned")) return
          const relabelled = ProcessIsolation.relabel(event, rootId, as)
          agent.lastProgress = event.at
          // Its tool calls and the files they changed, in its receipt, as a fiber child's are.
          if (event.agent.depth === 0 && event.type === "tool_result") {
            Receipt.toolResult(record, relabelled, relativize)
          }
          ctx.events.emit(relabelled)
        },
        onTranscript: (handle, messages) => {
          appended.push({ handle, messages })
        },
        onCounts: (reported) => {
          counts = reported
          // Its record's counts, however its run ended (AgentRun.finish reads them).
          agent.ended = { ...reported, takeUnread: () => [] }
        }
      }).pipe(
        // What it spent is its tree's, as a fiber child's is (the tree budget of later agents).
        Effect.onExit(() =>
          counts === undefined ? Effect.void : ctx.session.account(record.agent_id, counts.treeUsage, counts.usageSteps)
        ),
        // Its transcripts into this process's store, however it ended (a child killed mid-run
        // leaves what it had said): its root's under its record's handle, a nested child's
        // under its own.
        Effect.onExit(() =>
          Effect.forEach(appended, ({ handle, messages }) =>
            Effect.catch(
              ctx.store.appendTranscript(handle === appended[0]!.handle ? record.transcript_handle : handle, messages),
              (error) => Effect.logWarning(`agent ${record.agent_id}: its transcript was not kept: ${error.message}`)
            ), { discard: true })
        ),
        Effect.map(({ counts: end, output, text }): PromptResult => {
          const result = {
            sessionId: record.agent_id,
            text,
            steps: end.steps,
            toolCalls: end.toolCalls,
            usage: end.treeUsage
          }
          return output === undefined ? result : { ...result, output }
        })
      ))
  })
