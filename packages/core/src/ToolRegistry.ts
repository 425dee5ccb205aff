/**
 * ToolRegistry — tools as data.
 *
 * A tool is a definition (name, description, Schema parameters, posture) plus a handler
 * Effect. The registry turns each definition into an `effect/ai` Tool once (so the model
 * sees its JSON Schema), pre-compiles its argument decoder, and hands every session a
 * *view*: the tools its permissions allow, with a ready-made toolkit for the model call.
 * Views are the model-facing half of permissions; `Permission.decide` is re-checked when a
 * call is executed, so hiding a tool is never the only guard.
 */
import * as AiTool from "effect/ai/Tool"
import type * as Toolkit from "effect/ai/Toolkit"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as References from "effect/References"
import * as Schema from "effect/Schema"
import type * as SchemaAST from "effect/SchemaAST"
import * as SchemaIssue from "effect/SchemaIssue"
import * as Tracer from "effect/Tracer"
import type { ToolProgress } from "./AgentEvents.ts"
import * as Permission from "./Permission.ts"
import * as Workspace from "./Workspace.ts"

import { type Posture } from "./Permission.ts"

export { Posture, postures } from "./Permission.ts"

/** The calling agent, as a tool handler sees it. */
export interface ToolCallContext {
  /**
   * The calling agent's id. Absent when the caller is not an agent of a loop (an `effect/ai`
   * Toolkit's model loop, an MCP client): agents it starts have no parent.
   */
  readonly sessionId: string | undefined
  readonly callId: string
  readonly role: string
  readonly depth: number
  /**
   * The agent's permission rules at the time of the call; `shell` sandboxes its commands by
   * them. Absent when the caller is not an agent of the loop: such a caller gets no write
   * access from tools that consult them.
   */
  readonly rules?: Permission.Rules | undefined
  /**
   * Reports how far the call is (an MCP server's progress notifications): each update becomes a
   * `tool_progress` event of the agent. Absent where nobody listens.
   */
  readonly progress?: ((update: ToolProgress) => void) | undefined
}

/** Any tagged failure with a readable message; the loop renders it for the model. */
export interface ToolErrorLike {
  readonly _tag: string
  readonly message: string
}

/** A tool failed in a way the model should read and may correct. */
export class ToolFailure extends Schema.TaggedError<ToolFailure>()("ToolFailure", {
  tool: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `${this.tool}: ${this.reason}`
  }
}

export class DuplicateTool extends Schema.TaggedError<DuplicateTool>()("DuplicateTool", {
  name: Schema.String
}) {
  override get message() {
    return `a tool named "${this.name}" is already registered`
  }
}

/** Parameters are a Struct whose decoding needs no services (arguments arrive as JSON). */
export type Parameters = Schema.Codec<any, any, never, never> & Schema.Top

/**
 * A tool definition. `paths` names the workspace paths a call touches, so path-scoped
 * permissions (the `plan` role writes only plan artifacts) can be checked before it runs.
 */
export interface ToolDefinition<P extends Parameters = Parameters, R = never> {
  readonly name: string
  readonly description: string
  readonly parameters: P
  readonly posture: Posture
  /**
   * Can a call run twice with the effect of once? Durable runs (cluster mode) run a step again
   * after a crash: an idempotent tool simply runs again, another one is not run twice (its
   * model is told the call was interrupted). Default: true for the `read` posture, else false.
   */
  readonly idempotent?: boolean | undefined
  readonly paths?: ((params: P["Type"]) => ReadonlyArray<string>) | undefined
  /** How the tool is offered outside Fibril's loop (an `effect/ai` Toolkit, an MCP server). */
  readonly served?: Served | undefined
  readonly handler: (params: P["Type"], context: ToolCallContext) => Effect.Effect<unknown, ToolErrorLike, R>
}

/**
 * A tool as a Toolkit or an MCP server offers it: its result's schema (an object root, as
 * MCP wants) and the hints an MCP client shows (MCP defaults them to destructive and
 * open-world, so each is stated).
 */
export interface Served {
  readonly title: string
  readonly success: Parameters
  readonly readOnly: boolean
  readonly destructive: boolean
  readonly idempotent: boolean
  readonly openWorld: boolean
  /**
   * Parameters the advertised input schema marks required although the Schema keeps them
   * optional (beside an alias it still accepts, such as `id` for `agent_id`).
   */
  readonly required?: ReadonlyArray<string> | undefined
}

/** Declares a tool; the identity function that fixes the parameter type for the handler. */
export const define = <P extends Parameters, R = never, const Name extends string = string>(
  definition: ToolDefinition<P, R> & { readonly name: Name }
): ToolDefinition<P, R> & { readonly name: Name } => definition

