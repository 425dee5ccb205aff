/**
 * Token usage: input, output and cached input tokens. Accumulators are plain mutable
 * records because they are bumped on every model step of every agent.
 */
import type { Response } from "effect/ai"

export interface Usage {
  readonly input: number
  readonly output: number
  readonly cached: number
}

export interface MutableUsage {
  input: number
  output: number
  cached: number
}

export const zero = (): MutableUsage => ({ input: 0, output: 0, cached: 0 })

export const add = (into: MutableUsage, usage: Usage): void => {
  into.input += usage.input
  into.output += usage.output
  into.cached += usage.cached
}

export const snapshot = (usage: Usage): Usage => ({ input: usage.input, output: usage.output, cached: usage.cached })

export const total = (usage: Usage): number => usage.input + usage.output

/** Reads an `effect/ai` finish-part usage (all fields optional) as numbers. */
export const fromResponse = (usage: Response.Usage | undefined): Usage => ({
  input: usage?.inputTokens.total ?? 0,
  output: usage?.outputTokens.total ?? 0,
  cached: usage?.inputTokens.cacheRead ?? 0
})
