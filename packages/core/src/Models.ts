/**
 * Models — which `LanguageModel` serves a model id.
 *
 * Sub-agents may run on different models (per role, or named at spawn). A catalog resolves
 * an id to a LanguageModel and, where it can list its models, refuses unknown ids with the
 * list of accepted ones — at spawn, before anything is created. A single LanguageModel
 * (the common case, and the ScriptedModel) serves every id and validates none.
 */
import * as LanguageModel from "effect/ai/LanguageModel"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"

export class UnknownModel extends Schema.TaggedError<UnknownModel>()("UnknownModel", {
  model: Schema.String,
  accepted: Schema.Array(Schema.String)
}) {
  override get message() {
    return `unknown model "${this.model}"; accepted: ${this.accepted.join(", ")}`
  }
}

export class Models extends Context.Service<Models, {
  /** The id used when nothing else names a model. */
  readonly defaultModel: string
  /** The ids this catalog accepts, when it can list them. */
  readonly available: ReadonlyArray<string> | undefined
  readonly resolve: (model: string) => Effect.Effect<LanguageModel.LanguageModel, UnknownModel>
}>()("@fibril/core/Models") {}

/**
 * The id of a model no one named (`fromLanguageModel()` without a label). An agent on it takes
 * the name its provider reports in its first answer (`response-metadata`'s `modelId`), so its
 * events, record and results name the real model.
 */
export const unnamed = "default"

/** One LanguageModel (from context) under every id; `defaultModel` labels it. */
export const fromLanguageModel = (defaultModel = unnamed): Layer.Layer<Models, never, LanguageModel.LanguageModel> =>
  Layer.effect(
    Models,
    LanguageModel.LanguageModel.useSync((model) =>
      Models.of({ defaultModel, available: undefined, resolve: () => Effect.succeed(model) })
    )
  )

/** A fixed catalog: exactly these ids, the first one (or `defaultModel`) by default. */
export const fromRecord = (
  models: Readonly<Record<string, LanguageModel.LanguageModel>>,
  defaultModel?: string
): Layer.Layer<Models> => {
  const available = Object.keys(models)
  return Layer.succeed(
    Models,
    Models.of({
      defaultModel: defaultModel ?? available[0] ?? "default",
      available,
      resolve: (model) => {
        const found = models[model]
        return found === undefined
          ? Effect.fail(new UnknownModel({ model, accepted: available }))
          : Effect.succeed(found)
      }
    })
  )
}