/**
 * A definition as the tool-call pipeline (`loop/ToolStep.ts`) runs it: its decoder, argument
 * names and paths made once; its handler may still need `R` (the cluster runs the sub-agent
 * tools' definitions this way, with its own services provided).
 */
export interface Callable<R = never> {
  readonly name: string
  readonly posture: Posture
  readonly decode: (input: unknown) => Effect.Effect<unknown, Schema.SchemaError>
  readonly arguments: ReadonlyArray<string> | undefined
  readonly paths: (params: unknown) => ReadonlyArray<string>
  readonly handler: (params: unknown, context: ToolCallContext) => Effect.Effect<unknown, ToolErrorLike, R>
}

/** A registered tool: its handler's requirements are already provided. */
export interface RegisteredTool {
  readonly name: string
  readonly description: string
  readonly posture: Posture
  /** See `ToolDefinition.idempotent` (here with its default applied). */
  readonly idempotent: boolean
  readonly parameters: Parameters
  readonly aiTool: AiTool.Any
  readonly decode: (input: unknown) => Effect.Effect<unknown, Schema.SchemaError>
  /**
   * The argument names the parameters declare, when they are a struct with no index
   * signatures: what a refusal of an unexpected argument lists as accepted.
   */
  readonly arguments: ReadonlyArray<string> | undefined
  readonly paths: (params: unknown) => ReadonlyArray<string>
  readonly handler: (params: unknown, context: ToolCallContext) => Effect.Effect<unknown, ToolErrorLike>
}

/** The tools one session may see, and the toolkit handed to the model. */
export interface ToolView {
  readonly tools: ReadonlyArray<RegisteredTool>
  readonly byName: ReadonlyMap<string, RegisteredTool>
  readonly toolkit: Toolkit.WithHandler<Record<string, AiTool.Any>>
}

const noPaths = () => [] as ReadonlyArray<string>

/** Types inside which `onExcessProperty` changes nothing: no objects, no transformations. */
const isFlat = (ast: SchemaAST.AST): boolean => {
  if (ast.encoding !== undefined) return false
  switch (ast._tag) {
    case "Arrays":
      return ast.elements.every(isFlat) && ast.rest.every(isFlat)
    case "Union":
      return ast.types.every(isFlat)
    case "Objects":
    case "Declaration":
    case "Suspend":
      return false
    default:
      return true
  }
}

/**
 * Decodes arguments, failing on keys the schema does not declare. With that option Schema
 * takes a slower generic path per call; for a flat struct (the usual tool parameters) the
 * same check is done here and a clean input takes the default fast path, with the same
 * result. Any input with an excess key still goes through the strict decoder, for its error.
 */
const strictDecoder = (parameters: Parameters): RegisteredTool["decode"] => {
  const strict = Schema.decodeUnknownEffect(parameters, { onExcessProperty: "error" })
  const ast = parameters.ast
  if (
    ast._tag !== "Objects" || ast.indexSignatures.length > 0 || ast.encoding !== undefined ||
    !ast.propertySignatures.every((property) => isFlat(property.type))
  ) return strict
  const loose = Schema.decodeUnknownEffect(parameters)
  const declared: ReadonlySet<PropertyKey> = new Set(ast.propertySignatures.map((property) => property.name))
  const excessKey = (input: object): PropertyKey | undefined => {
    // Own enumerable string keys without an array of them (this runs for every tool call).
    for (const key in input) {
      if (!declared.has(key) && Object.hasOwn(input, key)) return key
    }
    for (const key of Object.getOwnPropertySymbols(input)) {
      if (!declared.has(key) && Object.prototype.propertyIsEnumerable.call(input, key)) return key
    }
    return undefined
  }
  const isObject = (input: unknown): input is object =>
    typeof input === "object" && input !== null && !Array.isArray(input)
  if (ast.propertySignatures.length === 0) {
    // `Schema.Struct({})` is the type `{}`: it takes any value but null and undefined, even
    // with `onExcessProperty: "error"`. A tool that takes no arguments takes `{}` only.
    return (input) => {
      if (!isObject(input)) {
        return Effect.fail(
          new Schema.SchemaError(new SchemaIssue.InvalidValue({ message: "Expected an object with no keys" }, input))
        )
      }
      const key = excessKey(input)
      return key === undefined ? loose(input) : Effect.fail(
        new Schema.SchemaError(
          new SchemaIssue.Composite(ast, [new SchemaIssue.Pointer([key], new SchemaIssue.UnexpectedKey(ast))], input)
        )
      )
    }
  }
  return (input) => !isObject(input) || excessKey(input) !== undefined ? strict(input) : loose(input)
}

