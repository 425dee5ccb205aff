/**
 * OutputSchema — a typed result: the JSON Schema a caller gives as `output_schema` (on `task`,
 * `agent_spawn`, or an agent definition), turned into an Effect `Schema` that decodes the
 * child's final answer.
 *
 * Only a subset of JSON Schema is accepted, one every provider's structured output and every
 * model's tool parameters understand, and that decodes to a plain JSON value: anything else
 * (`$ref`, `oneOf`, `pattern`, ...) is refused at spawn (SpawnPlan) with the keyword and its
 * path, rather than silently ignored — a schema the decoder did not enforce would hand the
 * parent data it cannot trust. The subset is `supported` below and in docs/subagents.md.
 *
 * The answer is decoded by the agent loop (AgentLoop), the one loop both engines drive: a
 * mismatch gets one repair turn with the decoding errors (`repairMessage`), and a second one
 * fails the run closed (`OutputInvalid`) — never a half-valid object.
 */
import type * as LanguageModel from "effect/ai/LanguageModel"
import * as Tool from "effect/ai/Tool"
import * as Context from "effect/Context"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"

/** A JSON Schema object as a caller gives it. */
export type JsonSchema = { readonly [key: string]: unknown }

/** `output_schema` as the `task` and `agent_spawn` tools take it. */
export const Parameter = Schema.Record(Schema.String, Schema.Unknown).annotate({
  description: "A JSON Schema (type object) the result must match: the result is then this data, as `output`, " +
    "instead of the five text sections. Supported: type, properties, required, additionalProperties (bool), " +
    "items, enum, const, description, min/maxLength, min/maxItems, minimum/maximum; nullable via a type array."
})

/** The keywords this subset reads, each with what it accepts (anything else is refused, with its path). */
const subset: ReadonlyArray<readonly [keyword: string, accepts?: string]> = [
  ["type", "object, array, string, number, integer, boolean, null, or an array of them for nullable"],
  ["properties"],
  ["required"],
  ["additionalProperties", "true or false"],
  ["items"],
  ["enum", "strings, numbers, booleans, null"],
  ["const"],
  ["description"],
  ["title"],
  ["minLength"],
  ["maxLength"],
  ["minItems"],
  ["maxItems"],
  ["minimum"],
  ["maximum"]
]

/** The subset as an error names it. */
export const supported: ReadonlyArray<string> = subset.map(([keyword, accepts]) =>
  accepts === undefined ? keyword : `${keyword} (${accepts})`
)

/** `$schema` is read as an annotation too. */
const keywords = new Set([...subset.map(([keyword]) => keyword), "$schema"])
const types = new Set(["object", "array", "string", "number", "integer", "boolean", "null"])

export class UnsupportedOutputSchema extends Schema.TaggedError<UnsupportedOutputSchema>()(
  "UnsupportedOutputSchema",
  {
    /** Where in the schema, as a JSON pointer (`""` is the root). */
    path: Schema.String,
    /** The keyword refused (or the one whose value is not accepted). */
    keyword: Schema.String,
    reason: Schema.String,
    supported: Schema.Array(Schema.String)
  }
) {
  override get message() {
    return `output_schema is not supported at ${this.path === "" ? "the root" : this.path}: ${this.reason}. ` +
      `Supported keywords: ${this.supported.join("; ")}`
  }
}

/** The child's final answer did not match the output schema, even after its repair turn. */
export class OutputInvalid extends Schema.TaggedError<OutputInvalid>()("OutputInvalid", {
  agentId: Schema.String,
  errors: Schema.String
}) {
  override get message() {
    return `the final answer does not match output_schema after one repair turn: ${this.errors}`
  }
}

/** An output schema, checked and compiled: the caller's JSON Schema and its decoder. */
export interface Compiled {
  readonly jsonSchema: JsonSchema
  readonly schema: Schema.Codec<unknown>
}

/** An output schema as a run checks it, and how the child is told to finish (`viaOf`). */
export interface Check {
  readonly compiled: Compiled
  readonly via: "tool" | "provider"
}

type Refusal = { readonly path: string; readonly keyword: string; readonly reason: string }
type Built = Schema.Codec<unknown> | Refusal

const isRefusal = (built: Built): built is Refusal => "reason" in built && !Schema.isSchema(built)

const isPrimitive = (value: unknown): value is string | number | boolean | null =>
  value === null || typeof value === "string" || typeof value === "number" || typeof value === "boolean"

const isObject = (value: unknown): value is JsonSchema =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const refuse = (path: string, keyword: string, reason: string): Refusal => ({ path, keyword, reason })

const count = (node: JsonSchema, keyword: string, path: string): number | Refusal | undefined => {
  const value = node[keyword]
  if (value === undefined) return undefined
  return typeof value === "number" && Number.isFinite(value)
    ? value
    : refuse(`${path}/${keyword}`, keyword, `${keyword} must be a number`)
}

