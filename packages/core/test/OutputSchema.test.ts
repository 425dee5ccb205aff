import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Effect, Option, Result, Schema } from "effect"
import type { Prompt } from "effect/ai"
import type * as AgentResult from "../src/AgentResult.ts"
import * as OutputSchema from "../src/OutputSchema.ts"
import { Session } from "../src/Session.ts"
import { SubAgentStore } from "../src/SubAgentStore.ts"
import { provideNode, setup } from "./support.ts"

const findings = {
  type: "object",
  properties: {
    files: { type: "array", items: { type: "string", minLength: 1 }, minItems: 1 },
    count: { type: "integer", minimum: 0 },
    verdict: { enum: ["ok", "broken"] },
    note: { type: ["string", "null"] }
  },
  required: ["files", "count", "verdict"],
  additionalProperties: false
}

const toolResults = (messages: ReadonlyArray<Prompt.Message>) =>
  messages.flatMap((m) => m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [p] : []) : [])

const userTexts = (messages: ReadonlyArray<Prompt.Message>) =>
  messages.flatMap((m) => m.role === "user" ? m.content.flatMap((p) => p.type === "text" ? [p.text] : []) : [])

const compiled = (schema: OutputSchema.JsonSchema) => Result.getOrThrow(OutputSchema.compile(schema))

describe("OutputSchema: the supported subset", () => {
  it("decodes what matches and lists every mismatch", () => {
    const check = compiled(findings)
    const good = { files: ["a.ts"], count: 2, verdict: "ok", note: null }
    assert.deepStrictEqual(Result.getOrThrow(OutputSchema.decodeValue(check, good)), good)
    const bad = OutputSchema.decodeValue(check, { files: [], count: 1.5, verdict: "maybe", extra: 1 })
    assert.isTrue(Result.isFailure(bad))
    const errors = Result.isFailure(bad) ? bad.failure : ""
    for (const path of ["files", "count", "verdict", "extra"]) assert.include(errors, path)
  })

  it("accepts extra properties only where additionalProperties is not false", () => {
    const open = compiled({ type: "object", properties: { a: { type: "string" } } })
    assert.isTrue(Result.isSuccess(OutputSchema.decodeValue(open, { a: "x", b: 1 })))
    const closed = compiled({ type: "object", properties: { a: { type: "string" } }, additionalProperties: false })
    assert.isTrue(Result.isFailure(OutputSchema.decodeValue(closed, { a: "x", b: 1 })))
  })

  it("reads a final answer as text, fenced JSON or a final_answer call's arguments", () => {
    const check = compiled(findings)
    const value = { files: ["a"], count: 0, verdict: "ok" }
    for (const answer of [JSON.stringify(value), "```json\n" + JSON.stringify(value) + "\n```", { params: value }]) {
      assert.deepStrictEqual(Result.getOrThrow(OutputSchema.decodeAnswer(check, answer)), value)
    }
    const prose = OutputSchema.decodeAnswer(check, "SUMMARY: done")
    assert.isTrue(Result.isFailure(prose) && prose.failure.includes("not JSON"))
  })

  it("refuses what it does not support, naming the keyword, its path and what is supported", () => {
    const cases: ReadonlyArray<readonly [OutputSchema.JsonSchema, string, string]> = [
      [{ type: "object", properties: { a: { $ref: "#/defs/a" } } }, "$ref", "/properties/a/$ref"],
      [{ type: "object", properties: { a: { oneOf: [{ type: "string" }] } } }, "oneOf", "/properties/a/oneOf"],
      [{ type: "object", patternProperties: {} }, "patternProperties", "/patternProperties"],
      [{ type: "object", properties: { a: { type: "date" } } }, "type", "/properties/a/type"],
      [{ type: "object", additionalProperties: { type: "string" } }, "additionalProperties", "/additionalProperties"],
      [{ type: "array", items: { type: "string" } }, "type", "/type"]
    ]
    for (const [schema, keyword, path] of cases) {
      const refused = OutputSchema.compile(schema)
      assert.isTrue(Result.isFailure(refused), JSON.stringify(schema))
      if (Result.isFailure(refused)) {
        assert.strictEqual(refused.failure.keyword, keyword)
        assert.strictEqual(refused.failure.path, path)
        assert.include(refused.failure.message, "Supported keywords")
      }
    }
  })

  it.prop(
    "a value decodes exactly when it meets every constraint",
    [Schema.Array(Schema.String), Schema.Int, Schema.Literals(["ok", "broken", "other"])],
    ([files, count, verdict]) => {
      const valid = files.length >= 1 && files.every((file) => file.length >= 1) && count >= 0 && verdict !== "other"
      const decoded = OutputSchema.decodeValue(compiled(findings), { files, count, verdict })
      assert.strictEqual(Result.isSuccess(decoded), valid)
    }
  )
})

