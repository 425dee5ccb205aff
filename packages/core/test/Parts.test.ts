import { assert, describe, it } from "@effect/vitest"
import * as Prompt from "effect/ai/Prompt"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Parts from "../src/internal/parts.ts"

// The run's own constructors must make exactly what effect/ai's make: providers, the
// transcript schema and equality all read these values.
describe("internal/parts", () => {
  it("each part and message is what Prompt.makePart / Prompt.makeMessage make", () => {
    const params = { key: "k" }
    const result = { rows: [1, 2] }
    const pairs: Array<[unknown, unknown]> = [
      [Parts.textPart("hi"), Prompt.makePart("text", { text: "hi" })],
      [Parts.reasoningPart("why"), Prompt.makePart("reasoning", { text: "why" })],
      [
        Parts.toolCallPart("c1", "lookup", params),
        Prompt.makePart("tool-call", { id: "c1", name: "lookup", params, providerExecuted: false })
      ],
      [
        Parts.toolResultPart("c1", "lookup", true, result),
        Prompt.makePart("tool-result", { id: "c1", name: "lookup", isFailure: true, result, providerExecuted: false })
      ],
      [Parts.systemMessage("be brief"), Prompt.makeMessage("system", { content: "be brief" })],
      [
        Parts.userText("go"),
        Prompt.makeMessage("user", { content: [Prompt.makePart("text", { text: "go" })] })
      ],
      [
        Parts.assistantMessage([Parts.textPart("done")]),
        Prompt.makeMessage("assistant", { content: [Prompt.makePart("text", { text: "done" })] })
      ],
      [
        Parts.toolMessage([Parts.toolResultPart("c2", "read", false, "x")]),
        Prompt.makeMessage("tool", {
          content: [
            Prompt.makePart("tool-result", {
              id: "c2",
              name: "read",
              isFailure: false,
              result: "x",
              providerExecuted: false
            })
          ]
        })
      ]
    ]
    for (const [ours, theirs] of pairs) {
      assert.deepStrictEqual(ours, theirs)
      assert.deepStrictEqual(Object.keys(ours as object).sort(), Object.keys(theirs as object).sort())
    }
  })

  it.effect("the messages pass effect/ai's Prompt schema both ways", () =>
    Effect.gen(function*() {
      const messages = [
        Parts.systemMessage("s"),
        Parts.userText("u"),
        Parts.assistantMessage([Parts.textPart("t"), Parts.toolCallPart("c", "lookup", { key: "k" })]),
        Parts.toolMessage([Parts.toolResultPart("c", "lookup", false, "v")])
      ]
      const codec = Schema.Array(Prompt.Message)
      const encoded = yield* Schema.encodeUnknownEffect(codec)(messages)
      const decoded = yield* Schema.decodeUnknownEffect(codec)(encoded)
      assert.deepStrictEqual(decoded, messages)
      assert.isTrue(Prompt.isMessage(messages[1]) && Prompt.isPart(messages[1].content[0]))
    }))
})
