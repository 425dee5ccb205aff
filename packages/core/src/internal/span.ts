/**
 * A span for the per-agent paths (a prompt, a `task` call, a sub-agent run): the same span as
 * `Effect.withSpan` — same name, same parent, ended with the effect's exit, and the parent of
 * the spans inside — without the stack frame `withSpan` also installs.
 *
 * That frame only annotates failure causes (the "at <span>" lines of `Cause.pretty`), but
 * while it is installed, every fiber below pays for it each time a cause passes a
 * finalizer: the cause is re-annotated (new Maps, a new Cause) at every step. A cancelled
 * sub-agent tree unwinds a few dozen such steps per agent, so with the frame, interrupting
 * a hundred children allocated ~50 KB per child and spent most of its time there.
 */
import { Effect, Tracer } from "effect"

export const withSpan = (name: string) => <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.useSpan(name, (span) => Effect.provideService(self, Tracer.ParentSpan, span))
