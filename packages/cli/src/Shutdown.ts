/**
 * Shutdown — how long a signalled process may take to end.
 *
 * A signal (Ctrl-C, SIGTERM, SIGHUP) interrupts the main fiber, and the process ends once the
 * finalizers have run: the tree is cancelled, records and transcripts are written. Installing
 * a signal listener replaces Node's default "exit now", so a finalizer that never returns — a
 * file write queued behind file operations stuck in libuv's thread pool, a fiber waiting on
 * one — would keep the process alive for good, deaf to every further SIGTERM. So the first
 * signal also starts a timer: past the grace period the process says so on stderr and exits
 * with the signal's code. The timer is unref'd: it never delays an exit that comes on time.
 *
 * `fibril worker` has a graceful stop of its own length (`--shutdown-timeout`) and sets it here.
 */

/** How long a signalled `fibril` may take to end by default (issue 29: within 5 s). */
export const defaultGraceMs = 3_000

let grace: { readonly ms: number; readonly message?: string; readonly code?: number } = { ms: defaultGraceMs }
let started = false

/** Replaces the grace period (before a signal): `message` and `code` for when it runs out. */
export const setGrace = (ms: number, options: { readonly message?: string; readonly code?: number } = {}) => {
  grace = { ms, ...options }
}

/** Called on every signal: the first one starts the timer that ends the process with `code`. */
export const signalled = (code: number, label: string) => {
  if (started) return
  started = true
  const { ms, message, code: fixed } = grace
  setTimeout(() => {
    process.stderr.write(message ?? `fibril: still running ${ms / 1000} s after ${label}; stopping now\n`)
    process.exit(fixed ?? code)
  }, ms).unref()
}
