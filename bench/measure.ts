/**
 * One measurement in this (fresh) process:
 * `node bench/measure.ts <w1|w2|w2warm|w3> <K> <cap|none> <store> [fibril|floor|effect|effect-ai]`
 * (`floor`: the plain-Promise floor, `effect`: the Effect floor, `effect-ai`: the Effect floor with
 * `effect/ai` Prompt/Response values per step).
 * Prints one JSON line with the figures and whether every count checked out.
 */
import { performance } from "node:perf_hooks"
import { makeScript } from "./script.ts"

const [workload = "w1", kArg = "10", capArg = "none", storeArg = "memory", runtime = "fibril"] = process.argv.slice(2)
const Adapter = runtime === "floor"
  ? await import("./floor.ts")
  : runtime === "effect"
  ? await import("./effect-floor.ts")
  : runtime === "effect-ai"
  ? await import("./effect-ai-floor.ts")
  : await import("./peer-adapter.ts")
const K = Number(kArg)
const cap = capArg === "none" ? null : Number(capArg)
const store = storeArg === "file" ? "file" : "memory"

let peakRss = process.memoryUsage().rss
const sampler = setInterval(() => (peakRss = Math.max(peakRss, process.memoryUsage().rss)), 5)
const cpu = () => {
  const u = process.cpuUsage()
  return (u.user + u.system) / 1000
}

const w1 = async () => {
  const M = 3
  for (let i = 0; i < 3; i++) {
    const warm = makeScript({ K: 10, M, blocking: false })
    await Adapter.runW1({ K: 10, M, cap, s: warm, store })
    await Adapter.dispose(warm)
  }
  const s = makeScript({ K, M, blocking: false })
  const cpu0 = cpu()
  const t0 = performance.now()
  const { final } = await Adapter.runW1({ K, M, cap, s, store })
  const wall = performance.now() - t0
  const cpuMs = cpu() - cpu0
  peakRss = Math.max(peakRss, process.memoryUsage().rss)
  const c = s.counts
  const ok = final === `final: received ${K} summaries` && c.summaries === K && c.parentCalls === 2 &&
    c.childCalls === K * (M + 1) && c.lookups === K * M && c.badPayloads === 0
  await Adapter.dispose(s)
  return {
    workload: "W1",
    runtime,
    K,
    M,
    cap,
    store,
    ok,
    wall_ms: wall,
    cpu_ms: cpuMs,
    peak_rss_mib: peakRss / 2 ** 20,
    us_per_subagent: (wall * 1000) / K,
    cpu_us_per_subagent: (cpuMs * 1000) / K,
    counts: c
  }
}

/** One W2 cycle: K children inside `lookup`, then the abort; resolves with the script and figures. */
const cancelOnce = async () => {
  const M = 3
  const s = makeScript({ K, M, blocking: true })
  const controller = new AbortController()
  const run = Adapter.runW2({ K, M, signal: controller.signal, s, store })
  const settled = run.then(() => "resolved", () => "rejected")
  await s.allInLookup
  const t0 = performance.now()
  s.markAborted()
  controller.abort()
  const how = await settled
  return { s, M, how, abortToSettled: performance.now() - t0 }
}

// `w2` is BENCH.md's W2: the process's first cancellation. `w2warm` measures a second one, in
// the same process after a first full cycle: what cancelling costs once the code is compiled.
const w2 = async (warm: boolean) => {
  if (warm) await Adapter.dispose((await cancelOnce()).s)
  const { s, M, how, abortToSettled } = await cancelOnce()
  await new Promise((resolve) => setTimeout(resolve, 1000))
  const c = s.counts
  await Adapter.dispose(s)
  clearInterval(sampler)
  // Does the process exit on its own? Nothing of ours may keep the event loop alive. Work that
  // is finishing (the temporary workspace's removal, whose last rmdir can still be in flight
  // when dispose resolves) gets 100 ms; what is left after that would keep the process alive.
  await new Promise((resolve) => setTimeout(resolve, 100))
  const handles = (process as unknown as { getActiveResourcesInfo(): Array<string> }).getActiveResourcesInfo()
    .filter((kind) => kind !== "TTYWrap" && kind !== "PipeWrap")
  return {
    workload: warm ? "W2 warm" : "W2",
    runtime,
    K,
    M,
    cap: null,
    store,
    ok: how === "rejected" && c.childrenInLookup === K,
    abort_to_settled_ms: abortToSettled,
    leaked_lookups: c.lookupsPending,
    timers_armed: c.timersArmed,
    model_calls_after_abort: c.callsAfterAbort,
    exits_on_its_own: handles.length === 0,
    open_handles: handles
  }
}

const w3 = async () => {
  const s = makeScript({ K: 1, M: 1, blocking: false })
  const times: Array<number> = []
  let ok = true
  for (let i = 0; i < 2050; i++) {
    const t0 = performance.now()
    const { final } = await Adapter.runW3({ K: 1, M: 1, s, store })
    const t = performance.now() - t0
    if (final !== "final: received 1 summaries") ok = false
    if (i >= 50) times.push(t * 1000)
  }
  times.sort((a, b) => a - b)
  const c = s.counts
  ok = ok && c.parentCalls === 2 * 2050 && c.childCalls === 2 * 2050 && c.lookups === 2050 && c.badPayloads === 0
  await Adapter.dispose(s)
  return {
    workload: "W3",
    runtime,
    K: 1,
    M: 1,
    store,
    ok,
    median_us: times[Math.floor(times.length / 2)]!,
    p99_us: times[Math.floor(times.length * 0.99)]!
  }
}

const result = workload === "w2" || workload === "w2warm"
  ? await w2(workload === "w2warm")
  : workload === "w3"
  ? await w3()
  : await w1()
clearInterval(sampler)
process.stdout.write(JSON.stringify(result) + "\n")
