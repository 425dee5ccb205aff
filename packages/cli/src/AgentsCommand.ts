/**
 * `fibril agents list [--all] | show <id> | cancel <id> | resume <id> | transcript <id>` over
 * the records in `.fibril/state` (the file store).
 *
 * `list`, `show` and `transcript` only read the files, so they are safe while another fibril
 * process works in the same directory. `cancel` and `resume` load a SubAgentManager, which
 * owns the state from then on: records left running by a process that ended read
 * `interrupted`; an agent is cancelled or resumed in this process.
 */
import * as SubAgentManager from "@fibril/core/SubAgentManager"
import { SubAgentRecord } from "@fibril/core/SubAgentRecord"
import { Effect, FileSystem, Option, Path, Schema } from "effect"
import { Prompt } from "effect/ai"
import type * as Output from "./Output.ts"

export class AgentNotRecorded extends Schema.TaggedError<AgentNotRecorded>()("AgentNotRecorded", {
  agentId: Schema.String,
  dir: Schema.String
}) {
  override get message() {
    return `no sub-agent "${this.agentId}" is recorded in ${this.dir}; \`fibril agents list --all\` shows the recorded ones`
  }
}

const decodeRecord = Schema.decodeUnknownOption(SubAgentRecord)
const RecordsFile = Schema.fromJsonString(Schema.Struct({ records: Schema.Array(Schema.Unknown) }))

/** The records on disk, read without loading a manager (nothing is written). */
export const readRecords = Effect.fn("fibril.agents.read")(function*(stateDir: string) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const file = path.join(stateDir, "subagents.v1.json")
  if (!(yield* fs.exists(file))) return [] as ReadonlyArray<SubAgentRecord>
  const parsed = yield* Schema.decodeUnknownEffect(RecordsFile)(yield* fs.readFileString(file))
  return parsed.records.flatMap((raw) => Option.toArray(decodeRecord(raw)))
})

const live = (record: SubAgentRecord): SubAgentManager.AgentView => ({ ...record, from_prior_session: true })

const line = (agent: SubAgentManager.AgentView) =>
  `${agent.agent_id}  ${agent.status.padEnd(11)} ${agent.role.padEnd(11)} ${agent.description}${
    agent.reason === undefined ? "" : `  — ${agent.reason}`
  }${agent.from_prior_session ? "  (earlier run)" : ""}`

/** Without --all: agents still running or pending (in some process); with it, every record. */
export const list = Effect.fn("fibril.agents.list")(function*(
  stateDir: string,
  all: boolean,
  json: boolean,
  output: Output.Output
) {
  const records = yield* readRecords(stateDir)
  const agents = all ? records : records.filter((r) => r.status === "running" || r.status === "pending")
  if (json) return yield* output.line(JSON.stringify(agents))
  if (agents.length === 0) {
    return yield* output.line(
      all ? `No sub-agents recorded in ${stateDir}.` : "No sub-agent is running; --all shows every recorded one."
    )
  }
  for (const agent of agents) yield* output.line(line(live(agent)))
})

const find = (stateDir: string, id: string) =>
  Effect.flatMap(readRecords(stateDir), (records) => {
    const found = records.find((record) => record.agent_id === id)
    return found === undefined ? Effect.fail(new AgentNotRecorded({ agentId: id, dir: stateDir })) : Effect.succeed(found)
  })

export const show = Effect.fn("fibril.agents.show")(function*(stateDir: string, id: string, output: Output.Output) {
  yield* output.line(JSON.stringify(yield* find(stateDir, id), null, 2))
})

export const cancel = Effect.fn("fibril.agents.cancel")(function*(id: string, output: Output.Output) {
  const manager = yield* SubAgentManager.SubAgentManager
  const agent = yield* manager.cancel(id, "Cancelled from the command line")
  yield* output.line(line(agent))
})

export const resume = Effect.fn("fibril.agents.resume")(function*(
  id: string,
  message: string | undefined,
  output: Output.Output
) {
  const manager = yield* SubAgentManager.SubAgentManager
  yield* manager.resume(undefined, id, message)
  const agent = yield* manager.result(id, { block: true })
  yield* output.line(line(agent))
  if (agent.outcome !== undefined) for (const text of agent.outcome.text.split("\n")) yield* output.line(`  ${text}`)
})

export const transcript = Effect.fn("fibril.agents.transcript")(function*(
  stateDir: string,
  id: string,
  output: Output.Output
) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const agent = yield* find(stateDir, id)
  const file = path.join(stateDir, "transcripts", agent.transcript_handle)
  const text = (yield* fs.exists(file)) ? yield* fs.readFileString(file) : ""
  // A crash can cut the last line short: read what parses.
  const raw = text.split("\n").flatMap((line) => {
    if (line.trim() === "") return []
    return Option.toArray(Schema.decodeUnknownOption(Schema.fromJsonString(Schema.Unknown))(line))
  })
  const messages = yield* Schema.decodeUnknownEffect(Schema.Array(Prompt.Message))(raw)
  for (const message of messages) {
    const content = typeof message.content === "string"
      ? message.content
      : message.content.map((part) =>
        part.type === "text"
          ? part.text
          : part.type === "tool-call"
          ? `→ ${part.name} ${JSON.stringify(part.params)}`
          : part.type === "tool-result"
          ? `← ${part.name}${part.isFailure ? " (failed)" : ""} ${JSON.stringify(part.result).slice(0, 400)}`
          : `[${part.type}]`
      ).join("\n")
    yield* output.line(`[${message.role}]`)
    for (const text of content.split("\n")) yield* output.line(`  ${text}`)
  }
})
