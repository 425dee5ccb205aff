/**
 * OpenAiModels — the `Models` catalog of an OpenAI-compatible server.
 *
 * The runtime resolves a model id when an agent is spawned; resolving here checks the id
 * against the server's `GET /models` list, so a typo in `--model` or a role's model fails at
 * spawn with `UnknownModel{model, accepted}` instead of as a 404 in the middle of a run.
 * The list is fetched on the first resolve and kept once a listing succeeds. One
 * `LanguageModel` is built per id and reused.
 */
import * as Models from "@fibril/core/Models"
import type * as LanguageModel from "effect/ai/LanguageModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Semaphore from "effect/Semaphore"
import { OpenAiClient } from "./OpenAiClient.ts"
import * as OpenAiModel from "./OpenAiModel.ts"

export interface Options extends Omit<OpenAiModel.Options, "model"> {
  /** The id used when nothing else names a model. */
  readonly defaultModel: string
}

/** The catalog on the `OpenAiClient` in context. */
export const make = Effect.fn("OpenAiModels.make")(function*(options: Options) {
  const client = yield* OpenAiClient
  const lock = yield* Semaphore.make(1)
  const models = new Map<string, LanguageModel.LanguageModel>()
  let listed: ReadonlyArray<string> | undefined

  // The ids the server lists, or `undefined` when it cannot list them. Not every
  // OpenAI-compatible server implements /models (or lets this key call it), and a server
  // that cannot list must still be usable: then any id is accepted and a wrong one shows up
  // as the server's own error on the first call. A failed listing is tried again on the
  // next resolve; a successful one is kept. The lock keeps concurrent spawns to one request.
  // The warning is said once per catalog: a run resolves its model more than once (the
  // root's record, then its session), and the same failure need not be read twice.
  let warned = false
  const available = lock.withPermits(1)(
    Effect.suspend(() =>
      listed !== undefined ? Effect.succeed(listed) : client.listModels.pipe(
        Effect.tap((ids) => Effect.sync(() => void (listed = ids))),
        Effect.catch((error) => {
          if (warned) return Effect.succeed(undefined)
          warned = true
          return Effect.logWarning(`cannot list the models of ${client.baseURL}; accepting any model id`).pipe(
            Effect.annotateLogs({ reason: error.reason._tag, message: error.message }),
            Effect.as(undefined)
          )
        })
      )
    )
  )

  const modelFor = (model: string) =>
    Effect.suspend(() => {
      const cached = models.get(model)
      if (cached !== undefined) return Effect.succeed(cached)
      return OpenAiModel.makeWith(client, { ...options, model }).pipe(
        Effect.tap((built) => Effect.sync(() => void models.set(model, built)))
      )
    })

  const resolve = Effect.fn("OpenAiModels.resolve")(function*(model: string) {
    const ids = yield* available
    if (ids !== undefined && !ids.includes(model)) return yield* new Models.UnknownModel({ model, accepted: ids })
    return yield* modelFor(model)
  })

  return Models.Models.of({
    defaultModel: options.defaultModel,
    // Known after the first resolve that could list them.
    get available() {
      return listed
    },
    resolve
  })
})

/**
 * The catalog as the `Models` service.
 *
 * @example
 * ```ts
 * Fibril.layerWithModels({ cwd }).pipe(
 *   Layer.provide(OpenAiModels.layer({ defaultModel: "gpt-4.1-mini" })),
 *   Layer.provide(OpenAiClient.layerConfig())
 * )
 * ```
 */
export const layer = (options: Options): Layer.Layer<Models.Models, never, OpenAiClient> =>
  Layer.effect(Models.Models, make(options))
