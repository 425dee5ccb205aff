/**
 * A session's system message: the role's header, the workspace, the role's prompt and the
 * memory file's section. Shared by the sessions of one role at one depth (see below).
 */
import type * as Prompt from "effect/ai/Prompt"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import type { Memory } from "../../Memory.ts"
import * as Roles from "../../Roles.ts"
import type { Workspace } from "../../Workspace.ts"
import * as Parts from "../parts.ts"
import { tracing } from "../span.ts"

/** `systemFor(role, depth, prompt)`: the system message of a session of `role` at `depth`. */
export const make = (workspace: Workspace["Service"], memory: Option.Option<Memory["Service"]>) => {
  // A new conversation reads the memory file; a sub-agent inherits what this process last
  // read or wrote (with every note remembered since), so a fan-out does not read it per child.
  // Usually the section is known at once (the file unchanged since it was read): then it is an
  // Exit, read with no step. With a tracer, the read runs as an effect (its `Memory.section` span).
  const memorySection = (inherited: boolean): Effect.Effect<string> => {
    if (Option.isNone(memory)) return Effect.succeed("")
    const fiber = Fiber.getCurrent()
    if (fiber !== undefined && !tracing(fiber)) {
      const known = memory.value.knownSection(inherited)
      if (known !== undefined) return Effect.succeed(known)
    }
    return Effect.orElseSucceed(inherited ? memory.value.inheritedSection : memory.value.section, () => "")
  }

  // Children of one role at one depth get the same system message: one shared (immutable)
  // message instead of a new ~1 KB string per sub-agent, retained for as long as its session.
  // Keyed by prompt, then section (strings whose hashes V8 caches), then role and depth;
  // cleared when it grows (each changed memory section adds keys).
  let systemCache = new Map<string, Map<string, Map<string, Prompt.SystemMessage>>>()
  let systemCached = 0
  const systemFor = (role: Roles.RoleSpec, depth: number, prompt: string) =>
    Effect.mapEager(memorySection(depth > 0), (section) => {
      let bySection = systemCache.get(prompt)
      if (bySection === undefined) systemCache.set(prompt, bySection = new Map())
      let byRole = bySection.get(section)
      if (byRole === undefined) bySection.set(section, byRole = new Map())
      const key = `${role.name}:${depth}`
      let message = byRole.get(key)
      if (message === undefined) {
        message = Parts.systemMessage(
          `${Roles.header(role.name, depth)}\nWorkspace: ${workspace.root}\n\n${prompt}${
            section === "" ? "" : `\n\n${section}`
          }`
        )
        if (++systemCached > 256) {
          systemCache = new Map([[prompt, new Map([[section, byRole = new Map()]])]])
          systemCached = 1
        }
        byRole.set(key, message)
      }
      return message
    })
  return systemFor
}
