/**
 * todowrite / todoread — the calling session's task list, and the `Todos` service that
 * holds it.
 *
 * Lists are keyed by `sessionId` (from the tool call context), so every agent of a tree
 * has its own list and a sub-agent cannot overwrite its parent's plan. `todowrite`
 * replaces the whole list: the model always sends the full current state, which keeps
 * the tool idempotent and the stored list exactly what the model last saw.
 */
import * as AiTool from "effect/ai/Tool"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { text } from "../internal/resource.ts"
import * as ToolRegistry from "../ToolRegistry.ts"

export const TodoStatus = Schema.Literals(["pending", "in_progress", "completed"])
export type TodoStatus = typeof TodoStatus.Type
export const TodoPriority = Schema.Literals(["high", "medium", "low"])
export type TodoPriority = typeof TodoPriority.Type

export const Todo = Schema.Struct({
  content: Schema.String.annotate({ description: "What to do, as a short imperative sentence" }),
  status: TodoStatus.annotate({ description: "pending, in_progress (ideally one at a time) or completed" }),
  priority: Schema.optionalKey(TodoPriority.annotate({ description: "high, medium or low" }))
})
export type Todo = typeof Todo.Type

/** In-memory todo lists, one per session. */
export class Todos extends Context.Service<Todos, {
  readonly get: (sessionId: string) => Effect.Effect<ReadonlyArray<Todo>>
  readonly set: (sessionId: string, todos: ReadonlyArray<Todo>) => Effect.Effect<void>
  /** Forgets a session's list (when the session ends). */
  readonly clear: (sessionId: string) => Effect.Effect<void>
}>()("@fibril/core/Todos") {
  /** A fresh, empty store per build of the layer. */
  static readonly layer: Layer.Layer<Todos> = Layer.sync(Todos, () => {
    const lists = new Map<string, ReadonlyArray<Todo>>()
    return Todos.of({
      get: (sessionId) => Effect.sync(() => lists.get(sessionId) ?? []),
      set: (sessionId, todos) => Effect.sync(() => void lists.set(sessionId, [...todos])),
      clear: (sessionId) => Effect.sync(() => void lists.delete(sessionId))
    })
  })
}

export const layer: Layer.Layer<Todos> = Todos.layer

export const WriteParameters = Schema.Struct({
  todos: Schema.Array(Todo).annotate({ description: "The complete todo list; it replaces the previous one" })
})
export type WriteParameters = typeof WriteParameters.Type

// Not `Schema.Struct({})`: in Effect 4.1 that is the `{}` type (any non-null value), whose
// JSON Schema is `{"not":{"type":"null"}}` (providers want an object) and whose decoding
// accepts excess keys. `Tool.EmptyParams` is `{"type":"object","additionalProperties":false}`.
export const ReadParameters = AiTool.EmptyParams
export type ReadParameters = typeof ReadParameters.Type

/** The caller's list: its agent's, or one shared by the callers that are not agents. */
const listOf = (context: ToolRegistry.ToolCallContext): string => context.sessionId ?? ""

export const write = ToolRegistry.define({
  name: "todowrite",
  description: text("./todowrite.md", import.meta.url),
  parameters: WriteParameters,
  posture: "plan",
  // It replaces the whole list: twice is once.
  idempotent: true,
  handler: Effect.fn("tool.todowrite")(function*(params: WriteParameters, context: ToolRegistry.ToolCallContext) {
    const todos = yield* Todos
    yield* todos.set(listOf(context), params.todos)
    return yield* todos.get(listOf(context))
  })
})

export const read = ToolRegistry.define({
  name: "todoread",
  description: text("./todoread.md", import.meta.url),
  parameters: ReadParameters,
  posture: "read",
  handler: Effect.fn("tool.todoread")(function*(_params: ReadParameters, context: ToolRegistry.ToolCallContext) {
    const todos = yield* Todos
    return yield* todos.get(listOf(context))
  })
})