/** A root that delegates one typed task, and a child whose answers are `answers` (one per turn). */
const typedRun = (
  answers: ReadonlyArray<ScriptedModel.Turn>,
  schema: OutputSchema.JsonSchema = findings,
  seen: Array<ReadonlyArray<string>> = [],
  store: "memory" | "file" = "memory"
) =>
  Effect.gen(function*() {
    const script: ScriptedModel.ScriptInput = {
      rules: [
        {
          match: { depth: 1 },
          respond: (c) => {
            seen.push(c.tools)
            return answers[c.turn] ?? { text: "out of script" }
          }
        },
        {
          match: { depth: 0 },
          respond: (c) =>
            c.turn === 0
              ? {
                tool_calls: [{
                  name: "task",
                  args: { description: "typed", prompt: "find the files", output_schema: schema }
                }]
              }
              : { text: "done" }
        }
      ]
    }
    const { get } = yield* setup(script, {}, { store })
    const session = get(Session)
    const root = yield* session.create()
    yield* session.prompt(root.id, "go")
    const [call] = toolResults(yield* session.transcript(root.id))
    return { call: call!, get, session }
  })

const value = { files: ["src/a.ts"], count: 1, verdict: "ok" }

describe("typed results through task (final-answer tool)", () => {
  it.effect("a valid final_answer is the result's output, with no sections, and is kept in the record", () =>
    Effect.gen(function*() {
      const offered: Array<ReadonlyArray<string>> = []
      const { call, get, session } = yield* typedRun(
        [{ tool_calls: [{ name: "final_answer", args: value }] }],
        findings,
        offered,
        // The SQLite store: the receipt keeps the output through its encoding.
        "file"
      )
      assert.isFalse(call.isFailure)
      const result = call.result as AgentResult.TaskResult
      assert.strictEqual(result.status, "completed")
      assert.deepStrictEqual(result.output, value)
      assert.isUndefined(result.sections)
      // The child was offered the tool, and told to finish with it.
      assert.isTrue(offered[0]?.includes("final_answer"), JSON.stringify(offered[0]))
      const child = yield* session.transcript(result.agent_id)
      assert.include(userTexts(child).join("\n"), "call the final_answer tool")
      const record = Option.getOrThrow(yield* get(SubAgentStore).get(result.agent_id))
      assert.deepStrictEqual(record.outcome?.output, value)
    }).pipe(provideNode))

  it.effect("an invalid answer gets one repair turn with the decoding errors", () =>
    Effect.gen(function*() {
      const { call, session } = yield* typedRun([
        { tool_calls: [{ name: "final_answer", args: { files: [], count: -1, verdict: "ok" } }] },
        { text: JSON.stringify(value) }
      ])
      const result = call.result as AgentResult.TaskResult
      assert.strictEqual(result.status, "completed")
      assert.deepStrictEqual(result.output, value)
      const child = yield* session.transcript(result.agent_id)
      const repair = userTexts(child).find((text) => text.startsWith("Your result does not match"))
      assert.isDefined(repair)
      assert.include(repair, "count")
      // The refused call got its errors as its result.
      const [refused] = toolResults(child)
      assert.isTrue(refused!.isFailure)
    }).pipe(provideNode))

  it.effect("an answer still invalid after the repair fails closed with the errors, and no output", () =>
    Effect.gen(function*() {
      const { call, get } = yield* typedRun([
        { tool_calls: [{ name: "final_answer", args: { files: ["a"], count: 1, verdict: "maybe" } }] },
        { text: "SUMMARY:\nsorry" }
      ])
      const result = call.result as AgentResult.TaskResult
      assert.strictEqual(result.status, "failed")
      assert.isUndefined(result.output)
      assert.include(result.summary, "does not match output_schema")
      assert.include(result.summary, "not JSON")
      const record = Option.getOrThrow(yield* get(SubAgentStore).get(result.agent_id))
      assert.strictEqual(record.status, "failed")
      assert.isUndefined(record.outcome)
    }).pipe(provideNode))

  it.effect("an unsupported schema is a tool error at spawn naming the keyword, and starts no agent", () =>
    Effect.gen(function*() {
      const { call, get } = yield* typedRun(
        [{ text: "never asked" }],
        { type: "object", properties: { a: { anyOf: [{ type: "string" }] } } }
      )
      assert.isTrue(call.isFailure)
      const text = JSON.stringify(call.result)
      assert.include(text, "anyOf")
      assert.include(text, "/properties/a")
      assert.include(text, "Supported keywords")
      assert.lengthOf(yield* get(SubAgentStore).all, 0)
    }).pipe(provideNode))
})
