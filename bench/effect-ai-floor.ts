/**
 * The Effect floor with `effect/ai` Prompt/Response values per step (`BENCH.md`'s third row):
 * bench/effect-floor.ts's runtime with the conversation held as `Prompt.Message` values, a
 * `Prompt` handed to the model and a `GenerateTextResponse` of `Response` parts read back at
 * each step. Fibril's model port is the `effect/ai` `LanguageModel` (DESIGN.md), so this is
 * the least any runtime on that port pays: measured in the same run as Fibril and the other
 * floors, it says how much of Fibril's distance to the bare Effect floor the port itself is.
 */
import * as EffectFloor from "./effect-floor.ts"

export const meta = {
  name: "effect-ai-floor",
  packages: [["effect"]],
  capHow: EffectFloor.meta.capHow,
  abortHow: EffectFloor.meta.abortHow
}

export const { dispose, runW1, runW2, runW3 } = EffectFloor.adapter(EffectFloor.ai)