/** One type of a node (the node's other keywords apply to it). */
const ofType = (node: JsonSchema, type: string, path: string): Built => {
  switch (type) {
    case "null":
      return Schema.Null
    case "boolean":
      return Schema.Boolean
    case "string": {
      const min = count(node, "minLength", path)
      const max = count(node, "maxLength", path)
      if (typeof min === "object") return min
      if (typeof max === "object") return max
      let schema: Schema.Codec<string> = Schema.String
      if (min !== undefined) schema = schema.check(Schema.isMinLength(min))
      if (max !== undefined) schema = schema.check(Schema.isMaxLength(max))
      return schema
    }
    case "number":
    case "integer": {
      const min = count(node, "minimum", path)
      const max = count(node, "maximum", path)
      if (typeof min === "object") return min
      if (typeof max === "object") return max
      let schema: Schema.Codec<number> = type === "integer" ? Schema.Int : Schema.Finite
      if (min !== undefined) schema = schema.check(Schema.isGreaterThanOrEqualTo(min))
      if (max !== undefined) schema = schema.check(Schema.isLessThanOrEqualTo(max))
      return schema
    }
    case "array": {
      const items = node.items === undefined ? Schema.Unknown : build(node.items, `${path}/items`)
      if (isRefusal(items)) return items
      const min = count(node, "minItems", path)
      const max = count(node, "maxItems", path)
      if (typeof min === "object") return min
      if (typeof max === "object") return max
      let schema: Schema.Codec<ReadonlyArray<unknown>> = Schema.Array(items)
      if (min !== undefined) schema = schema.check(Schema.isMinLength(min))
      if (max !== undefined) schema = schema.check(Schema.isMaxLength(max))
      return schema
    }
    default:
      return objectOf(node, path)
  }
}

const objectOf = (node: JsonSchema, path: string): Built => {
  const properties = node.properties ?? {}
  if (!isObject(properties)) return refuse(`${path}/properties`, "properties", "properties must be an object")
  const required = node.required ?? []
  if (!Array.isArray(required) || !required.every((name) => typeof name === "string")) {
    return refuse(`${path}/required`, "required", "required must be an array of property names")
  }
  const additional = node.additionalProperties ?? true
  if (typeof additional !== "boolean") {
    return refuse(
      `${path}/additionalProperties`,
      "additionalProperties",
      "additionalProperties must be true or false (a schema for extra properties is not supported)"
    )
  }
  const fields: Record<string, Schema.Top> = {}
  for (const [name, property] of Object.entries(properties)) {
    const built = build(property, `${path}/properties/${name}`)
    if (isRefusal(built)) return built
    fields[name] = required.includes(name) ? built : Schema.optionalKey(built)
  }
  const missing = required.find((name) => !(name in properties))
  if (missing !== undefined) {
    return refuse(`${path}/required`, "required", `required names "${missing}", which is not in properties`)
  }
  const struct = Schema.Struct(fields)
  // Decoded with excess properties refused (`decode`): extra keys pass only where allowed.
  return (additional
    ? Schema.StructWithRest(struct, [Schema.Record(Schema.String, Schema.Unknown)])
    : struct) as unknown as Schema.Codec<unknown>
}

const build = (node: unknown, path: string): Built => {
  if (!isObject(node)) return refuse(path, "type", "a schema must be a JSON object")
  const unknown = Object.keys(node).find((keyword) => !keywords.has(keyword))
  if (unknown !== undefined) return refuse(`${path}/${unknown}`, unknown, `"${unknown}" is not supported`)
  let built: Built
  if (node.const !== undefined) {
    if (!isPrimitive(node.const)) {
      return refuse(`${path}/const`, "const", "const must be a string, number, boolean or null")
    }
    built = Schema.Literal(node.const as never) as Schema.Codec<unknown>
    if (node.const === null) built = Schema.Null
  } else if (node.enum !== undefined) {
    const values = node.enum
    if (!Array.isArray(values) || values.length === 0 || !values.every(isPrimitive)) {
      return refuse(`${path}/enum`, "enum", "enum must be a non-empty array of strings, numbers, booleans or null")
    }
    const literals = values.filter((value) => value !== null)
    const members: Array<Schema.Codec<unknown>> = literals.length === 0
      ? []
      : [Schema.Literals(literals as never) as Schema.Codec<unknown>]
    if (values.includes(null)) members.push(Schema.Null)
    built = members.length === 1 ? members[0]! : Schema.Union(members) as Schema.Codec<unknown>
  } else {
    const declared = node.type
    if (declared === undefined) {
      return refuse(`${path}/type`, "type", "every schema needs a type (or enum / const)")
    }
    const list = Array.isArray(declared) ? declared : [declared]
    const bad = list.find((type) => typeof type !== "string" || !types.has(type))
    if (list.length === 0 || bad !== undefined) {
      return refuse(
        `${path}/type`,
        "type",
        `type ${JSON.stringify(bad ?? declared)} is not one of ${[...types].join(", ")}`
      )
    }
    const members: Array<Schema.Codec<unknown>> = []
    for (const type of list as ReadonlyArray<string>) {
      const member = ofType(node, type, path)
      if (isRefusal(member)) return member
      members.push(member)
    }
    built = members.length === 1 ? members[0]! : Schema.Union(members) as Schema.Codec<unknown>
  }
  return typeof node.description === "string" ? built.annotate({ description: node.description }) : built
}

