/**
 * The floor of shared/BENCH.md: the same script driven by a plain Promise loop, with no
 * records, events, permissions or transcripts. Measured in the same run as Fibril so the
 * report can give ratios on this machine, now (BENCH.md: "compare runtimes in the same run").
 *
 * Implements the adapter interface of BENCH.md, like peer-adapter.ts.
 */
import type { Call, Script } from "./script.ts"

export const meta = {
  name: "floor",
  packages: [],
  capHow: "a counter and a FIFO of waiting children",
  abortHow: "the AbortSignal is passed to every lookup and checked before every model call"
}

const aborted = (signal: AbortSignal | undefined) => {
  if (signal?.aborted) throw signal.reason
}

/** Runs the tool calls of one turn concurrently; results in call order. */
const runCalls = (calls: ReadonlyArray<Call>, run: (call: Call) => Promise<string>) => Promise.all(calls.map(run))

const limiter = (cap: number | null) => {
  if (cap === null) return <A>(f: () => Promise<A>) => f()
  let running = 0
  const waiting: Array<() => void> = []
  return async <A>(f: () => Promise<A>) => {
    if (running >= cap) await new Promise<void>((resolve) => waiting.push(resolve))
    running++
    try {
      return await f()
    } finally {
      running--
      waiting.shift()?.()
    }
  }
}

const child = async (s: Script, prompt: string, signal: AbortSignal | undefined) => {
  const toolResults: Array<string> = []
  for (;;) {
    aborted(signal)
    const answer = s.childModel({ prompt, toolResults, signal })
    if ("text" in answer) return answer.text
    toolResults.push(...await runCalls(answer.calls, (call) => s.lookup(call.args as { key: string }, signal)))
  }
}

const parent = async (s: Script, cap: number | null, signal?: AbortSignal) => {
  const limit = limiter(cap)
  const toolResults: Array<string> = []
  for (;;) {
    aborted(signal)
    const answer = s.parentModel({ toolResults, signal })
    if ("text" in answer) return { final: answer.text }
    toolResults.push(
      ...await runCalls(answer.calls, (call) => limit(() => child(s, String(call.args["prompt"]), signal)))
    )
  }
}

export async function runW1({ cap, s }: { K: number; M: number; cap: number | null; s: Script }) {
  return parent(s, cap)
}

export async function runW2({ signal, s }: { K: number; M: number; signal: AbortSignal; s: Script }) {
  return parent(s, null, signal)
}

export async function runW3({ s }: { K: number; M: number; s: Script }) {
  return parent(s, null)
}

export async function dispose(_s: Script) {}
