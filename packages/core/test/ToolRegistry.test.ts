import { assert, describe, it } from "@effect/vitest"
import { Cause, Context, Effect, Exit, Option, Schema, SchemaTransformation, Tracer } from "effect"
import { Tool as AiTool } from "effect/ai"
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

  it.effect("register, get, list and view: the registered definitions, a duplicate refused by name", () =>
    Effect.gen(function*() {
      const registry = yield* ToolRegistry.make
      yield* registry.register({
        ...tool("edit", "write"),
        paths: (params: {}) => [`${Object.keys(params).length}.txt`]
      })
      yield* registry.register(tool("read", "read"))
      assert.deepStrictEqual((yield* registry.list).map((t) => [t.name, t.posture]), [["edit", "write"], [
        "read",
        "read"
      ]])
      const duplicate = yield* Effect.flip(registry.register(tool("read", "write")))
      assert.strictEqual(duplicate._tag, "DuplicateTool")
      assert.strictEqual(duplicate.message, `a tool named "read" is already registered`)
      assert.strictEqual(Option.getOrThrow(registry.get("read")).posture, "read", "the first registration stays")
      assert.isTrue(Option.isNone(registry.get("nope")))
      // A definition's paths are the call's; a tool without them touches none.
      assert.deepStrictEqual(Option.getOrThrow(registry.get("edit")).paths({}), ["0.txt"])
      assert.deepStrictEqual(Option.getOrThrow(registry.get("read")).paths({}), [])

      const all = registry.view(Permission.allowAll)
      assert.deepStrictEqual([...all.byName.keys()], ["edit", "read"])
      assert.strictEqual(all.byName.get("read"), Option.getOrThrow(registry.get("read")))
      // The toolkit the model sees: each visible tool, with its description and parameters.
      assert.deepStrictEqual(Object.keys(all.toolkit.tools), ["edit", "read"])
      const aiRead = all.toolkit.tools["read"]!
      assert.strictEqual(aiRead.name, "read")
      assert.strictEqual(aiRead.description, "the read tool")
      assert.strictEqual(aiRead.parametersSchema, Option.getOrThrow(registry.get("read")).parameters)
      // It never runs a call itself: the loop does.
      const exit = yield* Effect.exit(all.toolkit.handle("read" as never, {} as never))
      assert.isTrue(Exit.isFailure(exit) && Cause.hasDies(exit.cause))
      assert.include(Cause.pretty((exit as Exit.Failure<unknown, unknown>).cause), `cannot execute "read"`)
    }))

  it.effect("rule sets that allow as many tools, but different ones, get different views", () =>
    Effect.gen(function*() {
      const registry = yield* ToolRegistry.make
      yield* registry.register(tool("read", "read"))
      yield* registry.register(tool("write", "write"))
      const reader = registry.view(Permission.derive(Permission.allowAll, { label: "r", allow: ["read"] }))
      const writer = registry.view(Permission.derive(Permission.allowAll, { label: "w", allow: ["write"] }))
      assert.deepStrictEqual(reader.tools.map((t) => t.name), ["read"])
      assert.deepStrictEqual(writer.tools.map((t) => t.name), ["write"])
      assert.deepStrictEqual(Object.keys(writer.toolkit.tools), ["write"])
    }))

  it("a ToolFailure reads as the tool and its reason", () => {
    assert.strictEqual(
      new ToolRegistry.ToolFailure({ tool: "grep", reason: "bad pattern" }).message,
      "grep: bad pattern"
    )
  })

  // The fast decoder may skip the strict one only where an excess key cannot hide: every
  // nested shape that holds an object (a struct, an array or tuple of them, a union with one,
  // a class, a suspended schema, a value encoded from an object) must still go strict.
  const Inner = Schema.Struct({ a: Schema.String })
  class Point extends Schema.Class<Point>("Point")({ a: Schema.String }) {}
  const FromObject = Schema.String.pipe(Schema.encodeTo(
    Inner,
    SchemaTransformation.transform({ decode: (o: { readonly a: string }) => o.a, encode: (a: string) => ({ a }) })
  ))
  const shapes: ReadonlyArray<readonly [string, ToolRegistry.Parameters, unknown, unknown]> = [
    ["a flat key beside a struct", Schema.Struct({ path: Schema.String, inner: Inner }), {
      path: "p",
      inner: { a: "x", extra: 1 }
    }, { path: "p", inner: { a: "x" } }],
    ["an array of structs", Schema.Struct({ items: Schema.Array(Inner) }), { items: [{ a: "x", extra: 1 }] }, {
      items: [{ a: "x" }]
    }],
    ["a tuple holding a struct", Schema.Struct({ pair: Schema.Tuple([Schema.String, Inner]) }), {
      pair: ["s", { a: "x", extra: 1 }]
    }, { pair: ["s", { a: "x" }] }],
    [
      "a tuple whose rest ends in a struct",
      Schema.Struct({ rest: Schema.TupleWithRest(Schema.Tuple([Schema.String]), [Schema.String, Inner]) }),
      { rest: ["s", "t", { a: "x", extra: 1 }] },
      { rest: ["s", "t", { a: "x" }] }
    ],
    ["a union with a struct", Schema.Struct({ either: Schema.Union([Schema.String, Inner]) }), {
      either: { a: "x", extra: 1 }
    }, { either: "s" }],
    ["a class", Schema.Struct({ point: Point }), { point: { a: "x", extra: 1 } }, { point: { a: "x" } }],
    // A declaration with no encoding of its own (an Option value: not JSON, but decode takes any input).
    ["an Option of a struct", Schema.Struct({ maybe: Schema.Option(Inner) }), {
      maybe: Option.some({ a: "x", extra: 1 })
    }, { maybe: Option.some({ a: "x" }) }],
    ["a suspended struct", Schema.Struct({ later: Schema.suspend(() => Inner) }), { later: { a: "x", extra: 1 } }, {
      later: { a: "x" }
    }],
    ["a string encoded as an object", Schema.Struct({ encoded: FromObject }), { encoded: { a: "x", extra: 1 } }, {
      encoded: { a: "x" }
    }],
    ["a union as the parameters", Schema.Union([Inner, Schema.Struct({ b: Schema.Number })]), { a: "x", extra: 1 }, {
      b: 1
    }],
    [
      "keys renamed by an encoding",
      Schema.Struct({ a: Schema.String }).pipe(Schema.encodeKeys({ a: "b" })),
      { a: "x" },
      { b: "x" }
    ]
  ]
  for (const [name, parameters, excess, clean] of shapes) {
    it.effect(`arguments with ${name} decode as the strict decoder says, an excess key inside refused`, () =>
      Effect.gen(function*() {
        const registry = yield* ToolRegistry.make
        yield* registry.register({ ...tool("t", "read"), parameters })
        const decode = Option.getOrThrow(registry.get("t")).decode
        const strict = Schema.decodeUnknownEffect(parameters, { onExcessProperty: "error" })
        const refused = yield* outcome(decode(excess))
        assert.match(String(refused), /^error: /)
        assert.deepStrictEqual(refused, yield* outcome(strict(excess)))
        assert.deepStrictEqual(yield* outcome(decode(clean)), yield* outcome(strict(clean)))
      }))
  }

  it.effect("an excess symbol key is refused, as the strict decoder does; a declared one is not excess", () =>
    Effect.gen(function*() {
      const registry = yield* ToolRegistry.make
      const declared = Symbol.for("fibril/test/declared")
      const parameters = Schema.Struct({ path: Schema.String, [declared]: Schema.optionalKey(Schema.String) })
      yield* registry.register({ ...tool("t", "read"), parameters })
      const decode = Option.getOrThrow(registry.get("t")).decode
      const strict = Schema.decodeUnknownEffect(parameters, { onExcessProperty: "error" })
      const inputs = [{ path: "a", [Symbol("extra")]: 1 }, { path: "a", [declared]: "d" }]
      const hidden = { path: "a" }
      Object.defineProperty(hidden, Symbol("hidden"), { value: 1, enumerable: false })
      for (const input of [...inputs, hidden]) {
        assert.deepStrictEqual(yield* outcome(decode(input)), yield* outcome(strict(input)))
      }
      assert.match(String(yield* outcome(decode(inputs[0]))), /^error: Expected no excess property/)
    }))

  it.effect("a tool with no parameters takes {} only: Schema.Struct({}) and Tool.EmptyParams refuse keys and non-objects", () =>
    Effect.gen(function*() {
      // `Schema.Struct({})` alone is the type `{}`, which takes any value but null and
      // undefined, excess keys included, even with onExcessProperty "error".
      for (const parameters of [Schema.Struct({}), AiTool.EmptyParams]) {
        const registry = yield* ToolRegistry.make
        yield* registry.register({ ...tool("t", "read"), parameters })
        const registered = Option.getOrThrow(registry.get("t"))
        assert.deepStrictEqual(registered.arguments, [])
        assert.deepStrictEqual(yield* outcome(registered.decode({})), {})
        assert.match(
          String(yield* outcome(registered.decode({ a: 1 }))),
          /^error: Expected (no excess property|never)\n  at \["a"\]/
        )
        for (const input of ["abc", 5, [], null, true]) {
          assert.match(String(yield* outcome(registered.decode(input))), /^error: /, JSON.stringify(input))
        }
      }
    }))

  // Which decoder ran is seen by a check on a property: Schema hands it the parse options.
  // The fast path is the point of `strictDecoder` (every tool call of every agent decodes):
  // a clean input to parameters with no nested object must take the default decoder.
  const spied = () => {
    const seen: Array<string> = []
    const Spy = Schema.String.check(Schema.makeFilter((_: string, _ast, options) => {
      seen.push(options.onExcessProperty ?? "default")
      return true
    }))
    return { seen, Spy }
  }

  it.effect("a clean input to flat parameters takes the fast decoder; an excess key, or any nested object, the strict one", () =>
    Effect.gen(function*() {
      const declared = Symbol.for("fibril/test/spy-symbol")
      const cases: ReadonlyArray<
        readonly [string, (spy: Schema.Codec<string>) => ToolRegistry.Parameters, unknown, ReadonlyArray<string>]
      > = [
        ["a flat struct, clean", (Spy) => Schema.Struct({ s: Spy, n: Schema.Number }), { s: "x", n: 1 }, ["default"]],
        // The strict decoder refuses the excess key before it checks the values.
        ["a flat struct, an excess key", (Spy) => Schema.Struct({ s: Spy }), { s: "x", extra: 1 }, []],
        [
          "an array of strings and a union of primitives",
          (Spy) =>
            Schema.Struct({
              s: Spy,
              tags: Schema.Array(Schema.String),
              either: Schema.Union([Schema.String, Schema.Number])
            }),
          { s: "x", tags: ["a"], either: 1 },
          ["default"]
        ],
        ["a declared symbol key", (Spy) => Schema.Struct({ s: Spy, [declared]: Schema.optionalKey(Schema.String) }), {
          s: "x",
          [declared]: "d"
        }, ["default"]],
        ["a nested struct", (Spy) => Schema.Struct({ s: Spy, inner: Schema.Struct({ a: Schema.String }) }), {
          s: "x",
          inner: { a: "y" }
        }, ["error"]],
        [
          "index signatures (a struct with a rest)",
          (Spy) => Schema.StructWithRest(Schema.Struct({ s: Spy }), [Schema.Record(Schema.String, Schema.Number)]),
          { s: "x" },
          ["error"]
        ]
      ]
      for (const [name, parameters, input, expected] of cases) {
        const { seen, Spy } = spied()
        const registry = yield* ToolRegistry.make
        yield* registry.register({ ...tool("t", "read"), parameters: parameters(Spy) })
        yield* Effect.ignore(Option.getOrThrow(registry.get("t")).decode(input))
        assert.deepStrictEqual(seen, expected, name)
      }
    }))
})
