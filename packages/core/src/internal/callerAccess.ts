/**
 * How much of the workspace a tool's caller may write, as its own write tools say: what
 * `shell` confines its commands to, and what decides whether an MCP call goes to the server's
 * read-only (sandboxed) instance. One definition, so the two never disagree.
 */
import * as Effect from "effect/Effect"
import type * as Permission from "../Permission.ts"
import * as Sandbox from "../Sandbox.ts"
import type * as ToolRegistry from "../ToolRegistry.ts"

/** A caller without rules (not an agent of the loop) may write nothing. */
export const accessOfCaller = (
  registry: ToolRegistry.ToolRegistry["Service"],
  rules: Permission.Rules | undefined
): Effect.Effect<Sandbox.Access> =>
  rules === undefined
    ? Effect.succeed({ _tag: "none" })
    : Effect.map(
      registry.list,
      (tools) => Sandbox.accessOf(rules, tools.flatMap((tool) => tool.posture === "write" ? [tool.name] : []))
    )
