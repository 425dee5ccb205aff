/**
 * ProcessIsolation — `isolation: "process"`: a sub-agent run in its own OS process.
 *
 * The child process runs the SAME engine (a host such as the CLI's `ChildHost.ts` builds
 * `Fibril.layer` and starts the child's prompt as the root of its own embedded tree); this
 * module is the parent's side of it and the protocol between the two.
 *
 * The mailbox is a pipe: one JSON line on the child's stdin (its spawn request), JSON lines
 * back on its stdout (its events, then its end). Chosen over the store's request mechanism
 * (a durable store polled for requests: latency, and a file store the memory engine does not
 * have) and over the cluster engine on a private SQLite file (a runner per child, far heavier):
 * a pipe orders the events, delivers them as they happen, and its end (EOF, an exit code or a
 * signal) says at once that the child died. The parent owns the process: it is started in a
 * process group of its own, which a cancel (an interruption of the run) kills as a whole, so
 * whatever the child's tools started dies with it.
 *
 * The child has its own heap cap (`--max-old-space-size`): a child that runs out of memory
 * kills only its own process, and the parent records the run as `failed` with the reason.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { spawn } from "node:child_process"
import { createInterface } from "node:readline"
import type { AgentEvent, AgentSnapshot } from "./AgentEvents.ts"
import type { ClaimsReport } from "./Claims.ts"
import * as Permission from "./Permission.ts"
import type { Usage } from "./Usage.ts"

/** How a child process is started: the host program (the heap cap is put before its arguments). */
export interface Host {
  readonly command: string
  readonly args: ReadonlyArray<string>
  readonly env?: Readonly<Record<string, string | undefined>> | undefined
}

export interface Options {
  /** The host that runs a child's engine; undefined: `isolation: "process"` is refused. */
  readonly host?: Host | undefined
  /** The heap cap of a child process, in MB (`--max-old-space-size`). */
  readonly maxOldSpaceMb: number
  /** The heap cap per role (or agent type), over `maxOldSpaceMb`. */
  readonly roleMaxOldSpaceMb: Readonly<Record<string, number>>
  /**
   * How many levels of children a process child may spawn below itself (they run as fibers of
   * its process, on the same engine); 0: none.
   */
  readonly nestedDepth: number
}

export const defaults: Options = { maxOldSpaceMb: 512, roleMaxOldSpaceMb: {}, nestedDepth: 0 }

/** The heap cap of a child of this role. */
export const capFor = (options: Options, role: string): number =>
  options.roleMaxOldSpaceMb[role] ?? options.maxOldSpaceMb

// --- Protocol ---

/** A child's budgets (Session's `Budgets`) as its parent's engine gave them. */
export const Budgets = Schema.Struct({
  maxSteps: Schema.Int,
  maxTokens: Schema.optionalKey(Schema.UndefinedOr(Schema.Number)),
  maxWallSecs: Schema.optionalKey(Schema.UndefinedOr(Schema.Number)),
  treeMaxTokens: Schema.optionalKey(Schema.UndefinedOr(Schema.Number))
})

/**
 * The one line the parent writes: the child's spawn request, as its own root agent. The child
 * is held to what its parent's engine derived for it, as a fiber child would be: its rules (a
 * ceiling over the root rules of the child's process), its budgets and its typed result.
 */
export const Start = Schema.Struct({
  prompt: Schema.String,
  role: Schema.String,
  model: Schema.optionalKey(Schema.String),
  description: Schema.optionalKey(Schema.String),
  allowedTools: Schema.optionalKey(Schema.Array(Schema.String)),
  cwd: Schema.String,
  /** The depths its own children may still use (the parent's max depth less the child's depth). */
  maxDepth: Schema.Int,
  rules: Schema.optionalKey(Permission.RulesJson),
  budgets: Schema.optionalKey(Budgets),
  /** Its `output_schema`: it answers a decoded value, sent back in its end line. */
  outputSchema: Schema.optionalKey(Schema.Record(Schema.String, Schema.Unknown))
})
export type Start = typeof Start.Type

/** What the child's run did (SubAgentRecord's counts), in its end line. */
export interface RunCounts {
  readonly model: string
  readonly steps: number
  readonly toolCalls: number
  readonly lastTool: string | undefined
  readonly treeUsage: Usage
  readonly usageSteps: { readonly reported: number; readonly estimated: number }
  /** A completed answer's claims, checked in the child against its own conversation. */
  readonly claims?: ClaimsReport | undefined
}

/** A line the child writes. */
export type Line =
  | { readonly type: "event"; readonly event: AgentEvent }
  /**
   * Messages appended to an agent's transcript in the child (its root's or a nested child's,
   * by handle; encoded as a store keeps them), sent as they are appended.
   */
  | { readonly type: "transcript"; readonly handle: string; readonly messages: ReadonlyArray<unknown> }
  /** Its answer; with an output schema, `output` is the decoded value (`text` its JSON). */
  | { readonly type: "end"; readonly text: string; readonly output?: unknown; readonly counts: RunCounts }
  | { readonly type: "error"; readonly reason: string; readonly counts?: RunCounts | undefined }

/** The marker Node prints when a heap reaches `--max-old-space-size`. */
const outOfMemoryMarker = /heap out of memory|Reached heap limit/

// --- Errors ---

