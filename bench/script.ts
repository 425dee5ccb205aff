/**
 * The benchmark script of shared/BENCH.md, identical for every runtime: a stateless parent
 * and child model and the `lookup` tool, with counters the harness verifies afterwards.
 */
export const PAYLOAD = "x".repeat(1024)

export interface Call {
  readonly id: string
  readonly name: string
  readonly args: Record<string, unknown>
}
export type ModelAnswer = { readonly calls: ReadonlyArray<Call> } | { readonly text: string }

export interface Counts {
  parentCalls: number
  childCalls: number
  lookups: number
  lookupsPending: number
  timersArmed: number
  callsAfterAbort: number
  badPayloads: number
  /** Distinct well-formed summaries in the parent's final tool results. */
  summaries: number
  childrenInLookup: number
}

export interface Script {
  readonly K: number
  readonly M: number
  readonly counts: Counts
  parentModel(
    input: { readonly toolResults: ReadonlyArray<string>; readonly signal?: AbortSignal | undefined }
  ): ModelAnswer
  childModel(
    input: {
      readonly prompt: string
      readonly toolResults: ReadonlyArray<string>
      readonly signal?: AbortSignal | undefined
    }
  ): ModelAnswer
  lookup(args: { readonly key: string }, signal?: AbortSignal): Promise<string>
  /** W2: resolves when all K children are inside `lookup`. */
  readonly allInLookup: Promise<void>
  markAborted(): void
}

/** A well-formed summary, exactly as the child wrote it: the whole tool result, 200 characters. */
const summaryPattern = /^summary<task-(\d+)>:\.*$/

export const makeScript = (options: { readonly K: number; readonly M: number; readonly blocking: boolean }): Script => {
  const { K, M, blocking } = options
  const counts: Counts = {
    parentCalls: 0,
    childCalls: 0,
    lookups: 0,
    lookupsPending: 0,
    timersArmed: 0,
    callsAfterAbort: 0,
    badPayloads: 0,
    summaries: 0,
    childrenInLookup: 0
  }
  let aborted = false
  let release: () => void = () => {}
  const allInLookup = new Promise<void>((resolve) => (release = resolve))
  return {
    K,
    M,
    counts,
    allInLookup,
    markAborted: () => void (aborted = true),
    parentModel({ toolResults }) {
      counts.parentCalls++
      if (aborted) counts.callsAfterAbort++
      if (toolResults.length === 0) {
        return {
          // The harness's name for the sub-agent tool; each adapter translates it.
          calls: Array.from(
            { length: K },
            (_, i) => ({ id: `call_sub_${i}`, name: "subagent", args: { prompt: `task-${i}` } })
          )
        }
      }
      const seen = new Set<string>()
      for (const text of toolResults) {
        const match = summaryPattern.exec(text)
        if (match !== null && match[0].length === 200) seen.add(match[1]!)
      }
      counts.summaries = seen.size
      return { text: `final: received ${toolResults.length} summaries` }
    },
    childModel({ prompt, toolResults }) {
      counts.childCalls++
      if (aborted) counts.callsAfterAbort++
      for (const text of toolResults) if (text !== PAYLOAD) counts.badPayloads++
      const n = toolResults.length
      if (n < M) {
        return { calls: [{ id: `call_${prompt}_lookup_${n}`, name: "lookup", args: { key: `${prompt}/${n}` } }] }
      }
      return { text: `summary<${prompt}>:`.padEnd(200, ".") }
    },
    lookup(_args, signal) {
      counts.lookups++
      if (!blocking) return Promise.resolve(PAYLOAD)
      counts.lookupsPending++
      counts.timersArmed++
      if (++counts.childrenInLookup === K) release()
      return new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => {
          counts.timersArmed--
          counts.lookupsPending--
          resolve(PAYLOAD)
        }, 60_000)
        signal?.addEventListener("abort", () => {
          clearTimeout(timer)
          counts.timersArmed--
          counts.lookupsPending--
          reject(signal.reason)
        }, { once: true })
      })
    }
  }
}
