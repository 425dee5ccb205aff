/**
 * Heartbeat — the liveness policy both engines apply to sub-agents, written once.
 *
 * An agent that makes no progress for `heartbeat_timeout_secs` is cancelled with
 * {@link reason}. A watchdog looks every {@link checkIntervalMs}: a quarter of the timeout, so
 * a stale agent is caught at most a quarter late, but never more often than once a second
 * (a short timeout in tests) nor less often than every 30 s (a timeout of hours).
 *
 * What counts as progress is each engine's to observe (an event of the agent's run, a model
 * call in flight, a running child), the decision is {@link isStale}: the embedded
 * SubAgentManager, the cluster's watchdog and testkit's simulation all use these.
 */

/** How often a watchdog looks for agents without progress, for a timeout of `timeoutSecs`. */
export const checkIntervalMs = (timeoutSecs: number): number =>
  Math.max(1000, Math.min(30_000, (timeoutSecs * 1000) / 4))

/** The reason an agent cancelled by the heartbeat is given. */
export const reason = (timeoutSecs: number): string =>
  `Auto-cancelled after ${timeoutSecs}s without sub-agent progress.`

/** True when an agent last seen making progress at `lastProgress` is past the timeout at `now` (ms). */
export const isStale = (lastProgress: number, now: number, timeoutSecs: number): boolean =>
  now - lastProgress >= timeoutSecs * 1000
