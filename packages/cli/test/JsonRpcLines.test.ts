// The line layer in front of `fibril mcp`: unit cases and a property over arbitrary splits of
// the input into reads. The real server under these inputs is in McpRobust.test.ts.
import { assert, describe, it } from "@effect/vitest"
import { Schema } from "effect"
import * as JsonRpcLines from "../src/JsonRpcLines.ts"

const bytes = (text: string) => new TextEncoder().encode(text)
const parsed = (reply: string) => JSON.parse(reply) as { id: unknown; error: { code: number; message: string } }

describe("JsonRpcLines", () => {
  it("a malformed line is answered -32700 with id null; the valid line of the same read goes on", () => {
    const split = JsonRpcLines.make().push(bytes(`{"broken\n{"jsonrpc":"2.0","id":2,"method":"ping"}\r\n`))
    assert.strictEqual(split.lines, `{"jsonrpc":"2.0","id":2,"method":"ping"}\n`)
    assert.deepStrictEqual(split.replies.map(parsed).map((r) => [r.id, r.error.code]), [[null, -32700]])
  })

  it("a line over the limit is dropped as it arrives and answered -32600 at its newline", () => {
    const splitter = JsonRpcLines.make({ maxLineBytes: 10 })
    assert.deepStrictEqual(splitter.push(bytes(`{"id":1,"x":"`)), { lines: "", replies: [] })
    assert.deepStrictEqual(splitter.push(bytes("a".repeat(50))), { lines: "", replies: [] })
    const end = splitter.push(bytes(`"}\n{"id":3}\n`))
    assert.strictEqual(end.lines, `{"id":3}\n`)
    assert.deepStrictEqual(end.replies.map(parsed).map((r) => [r.id, r.error.code]), [[null, -32600]])
    assert.include(parsed(end.replies[0]!).error.message, "over 10 bytes")
  })

  it("too deep: -32600 with the id read from the top level, whatever follows it", () => {
    const deep = "[".repeat(100_000) + "]".repeat(100_000)
    for (
      const [line, id] of [
        [`{"jsonrpc":"2.0","id":7,"params":{"a":${deep}}}`, 7],
        [`{"params":{"id":1,"a":${deep}},"id":"abc"}`, "abc"],
        [`{"method":"x","params":${deep}}`, null],
        [`[${deep}]`, null]
      ] as const
    ) {
      const split = JsonRpcLines.make().push(bytes(`${line}\n`))
      assert.strictEqual(split.lines, "")
      const reply = parsed(split.replies[0]!)
      assert.deepStrictEqual([reply.id, reply.error.code], [id, -32600])
    }
    assert.strictEqual(JsonRpcLines.depthOf(`{"a":"[[[{{{","b":[1,[2]]}`), 3)
  })

  // Lines of three kinds, joined, cut into reads at arbitrary places: every non-empty line gets
  // exactly one outcome, in order: passed on unchanged, or answered.
  const Line = Schema.Union([
    Schema.Struct({ kind: Schema.Literal("ok"), id: Schema.Int }),
    Schema.Struct({ kind: Schema.Literal("garbage"), text: Schema.String }),
    Schema.Struct({ kind: Schema.Literal("blank") })
  ])
  it.prop(
    "every line gets one outcome, however the input is cut into reads",
    [Schema.Array(Line), Schema.Array(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 400 })))],
    ([lines, cuts]) => {
      const texts = lines.map((line) =>
        line.kind === "ok"
          ? JSON.stringify({ jsonrpc: "2.0", id: line.id, method: "ping" })
          : line.kind === "blank"
          ? ""
          : `{${line.text.replace(/\n/g, " ")}`
      )
      const input = bytes(texts.map((text) => `${text}\n`).join(""))
      const at = [...new Set(cuts.map((cut) => Math.min(cut, input.length)))].sort((a, b) => a - b)
      const splitter = JsonRpcLines.make()
      let passed = ""
      let answered = 0
      let from = 0
      for (const to of [...at, input.length]) {
        const split = splitter.push(input.subarray(from, to))
        passed += split.lines
        answered += split.replies.length
        from = to
      }
      const valid = texts.filter((text) => {
        if (text.trim() === "") return false
        try {
          JSON.parse(text)
          return true
        } catch {
          return false
        }
      })
      assert.strictEqual(passed, valid.map((text) => `${text}\n`).join(""))
      assert.strictEqual(answered, texts.filter((text) => text.trim() !== "").length - valid.length)
    }
  )
})
