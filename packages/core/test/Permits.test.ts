import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Schema } from "effect"
import * as Permits from "../src/internal/permits.ts"

const holder = (): Permits.Holder => ({ permit: undefined, lending: undefined, lentTo: undefined })

/** Forked, and run at once until it blocks. */
const started = <A, E>(effect: Effect.Effect<A, E>) => Effect.forkChild(effect, { startImmediately: true })

/** Lets forked fibers run until they block again. */
const settle = Effect.gen(function*() {
  for (let i = 0; i < 8; i++) yield* Effect.yieldNow
})

/** Holders working on a permit: they hold one and have not lent it on. */
const working = (holders: ReadonlyArray<Permits.Holder>) =>
  holders.filter((h) => h.permit !== undefined && h.lentTo === undefined)

/** Every permit is either free or worked on by exactly one holder; a borrower points back at its lender. */
const conserved = (permits: Permits.Permits, max: number, holders: ReadonlyArray<Permits.Holder>, when: string) => {
  assert.strictEqual(permits.free() + working(holders).length, max, `permits not conserved ${when}`)
  if (permits.free() > 0) assert.strictEqual(permits.queued(), 0, `a permit free while a holder queues ${when}`)
  for (const h of holders) {
    if (h.lentTo !== undefined) assert.strictEqual(h.lentTo.permit, h, `a borrower not pointing at its lender ${when}`)
  }
}

/** A wait that ends when its gate is opened (or failed). */
const gated = () => Effect.map(Deferred.make<void, string>(), (gate) => ({ gate, waiting: Deferred.await(gate) }))

