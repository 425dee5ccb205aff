/**
 * Spans for the per-agent paths, and the one place that says why the hot paths are written
 * the way they are (docs/performance.md has the measurements).
 *
 * ## The speed idioms
 *
 * A sub-agent's path — spawn, prompt, each model step, each tool call, finish — runs thousands
 * of times in a fan-out, and on it Effect's own overhead per operation is most of Fibril's cost.
 * Where the benchmark (W1, W3) showed it paid, these paths use:
 *
 * - **The eager forms** (`mapEager`, `flatMapEager`, `catchEager`, `matchEager`,
 *   `matchCauseEffectEager`, `fnUntracedEager`). Most of what a step waits on is decided at once
 *   (a lookup, a permission check, a decoded argument, a scripted or cached answer): it is an
 *   Exit, and the eager form reads it where it is, instead of leaving the continuation to a
 *   scheduler turn of its own. The result is the same; only the number of run-loop turns and
 *   continuation objects changes.
 * - **Combinators rather than generators** in per-call code: a generator costs an iterator and
 *   a scheduler turn per `yield*`.
 * - **Untraced functions with explicit spans** (`Effect.fnUntraced` + `spanned` / `withSpan`
 *   below) instead of `Effect.fn`, whose per-call stack capture measured about 3 µs a call on
 *   the spawn path.
 * - **Work started in the caller's scheduler turn**: a model call done at once is matched where
 *   it starts (`callModelIn`), and a turn's single tool call runs in the loop's own fiber (`now`
 *   in `loop/ToolStep.ts`) instead of a forked one.
 * - **Hand-built literals** where objects of several shapes would otherwise be spread (an
 *   event, `loop/State.ts`'s `eventOf`): a spread of them is a megamorphic copy.
 * - **`DirectModel`**: the loop's model call without `LanguageModel.make`'s generic decoding
 *   when nothing would observe the difference.
 *
 * Call sites do not repeat these reasons; a comment there says only what is particular to it.
 *
 * ## Spans
 *
 * `withSpan` and `spanned` give the same span as `Effect.withSpan` — same name, same parent,
 * ended with the effect's exit, and the parent of the spans inside — without the stack frame
 * `withSpan` also installs, and with nothing at all when no tracer is installed.
 *
 * The frame only annotates failure causes (the "at <span>" lines of `Cause.pretty`), but
 * while it is installed, every fiber below pays for it each time a cause passes a
 * finalizer: the cause is re-annotated (new Maps, a new Cause) at every scheduler turn. A
 * cancelled sub-agent tree unwinds a few dozen such turns per agent, so with the frame,
 * interrupting a hundred children allocated ~50 KB per child and spent most of its time there.
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
 * the running fiber's scheduler turn, where `Effect.fnUntraced(…, withSpan(name))` takes a span
 * check, a suspension and the generator's own turns. `body` gets the fiber, so what it decides
 * at once (a session looked up, a clock read) is read from it with no turn more.
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
