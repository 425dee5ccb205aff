/**
 * A sleep that does not keep the process alive: for the runtime's own periodic work (the
 * heartbeat watchdog, the poll for other processes' requests), which must never be the reason
 * a process whose agents have all ended stays up. On Effect's live clock it is an unref'd
 * timer, cleared if the sleeping fiber is interrupted; on any other clock (TestClock) it is
 * `Effect.sleep`, so the clock under test drives it.
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"

/** Effect's own clock (the default of the `Clock` reference). */
export const liveClock: Clock.Clock = Context.get(Context.empty(), Clock.Clock)

const maxTimerMs = 2 ** 31 - 1

export const sleepUnref = (duration: Duration.Duration): Effect.Effect<void> =>
  Effect.withFiber((fiber) =>
    fiber.getRef(Clock.Clock) !== liveClock ? Effect.sleep(duration) : Effect.callback<void>((resume) => {
      const timer = setTimeout(() => resume(Effect.void), Math.min(maxTimerMs, Duration.toMillis(duration)))
      timer.unref()
      return Effect.sync(() => clearTimeout(timer))
    })
  )
