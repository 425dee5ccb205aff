/**
 * BuiltinTools — the tools every Fibril agent starts with: reading, searching, writing and
 * editing workspace files, running shell commands, and keeping a todo list.
 *
 * Each tool lives in `tools/<Tool>.ts` with its long description beside it in a `.md`
 * file; this module fixes their limits and registers them all into the `ToolRegistry`.
 * Every file path a tool receives goes through `Workspace.resolve`, so nothing here can
 * read or write outside the workspace.
 *
 * @example
 * const tools = BuiltinTools.layer({ shellTimeoutSecs: 60 }).pipe(
 *   Layer.provideMerge(ToolRegistry.layer),
 *   Layer.provide([Workspace.layer(process.cwd()), BuiltinTools.Todos.layer, NodeServices.layer])
 * )
 */
import * as Effect from "effect/Effect"
import type * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import type * as Path from "effect/Path"
import type { ChildProcessSpawner } from "effect/process"
import * as Sandbox from "./Sandbox.ts"
import { type DuplicateTool, ToolRegistry } from "./ToolRegistry.ts"
import * as EditFile from "./tools/EditFile.ts"
import * as Glob from "./tools/Glob.ts"
import * as Grep from "./tools/Grep.ts"
import * as ListDir from "./tools/ListDir.ts"
import * as ReadFile from "./tools/ReadFile.ts"
import * as Shell from "./tools/Shell.ts"
import * as Todo from "./tools/Todo.ts"
import * as WriteFile from "./tools/WriteFile.ts"
import type { Workspace } from "./Workspace.ts"

export { Todos } from "./tools/Todo.ts"

export interface Options {
  /** Default `shell` timeout; a call may override it with `timeout_ms` (at most one hour). */
  readonly shellTimeoutSecs: number
  /** Cap on one tool result's text: shell stdout/stderr each, grep output, a read_file window. */
  readonly maxOutputChars: number
}

export const defaults: Options = { shellTimeoutSecs: 120, maxOutputChars: 30_000 }

/** The built-in tool definitions with `options` applied, in registration order. */
export const definitions = (options: Options = defaults) =>
  [
    ReadFile.definition(options),
    ListDir.definition,
    Grep.definition(options),
    Glob.definition,
    WriteFile.definition,
    EditFile.definition,
    Shell.definition(options),
    Todo.write,
    Todo.read
  ] as const

/** The names of the built-in tools. */
export const names: ReadonlyArray<string> = definitions().map((tool) => tool.name)

/**
 * Registers every built-in tool into the registry; their services are captured from the
 * layer's context. `shell` gets its own `Sandbox` under `options.sandbox` (`[sandbox]`).
 */
export const layer = (
  options: Partial<Options> & { readonly sandbox?: Partial<Sandbox.Options> | undefined } = {}
): Layer.Layer<
  never,
  DuplicateTool,
  | ToolRegistry
  | Workspace
  | FileSystem.FileSystem
  | Path.Path
  | ChildProcessSpawner.ChildProcessSpawner
  | Todo.Todos
> =>
  Layer.effectDiscard(Effect.gen(function*() {
    const registry = yield* ToolRegistry
    const { sandbox: _, ...limits } = options
    const [readFile, listDir, grep, glob, writeFile, editFile, shell, todoWrite, todoRead] = definitions({
      ...defaults,
      ...limits
    })
    yield* registry.register(readFile)
    yield* registry.register(listDir)
    yield* registry.register(grep)
    yield* registry.register(glob)
    yield* registry.register(writeFile)
    yield* registry.register(editFile)
    yield* registry.register(shell)
    yield* registry.register(todoWrite)
    yield* registry.register(todoRead)
  })).pipe(Layer.provide(Sandbox.layer(options.sandbox)))
