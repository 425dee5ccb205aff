import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { context, provide, setup } from "./harness.ts"

const plan = [
  { content: "Read the config loader", status: "completed", priority: "high" },
  { content: "Add the new flag", status: "in_progress" },
  { content: "Write tests", status: "pending", priority: "low" }
] as const

describe("todowrite / todoread", () => {
  it.effect("todowrite replaces the session's list and returns it; todoread reads it back", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      assert.deepStrictEqual(yield* h.call("todoread", {}), [])
      assert.deepStrictEqual(yield* h.call("todowrite", { todos: plan }), plan)
      assert.deepStrictEqual(yield* h.call("todoread", {}), plan)
      const next = [{ content: "Write tests", status: "in_progress" }]
      assert.deepStrictEqual(yield* h.call("todowrite", { todos: next }), next)
      assert.deepStrictEqual(yield* h.call("todoread", {}), next)
      assert.deepStrictEqual(yield* h.call("todowrite", { todos: [] }), [])
    }).pipe(provide))

  it.effect("lists are per session", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const other = { ...context, sessionId: "session-2" }
      yield* h.call("todowrite", { todos: plan })
      assert.deepStrictEqual(yield* h.call("todoread", {}, other), [])
      yield* h.call("todowrite", { todos: [{ content: "mine", status: "pending" }] }, other)
      assert.deepStrictEqual(yield* h.call("todoread", {}), plan)
    }).pipe(provide))

  it.effect("invalid items are refused at decoding and leave the list alone", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.call("todowrite", { todos: plan })
      const bad = yield* Effect.flip(h.call("todowrite", { todos: [{ content: "x", status: "done" }] }))
      assert.strictEqual(bad._tag, "SchemaError")
      const extra = yield* Effect.flip(h.call("todoread", { unexpected: true }))
      assert.strictEqual(extra._tag, "SchemaError")
      assert.deepStrictEqual(yield* h.call("todoread", {}), plan)
    }).pipe(provide))

  it.effect("postures: todowrite is plan, todoread is read", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const posture = (name: string) =>
        h.registry.get(name).pipe((o) => (o._tag === "Some" ? o.value.posture : undefined))
      assert.strictEqual(posture("todowrite"), "plan")
      assert.strictEqual(posture("todoread"), "read")
    }).pipe(provide))
})
