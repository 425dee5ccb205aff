// The seam between Session and the embedded SubAgentManager: the manager takes part in the
// runs of the sessions it creates through the RunObserver each is given at creation, and what
// it needs of a run that ended comes back from the run. Measured here on a Session that counts
// every call the manager makes into it.
import { assert, describe, it } from "@effect/vitest"
import { ScriptedModel } from "@fibril/testkit"
import { Context, Effect, Fiber, FileSystem, Layer, Option } from "effect"
import { TestClock } from "effect/testing"
import * as AgentEventsModule from "../src/AgentEvents.ts"
import * as Models from "../src/Models.ts"
import * as Permission from "../src/Permission.ts"
import * as SessionModule from "../src/Session.ts"
import { Session } from "../src/Session.ts"
import * as SubAgentManager from "../src/SubAgentManager.ts"
import * as SubAgentStore from "../src/SubAgentStore.ts"
import * as ToolRegistry from "../src/ToolRegistry.ts"
import * as Workspace from "../src/Workspace.ts"
import { provideNode, report, setup } from "./support.ts"

type SessionService = Session["Service"]

/** The real Session, with every method call counted by name (the manager's calls, once reset). */
const countingSession = (calls: Map<string, number>) =>
  Layer.effect(
    Session,
    Effect.map(SessionModule.make(), (real): SessionService => {
      const counted = {} as Record<string, unknown>
      for (const [name, method] of Object.entries(real)) {
        counted[name] = typeof method === "function"
          ? (...args: Array<unknown>) => {
            calls.set(name, (calls.get(name) ?? 0) + 1)
            return (method as (...a: Array<unknown>) => unknown)(...args)
          }
          : method
      }
      return counted as SessionService
    })
  )

const managerOver = (root: string, calls: Map<string, number>, script: ScriptedModel.ScriptInput) => {
  const base = Layer.mergeAll(
    ToolRegistry.layer,
    AgentEventsModule.layer,
    SubAgentStore.layerMemory,
    Permission.layer()
  ).pipe(Layer.provideMerge(Workspace.layer(root)))
  return SubAgentManager.layer().pipe(
    Layer.provideMerge(countingSession(calls).pipe(Layer.provideMerge(base))),
    Layer.provideMerge(Models.fromLanguageModel()),
    Layer.provide(ScriptedModel.layer(script))
  )
}

const sorted = (calls: Map<string, number>) => Object.fromEntries([...calls].sort(([a], [b]) => a.localeCompare(b)))

describe("Session <-> SubAgentManager", () => {
  it.effect("one spawn asks the session three things: createChild, scopeOf, prompt; a task two", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      const calls = new Map<string, number>()
      const context = yield* Layer.build(managerOver(root, calls, { rules: [{ turns: [{ text: report("done") }] }] }))
      const sessions = Context.get(context, Session)
      const manager = Context.get(context, SubAgentManager.SubAgentManager)
      const store = Context.get(context, SubAgentStore.SubAgentStore)
      const parent = yield* sessions.create()
      calls.clear()

      const spawned = yield* manager.spawn(parent.id, { prompt: "work", description: "w" })
      for (let i = 0; i < 100; i++) {
        const found = yield* store.get(spawned.agent_id)
        if (Option.isSome(found) && found.value.status === "completed") break
        yield* Effect.yieldNow
      }
      assert.strictEqual(Option.getOrThrow(yield* store.get(spawned.agent_id)).status, "completed")
      assert.deepStrictEqual(sorted(calls), { createChild: 1, prompt: 1, scopeOf: 1 })

      calls.clear()
      const ran = yield* manager.run(parent.id, { prompt: "work", description: "t" })
      assert.strictEqual(ran.status, "completed")
      assert.deepStrictEqual(sorted(calls), { createChild: 1, prompt: 1 })
      // The counts came back from the run: the record has the child's step.
      assert.strictEqual(ran.steps, 1)
    }).pipe(provideNode))

  it.effect("an embedder's own root (session.create) that answers early still waits for its background child", () =>
    Effect.gen(function*() {
      let told: string | undefined
      const { get } = yield* setup({
        rules: [
          {
            match: { depth: 0 },
            respond: (c) => {
              if (c.turn === 0) {
                return { tool_calls: [{ name: "agent_spawn", args: { prompt: "child", description: "c" } }] }
              }
              if (c.turn === 1) return { text: "answering early" }
              told = JSON.stringify(c.messages.at(-1))
              return { text: "final" }
            }
          },
          { match: { prompt: "child" }, turns: [{ delay_ms: 1000, text: report("child done") }] }
        ]
      })
      const sessions = get(Session)
      const root = yield* sessions.create()
      const fiber = yield* Effect.forkChild(sessions.prompt(root.id, "go"))
      yield* TestClock.adjust("1 second")
      assert.strictEqual((yield* Fiber.join(fiber)).text, "final")
      assert.include(told!, "Your background sub-agents were still running when you answered")
      const [child] = yield* get(SubAgentManager.SubAgentManager).list({ includeArchived: true, parentId: root.id })
      assert.strictEqual(child!.status, "completed")
    }).pipe(provideNode))
})
