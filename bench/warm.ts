/**
 * Warm CPU per sub-agent (W1, K = 1000) and per round trip (W3), Fibril and the two Effect
 * floors, one after the other in one process:
 * `NODE_OPTIONS=--conditions=@fibril/source node bench/warm.ts [rounds] [fibril|effect|effect_ai]`.
 * W1's figure is the least of `rounds` runs, W3's the least and the median of `rounds` batches of
 * 500 round trips, after warm-up: compilation is left out, and on a shared machine noise only
 * adds, so the least is the steadiest figure for an A/B of a change (the fresh-process figures
 * of `npm run bench` include compiling the code).
 */
import * as EffectAiFloor from "./effect-ai-floor.ts"
import * as EffectFloor from "./effect-floor.ts"
import * as Fibril from "./peer-adapter.ts"
import { makeScript } from "./script.ts"

const rounds = Number(process.argv[2] ?? 8)
const which = process.argv[3] ?? "all"
type Adapter = typeof Fibril | typeof EffectFloor | typeof EffectAiFloor

const cpu = () => {
  const u = process.cpuUsage()
  return (u.user + u.system) / 1000
}

const w1 = async (adapter: Adapter, K: number) => {
  const s = makeScript({ K, M: 3, blocking: false })
  for (let i = 0; i < 3; i++) await adapter.runW1({ K, M: 3, cap: null, s })
  let best = Infinity
  for (let i = 0; i < rounds; i++) {
    const c0 = cpu()
    await adapter.runW1({ K, M: 3, cap: null, s })
    best = Math.min(best, ((cpu() - c0) * 1000) / K)
  }
  await adapter.dispose(s)
  return best
}

const w3 = async (adapter: Adapter) => {
  const s = makeScript({ K: 1, M: 1, blocking: false })
  for (let i = 0; i < 300; i++) await adapter.runW3({ K: 1, M: 1, s })
  const per: Array<number> = []
  for (let r = 0; r < rounds; r++) {
    const c0 = cpu()
    for (let i = 0; i < 500; i++) await adapter.runW3({ K: 1, M: 1, s })
    per.push(((cpu() - c0) * 1000) / 500)
  }
  await adapter.dispose(s)
  per.sort((a, b) => a - b)
  return { min: per[0]!, median: per[Math.floor(per.length / 2)]! }
}

const out: Record<string, unknown> = {}
for (const [name, adapter] of [["fibril", Fibril], ["effect", EffectFloor], ["effect_ai", EffectAiFloor]] as const) {
  if (which !== "all" && which !== name) continue
  out[`${name}_w1_k1000_us`] = +(await w1(adapter, 1000)).toFixed(1)
  const r3 = await w3(adapter)
  out[`${name}_w3_min_us`] = +r3.min.toFixed(1)
  out[`${name}_w3_median_us`] = +r3.median.toFixed(1)
}
console.log(JSON.stringify(out))
