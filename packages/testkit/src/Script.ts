/**
 * Script — the data a ScriptedModel plays: ordered rules, each a `match` and a list of turns.
 *
 * The JSON form (`docs/script-format.md`) is decoded by `Script`, which rejects unknown keys at
 * every level (a typo such as `"tool_call"` or `"repeatLast"` must not silently become a no-op)
 * and checks that every turn can actually answer. Keys are snake_case because scripts are
 * written by hand in JSON; code-defined scripts use the same shapes so there is one dialect.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as SchemaGetter from "effect/SchemaGetter"

const NonNegativeInt = Schema.Int.pipe(Schema.check(Schema.isGreaterThanOrEqualTo(0)))
const PositiveInt = Schema.Int.pipe(Schema.check(Schema.isGreaterThanOrEqualTo(1)))

/** Which conversations a rule answers. Every field is optional; all present fields must hold. */
export const Match = Schema.Struct({
  /** Compared case-insensitively to the role in the `Fibril agent: role=<role> depth=<n>` header. */
  role: Schema.optionalKey(Schema.String),
  /** Equal to the depth in the header. */
  depth: Schema.optionalKey(NonNegativeInt),
  /** Substring of the agent's task (its first user message, after the fork marker if any). */
  prompt: Schema.optionalKey(Schema.String),
  /** Substring of the system prompt. */
  system: Schema.optionalKey(Schema.String)
})
export type Match = typeof Match.Type

/** One tool call of a turn. `args` may be a raw string, passed through unparsed as the params. */
export const ToolCall = Schema.Struct({
  name: Schema.NonEmptyString,
  args: Schema.optionalKey(Schema.Union([Schema.Record(Schema.String, Schema.Unknown), Schema.String])),
  id: Schema.optionalKey(Schema.NonEmptyString)
})
export type ToolCall = typeof ToolCall.Type

/** A provider failure. With `times`, only the first `times` attempts fail (a transient fault). */
export const TurnError = Schema.Struct({
  kind: Schema.Literals(["retryable", "fatal"]),
  message: Schema.String,
  retry_after_ms: Schema.optionalKey(NonNegativeInt),
  times: Schema.optionalKey(PositiveInt)
})
export type TurnError = typeof TurnError.Type

/** Token usage reported for a turn; a missing field gets its deterministic default. */
export const Usage = Schema.Struct({
  input: Schema.optionalKey(NonNegativeInt),
  output: Schema.optionalKey(NonNegativeInt),
  cached: Schema.optionalKey(NonNegativeInt)
})
export type Usage = typeof Usage.Type

/** `true`: never answer. `{ times: n }`: never answer on the first n attempts, then answer. */
export const Hang = Schema.Union([Schema.Boolean, Schema.Struct({ times: PositiveInt })])
export type Hang = typeof Hang.Type

const turnProblems = (turn: {
  readonly text?: string
  readonly tool_calls?: ReadonlyArray<unknown>
  readonly error?: TurnError
  readonly hang?: Hang
}): Array<Schema.FilterIssue> => {
  const answers = turn.text !== undefined || turn.tool_calls !== undefined
  const hangs = turn.hang !== undefined && turn.hang !== false
  const problems: Array<Schema.FilterIssue> = []
  if (!answers && turn.error === undefined && !hangs) {
    problems.push("a turn needs at least one of text, tool_calls, error or hang")
  }
  if (turn.error !== undefined && hangs) {
    problems.push({ path: ["hang"], issue: "a turn cannot have both error and hang" })
  }
  if (turn.error !== undefined) {
    if (turn.error.kind === "fatal" && turn.error.retry_after_ms !== undefined) {
      problems.push({ path: ["error", "retry_after_ms"], issue: "retry_after_ms only applies to retryable errors" })
    }
    if (turn.error.times === undefined && answers) {
      problems.push({
        path: ["error"],
        issue: "an error without times fails every attempt, so this turn's text/tool_calls are never used; add times"
      })
    }
    if (turn.error.times !== undefined && !answers) {
      problems.push({
        path: ["error", "times"],
        issue: "error.times needs text or tool_calls to answer with afterwards"
      })
    }
  }
  if (turn.hang === true && answers) {
    problems.push({
      path: ["hang"],
      issue: "hang: true never answers, so this turn's text/tool_calls are never used; use hang: { times: n }"
    })
  }
  if (typeof turn.hang === "object" && !answers) {
    problems.push({ path: ["hang", "times"], issue: "hang.times needs text or tool_calls to answer with afterwards" })
  }
  return problems
}

/**
 * One model answer. Any combination of `text` and `tool_calls`; or an `error`/`hang`
 * (optionally for the first `times` attempts only); plus `delay_ms` and `usage` on any turn
 * (`usage: null`: a provider that reports no token counts at all).
 */
export const Turn = Schema.Struct({
  text: Schema.optionalKey(Schema.String),
  tool_calls: Schema.optionalKey(Schema.NonEmptyArray(ToolCall)),
  error: Schema.optionalKey(TurnError),
  hang: Schema.optionalKey(Hang),
  delay_ms: Schema.optionalKey(NonNegativeInt),
  usage: Schema.optionalKey(Schema.NullOr(Usage))
}).check(Schema.makeFilter(turnProblems))
export type Turn = typeof Turn.Type

/** A rule of a JSON script: turn i of a matching conversation plays `turns[i]`. */
export const JsonRule = Schema.Struct({
  /** Shown in error messages; defaults to a summary of `match`. */
  name: Schema.optionalKey(Schema.String),
  match: Schema.optionalKey(Match),
  turns: Schema.NonEmptyArray(Turn),
  /** Past the last turn, replay it instead of failing. */
  repeat_last: Schema.optionalKey(Schema.Boolean)
})
export type JsonRule = typeof JsonRule.Type

const ScriptStruct = Schema.Struct({
  description: Schema.optionalKey(Schema.String),
  rules: Schema.Array(JsonRule)
})

/**
 * A JSON script. Decoding is strict whatever options the caller passes: unknown keys are
 * reported (all of them, with their paths) instead of being dropped.
 *
 * @example
 * ```ts
 * const script = Schema.decodeUnknownSync(Script)({
 *   rules: [{ match: { role: "explore" }, turns: [{ text: "SUMMARY\nnothing found" }] }]
 * })
 * ```
 */
export const Script = Schema.Unknown.pipe(
  Schema.decodeTo(Schema.toType(ScriptStruct), {
    decode: SchemaGetter.transformEffect((input, options) =>
      Schema.decodeUnknownEffect(ScriptStruct)(input, { ...options, onExcessProperty: "error", errors: "all" }).pipe(
        Effect.mapError((error) => error.issue)
      )
    ),
    encode: SchemaGetter.passthroughSubtype()
  })
)
export type Script = typeof ScriptStruct.Type
