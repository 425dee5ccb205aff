import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Option, Schema, Tracer } from "effect"
import * as Permission from "../src/Permission.ts"
import * as ToolRegistry from "../src/ToolRegistry.ts"

const Greeting = Context.Service<{ readonly text: string }>("test/Greeting")

const context: ToolRegistry.ToolCallContext = { sessionId: "s", callId: "c", role: "general", depth: 0 }

const tool = (name: string, posture: Permission.Posture) =>
  ToolRegistry.define({
    name,
    description: `the ${name} tool`,
    parameters: Schema.Struct({}),
    posture,
    handler: () => Effect.succeed(name)
  })

/** A decoding's value, or its error message: what a tool call sees either way. */
const outcome = (effect: Effect.Effect<unknown, Schema.SchemaError>) =>
  Effect.match(effect, { onFailure: (error) => `error: ${error.message}`, onSuccess: (value) => value })

describe("ToolRegistry", () => {
  it.effect("rule sets that allow the same tools share one view; a registration starts over", () =>
    Effect.gen(function*() {
      const registry = yield* ToolRegistry.make
      yield* registry.register(tool("read", "read"))
      yield* registry.register(tool("write", "write"))
      const a = Permission.derive(Permission.allowAll, { label: "a", allow: ["read"] })
      const b = Permission.derive(Permission.allowAll, { label: "b", postures: ["read"] })
      const both = Permission.derive(Permission.allowAll, { label: "both" })
      const viewA = registry.view(a)
      assert.deepStrictEqual(viewA.tools.map((t) => t.name), ["read"])
      assert.strictEqual(registry.view(b), viewA)
      assert.strictEqual(registry.view(b).toolkit, viewA.toolkit)
      assert.deepStrictEqual(registry.view(both).tools.map((t) => t.name), ["read", "write"])
      yield* registry.register(tool("grep", "read"))
      const after = registry.view(a)
      assert.notStrictEqual(after, viewA)
      assert.deepStrictEqual(registry.view(b).tools.map((t) => t.name), ["read", "grep"])
    }))

  it.effect("a handler runs with the services captured at registration, over the caller's", () =>
    Effect.gen(function*() {
      const registry = yield* ToolRegistry.make
      yield* registry.register(ToolRegistry.define({
        name: "greet",
        description: "says the greeting",
        parameters: Schema.Struct({}),
        posture: "read",
        handler: () => Greeting.useSync((g) => g.text)
      })).pipe(Effect.provideService(Greeting, { text: "registered" }))
      const greet = registry.get("greet")
      assert.isTrue(greet._tag === "Some")
      if (greet._tag !== "Some") return
      const call = greet.value.handler({}, context)
      // From the same caller context twice (the merged context is reused), and from another.
      assert.strictEqual(yield* call, "registered")
      assert.strictEqual(yield* call, "registered")
      assert.strictEqual(yield* call.pipe(Effect.provideService(Greeting, { text: "caller" })), "registered")
    }))

  it.effect("a handler's spans are children of the caller's span, not of the registration's", () =>
    Effect.gen(function*() {
      const registry = yield* ToolRegistry.make
      yield* registry.register(ToolRegistry.define({
        name: "traced",
        description: "names its parent span",
        parameters: Schema.Struct({}),
        posture: "read",
        handler: () =>
          Effect.currentSpan.pipe(
            Effect.map((span) =>
              Option.match(span.parent, { onNone: () => "none", onSome: (p) => (p as Tracer.Span).name })
            ),
            Effect.orElseSucceed(() => "none"),
            Effect.withSpan("tool.traced")
          )
      })).pipe(Effect.withSpan("registration"))
      const traced = registry.get("traced")
      assert.isTrue(traced._tag === "Some")
      if (traced._tag !== "Some") return
      assert.strictEqual(yield* traced.value.handler({}, context).pipe(Effect.withSpan("caller")), "caller")
    }))

  it.effect("arguments decode as with onExcessProperty \"error\", for flat and nested parameters", () =>
    Effect.gen(function*() {
      const registry = yield* ToolRegistry.make
      const flat = Schema.Struct({
        path: Schema.String,
        limit: Schema.optionalKey(Schema.Int),
        tags: Schema.Array(Schema.String)
      })
      const nested = Schema.Struct({ inner: Schema.Struct({ a: Schema.String }) })
      yield* registry.register({ ...tool("flat", "read"), parameters: flat })
      yield* registry.register({ ...tool("nested", "read"), parameters: nested })
      const check = (name: string, parameters: ToolRegistry.Parameters, input: unknown) =>
        Effect.gen(function*() {
          const strict = Schema.decodeUnknownEffect(parameters, { onExcessProperty: "error" })
          const decode = Option.getOrThrow(registry.get(name)).decode
          assert.deepStrictEqual(yield* outcome(decode(input)), yield* outcome(strict(input)))
        })
      for (
        const input of [
          { path: "a", tags: [] },
          { path: "a", limit: 3, tags: ["x"] },
          { path: "a", tags: [], extra: 1 },
          { path: 1, tags: [] },
          { tags: [] },
          { path: "a", limit: 1.5, tags: [] },
          null,
          [],
          "a"
        ]
      ) yield* check("flat", flat, input)
      for (const input of [{ inner: { a: "x" } }, { inner: { a: "x", extra: 1 } }, { inner: {} }]) {
        yield* check("nested", nested, input)
      }
    }))

  const Flat = Schema.Struct({
    path: Schema.String,
    limit: Schema.optionalKey(Schema.Int),
    tags: Schema.Array(Schema.String)
  })
  const Value = Schema.Union([Schema.String, Schema.Number, Schema.Boolean, Schema.Null, Schema.Array(Schema.String)])
  const FlatInput = Schema.Struct({
    path: Schema.optionalKey(Value),
    limit: Schema.optionalKey(Value),
    tags: Schema.optionalKey(Value),
    extra: Schema.optionalKey(Value),
    _: Schema.optionalKey(Value)
  })

  it.effect.prop(
    "the fast decoder gives what the strict one gives, on random inputs (declared keys, wrong types, extra keys)",
    { input: FlatInput },
    ({ input }) =>
      Effect.gen(function*() {
        const registry = yield* ToolRegistry.make
        yield* registry.register({ ...tool("flat", "read"), parameters: Flat })
        const decode = Option.getOrThrow(registry.get("flat")).decode
        const strict = Schema.decodeUnknownEffect(Flat, { onExcessProperty: "error" })
        assert.deepStrictEqual(yield* outcome(decode(input)), yield* outcome(strict(input)))
      })
  )
})
