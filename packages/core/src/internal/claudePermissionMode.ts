/**
 * Claude Code's `permissionMode` (agent front matter) as Fibril rules. A mode says which calls
 * Claude Code prompts for; Fibril keeps what makes its rules stricter and drops what would
 * loosen them: a definition is one more ceiling (Permission rule 1), so a mode can add asks or
 * remove tools, never grant what the configuration, a parent or a role withholds.
 */
import * as Schema from "effect/Schema"
import type { Posture } from "../Permission.ts"

export const claudePermissionModes = [
  "default",
  "manual",
  "acceptEdits",
  "plan",
  "dontAsk",
  "auto",
  "bypassPermissions"
] as const

export const ClaudePermissionMode = Schema.Literals(claudePermissionModes).annotate({
  message: `permissionMode must be one of ${claudePermissionModes.join(", ")}`
})
export type ClaudePermissionMode = typeof ClaudePermissionMode.Type

/** What a mode adds to a definition: asks, and a base role whose postures are read-only. */
export interface ModeRules {
  readonly ask: ReadonlyArray<Posture>
  readonly readOnly: boolean
  /** What Fibril does differently from Claude Code, for the definition's warnings. */
  readonly note?: string | undefined
}

export const fromPermissionMode = (mode: ClaudePermissionMode): ModeRules => {
  switch (mode) {
    // Manual (config value `default`): edits and commands prompt, reads do not.
    case "default":
    case "manual":
      return { ask: ["write", "shell"], readOnly: false }
    // Edits are accepted; commands still prompt.
    case "acceptEdits":
      return { ask: ["shell"], readOnly: false }
    // Reads only: no edits, no commands.
    case "plan":
      return { ask: [], readOnly: true }
    // Anything that would prompt is denied; the pre-approvals it relies on live in Claude Code's
    // settings, which Fibril does not read, so what is left is reading.
    case "dontAsk":
      return {
        ask: [],
        readOnly: true,
        note:
          "dontAsk denies what would ask; Claude Code settings' pre-approvals are not read, so the agent is read-only"
      }
    // These only loosen Claude Code's prompts: they cannot widen Fibril's rules, which apply as written.
    case "auto":
    case "bypassPermissions":
      return {
        ask: [],
        readOnly: false,
        note:
          `${mode} only loosens prompts and cannot widen Fibril's rules: [permissions] and the parent's asks still apply`
      }
  }
}
