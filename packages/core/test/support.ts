// Shared test wiring: the real core layers (Fibril.layer) over a ScriptedModel script and
// the Node platform services, rooted in a fresh temp directory.
import { NodeServices } from "@effect/platform-node"
import { ScriptedModel } from "@fibril/testkit"
import { Context, Effect, FileSystem, Layer, Path } from "effect"
import * as Fibril from "../src/Fibril.ts"
import type * as Models from "../src/Models.ts"
import type * as Session from "../src/Session.ts"

type Services = Fibril.Services | Models.Models

/** Builds the core services over `script` in a new temp workspace; returns them and the root. */
export const setup = Effect.fn("test.setup")(function*(
  script: ScriptedModel.ScriptInput,
  session: Partial<Session.Options> = {},
  extra: Omit<Partial<Fibril.Options>, "cwd" | "session"> & { readonly root?: string } = {}
) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const root = extra.root ?? (yield* fs.realPath(yield* fs.makeTempDirectoryScoped()))
  const context = yield* Layer.build(
    Fibril.layer({ ...extra, cwd: root, session }).pipe(Layer.provide(ScriptedModel.layer(script)))
  )
  const get = <I extends Services, S>(tag: Context.Key<I, S>): S => Context.get(context, tag)
  return { fs, path, root, context, get }
})

export const provideNode = Effect.provide(NodeServices.layer)

/** Text answer in the five-section format. */
export const report = (summary: string, evidence = "none") =>
  `SUMMARY:\n${summary}\n\nCHANGES:\nnone\n\nEVIDENCE:\n${evidence}\n\nRISKS:\nnone\n\nBLOCKERS:\nnone`

/** Is a process with this pid alive? */
export const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}