/** The declared argument names of plain struct parameters (see `RegisteredTool.arguments`). */
const argumentNames = (parameters: Parameters): ReadonlyArray<string> | undefined => {
  const ast = parameters.ast
  if (ast._tag !== "Objects" || ast.encoding !== undefined) return undefined
  // A record of `Never` values (`Tool.EmptyParams`) accepts no key at all.
  if (!ast.indexSignatures.every((index) => index.type._tag === "Never")) return undefined
  return ast.propertySignatures.flatMap((property) => typeof property.name === "string" ? [property.name] : [])
}

/** `tool` ready for the tool-call pipeline (see `Callable`). */
export const callable = <R>(
  // `any`: a definition's handler is invariant in its parameters (a list of definitions would
  // not type otherwise); the decoder made here is what gives the handler its input.
  tool: ToolDefinition<any, R>
): Callable<R> => {
  const paths = tool.paths
  return {
    name: tool.name,
    posture: tool.posture,
    decode: strictDecoder(tool.parameters),
    arguments: argumentNames(tool.parameters),
    paths: paths ? (params) => paths(params) : noPaths,
    handler: (params, context) => tool.handler(params, context)
  }
}

const toToolkit = (tools: ReadonlyArray<RegisteredTool>): Toolkit.WithHandler<Record<string, AiTool.Any>> => {
  const record: Record<string, AiTool.Any> = {}
  for (const tool of tools) record[tool.name] = tool.aiTool
  return {
    tools: record,
    // The loop calls the model with tool-call resolution disabled and runs tools itself
    // (permissions, events, concurrency, timeouts), so the toolkit never executes a call.
    handle: (name) => Effect.die(`ToolRegistry toolkit cannot execute "${String(name)}": the agent loop runs tools`)
  }
}

/**
 * Tools that exist only once something is started: an MCP server's (McpTools), started on
 * first use. The registry starts a source when an agent whose rules could use it is about to
 * be offered its tools (`prepare`), so an agent that may not use it never starts it.
 */
export interface Source {
  /** The MCP server it is, when it is one: what an agent's `mcp_servers` name (McpNarrowing). */
  readonly server?: string | undefined
  /** Is `name` one of its tools (known before it is started: `allowed_tools` may name them)? */
  readonly covers: (name: string) => boolean
  /** Could an agent with these rules use any of its tools? */
  readonly usedBy: (rules: Permission.Rules) => boolean
  /**
   * Starts it and registers its tools; called again until it succeeds once, so it must be
   * idempotent. `rules` are those of the agent that needs it first: a source may start what
   * that agent may use (a read-only agent's MCP server runs sandboxed).
   */
  readonly start: (rules: Permission.Rules) => Effect.Effect<void>
}

export class ToolRegistry extends Context.Service<ToolRegistry, {
  /** Registers a tool; its handler's requirements are captured from the caller's context. */
  readonly register: <P extends Parameters, R>(tool: ToolDefinition<P, R>) => Effect.Effect<void, DuplicateTool, R>
  readonly get: (name: string) => Option.Option<RegisteredTool>
  readonly list: Effect.Effect<ReadonlyArray<RegisteredTool>>
  /** The tools `rules` allow, cached per rule set (and shared per set of tools) until the registry changes. */
  readonly view: (rules: Permission.Rules) => ToolView
  /** Adds a source whose tools are registered when first needed. */
  readonly addSource: (source: Source) => Effect.Effect<void>
  /** Starts the sources `rules` could use (once each): call before offering `view(rules)`. */
  readonly prepare: (rules: Permission.Rules) => Effect.Effect<void>
  /** Is `name` a registered tool or one a source will register? */
  readonly known: (name: string) => boolean
  /**
   * The MCP servers there are: every server source, and every server a registered
   * `mcp__<server>__<tool>` names (McpNarrowing narrows agents among them).
   */
  readonly mcpServers: () => ReadonlyArray<string>
}>()("@fibril/core/ToolRegistry") {}

const withoutCallSite = Context.omit(Tracer.ParentSpan, References.CurrentStackFrame)
const capturable = <R>(context: Context.Context<R>): Context.Context<R> =>
  withoutCallSite(context) as Context.Context<R>

