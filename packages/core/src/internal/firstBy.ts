/**
 * The `count` items of `items` with the least `key`, ties in their order in `items`: what a
 * stable sort by `key` and its first `count` give, without sorting them all (the memory store
 * holds up to `maxRecords` finished records and evicts a few dozen at a time). A max-heap of
 * the `count` least seen so far, by (key, position); O(n log count). In no particular order,
 * except that a `count` at or past the end gives `items` themselves, in their order.
 */
export const firstBy = <A>(items: ReadonlyArray<A>, count: number, key: (item: A) => number): ReadonlyArray<A> => {
  if (count >= items.length) return items
  if (count <= 0) return []
  const keys = items.map(key)
  // Positions in `items`; the greatest (by key, then position) on top.
  const heap: Array<number> = []
  const after = (a: number, b: number) => keys[a]! > keys[b]! || (keys[a] === keys[b] && a > b)
  const swap = (i: number, j: number) => {
    const at = heap[i]!
    heap[i] = heap[j]!
    heap[j] = at
  }
  for (let at = 0; at < items.length; at++) {
    if (heap.length < count) {
      heap.push(at)
      for (let i = heap.length - 1; i > 0;) {
        const parent = (i - 1) >> 1
        if (!after(heap[i]!, heap[parent]!)) break
        swap(i, parent)
        i = parent
      }
    } else if (after(heap[0]!, at)) {
      heap[0] = at
      for (let i = 0;;) {
        const l = 2 * i + 1
        const r = l + 1
        let top = i
        if (l < heap.length && after(heap[l]!, heap[top]!)) top = l
        if (r < heap.length && after(heap[r]!, heap[top]!)) top = r
        if (top === i) break
        swap(i, top)
        i = top
      }
    }
  }
  return heap.map((at) => items[at]!)
}
