/**
 * The running fiber's clock, read synchronously: for per-agent code that is already running
 * inside a fiber's step (a generator's body, a combinator's callback) and only needs the
 * time, where `yield* Clock.currentTimeMillis` would cost steps of its own. It is the same
 * `Clock` reference (TestClock under test); outside a fiber it is the live clock.
 */
import * as Clock from "effect/Clock"
import * as Fiber from "effect/Fiber"
import { liveClock } from "./sleep.ts"

export const clockNow = (): Clock.Clock => Fiber.getCurrent()?.getRef(Clock.Clock) ?? liveClock

export const nowMillis = (): number => clockNow().currentTimeMillisUnsafe()