export const make = Effect.sync(() => {
  const tools = new Map<string, RegisteredTool>()
  let views = new WeakMap<Permission.Rules, ToolView>()
  // Every child derives new rules, but children of one role see the same tools: views are
  // shared by the set of visible tools, so each such set gets one toolkit.
  let viewsByTools = new Map<string, ToolView>()

  const register = Effect.fn("ToolRegistry.register")(function*<P extends Parameters, R>(tool: ToolDefinition<P, R>) {
    if (tools.has(tool.name)) return yield* new DuplicateTool({ name: tool.name })
    // What the registration site says about *where* it ran is not the handler's to keep: its
    // span (this `register` call's, long ended) would parent every call's spans, and its stack
    // frame would annotate every cause passing through a call. Calls take both from the caller.
    const context = capturable(yield* Effect.context<R>())
    // The handler runs with the caller's context with the captured services over it (what
    // `Context.merge(caller, captured)` gives). The caller's usually holds most of them already
    // (same runtime), so only the differing ones (the layer's Scope) are added, not both maps
    // copied; the result is kept per caller context, shared by the calls of one session.
    const merged = new WeakMap<Context.Context<never>, Context.Context<R>>()
    const captured = Array.from(context.mapUnsafe, ([key, value]) => ({
      key,
      service: Context.Service<unknown>(key),
      value
    }))
    const withCaptured = (caller: Context.Context<never>) => {
      let found = merged.get(caller)
      if (found === undefined) {
        let ctx = caller as Context.Context<R>
        for (const { key, service, value } of captured) {
          if (Context.getOrUndefined(ctx, service) !== value) ctx = Context.addUnsafe(ctx, key, value)
        }
        // An isolated agent's tools work in its worktree, whatever workspace they captured.
        const isolated = Context.get(caller, Workspace.Isolated)
        if (isolated !== undefined) ctx = Context.add(ctx, Workspace.Workspace, isolated) as Context.Context<R>
        found = ctx
        merged.set(caller, found)
      }
      return found
    }
    const { decode, arguments: names, paths } = callable(tool)
    tools.set(tool.name, {
      name: tool.name,
      description: tool.description,
      posture: tool.posture,
      idempotent: tool.idempotent ?? tool.posture === "read",
      parameters: tool.parameters,
      aiTool: AiTool.make(tool.name, { description: tool.description, parameters: tool.parameters }),
      decode,
      arguments: names,
      paths,
      handler: (params, ctx) => Effect.updateContext(tool.handler(params as P["Type"], ctx), withCaptured)
    })
    views = new WeakMap()
    viewsByTools = new Map()
  })

  const view = (rules: Permission.Rules): ToolView => {
    const cached = views.get(rules)
    if (cached) return cached
    const visible = [...tools.values()].filter((tool) => Permission.allowsTool(rules, tool.name, tool.posture))
    const key = JSON.stringify(visible.map((tool) => tool.name))
    let made = viewsByTools.get(key)
    if (made === undefined) {
      made = { tools: visible, byName: new Map(visible.map((tool) => [tool.name, tool])), toolkit: toToolkit(visible) }
      viewsByTools.set(key, made)
    }
    views.set(rules, made)
    return made
  }

  // Sources not started yet; one that started is dropped, so `prepare` is free afterwards.
  const pending: Array<Source> = []
  const sources: Array<Source> = []
  const prepare = (rules: Permission.Rules): Effect.Effect<void> =>
    Effect.suspend(() => {
      const wanted = pending.filter((source) => source.usedBy(rules))
      return wanted.length === 0 ?
        Effect.void :
        Effect.forEach(wanted, (source) =>
          Effect.tap(source.start(rules), () =>
            Effect.sync(() => {
              const at = pending.indexOf(source)
              if (at >= 0) pending.splice(at, 1)
            })), { concurrency: "unbounded", discard: true })
    })

  return ToolRegistry.of({
    addSource: (source) =>
      Effect.sync(() => {
        pending.push(source)
        sources.push(source)
      }),
    prepare,
    known: (name) => tools.has(name) || sources.some((source) => source.covers(name)),
    mcpServers: () => {
      const names = new Set<string>()
      for (const source of sources) if (source.server !== undefined) names.add(source.server)
      for (const name of tools.keys()) {
        const server = Permission.mcpServerOf(name)
        if (server !== undefined) names.add(server)
      }
      return [...names]
    },
    register,
    get: (name) => Option.fromNullishOr(tools.get(name)),
    list: Effect.sync(() => [...tools.values()]),
    view
  })
})

/** An empty registry; tool layers (`BuiltinTools.layer`, `TaskTool.layer`) register into it. */
export const layer: Layer.Layer<ToolRegistry> = Layer.effect(ToolRegistry, make)
