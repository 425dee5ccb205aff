/**
 * `node bench/idle-exit.ts <memory|file>`: one W2 run of the Fibril adapter, aborted once every
 * child is inside `lookup`, and then nothing: no `dispose`, no `process.exit`. The process must
 * end on its own (an idle Fibril runtime keeps nothing on the event loop); bench.test.ts checks
 * that it does. Prints what is still on the event loop after the abort, as JSON.
 */
import * as Fibril from "./peer-adapter.ts"
import { makeScript } from "./script.ts"

const store = process.argv[2] === "file" ? "file" : "memory"
const K = 10
const s = makeScript({ K, M: 3, blocking: true })
const controller = new AbortController()
const settled = Fibril.runW2({ K, M: 3, signal: controller.signal, s, store }).then(() => "resolved", () => "rejected")
await s.allInLookup
s.markAborted()
controller.abort()
const how = await settled
// One macrotask later, what is left: the test expects the process to exit, so nothing of ours.
await new Promise((resolve) => setImmediate(resolve))
const handles = (process as unknown as { getActiveResourcesInfo(): Array<string> }).getActiveResourcesInfo()
process.stdout.write(JSON.stringify({ how, pending: s.counts.lookupsPending, handles }) + "\n")
