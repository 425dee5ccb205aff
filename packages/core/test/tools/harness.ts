// Test harness for the built-in tools: a real temp directory holding a workspace root
// (`<dir>/ws`) and a sibling outside it (`<dir>/outside`), the real ToolRegistry,
// Workspace and Todos layers, and `call`, which goes through the registry exactly like
// the agent loop does (decode the JSON arguments, then run the handler).
import { NodeServices } from "@effect/platform-node"
import { Context, Effect, FileSystem, Layer, Option, Path, Schema } from "effect"
import { readdirSync, readFileSync } from "node:fs"
import * as BuiltinTools from "../../src/BuiltinTools.ts"
import * as Permission from "../../src/Permission.ts"
import type * as Sandbox from "../../src/Sandbox.ts"
import * as ToolRegistry from "../../src/ToolRegistry.ts"
import * as Workspace from "../../src/Workspace.ts"

/** A root agent with every permission (so `shell`, when sandboxed, gets the workspace writable). */
export const context: ToolRegistry.ToolCallContext = {
  sessionId: "session-1",
  callId: "call-1",
  role: "build",
  depth: 0,
  rules: Permission.allowAll
}

export class NoSuchTool extends Schema.TaggedError<NoSuchTool>()("NoSuchTool", { name: Schema.String }) {}

export const setup = Effect.fn("test.setup")(function*(
  options: Partial<BuiltinTools.Options> & { readonly sandbox?: Partial<Sandbox.Options> } = {}
) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const dir = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
  const root = path.join(dir, "ws")
  const outside = path.join(dir, "outside")
  yield* fs.makeDirectory(root)
  yield* fs.makeDirectory(outside)
  const services = yield* Layer.build(
    BuiltinTools.layer(options).pipe(
      Layer.provideMerge(ToolRegistry.layer),
      Layer.provideMerge(Workspace.layer(root)),
      Layer.provideMerge(BuiltinTools.Todos.layer)
    )
  )
  const registry = Context.get(services, ToolRegistry.ToolRegistry)

  /** Runs a tool through the registry, as the agent loop would. */
  const call = (name: string, args: unknown, ctx: ToolRegistry.ToolCallContext = context) =>
    Option.match(registry.get(name), {
      onNone: () => Effect.fail(new NoSuchTool({ name })),
      onSome: (tool) => Effect.flatMap(tool.decode(args), (params) => tool.handler(params, ctx))
    })

  /** A tool call expected to return text. */
  const text = (name: string, args: unknown) =>
    Effect.map(call(name, args), (out) => (typeof out === "string" ? out : JSON.stringify(out)))

  /** A tool call expected to fail: its error. */
  const failure = (name: string, args: unknown) => Effect.flip(call(name, args))

  const write = (relative: string, content: string | Uint8Array) => {
    const target = path.join(root, relative)
    return fs.makeDirectory(path.dirname(target), { recursive: true }).pipe(
      Effect.andThen(typeof content === "string" ? fs.writeFileString(target, content) : fs.writeFile(target, content))
    )
  }
  const read = (relative: string) => fs.readFileString(path.join(root, relative))

  return { fs, path, dir, root, outside, registry, call, text, failure, write, read }
})

/** The harness's services: NodeServices gives FileSystem, Path and ChildProcessSpawner. */
export const provide = Effect.provide(NodeServices.layer)

/**
 * Is process `pid` still alive? `kill(pid, 0)` says whether it exists; an exited child
 * that no one has reaped yet is a zombie, which counts as gone.
 */
export const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
  } catch {
    return false
  }
  try {
    return !/^\d+ \(.*\) Z /.test(readFileSync(`/proc/${pid}/stat`, "utf8"))
  } catch {
    return false
  }
}

/**
 * Host pids of live processes whose command line contains `marker` as one argument, found
 * through /proc: a sandboxed command's `$$` is a pid in its own namespace, not the host's.
 */
export const pidsWith = (marker: string): Array<number> => {
  const found: Array<number> = []
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0").includes(marker) && isAlive(Number(entry))) {
        found.push(Number(entry))
      }
    } catch {
      // gone meanwhile
    }
  }
  return found
}
