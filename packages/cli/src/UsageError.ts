/**
 * A command used wrongly (a flag, an argument, a missing setting): exit 2, and the message says
 * what to change. A module of its own, so that the command definitions parsing and help load
 * do not load the model selection (ModelSelection.ts) to name it.
 */
import * as Schema from "effect/Schema"

export class UsageError extends Schema.TaggedError<UsageError>()("UsageError", { problem: Schema.String }) {
  override get message() {
    return this.problem
  }
}