/** A caller's JSON Schema checked against the subset and compiled, or the first thing refused. */
export const compile = (jsonSchema: JsonSchema): Result.Result<Compiled, UnsupportedOutputSchema> => {
  const built = build(jsonSchema, "")
  if (isRefusal(built)) return Result.fail(new UnsupportedOutputSchema({ ...built, supported }))
  if (jsonSchema.type !== "object") {
    return Result.fail(
      new UnsupportedOutputSchema({
        path: "/type",
        keyword: "type",
        reason: "the root must be {\"type\": \"object\"} (structured output and MCP need an object)",
        supported
      })
    )
  }
  return Result.succeed({ jsonSchema, schema: built })
}

/** The answer's JSON: the text itself, or inside a ```json fence the model wrapped it in. */
const parseAnswer = (text: string): Result.Result<unknown, string> => {
  const fenced = /^\s*```(?:json)?\s*\n([\s\S]*?)\n\s*```\s*$/.exec(text)
  const body = (fenced === null ? text : fenced[1]!).trim()
  try {
    return Result.succeed(JSON.parse(body))
  } catch {
    return Result.fail(`the answer is not JSON (it starts ${JSON.stringify(body.slice(0, 80))})`)
  }
}

/** A value decoded against the schema, or the decoding errors (every one of them). */
export const decodeValue = (compiled: Compiled, value: unknown): Result.Result<unknown, string> =>
  Result.mapError(
    Schema.decodeUnknownResult(compiled.schema)(value, { errors: "all", onExcessProperty: "error" }),
    (issue) => issue.message
  )

/** A final answer (text, or a `final_answer` call's arguments) decoded against the schema. */
export const decodeAnswer = (compiled: Compiled, answer: string | { readonly params: unknown }) => {
  if (typeof answer !== "string") {
    const params = typeof answer.params === "string" ? parseAnswer(answer.params) : Result.succeed(answer.params)
    return Result.flatMap(params, (value) => decodeValue(compiled, value))
  }
  return Result.flatMap(parseAnswer(answer), (value) => decodeValue(compiled, value))
}

/** The name of the tool a child finishes with when its model gives no structured output. */
export const finalAnswerTool = "final_answer"

/** What the child is told, after its task: how to finish. */
export const instruction = (compiled: Compiled, via: "tool" | "provider"): string =>
  via === "tool"
    ? `Your result is data, not the SUMMARY/CHANGES/EVIDENCE/RISKS/BLOCKERS sections: when you are done, ` +
      `call the ${finalAnswerTool} tool once with your result as its arguments (they must match its schema).`
    : `Your result is data, not the SUMMARY/CHANGES/EVIDENCE/RISKS/BLOCKERS sections: when you are done, ` +
      `answer with only a JSON object matching this JSON Schema (no other text):\n` +
      JSON.stringify(compiled.jsonSchema)

/** A child's task, with how to finish when its result is typed. */
export const taskMessage = (prompt: string, output: Check | undefined): string =>
  output === undefined ? prompt : `${prompt}\n\n${instruction(output.compiled, output.via)}`

/** The repair turn's message: what did not match, and how to answer again. */
export const repairMessage = (errors: string, via: "tool" | "provider"): string =>
  `Your result does not match the required output schema:\n${errors}\n` +
  (via === "tool"
    ? `Call ${finalAnswerTool} again with arguments that match its schema.`
    : "Answer again with only a JSON object that matches the schema.")

// ---------------------------------------------------------------------------
// How the child is told: the provider's structured output, or the final-answer tool
// ---------------------------------------------------------------------------

/**
 * A model whose provider takes a JSON Schema for its answer (OpenAI-compatible
 * `response_format: json_schema`) carries this key; a provider package sets it where its
 * configuration says the model supports it (`structured_output`).
 */
export const StructuredOutputTypeId: unique symbol = Symbol.for("@fibril/core/OutputSchema/StructuredOutput")

/** `model`, marked as supporting structured output. */
export const withStructuredOutput = <M extends LanguageModel.LanguageModel>(model: M): M =>
  Object.assign(model, { [StructuredOutputTypeId]: true })

/** How a child on `model` is told to finish: the provider's structured output, else the final-answer tool. */
export const viaOf = (model: LanguageModel.LanguageModel): "tool" | "provider" =>
  StructuredOutputTypeId in model ? "provider" : "tool"

/**
 * The JSON Schema the current model request asks the answer to match, if any: set by the
 * model step around its call, read by a provider that supports structured output (the
 * `effect/ai` request itself stays `generateText`, so the agent keeps its tools).
 */
export const ResponseFormat = Context.Reference<JsonSchema | undefined>("@fibril/core/OutputSchema/ResponseFormat", {
  defaultValue: () => undefined
})

/** The final-answer tool a child on a model without structured output finishes with. */
export const finalAnswer = (compiled: Compiled): Tool.Any =>
  Tool.dynamic(finalAnswerTool, {
    description: "Finish your task: call this once, with your result as its arguments (they must match its schema).",
    parameters: compiled.jsonSchema as never
  }) as unknown as Tool.Any
