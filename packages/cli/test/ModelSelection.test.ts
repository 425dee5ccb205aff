import { describe, it } from "@effect/vitest"
import { assert } from "@effect/vitest"
import * as FibrilConfig from "@fibril/core/FibrilConfig"
import * as Effect from "effect/Effect"
import * as ModelSelection from "../src/ModelSelection.ts"

const select = (env: Record<string, string>) =>
  ModelSelection.select({ env: { OPENAI_API_KEY: "sk-test", ...env }, settings: FibrilConfig.defaults, cwd: "/tmp" })

describe("ModelSelection: FIBRIL_STRUCTURED_OUTPUT", () => {
  it.effect("1 or true marks the endpoint as serving structured output; absent, 0 or false does not", () =>
    Effect.gen(function*() {
      for (const [value, expected] of [["1", true], ["true", true], ["0", false], ["false", false]] as const) {
        const selection = yield* select({ FIBRIL_STRUCTURED_OUTPUT: value })
        assert.isTrue(selection.kind === "openai" && selection.structuredOutput === expected, value)
      }
      const unset = yield* select({})
      assert.isTrue(unset.kind === "openai" && !unset.structuredOutput)
    }))

  it.effect("anything else is a usage error saying what is accepted", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(select({ FIBRIL_STRUCTURED_OUTPUT: "yes" }))
      assert.include(error.problem, "FIBRIL_STRUCTURED_OUTPUT=yes is not a switch: 1 or true")
    }))
})
