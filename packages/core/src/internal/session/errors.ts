/**
 * Session's errors, and how a failure is described: shared by Session.ts and its run
 * (internal/session/run.ts), which Session re-exports.
 */
import * as Cause from "effect/Cause"
import * as Schema from "effect/Schema"
import { redactText } from "../../Secrets.ts"

export class SessionNotFound extends Schema.TaggedError<SessionNotFound>()("SessionNotFound", {
  sessionId: Schema.String
}) {
  override get message() {
    return `no session with id "${this.sessionId}"`
  }
}

export class SessionBusy extends Schema.TaggedError<SessionBusy>()("SessionBusy", { sessionId: Schema.String }) {
  override get message() {
    return `session "${this.sessionId}" is already running a prompt; wait for it to finish`
  }
}

/**
 * The message of a typed failure, or a short form of a defect; URLs in it are redacted
 * (Secrets), since it becomes a record's reason, an event, a `task` result and CLI output.
 */
export const describeFailure = (cause: Cause.Cause<unknown>): string => {
  const error = Cause.squash(cause)
  return redactText(error instanceof Error ? error.message : String(error))
}
