import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Layer } from "effect"
import { Tool as AiTool } from "effect/ai"
import * as BuiltinTools from "../../src/BuiltinTools.ts"
import * as ToolRegistry from "../../src/ToolRegistry.ts"
import * as Workspace from "../../src/Workspace.ts"
import { provide, setup } from "./harness.ts"

describe("BuiltinTools", () => {
  it.effect("registers every built-in tool with its posture", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const tools = yield* h.registry.list
      assert.deepStrictEqual(
        tools.map((tool) => [tool.name, tool.posture]),
        [
          ["read_file", "read"],
          ["list_dir", "read"],
          ["grep", "read"],
          ["glob", "read"],
          ["write_file", "write"],
          ["edit_file", "write"],
          ["shell", "shell"],
          ["todowrite", "plan"],
          ["todoread", "read"]
        ]
      )
      assert.deepStrictEqual(BuiltinTools.names, tools.map((tool) => tool.name))
      for (const tool of tools) assert.isAbove(tool.description.length, 100, tool.name)
    }).pipe(provide))

  it.effect("every tool has a JSON-safe object schema for the model, todoread's empty parameters included", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      for (const tool of yield* h.registry.list) {
        const schema = AiTool.getJsonSchema(tool.aiTool)
        assert.strictEqual(schema.type, "object", tool.name)
        const text = JSON.stringify(schema)
        assert.notInclude(text, "Infinity", tool.name) // no Schema.Number
        assert.notInclude(text, "NaN", tool.name)
      }
      const todoread = h.registry.get("todoread")
      assert.isTrue(todoread._tag === "Some")
      if (todoread._tag === "Some") {
        const schema = AiTool.getJsonSchema(todoread.value.aiTool)
        assert.deepStrictEqual(schema, { type: "object", additionalProperties: false })
      }
      const readFile = h.registry.get("read_file")
      if (readFile._tag === "Some") {
        const schema = AiTool.getJsonSchema(readFile.value.aiTool)
        assert.deepStrictEqual(schema.required, ["path"])
        assert.deepStrictEqual(Object.keys(schema.properties ?? {}), ["path", "offset", "limit"])
      }
    }).pipe(provide))

  it.effect("registering twice fails with DuplicateTool", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const twice = BuiltinTools.layer().pipe(
        Layer.provide(Layer.succeed(ToolRegistry.ToolRegistry, h.registry)),
        Layer.provide(Workspace.layer(h.root)),
        Layer.provide(BuiltinTools.Todos.layer)
      )
      const exit = yield* Effect.exit(Layer.build(twice))
      assert.isTrue(Exit.isFailure(exit))
      if (Exit.isFailure(exit)) {
        const error = Cause.squash(exit.cause)
        assert.isTrue(error instanceof ToolRegistry.DuplicateTool)
        assert.include(String(error), `a tool named "read_file" is already registered`)
      }
    }).pipe(provide))
})
