import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import { main } from "./custom-tool.ts"

it.live("the custom tool is offered to the model and runs", () =>
  Effect.gen(function*() {
    const { answer, transcript } = yield* main
    assert.strictEqual(answer.text, "I asked the clock.")
    const result = transcript.flatMap((m) => m.role === "tool" ? m.content : [])[0]
    assert.isTrue(result?.type === "tool-result" && !result.isFailure)
    assert.match(String(result?.type === "tool-result" ? result.result : ""), /^\d{4}-\d\d-\d\dT/)
  }))