describe("Permits", () => {
  it.effect("reject admission: admit takes a free permit or says no; unadmit and release give it back", () =>
    Effect.gen(function*() {
      const permits = Permits.make(2)
      assert.isTrue(permits.admit())
      assert.isTrue(permits.admit())
      assert.isFalse(permits.admit())
      assert.deepStrictEqual([permits.free(), permits.held()], [0, 2])
      // A spawn that failed before its run started gives its permit back.
      permits.unadmit()
      assert.deepStrictEqual([permits.free(), permits.held()], [1, 1])
      // A run that started on an admitted permit holds it from the pool, and gives it back at its end.
      const a = holder()
      a.permit = "pool"
      permits.release(a, true)
      assert.deepStrictEqual([permits.free(), permits.held(), permits.queued()], [2, 0, 0])
      assert.isUndefined(a.permit)
      // A holder with no permit (a root) gives nothing back.
      permits.release(holder(), false)
      assert.strictEqual(permits.free(), 2)
      // Only a release of an admitted run counts down the admitted ones.
      assert.isTrue(permits.admit())
      const b = holder()
      b.permit = "pool"
      permits.release(b, false)
      assert.deepStrictEqual([permits.free(), permits.held()], [2, 1])
    }))

  it.effect("queue admission: takes in order; an interrupted taker leaves the queue", () =>
    Effect.gen(function*() {
      const permits = Permits.make(1)
      const [a, b, c, d] = [holder(), holder(), holder(), holder()]
      yield* permits.take(a)
      assert.strictEqual(a.permit, "pool")
      assert.strictEqual(permits.free(), 0)
      const fb = yield* started(permits.take(b))
      const fc = yield* started(permits.take(c))
      const fd = yield* started(permits.take(d))
      assert.strictEqual(permits.queued(), 3)
      // The head of the queue, interrupted, leaves it: c is next.
      yield* Fiber.interrupt(fb)
      assert.strictEqual(permits.queued(), 2)
      permits.release(a, false)
      yield* settle
      assert.isUndefined(b.permit)
      assert.isDefined(fc.pollUnsafe())
      assert.strictEqual(c.permit, "pool")
      assert.isUndefined(fd.pollUnsafe())
      // e queues behind d; d's interruption is handled at once (before the permit c gives back
      // is granted): d is out of the queue, and e gets it.
      const e = holder()
      const fe = yield* started(permits.take(e))
      fd.interruptUnsafe()
      permits.release(c, false)
      assert.isUndefined(d.permit)
      assert.strictEqual(e.permit, "pool")
      yield* settle
      assert.isTrue(Exit.hasInterrupts(fd.pollUnsafe()!))
      assert.isTrue(Exit.isSuccess(fe.pollUnsafe()!))
      permits.release(e, false)
      assert.deepStrictEqual([permits.free(), permits.queued()], [1, 0])
    }))

  it.effect("a lender lends to one queued target at a time, never to others, and has its permit back", () =>
    Effect.gen(function*() {
      const permits = Permits.make(1)
      const [lender, b, c, other] = [holder(), holder(), holder(), holder()]
      const all = [lender, b, c, other]
      yield* permits.take(lender)
      yield* started(permits.take(other))
      const fb = yield* started(permits.take(b))
      const { gate, waiting } = yield* gated()
      const lend = yield* started(permits.lendWhile(lender, new Set([b, c]), waiting))
      // b queued before the lend began: it gets the permit at once.
      yield* settle
      assert.isDefined(fb.pollUnsafe())
      assert.strictEqual(b.permit, lender)
      assert.strictEqual(lender.lentTo, b)
      conserved(permits, 1, all, "with b on the lent permit")
      // c queues meanwhile: the permit is in use, so c waits (one borrower per permit).
      const fc = yield* started(permits.take(c))
      yield* settle
      assert.isUndefined(fc.pollUnsafe())
      assert.isUndefined(c.permit)
      // b ends: the permit goes back to the lender, which lends it to c (not to `other`, queued first).
      permits.release(b, false)
      yield* settle
      assert.strictEqual(c.permit, lender)
      assert.strictEqual(lender.lentTo, c)
      assert.isUndefined(other.permit)
      conserved(permits, 1, all, "with c on the lent permit")
      permits.release(c, false)
      assert.isUndefined(lender.lentTo)
      assert.strictEqual(lender.permit, "pool")
      // The wait ends with the permit home: no new take.
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(lend)
      assert.isUndefined(lender.lending)
      assert.strictEqual(lender.permit, "pool")
      assert.strictEqual(permits.queued(), 1)
      conserved(permits, 1, all, "after the wait")
      // Its own run ends: `other` is next.
      permits.release(lender, false)
      assert.strictEqual(other.permit, "pool")
    }))

  it.effect("a wait that ends while its permit is still lent leaves it to the borrower and takes one again", () =>
    Effect.gen(function*() {
      const permits = Permits.make(1)
      const [lender, b] = [holder(), holder()]
      yield* permits.take(lender)
      yield* started(permits.take(b))
      const { gate, waiting } = yield* gated()
      const lend = yield* started(permits.lendWhile(lender, new Set([b]), waiting))
      yield* settle
      assert.strictEqual(b.permit, lender)
      yield* Deferred.succeed(gate, undefined)
      yield* settle
      // b keeps the permit, owed to the pool; the lender queues for one before it goes on.
      assert.strictEqual(b.permit, "pool")
      assert.isUndefined(lender.permit)
      assert.isUndefined(lender.lentTo)
      assert.isUndefined(lend.pollUnsafe())
      assert.strictEqual(permits.queued(), 1)
      conserved(permits, 1, [lender, b], "with the lender queued")
      permits.release(b, false)
      yield* Fiber.join(lend)
      assert.strictEqual(lender.permit, "pool")
    }))

  it.effect("a wait that fails also takes the permit again; an interrupted one does not", () =>
    Effect.gen(function*() {
      const permits = Permits.make(1)
      const [lender, b] = [holder(), holder()]
      yield* permits.take(lender)
      yield* started(permits.take(b))
      const failing = yield* gated()
      const lend = yield* started(permits.lendWhile(lender, new Set([b]), failing.waiting))
      yield* settle
      yield* Deferred.fail(failing.gate, "timed out")
      yield* settle
      assert.strictEqual(permits.queued(), 1)
      permits.release(b, false)
      const exit = yield* Fiber.await(lend)
      assert.deepStrictEqual(exit, Exit.fail("timed out"))
      assert.strictEqual(lender.permit, "pool")

      // Interrupted (the lender's run is cancelled): its borrower keeps the permit, and the
      // lender takes none.
      const c = holder()
      yield* started(permits.take(c))
      const never = yield* gated()
      const lend2 = yield* started(permits.lendWhile(lender, new Set([c]), never.waiting))
      yield* settle
      assert.strictEqual(c.permit, lender)
      yield* Fiber.interrupt(lend2)
      assert.strictEqual(c.permit, "pool")
      assert.isUndefined(lender.permit)
      assert.strictEqual(permits.queued(), 0)
      permits.release(lender, false)
      conserved(permits, 1, [lender, c], "after the interrupted wait")
    }))

  it.effect("nested lending: a borrower lends on; each hand-over keeps one holder per permit", () =>
    Effect.gen(function*() {
      const permits = Permits.make(1)
      const [a, b, c] = [holder(), holder(), holder()]
      const all = [a, b, c]
      yield* permits.take(a)
      yield* started(permits.take(b))
      const waitA = yield* gated()
      const lendA = yield* started(permits.lendWhile(a, new Set([b]), waitA.waiting))
      yield* settle
      assert.strictEqual(b.permit, a)
      // b waits for c and lends a's permit on.
      yield* started(permits.take(c))
      const waitB = yield* gated()
      const lendB = yield* started(permits.lendWhile(b, new Set([c]), waitB.waiting))
      yield* settle
      assert.strictEqual(c.permit, b)
      assert.strictEqual(b.lentTo, c)
      assert.strictEqual(a.lentTo, b)
      conserved(permits, 1, all, "with c on a permit lent twice")
      // b's wait ends first, c still working: c keeps it, owed to a; b queues.
      yield* Deferred.succeed(waitB.gate, undefined)
      yield* settle
      assert.strictEqual(c.permit, a)
      assert.strictEqual(a.lentTo, c)
      assert.isUndefined(b.permit)
      assert.isUndefined(lendB.pollUnsafe())
      conserved(permits, 1, all, "with b queued again")
      // c ends: back to a, which is still lending to b, queued: b goes on.
      permits.release(c, false)
      yield* settle
      assert.isDefined(lendB.pollUnsafe())
      assert.strictEqual(b.permit, a)
      assert.strictEqual(a.lentTo, b)
      conserved(permits, 1, all, "with b back on a's permit")
      // a's wait ends while b still works: b keeps the pool's permit, a queues.
      yield* Deferred.succeed(waitA.gate, undefined)
      yield* settle
      assert.strictEqual(b.permit, "pool")
      assert.isUndefined(a.permit)
      permits.release(b, false)
      yield* Fiber.join(lendA)
      assert.strictEqual(a.permit, "pool")
      conserved(permits, 1, all, "at the end")
    }))

  it.effect("a lender with a permit lent on through a second wait hands its lender's permit over", () =>
    Effect.gen(function*() {
      // a lends to b, b lends to c; a's wait ends: b's permit (owed to a) becomes the pool's,
      // and c, working on b's, now owes it to b still.
      const permits = Permits.make(1)
      const [a, b, c] = [holder(), holder(), holder()]
      yield* permits.take(a)
      yield* started(permits.take(b))
      const waitA = yield* gated()
      yield* started(permits.lendWhile(a, new Set([b]), waitA.waiting))
      yield* settle
      yield* started(permits.take(c))
      const waitB = yield* gated()
      yield* started(permits.lendWhile(b, new Set([c]), waitB.waiting))
      yield* settle
      yield* Deferred.succeed(waitA.gate, undefined)
      yield* settle
      assert.strictEqual(b.permit, "pool")
      assert.strictEqual(b.lentTo, c)
      assert.strictEqual(c.permit, b)
      assert.isUndefined(a.permit)
      conserved(permits, 1, [a, b, c], "after a's wait")
      // c ends: b has it back; b's wait ends with it home; b ends: a (queued) takes it.
      permits.release(c, false)
      yield* Deferred.succeed(waitB.gate, undefined)
      yield* settle
      assert.strictEqual(b.permit, "pool")
      permits.release(b, false)
      yield* settle
      assert.strictEqual(a.permit, "pool")
    }))

  it.effect("a holder that ends while its permit is lent (a wait from outside its run) leaves it to the borrower", () =>
    Effect.gen(function*() {
      const permits = Permits.make(1)
      const [a, b, d] = [holder(), holder(), holder()]
      yield* permits.take(a)
      yield* started(permits.take(b))
      const wait = yield* gated()
      const lend = yield* started(permits.lendWhile(a, new Set([b]), wait.waiting))
      yield* settle
      permits.release(a, false)
      assert.strictEqual(b.permit, "pool")
      assert.isUndefined(a.permit)
      assert.isUndefined(a.lentTo)
      // The wait ends afterwards: a ended, so it takes no permit again.
      yield* Deferred.succeed(wait.gate, undefined)
      yield* Fiber.join(lend)
      assert.isUndefined(a.permit)
      assert.strictEqual(permits.queued(), 0)
      // d queues; b ends: d has the pool's permit.
      yield* started(permits.take(d))
      permits.release(b, false)
      yield* settle
      assert.strictEqual(d.permit, "pool")
      conserved(permits, 1, [a, b, d], "at the end")
    }))

  it.effect("a holder without a permit, or already lending, only waits", () =>
    Effect.gen(function*() {
      const permits = Permits.make(1)
      const [root, a, b] = [holder(), holder(), holder()]
      yield* permits.take(a)
      // A root holds no permit: it lends none (also to a target that queues while it waits)
      // and takes none after.
      const rootWait = yield* gated()
      const rootLend = yield* started(permits.lendWhile(root, new Set([b]), rootWait.waiting))
      yield* started(permits.take(b))
      yield* settle
      assert.isUndefined(b.permit)
      assert.isUndefined(root.lentTo)
      yield* Deferred.succeed(rootWait.gate, undefined)
      yield* Fiber.join(rootLend)
      assert.isUndefined(root.permit)
      assert.strictEqual(permits.queued(), 1)
      // A second wait inside a first (already lending to nobody queued yet) lends nothing more.
      const outer = yield* gated()
      const lend = yield* started(permits.lendWhile(a, new Set<Permits.Holder>(), outer.waiting))
      yield* settle
      const lending = a.lending
      assert.strictEqual(yield* permits.lendWhile(a, new Set([b]), Effect.succeed("inner")), "inner")
      assert.strictEqual(a.lending, lending)
      assert.isUndefined(b.permit)
      yield* Deferred.succeed(outer.gate, undefined)
      yield* Fiber.join(lend)
      assert.strictEqual(a.permit, "pool")
      assert.isUndefined(a.lending)
      // b queued, not a target: a's run ends and b has the permit from the pool.
      permits.release(a, false)
      yield* settle
      assert.strictEqual(b.permit, "pool")
    }))

  it.effect("a holder that queues after its waiter began lending gets the lent permit", () =>
    Effect.gen(function*() {
      const permits = Permits.make(1)
      const [a, b] = [holder(), holder()]
      yield* permits.take(a)
      const wait = yield* gated()
      yield* started(permits.lendWhile(a, new Set([b]), wait.waiting))
      yield* settle
      assert.isUndefined(a.lentTo)
      const fb = yield* started(permits.take(b))
      yield* settle
      assert.isDefined(fb.pollUnsafe())
      assert.strictEqual(b.permit, a)
      assert.strictEqual(a.lentTo, b)
    }))

  const Op = Schema.Struct({
    op: Schema.Literals(["take", "release", "lend", "end", "fail", "interrupt", "releaseLending"]),
    who: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 4 })),
    mask: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 31 }))
  })

  it.effect.prop(
    "under any schedule of takes, releases, lends and waits ending, no more than max holders work and no permit is lost",
    {
      max: Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 3 })),
      ops: Schema.Array(Op).check(Schema.isMaxLength(40))
    },
    ({ max, ops }) =>
      Effect.gen(function*() {
        const permits = Permits.make(max)
        const holders = Array.from({ length: 5 }, holder)
        const taking: Array<Fiber.Fiber<void> | undefined> = holders.map(() => undefined)
        const lending: Array<{ fiber: Fiber.Fiber<void, string>; gate: Deferred.Deferred<void, string> } | undefined> =
          holders.map(() => undefined)
        const pending = (fiber: Fiber.Fiber<unknown, unknown> | undefined) =>
          fiber !== undefined && fiber.pollUnsafe() === undefined
        for (const [step, { mask, op, who }] of ops.entries()) {
          const h = holders[who]!
          const busy = pending(taking[who]) || pending(lending[who]?.fiber)
          if (op === "take" && !busy && h.permit === undefined && h.lentTo === undefined) {
            taking[who] = yield* started(permits.take(h))
          } else if (op === "release" && !busy && h.permit !== undefined) {
            permits.release(h, false)
          } else if (op === "lend" && !busy && h.permit !== undefined) {
            const targets = new Set(holders.filter((_, i) => (mask & (1 << i)) !== 0 && i !== who))
            const { gate, waiting } = yield* gated()
            const fiber = yield* started(permits.lendWhile(h, targets, waiting))
            lending[who] = { fiber, gate }
          } else if ((op === "end" || op === "fail") && lending[who] !== undefined) {
            yield* op === "end"
              ? Deferred.succeed(lending[who].gate, undefined)
              : Deferred.fail(lending[who].gate, "failed")
          } else if (op === "interrupt" && busy) {
            // The holder's run is cancelled: its take or wait is interrupted, and the run ends.
            yield* Fiber.interrupt(pending(taking[who]) ? taking[who]! : lending[who]!.fiber)
            permits.release(h, false)
          } else if (op === "releaseLending" && pending(lending[who]?.fiber) && h.permit !== undefined) {
            // Its run ends while a wait from outside lends its permit.
            permits.release(h, false)
          }
          yield* settle
          conserved(permits, max, holders, `after step ${step} (${op} ${who})`)
        }
        // Drain: every wait ends and every holder gives its permit up; then every take and wait
        // has finished (nobody is stuck) and every permit is back in the pool.
        for (let round = 0; round < 20; round++) {
          for (const [i, h] of holders.entries()) {
            const lend = lending[i]
            if (lend !== undefined && pending(lend.fiber)) yield* Deferred.succeed(lend.gate, undefined)
            yield* settle
            if (!pending(taking[i]) && !pending(lending[i]?.fiber) && h.permit !== undefined) {
              permits.release(h, false)
            }
            yield* settle
            conserved(permits, max, holders, `while draining (round ${round}, holder ${i})`)
          }
        }
        assert.isFalse([...taking, ...lending.map((l) => l?.fiber)].some(pending), "a take or wait never finished")
        assert.deepStrictEqual([permits.free(), permits.queued()], [max, 0])
      }),
    { arbitrary: { runs: 300 } }
  )
})
