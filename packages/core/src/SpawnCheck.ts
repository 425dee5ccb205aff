/**
 * SpawnCheck — the bounds of what a spawn request may carry, checked in one place for every
 * engine: the embedded SubAgentManager (and so `task`, `agent_spawn`, TaskToolkit and
 * `fibril mcp`) and the cluster's AgentWorkflow.
 *
 * A description is a label shown on one line (`agents list`, the tree); a prompt is a task,
 * not a data channel (a file is read by the agent, not pasted). Without bounds a 1 MB label
 * was stored and printed as given. A model named at spawn must be one the runtime serves:
 * a single LanguageModel answers any id, so an unchecked id (`scripted:/etc/passwd`) would be
 * recorded as the model the agent ran on while another one ran it.
 */
import * as Schema from "effect/Schema"
import { UnknownModel } from "./Models.ts"

/** The longest `description`, in characters. */
export const maxDescriptionChars = 200

/** The longest `prompt` of a sub-agent, in characters (256 Ki). */
export const maxPromptChars = 262_144

/**
 * A spawn's `description` or `prompt` is over its bound: nothing was spawned.
 *
 * @since 0.1.0
 */
export class SpawnTextTooLong extends Schema.TaggedError<SpawnTextTooLong>()("SpawnTextTooLong", {
  field: Schema.Literals(["description", "prompt", "message", "objective"]),
  length: Schema.Int,
  max: Schema.Int
}) {
  override get message() {
    const spawn = this.field === "description" || this.field === "prompt"
    return `${this.field} is ${this.length} characters; the limit is ${this.max}: ${
      spawn ? "nothing was spawned" : "nothing was sent"
    }. ` +
      (this.field === "description"
        ? "Give a short label (3-8 words) and put the details in the prompt."
        : `Put large material in a file in the workspace and name the file in the ${this.field}.`)
  }
}

/** The first bound a request's texts break, or undefined. */
export const checkText = (request: {
  readonly description?: string | undefined
  readonly prompt: string
}): SpawnTextTooLong | undefined => {
  const description = request.description?.length ?? 0
  if (description > maxDescriptionChars) {
    return new SpawnTextTooLong({ field: "description", length: description, max: maxDescriptionChars })
  }
  if (request.prompt.length > maxPromptChars) {
    return new SpawnTextTooLong({ field: "prompt", length: request.prompt.length, max: maxPromptChars })
  }
  return undefined
}

/**
 * A text sent to an agent that already exists (`agent_send_input`'s message, `agent_assign`'s
 * objective and message, `agent_resume`'s message): the same bound as a prompt. Undefined: fine.
 */
export const checkMessage = (
  field: "message" | "objective",
  text: string | undefined
): SpawnTextTooLong | undefined =>
  text !== undefined && text.length > maxPromptChars
    ? new SpawnTextTooLong({ field, length: text.length, max: maxPromptChars })
    : undefined

/**
 * A model named at spawn, refused unless it is one of `accepted` (the models configured for
 * this runtime: its default, the per-role models, the parent's). Undefined: accepted.
 */
export const checkModel = (
  model: string | undefined,
  accepted: ReadonlyArray<string | undefined>
): UnknownModel | undefined => {
  if (model === undefined) return undefined
  const known = [...new Set(accepted.filter((name): name is string => name !== undefined))]
  return known.includes(model) ? undefined : new UnknownModel({ model, accepted: known })
}
