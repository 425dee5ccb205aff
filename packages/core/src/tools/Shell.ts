/**
 * shell — run `sh -c <command>` in the workspace root and report what happened.
 *
 * The command runs in the operating-system sandbox its agent's permissions call for
 * (`Sandbox`): read-only for an agent that may not write, the workspace writable for one
 * that may. An agent that may not write, where no sandbox works, gets a `SandboxUnavailable`
 * result saying how to enable one, and nothing runs.
 *
 * The process is spawned inside its own scope through `ChildProcessSpawner`, which puts
 * it in a fresh process group (`detached` defaults to true on POSIX): closing the scope,
 * whether the command finished, timed out or the calling fiber was interrupted, signals
 * the whole group (SIGTERM, then SIGKILL), so background grandchildren die with it. In the
 * sandbox, bubblewrap's pid namespace ends every process the command started, including
 * those that left the group with `setsid`; without it, every process the command started
 * is found by an entry in its environment and killed before the result is returned.
 * A non-zero exit is a normal result the model reads, not a failure; only a spawn that
 * cannot happen at all fails the call. Output is kept bounded while it streams (head and
 * tail), so a command that prints gigabytes cannot exhaust memory.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { accessOfCaller } from "../internal/callerAccess.ts"
import * as GitStatus from "../internal/gitStatus.ts"
import { text } from "../internal/resource.ts"
import * as Sandbox from "../Sandbox.ts"
import * as ToolRegistry from "../ToolRegistry.ts"
import { Workspace } from "../Workspace.ts"
import { describe } from "./Common.ts"

export const name = "shell"
/** Upper bound for `timeout_ms`: one hour. */
export const maxTimeoutMs = 3_600_000
/** After the shell exits, how long to wait for its pipes to drain (a background child may hold them). */
const drainGrace = Duration.millis(500)
/**
 * Between SIGTERM and SIGKILL when the process group is stopped. Short, because an
 * interrupted call (cancel, Ctrl-C) waits for it: a command that ignores SIGTERM still ends
 * well within a second.
 */
const forceKillAfter = Duration.millis(400)
/**
 * How long a call waits for its process scope to close. After SIGKILL the spawner polls the
 * process group until its members are *reaped*, which an init that reaps lazily can stretch
 * to a second; the processes are already dead, so the call returns and that poll finishes
 * in the background.
 */
const closeWithin = Duration.millis(700)

const closeBounded = (scope: Scope.Closeable, exit: Exit.Exit<unknown, unknown>) =>
  Effect.flatMap(
    Effect.forkDetach(Scope.close(scope, exit)),
    (closing) => Effect.ignore(Effect.timeoutOption(Fiber.await(closing), closeWithin))
  )

const description = text("./shell.md", import.meta.url)

export const Parameters = Schema.Struct({
  command: Schema.String.annotate({
    description: "Shell command line, run as `sh -c <command>` in the workspace root"
  }),
  timeout_ms: Schema.optionalKey(
    Schema.Int.pipe(Schema.check(Schema.isGreaterThanOrEqualTo(1))).annotate({
      description: `Timeout in milliseconds (default: the configured shell timeout; at most ${maxTimeoutMs})`
    })
  )
})
export type Parameters = typeof Parameters.Type

/**
 * What the model gets back. `exit_code` is null when the process was killed by a signal or
 * timed out (in the sandbox, a command killed by a signal reports 128 + the signal, as shells
 * do). `sandbox` says where the command ran: "read-only", "workspace-write", or "none".
 */
export interface Result {
  readonly exit_code: number | null
  readonly stdout: string
  readonly stderr: string
  readonly timed_out: boolean
  readonly sandbox: Sandbox.Confinement
  /**
   * The workspace files the command changed, as `git status` before and after it shows them
   * (workspace-relative): present only for a command that may write, in a git work tree.
   * Whatever else changed the workspace while it ran is listed too.
   */
  readonly changed?: ReadonlyArray<string>
}

export interface Options {
  readonly shellTimeoutSecs: number
  readonly maxOutputChars: number
}

/**
 * A bounded text capture: the first half of the budget is kept as is, then a rolling
 * tail; the middle of an oversized output becomes a `[... N chars omitted ...]` marker.
 */
export const makeCapture = (maxChars: number) => {
  const decoder = new TextDecoder("utf-8")
  const headMax = Math.ceil(maxChars / 2)
  const tailMax = maxChars - headMax
  let head = ""
  let tail = ""
  let total = 0
  const add = (chunk: string) => {
    total += chunk.length
    let rest = chunk
    if (head.length < headMax) {
      const take = headMax - head.length
      head += rest.slice(0, take)
      rest = rest.slice(take)
    }
    if (rest === "") return
    tail += rest
    // Trim lazily (at twice the budget) so appending stays amortised O(1) per char.
    if (tail.length > 2 * tailMax + 1024) tail = tail.slice(tail.length - tailMax)
  }
  return {
    append: (bytes: Uint8Array) => add(decoder.decode(bytes, { stream: true })),
    render: (): string => {
      add(decoder.decode())
      if (total <= maxChars) return head + tail
      const kept = tailMax === 0 ? "" : tail.slice(-tailMax)
      return `${head}\n[... ${total - head.length - kept.length} chars omitted ...]\n${kept}`
    }
  }
}

