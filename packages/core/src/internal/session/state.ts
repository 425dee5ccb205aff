/**
 * The sessions of one Session service: a new session's state, registered under its id.
 */
import type * as Prompt from "effect/ai/Prompt"
import type * as Clock from "effect/Clock"
import * as Ids from "../../Ids.ts"
import type { Budgets, RunObserver, SessionState } from "../../loop/State.ts"
import type * as Roles from "../../Roles.ts"
import type { ToolRegistry } from "../../ToolRegistry.ts"
import * as Usage from "../../Usage.ts"

/** What a new session starts with. */
export interface Init {
  readonly id?: string | undefined
  readonly parent: SessionState | undefined
  readonly depth: number
  readonly role: Roles.RoleSpec
  readonly rules: SessionState["rules"]
  readonly model: string
  readonly languageModel: SessionState["languageModel"]
  readonly system: Prompt.SystemMessage
  readonly messages: Array<Prompt.Message>
  readonly description: string | undefined
  readonly budgets: Budgets
  readonly clock: Clock.Clock
  readonly observer: RunObserver | undefined
  readonly output?: SessionState["output"]
}

/** A new session's state, registered in `sessions` (its tools: the registry's view of its rules). */
export const register = (
  sessions: Map<string, SessionState>,
  registry: ToolRegistry["Service"],
  init: Init
): SessionState => {
  const state: SessionState = {
    id: init.id ?? Ids.next("agent"),
    parent: init.parent,
    depth: init.depth,
    role: init.role.name,
    model: init.model,
    languageModel: init.languageModel,
    description: init.description,
    system: init.system,
    messages: init.messages,
    rules: init.rules,
    view: registry.view(init.rules),
    budgets: init.budgets,
    usage: Usage.zero(),
    treeUsage: Usage.zero(),
    usageSteps: { reported: 0, estimated: 0 },
    inbox: [],
    steps: 0,
    toolCalls: 0,
    lastTool: undefined,
    busy: false,
    lastRequestLength: 0,
    modelCall: undefined,
    stepInterrupted: false,
    scope: undefined,
    cancelReason: undefined,
    clock: init.clock,
    observer: init.observer,
    output: init.output
  }
  sessions.set(state.id, state)
  return state
}

/** New rules for a session, and its tools with them (the registry's view, cached per rules). */
export const setRules = (registry: ToolRegistry["Service"], state: SessionState, rules: SessionState["rules"]) => {
  state.rules = rules
  state.view = registry.view(rules)
}
