/**
 * A span for the per-agent paths (a prompt, a `task` call, a sub-agent run): the same span as
 * `Effect.withSpan` — same name, same parent, ended with the effect's exit, and the parent of
 * the spans inside — without the stack frame `withSpan` also installs, and with nothing at all
 * when no tracer is installed.
 *
 * The frame only annotates failure causes (the "at <span>" lines of `Cause.pretty`), but
 * while it is installed, every fiber below pays for it each time a cause passes a
 * finalizer: the cause is re-annotated (new Maps, a new Cause) at every step. A cancelled
 * sub-agent tree unwinds a few dozen such steps per agent, so with the frame, interrupting
 * a hundred children allocated ~50 KB per child and spent most of its time there.
 *
 * Without a tracer (the fiber's `Tracer` is Effect's default `nativeTracer`, which exports
 * nothing, or tracing is disabled), a span is a native span object, a finalizer and a context
 * copy that nobody ever reads: about 16 µs of CPU each on the benchmark's machine, 5 to 9 of
 * them per sub-agent. Whether a tracer is installed is read from the running fiber (one
 * reference lookup), so a tracer provided anywhere above — a layer, `Effect.withTracer`, a
 * `ManagedRuntime` — gets every span with its parents, exactly as before.
 */
import type * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import * as References from "effect/References"
import * as Tracer from "effect/Tracer"

/** Does this fiber export spans anywhere (a tracer other than the default native one, tracing enabled)? */
export const tracing = (fiber: { readonly getRef: <A>(ref: Context.Reference<A>) => A }): boolean =>
  fiber.getRef(Tracer.Tracer) !== Tracer.nativeTracer && fiber.getRef(References.TracerEnabled)

export const withSpan = (name: string) => <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.withFiber((fiber) =>
    tracing(fiber) ? Effect.useSpan(name, (span) => Effect.provideService(self, Tracer.ParentSpan, span)) : self
  )

/**
 * `body`'s effect under a span named `name` when the fiber has a tracer (`withSpan`), built in
 * the running fiber's step: one step where `Effect.fnUntraced(…, withSpan(name))` takes a
 * span check, a suspension and the generator's own steps. `body` gets the fiber, so what it
 * decides at once (a session looked up, a clock read) is read from it with no step more.
 */
export const spanned = <A, E, R>(
  name: string,
  body: (fiber: Fiber.Fiber<unknown, unknown>) => Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  Effect.withFiber((fiber) =>
    tracing(fiber)
      ? Effect.useSpan(
        name,
        (span) => Effect.provideService(Effect.suspend(() => body(fiber)), Tracer.ParentSpan, span)
      )
      : body(fiber)
  )