type Capture = ReturnType<typeof makeCapture>

const drain = (stream: Stream.Stream<Uint8Array, unknown>, capture: Capture) =>
  Stream.runForEach(stream, (bytes) => Effect.sync(() => capture.append(bytes))).pipe(Effect.ignore)

/** How long a `git status` may take before the comparison is given up. */
const gitTimeout = Duration.seconds(5)

/**
 * Runs a script for GitStatus as the agent's command ran: read-only in the sandbox, or
 * unconfined when the command was (`none`: git can then do nothing the command could not).
 */
const gitRun = (
  sandbox: Sandbox.Sandbox["Service"],
  confinement: Sandbox.Confinement,
  policy: Sandbox.Policy
): GitStatus.Run =>
(script) =>
  Effect.gen(function*() {
    const readOnly: Sandbox.Policy = confinement === "none"
      ? policy
      : { ...policy, mode: "read-only", network: false, writable: [] }
    const launched = yield* sandbox.launch(readOnly, script, { stdin: "ignore", stderr: "ignore" })
    const { handle } = yield* sandbox.spawn(launched)
    const [output, code] = yield* Effect.all(
      [Stream.mkString(Stream.decodeText(handle.stdout)), handle.exitCode],
      { concurrency: "unbounded" }
    )
    return Number(code) === 0 ? Option.some(output) : Option.none<string>()
  }).pipe(
    Effect.scoped,
    Effect.timeoutOption(gitTimeout),
    Effect.map(Option.flatten),
    Effect.orElseSucceed(() => Option.none<string>())
  )

export const definition = (options: Options) =>
  ToolRegistry.define({
    name,
    description,
    parameters: Parameters,
    posture: "shell",
    handler: Effect.fn("tool.shell")(function*(params: Parameters, context: ToolRegistry.ToolCallContext) {
      const sandbox = yield* Sandbox.Sandbox
      const registry = yield* ToolRegistry.ToolRegistry
      // The shell may write no more than the agent's own write tools may.
      const access = yield* accessOfCaller(registry, context.rules)
      const policy = sandbox.policy(context.role, context.rules?.label ?? `${context.role} agent`, access)
      const launch = yield* sandbox.launch(policy, params.command, {
        stdin: "ignore",
        killSignal: "SIGTERM",
        forceKillAfter
      })
      // A command that may write is bracketed by `git status` (in a git work tree): what it
      // changed is in its result, where Claims finds a change its agent lists under CHANGES.
      // git runs confined like the command, but read-only (internal/gitStatus.ts says why).
      const workspace = yield* Workspace
      const status = launch.sandbox === "read-only" ? undefined : gitRun(sandbox, launch.sandbox, policy)
      const before = status === undefined ? undefined : yield* GitStatus.snapshot(status)
      const timeoutMs = Math.min(params.timeout_ms ?? options.shellTimeoutSecs * 1000, maxTimeoutMs)
      const stdout = makeCapture(options.maxOutputChars)
      const stderr = makeCapture(options.maxOutputChars)

      const body = Effect.gen(function*() {
        const { handle } = yield* sandbox.spawn(launch).pipe(
          Effect.mapError((error) =>
            new ToolRegistry.ToolFailure({
              tool: name,
              reason: `could not start ${launch.sandbox === "none" ? "sh" : "the sandbox"}: ${describe(error)}`
            })
          )
        )
        const drains = yield* Effect.forkChild(
          Effect.all([drain(handle.stdout, stdout), drain(handle.stderr, stderr)], { concurrency: "unbounded" })
        )
        // A failed exitCode means the shell died from a signal: no exit code to report.
        const exitCode = yield* handle.exitCode.pipe(
          Effect.map((code): number | null => Number(code)),
          Effect.orElseSucceed(() => null)
        )
        yield* Fiber.join(drains).pipe(Effect.timeoutOption(drainGrace))
        return exitCode
      })
      // Closing the scope stops the process group (the sandbox), also on timeout/interrupt.
      const run = Effect.flatMap(
        Scope.make(),
        (scope) => body.pipe(Scope.provide(scope), Effect.onExit((exit) => closeBounded(scope, exit)))
      )

      const outcome = yield* run.pipe(Effect.timeoutOption(Duration.millis(timeoutMs)))
      const result: Result = {
        exit_code: Option.getOrNull(outcome),
        stdout: stdout.render(),
        stderr: stderr.render(),
        timed_out: Option.isNone(outcome),
        sandbox: launch.sandbox
      }
      if (status === undefined || before === undefined) return result
      const after = yield* GitStatus.snapshot(status)
      if (after === undefined) return result
      const changed = GitStatus.changedBetween(before, after).flatMap((path) =>
        workspace.containsLexically(path) ? [workspace.relative(path)] : []
      )
      return { ...result, changed }
    })
  })
