/** The flags several commands share, described once. */
import * as Approvals from "@fibril/core/Approvals"
import { Flag } from "effect/cli"
import * as Schema from "effect/Schema"

export const cwd = Flag.String("cwd").pipe(
  Flag.withDescription(
    "The workspace, an existing directory (default: the project around the current directory: the nearest one up with .fibril/ or .git)"
  ),
  Flag.optional
)

/** `--json` of the commands that print a stream of events. */
export const jsonLines = Flag.Boolean("json").pipe(
  Flag.withDescription("One JSON object per line"),
  Flag.withDefault(false)
)

/** `--json` of the commands that print one JSON document. */
export const jsonDocument = Flag.Boolean("json").pipe(Flag.withDescription("Print it as JSON"), Flag.withDefault(false))

export const model = Flag.String("model").pipe(
  Flag.withDescription(
    "Model id (default FIBRIL_MODEL, the config's model, gpt-4.1-mini), or scripted:<file> for the ScriptedModel"
  ),
  Flag.optional
)

export const baseUrl = Flag.String("base-url").pipe(
  Flag.withDescription("OpenAI-compatible endpoint, …/v1 (default OPENAI_BASE_URL, else OpenAI)"),
  Flag.optional
)

/** `--max-concurrent` of the commands that run agents in this process. */
export const maxConcurrent = Flag.Int("max-concurrent").pipe(
  Flag.withSchema(Schema.Int.pipe(Schema.check(Schema.isBetween({ minimum: 1, maximum: 20 })))),
  Flag.withDescription("Sub-agent concurrency cap, 1..20"),
  Flag.optional
)

/**
 * `--approve` (`fibril run`, `fibril mcp`): how calls that `ask` rules hold are decided when no
 * person answers here (docs/security.md, "Asking a person").
 */
const approveMode = Flag.Literals("approve", Approvals.ApproveMode.literals)

export const approve = approveMode.pipe(
  Flag.withDescription(
    "How calls that `ask` rules hold are decided: deny (default), allow-reads, allow, or wait for " +
      "`fibril agents answer` from another process (until [permissions] ask_timeout_secs)"
  ),
  Flag.withDefault("deny" as const)
)

/** `--approve` of `fibril run`: absent on a terminal, the person at it answers (TerminalApprovals). */
export const approveRun = approveMode.pipe(
  Flag.withDescription(
    "How calls that `ask` rules hold are decided: deny, allow-reads, allow, or wait for `fibril agents answer` " +
      "from another process (until [permissions] ask_timeout_secs). Default: asked at the terminal when " +
      "stdin and stdout are one (without --json), else deny"
  ),
  Flag.optional
)
