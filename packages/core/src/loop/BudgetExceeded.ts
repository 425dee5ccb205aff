/**
 * The failure of a run that used up one of its budgets before a final answer. Its own module so
 * that the loop (`AgentLoop`) and the session that drives it can both name it.
 */
import * as Schema from "effect/Schema"

export class BudgetExceeded extends Schema.TaggedError<BudgetExceeded>()("BudgetExceeded", {
  sessionId: Schema.String,
  budget: Schema.Literals(["max_steps", "max_tokens", "max_wall_secs", "tree_max_tokens"]),
  limit: Schema.Finite
}) {
  override get message() {
    return `agent ${this.sessionId} ran out of budget (${this.budget}=${this.limit}) before a final answer`
  }
}
