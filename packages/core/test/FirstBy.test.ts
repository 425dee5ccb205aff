// The memory store's eviction picks the records that finished first without sorting all of
// them: the same records a stable sort by finish time and its first `count` give.
import { assert, describe, it } from "@effect/vitest"
import { firstBy } from "../src/internal/firstBy.ts"

/** A small deterministic generator (mulberry32), so a failure names its case. */
const random = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

describe("firstBy", () => {
  it("gives what a stable sort and its first `count` give, ties in their order", () => {
    const next = random(20261127)
    for (let round = 0; round < 3000; round++) {
      const n = Math.floor(next() * 60)
      // Few distinct keys: ties are the usual case (records finished in the same millisecond).
      const spread = 1 + Math.floor(next() * 8)
      const items = Array.from({ length: n }, (_, id) => ({ id, at: Math.floor(next() * spread) }))
      const count = Math.floor(next() * (n + 3)) - 1
      const expected = [...items].sort((a, b) => a.at - b.at).slice(0, Math.max(0, count)).map((i) => i.id)
      const got = firstBy(items, count, (i) => i.at).map((i) => i.id)
      assert.deepStrictEqual(
        [...got].sort((a, b) => a - b),
        [...expected].sort((a, b) => a - b),
        `round ${round}: n=${n} count=${count}`
      )
    }
  })

  it("a count at or past the end gives every item, in its order, without a heap", () => {
    const items = [5, 1, 4, 1, 3, 9, 2].map((at, id) => ({ id, at }))
    assert.strictEqual(firstBy(items, items.length, (i) => i.at), items)
    assert.strictEqual(firstBy(items, items.length + 2, (i) => i.at), items)
    assert.deepStrictEqual(firstBy(items, 0, (i) => i.at), [])
    assert.deepStrictEqual(firstBy(items, -1, (i) => i.at), [])
  })
})