/** The child's process ended without an answer: it crashed, ran out of memory, or its run failed. */
export class ChildProcessFailed extends Schema.TaggedError<ChildProcessFailed>()("ChildProcessFailed", {
  pid: Schema.optional(Schema.Int),
  exitCode: Schema.NullOr(Schema.Int),
  signal: Schema.NullOr(Schema.String),
  outOfMemory: Schema.Boolean,
  maxOldSpaceMb: Schema.Int,
  /** The child's own reason (its run failed), or the end of what it printed on stderr. */
  detail: Schema.String
}) {
  override get message() {
    const how = this.signal === null ? `exit code ${this.exitCode}` : `exit signal ${this.signal}`
    if (this.outOfMemory) {
      return `the sub-agent's process ran out of memory (its heap cap is ${this.maxOldSpaceMb} MB; ${how})`
    }
    if (this.exitCode === 0 && this.signal === null) return this.detail
    return `the sub-agent's process died (${how})${this.detail === "" ? "" : `: ${this.detail}`}`
  }
}

// --- The parent's side ---

export interface RunRequest {
  readonly host: Host
  readonly maxOldSpaceMb: number
  readonly start: Start
  /** Each event of the child's tree, as it arrives. */
  readonly onEvent: (event: AgentEvent) => void
  /** The child's pid, once started (tests and receipts). */
  readonly onPid?: ((pid: number) => void) | undefined
  /** What the child's run did, from its end line (an `error` end too: a failed run spent tokens). */
  readonly onCounts?: ((counts: RunCounts) => void) | undefined
  /** Messages appended to a transcript of the child's tree (encoded), as they are appended. */
  readonly onTranscript?: ((handle: string, messages: ReadonlyArray<unknown>) => void) | undefined
}

const stderrTail = 4_000

/**
 * Runs one child process to its end: its answer and counts, or ChildProcessFailed. Interrupting
 * the effect (a cancel, the parent's end) kills the child's whole process group.
 */
export const run = (request: RunRequest): Effect.Effect<
  { readonly text: string; readonly output?: unknown; readonly counts: RunCounts },
  ChildProcessFailed
> =>
  Effect.callback((resume) => {
    const child = spawn(
      request.host.command,
      [`--max-old-space-size=${request.maxOldSpaceMb}`, ...request.host.args],
      {
        cwd: request.start.cwd,
        env: { ...process.env, ...request.host.env },
        // A group of its own: a cancel kills the child and everything it started.
        detached: true,
        stdio: ["pipe", "pipe", "pipe"]
      }
    )
    const pid = child.pid
    if (pid !== undefined) request.onPid?.(pid)
    let stderr = ""
    let last: Line | undefined
    child.stderr.setEncoding("utf8")
    child.stderr.on("data", (chunk: string) => {
      stderr = (stderr + chunk).slice(-stderrTail)
    })
    createInterface({ input: child.stdout }).on("line", (text) => {
      const line = parseLine(text)
      if (line === undefined) return
      if (line.type === "event") request.onEvent(line.event)
      else if (line.type === "transcript") request.onTranscript?.(line.handle, line.messages)
      else {
        last = line
        if (line.counts !== undefined) request.onCounts?.(line.counts)
      }
    })
    // A write to a child that died at once is reported by its exit, not here.
    child.stdin.on("error", () => {})
    child.stdin.end(`${JSON.stringify(request.start)}\n`)
    const failed = (exitCode: number | null, signal: string | null, detail: string) =>
      new ChildProcessFailed({
        ...(pid === undefined ? {} : { pid }),
        exitCode,
        signal,
        outOfMemory: outOfMemoryMarker.test(stderr),
        maxOldSpaceMb: request.maxOldSpaceMb,
        detail
      })
    child.on("error", (error) => resume(Effect.fail(failed(null, null, error.message))))
    child.on("close", (exitCode, signal) => {
      if (last?.type === "end") {
        const { counts, output, text } = last
        return resume(Effect.succeed(output === undefined ? { text, counts } : { text, output, counts }))
      }
      const detail = last?.type === "error" ? last.reason : stderr.trim().split("\n").slice(-3).join("\n")
      resume(Effect.fail(failed(exitCode, signal, detail)))
    })
    return Effect.sync(() => killGroup(pid))
  })

/** Kills a process group; one already gone is fine. */
export const killGroup = (pid: number | undefined) => {
  if (pid === undefined) return
  try {
    process.kill(-pid, "SIGKILL")
  } catch {
    // ESRCH: the group has already exited.
  }
}

const parseLine = (text: string): Line | undefined => {
  try {
    const value: unknown = JSON.parse(text)
    if (typeof value !== "object" || value === null || !("type" in value)) return undefined
    return value as Line
  } catch {
    return undefined
  }
}

/**
 * An event of the child's tree as the parent's tree shows it: the child's root (depth 0 there)
 * is the agent `as` (its id, parent and depth), its descendants hang below it.
 */
export const relabel = (event: AgentEvent, rootId: string | undefined, as: AgentSnapshot): AgentEvent => {
  const agent = event.agent
  if (agent.depth === 0) {
    return { ...event, agent: { ...agent, agentId: as.agentId, parentId: as.parentId, depth: as.depth } }
  }
  return {
    ...event,
    agent: {
      ...agent,
      parentId: agent.parentId === rootId ? as.agentId : agent.parentId,
      depth: agent.depth + as.depth
    }
  }
}
