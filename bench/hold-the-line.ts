/**
 * Hold the line (issue 38): W1 CPU and W3 median over the Effect floor, from this run, against
 * the ratios recorded in docs/performance.md ("Hold the line" section, the one source). More
 * than 15% above the recorded ratio is a regression: `npm run bench` prints a loud verdict and
 * exits non-zero. Ratios, not times: the floor runs in the same minutes, so the machine's speed
 * of the moment cancels out.
 */
import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"

const doc = fileURLToPath(new URL("../docs/performance.md", import.meta.url))
/** The line `npm run bench` reads: `Recorded Effect-floor ratios: W1 CPU 2.1×, W3 median 3.3×`. */
const recordedPattern = /Recorded Effect-floor ratios: W1 CPU ([\d.]+)×, W3 median ([\d.]+)×/

export const tolerance = 0.15

export interface Recorded {
  readonly w1Cpu: number
  readonly w3Median: number
}

/** The recorded ratios, or a message saying what the doc lacks. */
export const recorded = (text: string = readFileSync(doc, "utf8")): Recorded | string => {
  const match = recordedPattern.exec(text)
  return match === null
    ? `docs/performance.md has no line "Recorded Effect-floor ratios: W1 CPU <x>×, W3 median <y>×"`
    : { w1Cpu: Number(match[1]), w3Median: Number(match[2]) }
}

export interface Verdict {
  readonly ok: boolean
  readonly lines: ReadonlyArray<string>
}

/** This run's ratios against the recorded ones: one line per figure, loud when one regressed. */
export const verdict = (now: { readonly w1_cpu: number; readonly w3_median: number }): Verdict => {
  const base = recorded()
  if (typeof base === "string") return { ok: false, lines: [`FAIL hold the line: ${base}`] }
  const rows = [
    ["W1 K=1000 CPU / Effect floor", now.w1_cpu, base.w1Cpu],
    ["W3 median / Effect floor", now.w3_median, base.w3Median]
  ] as const
  const lines = rows.map(([name, value, limit]) => {
    const regressed = !(value <= limit * (1 + tolerance))
    const change = ((value / limit - 1) * 100).toFixed(0)
    return `${regressed ? "!!!! REGRESSION" : "ok  "} hold the line: ${name} ${value.toFixed(2)}x, recorded ${
      limit.toFixed(2)
    }x (${Number(change) >= 0 ? "+" : ""}${change}%; limit +${tolerance * 100}%)`
  })
  return { ok: lines.every((line) => line.startsWith("ok")), lines }
}
