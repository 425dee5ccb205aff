/**
 * Sub-agent permits: `max` of them, SubAgentManager's cap. Only a run that holds a permit
 * works; the two admissions do not mix in one manager:
 *
 * - reject: `admit` takes a free permit at once or says no (the spawn fails with CapReached);
 * - queue: `take` waits for one, in order.
 *
 * With queue admission a run blocked waiting for others (agent_wait, a blocking agent_result,
 * its answer waiting for its background children) lends its permit to one of them that is
 * queued (`lendWhile`): that one works on it, and it goes back to the lender when that one
 * ends. So runs able to work never exceed the cap — `free` plus the holders that work on a
 * permit (hold one and have not lent it on) is always `max` — and a tree deeper than the cap
 * cannot deadlock on parents that keep their permits while their children queue.
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"

/** A run that can work on a permit (SubAgentManager's agent entry). */
export interface Holder {
  /** Where the permit it works on came from: the pool, or the holder that lent it; undefined: none. */
  permit: Holder | "pool" | undefined
  /** While it is blocked waiting for these: it lends its permit to one of them that is queued. */
  lending: ReadonlySet<unknown> | undefined
  /** The holder working on its permit now. */
  lentTo: Holder | undefined
}

interface Waiter {
  readonly holder: Holder
  readonly ready: Deferred.Deferred<void>
}

export interface Permits {
  /** Permits in the pool. */
  readonly free: () => number
  /** Permits taken by `admit` and not given back yet (the count a cap error reports). */
  readonly held: () => number
  /** Holders waiting in `take`. */
  readonly queued: () => number
  /** Reject admission: takes a free permit (true), or there is none (false). */
  readonly admit: () => boolean
  /** A permit taken by `admit` whose run never started goes back to the pool. */
  readonly unadmit: () => void
  /** Queue admission: waits for a permit (a lender waiting for `holder`, else the pool, in order). */
  readonly take: (holder: Holder) => Effect.Effect<void>
  /** Gives up the permit `holder` works on (and one taken by `admit`, when `admitted`). */
  readonly release: (holder: Holder, admitted: boolean) => void
  /**
   * `waiting` (the lender's run blocked until `targets` end), with the lender's permit lent to
   * a queued target. If the wait ends while a target still works on it, that one keeps it, and
   * the lender waits for a permit again before it goes on. `waiting` runs in the lender's own
   * run: the run cannot work (or end) meanwhile.
   */
  readonly lendWhile: <A, E>(
    lender: Holder,
    targets: ReadonlySet<unknown>,
    waiting: Effect.Effect<A, E>
  ) => Effect.Effect<A, E>
}

export const make = (max: number): Permits => {
  let free = max
  let held = 0
  /** In order of arrival (a Set keeps it); a waiter leaves it when granted or interrupted. */
  const queued = new Set<Waiter>()
  const lenders = new Set<Holder>()

  const grant = (waiter: Waiter, from: Holder | "pool") => {
    queued.delete(waiter)
    waiter.holder.permit = from
    if (from !== "pool") from.lentTo = waiter.holder
    Deferred.doneUnsafe(waiter.ready, Effect.void)
  }

  /**
   * A lender's permit is not in use: it goes to a queued holder the lender waits for, else
   * stays. (Every holder offered is lending: one of `lenders`, or the lender of a permit just
   * given back — a lender that stops lending, or ends, hands its permit over to its borrower,
   * so no permit in use is owed to a holder that does not lend.)
   */
  const offer = (lender: Holder) => {
    if (lender.lentTo !== undefined || lender.permit === undefined) return
    const lending = lender.lending!
    for (const waiter of queued) {
      if (lending.has(waiter.holder)) return grant(waiter, lender)
    }
  }

  /** `holder`'s permit goes on to the one it lent it to, owed to where it came from. */
  const handOver = (holder: Holder, borrower: Holder) => {
    const from = holder.permit!
    holder.lentTo = undefined
    holder.permit = undefined
    borrower.permit = from
    if (from !== "pool") from.lentTo = borrower
  }

  const release = (holder: Holder, admitted: boolean) => {
    if (admitted) held--
    const borrower = holder.lentTo
    // Ended while its permit is lent out (only if a wait lent it from outside its run): the
    // borrower keeps it.
    if (borrower !== undefined) return handOver(holder, borrower)
    const from = holder.permit
    holder.permit = undefined
    if (from === undefined) return
    if (from !== "pool") {
      from.lentTo = undefined
      offer(from)
    } else {
      const first = queued.values().next()
      if (first.done === true) free++
      else grant(first.value, "pool")
    }
  }

  const take = (holder: Holder): Effect.Effect<void> =>
    Effect.suspend(() => {
      if (free > 0) {
        free--
        holder.permit = "pool"
        return Effect.void
      }
      const waiter = { holder, ready: Deferred.makeUnsafe<void>() }
      queued.add(waiter)
      for (const lender of lenders) offer(lender)
      // Interrupted while queued: it leaves the queue (a permit granted meanwhile is released with the run).
      return Effect.onInterrupt(Deferred.await(waiter.ready), () => Effect.sync(() => queued.delete(waiter)))
    })

  const lendWhile = <A, E>(
    lender: Holder,
    targets: ReadonlySet<unknown>,
    waiting: Effect.Effect<A, E>
  ): Effect.Effect<A, E> =>
    Effect.suspend(() => {
      // Already lending (a wait within a wait): the outer one lends. A holder without a permit
      // (a root) lends nothing: `offer` finds no permit to give.
      if (lender.lending !== undefined) return waiting
      lender.lending = targets
      lenders.add(lender)
      offer(lender)
      // Whether the wait ended with the permit still lent: then the lender takes one again.
      let handed = false
      const stop = Effect.sync(() => {
        lender.lending = undefined
        lenders.delete(lender)
        const borrower = lender.lentTo
        if (borrower === undefined) return
        handed = true
        handOver(lender, borrower)
      })
      const retake = Effect.suspend(() => (handed ? take(lender) : Effect.void))
      return Effect.onExit(waiting, () => stop).pipe(Effect.tap(() => retake), Effect.tapError(() => retake))
    })

  return {
    free: () => free,
    held: () => held,
    queued: () => queued.size,
    admit: () => {
      if (free === 0) return false
      free--
      held++
      return true
    },
    // Reject admission never queues: the permit goes straight back to the pool.
    unadmit: () => {
      held--
      free++
    },
    take,
    release,
    lendWhile
  }
}
