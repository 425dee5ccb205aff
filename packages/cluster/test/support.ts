// The cluster on TestRunner (in-memory message storage and runner, one process): the real
// workflows, the real core steps over a ScriptedModel, the in-memory ClusterStore, in a temp
// workspace. The unit-test engine of cluster mode.
import { NodeServices } from "@effect/platform-node"
import { AgentSteps, Fibril, Session } from "@fibril/core"
import { ScriptedModel } from "@fibril/testkit"
import { Context, Effect, FileSystem, Layer } from "effect"
import type * as LanguageModel from "effect/ai/LanguageModel"
import { ClusterWorkflowEngine } from "effect/cluster"
import * as AgentWorkflow from "../src/AgentWorkflow.ts"
import * as ClusterStore from "../src/ClusterStore.ts"

export const setup = Effect.fn("cluster.test.setup")(function*(
  script: ScriptedModel.ScriptInput,
  options: Partial<AgentWorkflow.Options> & { readonly ask?: ReadonlyArray<string> } = {},
  session: Partial<Session.Options> = {},
  /** The store's clock (default Effect's): tests move it to check wall-time budgets and the heartbeat. */
  clock?: Effect.Effect<number>,
  /** What the workers see of the store (tests inject faults with it); `store` stays the real one. */
  wrapStore: (store: ClusterStore.ClusterStore["Service"]) => ClusterStore.ClusterStore["Service"] = (s) => s,
  /** The workers' model (default: the ScriptedModel of `script`). */
  model: Layer.Layer<LanguageModel.LanguageModel> = ScriptedModel.layer(script)
) {
  const fs = yield* FileSystem.FileSystem
  const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
  const store = yield* (clock === undefined ? ClusterStore.makeMemory : ClusterStore.makeMemoryClocked(clock))
  const core = Fibril.layer({
    cwd: root,
    session: { ...session, maxDepth: options.maxDepth ?? 1 },
    ...(options.ask === undefined ? {} : { ask: options.ask })
  }).pipe(
    Layer.provide(model)
  )
  const live = AgentWorkflow.layer(options).pipe(
    Layer.provideMerge(ClusterWorkflowEngine.layer),
    Layer.provideMerge(AgentWorkflow.memoryRunner),
    Layer.provide(AgentSteps.layer({ ...Session.defaults, ...session })),
    Layer.provideMerge(Layer.succeed(ClusterStore.ClusterStore, wrapStore(store))),
    Layer.provideMerge(core)
  )
  const context = yield* Layer.build(live)
  return { root, store, context, provide: Effect.provide(context) }
}, Effect.provide(NodeServices.layer))

export const provideNode = Effect.provide(NodeServices.layer)

export type Built = Effect.Success<ReturnType<typeof setup>>

export const get = <I, S>(built: Built, tag: Context.Key<I, S>): S =>
  Context.get(built.context as Context.Context<I>, tag)

/** A sub-agent's row as the store keeps it: `fields` over a pending depth-1 child of `ag_root`. */
export const agentRow = (agentId: string, fields: Partial<ClusterStore.AgentRow> = {}): ClusterStore.AgentRow => ({
  agentId,
  parentId: "ag_root",
  rootId: "ag_root",
  depth: 1,
  role: "general",
  model: "",
  description: agentId,
  prompt: "go",
  detached: false,
  workspace: "/ws",
  status: "pending",
  run: 0,
  executionId: `exec-${agentId}`,
  text: null,
  reason: null,
  steps: 0,
  toolCalls: 0,
  tokens: 0,
  ...fields
})
