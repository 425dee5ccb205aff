/**
 * `fibril agents questions [--json]` and `fibril agents answer <id> allow|deny [--reason] [--always]`:
 * the approval questions (`ask` rules) waiting in any process on the workspace, and an answer
 * to one, through the store every process shares (StoredQuestions.ts). The process whose agent
 * asked decides the question at its next request poll, within a second.
 */
import type * as Approvals from "@fibril/core/Approvals"
import type * as StoredQuestions from "@fibril/core/StoredQuestions"
import { Argument, Command, Flag } from "effect/cli"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { resolveCwd, stateDir as stateDirOf } from "./CliEnvironment.ts"
import * as CliFlags from "./CliFlags.ts"
import * as ClusterCommand from "./ClusterCommand.ts"
import * as Output from "./Output.ts"

const line = (entry: StoredQuestions.Pending): string => {
  const { agent, question } = entry
  return `${question.id}  ${question.kind === "fan_out" ? "fan-out" : question.tool}  agent ${agent.agent_id} ` +
    `(${question.role}, depth ${question.depth}, pid ${agent.owner_pid ?? "unknown"})\n` +
    `  why: ${question.reason}\n  path: ${question.path.join(" > ")}\n  arguments: ${question.arguments}`
}

/**
 * Runs a command on the cluster when a URL is given (flag > environment > config), else `local`
 * (AgentsCommand's `onCluster`); `X`: what it needs besides the commands' own services.
 */
export type OnCluster<X> = <A, E, R, E2, R2>(
  flags: { readonly cluster: Option.Option<string>; readonly cwd: Option.Option<string> },
  cluster: (url: string) => Effect.Effect<number, E2, R2>,
  local: Effect.Effect<A, E, R>
) => Effect.Effect<A | void, E | E2, R | R2 | X>

const loadClusterAgents = Effect.promise(() => import("./ClusterAgents.ts"))
// The store and its questions, imported when a subcommand runs (parsing and help do not load them).
const loadStore = Effect.promise(() =>
  Promise.all([
    import("./WorkspaceStore.ts"),
    import("@fibril/core/StoredQuestions"),
    import("@fibril/core/SubAgentStore")
  ])
)

/** The two subcommands of `fibril agents`; with a cluster URL they read and answer its questions. */
export const make = <X>(onCluster: OnCluster<X>) => {
  const output = Output.console(false)
  const questions = Command.make(
    "questions",
    { json: CliFlags.jsonDocument, cwd: CliFlags.cwd, cluster: ClusterCommand.clusterFlag },
    (flags) =>
      onCluster(
        flags,
        (url) => Effect.flatMap(loadClusterAgents, (c) => c.questions(url, flags.json)),
        Effect.gen(function*() {
          const [{ withStore }, StoredQuestions, SubAgentStore] = yield* loadStore
          const stateDir = stateDirOf(yield* resolveCwd(flags.cwd))
          const waiting = yield* withStore(stateDir, [], (store) =>
            StoredQuestions.pending.pipe(Effect.provideService(SubAgentStore.SubAgentStore, store)))
          if (flags.json) {
            return yield* output.line(JSON.stringify(
              waiting.map((entry) =>
                entry.question
              ),
              null,
              2
            ))
          }
          if (waiting.length === 0) return yield* output.line("no questions wait for an answer")
          for (const entry of waiting) yield* output.line(line(entry))
          yield* output.line(`answer with: fibril agents answer <id> allow|deny [--reason "…"]`)
        })
      )
  ).pipe(Command.withDescription("Questions of `ask` rules waiting for a person, in any process on the workspace"))

  const answer = Command.make(
    "answer",
    {
      id: Argument.String("id").pipe(Argument.withDescription("The question's id (fibril agents questions)")),
      decision: Argument.Literals("decision", ["allow", "deny"]).pipe(
        Argument.withDescription("allow or deny")
      ),
      reason: Flag.String("reason").pipe(
        Flag.withDescription("Why (a deny's reason is what the model reads)"),
        Flag.optional
      ),
      always: Flag.Boolean("always").pipe(
        Flag.withDescription("Allow this tool for the rest of the run in the asking agent's tree"),
        Flag.withDefault(false)
      ),
      cwd: CliFlags.cwd,
      cluster: ClusterCommand.clusterFlag
    },
    (flags) => {
      const given: Approvals.Answer = {
        decision: flags.decision,
        by: `process ${process.pid} (fibril agents answer)`,
        ...(Option.isSome(flags.reason) ? { reason: flags.reason.value } : {}),
        ...(flags.always && flags.decision === "allow" ? { always: true } : {})
      }
      return onCluster(
        flags,
        (url) => Effect.flatMap(loadClusterAgents, (c) => c.answer(url, flags.id, given)),
        Effect.gen(function*() {
          const [{ withStore }, StoredQuestions, SubAgentStore] = yield* loadStore
          const stateDir = stateDirOf(yield* resolveCwd(flags.cwd))
          const sent = yield* withStore(
            stateDir,
            undefined,
            (store) =>
              StoredQuestions.answer(flags.id, given).pipe(Effect.provideService(SubAgentStore.SubAgentStore, store))
          )
          if (sent === undefined) {
            return yield* output.line(`no agents are recorded in ${stateDir}`)
          }
          yield* output.line(
            `${flags.id}: ${flags.decision} sent to the process that runs ${sent.agent.agent_id} ` +
              `(pid ${sent.agent.owner_pid ?? "unknown"}); it acts on it within a second`
          )
        })
      )
    }
  ).pipe(Command.withDescription("Answer a question of an `ask` rule, in whichever process asked it"))
  return [questions, answer] as const
}
