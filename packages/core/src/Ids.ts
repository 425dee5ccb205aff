/**
 * Agent and session ids: a short per-process boot tag plus a counter, so ids are unique
 * across restarts (records persist) and cheap to make on the spawn path.
 */
const boot = Math.floor(Math.random() * 36 ** 4).toString(36).padStart(4, "0")
let counter = 0

/** A fresh id such as `agent_k3x91`. */
export const next = (prefix: string): string => `${prefix}_${boot}${(counter++).toString(36)}`
