// The lab against deliberately broken runtimes (each invariant must catch its planted bug,
// shrink it and replay it from the printed seed), byte-identical replay, and the SVG report.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { Invariants, Lab, LabBugs, LabGenerators, LabReport, Simulation } from "../src/index.ts"

const provideNode = Effect.provide(NodeServices.layer)

const size = (e: LabGenerators.Experiment) => e.nodes.length + e.schedule.length

/** A small, strict well-formedness check of XML: balanced tags, quoted attributes, known entities. */
export const parseXml = (text: string): Array<{ name: string; attributes: Record<string, string> }> => {
  const elements: Array<{ name: string; attributes: Record<string, string> }> = []
  const stack: Array<string> = []
  const tag = /<(\/?)([A-Za-z][\w:-]*)((?:\s+[\w:-]+="[^"<]*")*)\s*(\/?)>/y
  let i = 0
  while (i < text.length) {
    const lt = text.indexOf("<", i)
    const chunk = text.slice(i, lt === -1 ? text.length : lt)
    if (/&(?!amp;|lt;|gt;|quot;|apos;)/.test(chunk)) throw new Error(`bad entity near ${i}`)
    if (lt === -1) break
    tag.lastIndex = lt
    const match = tag.exec(text)
    if (match === null) throw new Error(`malformed tag at ${lt}: ${text.slice(lt, lt + 40)}`)
    const [, close, name, attrs, selfClose] = match
    if (close === "/") {
      if (stack.pop() !== name) throw new Error(`unbalanced </${name}> at ${lt}`)
    } else {
      const attributes: Record<string, string> = {}
      for (const a of attrs!.matchAll(/([\w:-]+)="([^"]*)"/g)) attributes[a[1]!] = a[2]!
      elements.push({ name: name!, attributes })
      if (selfClose !== "/") stack.push(name!)
    }
    i = tag.lastIndex
  }
  if (stack.length > 0) throw new Error(`unclosed <${stack.join(", ")}>`)
  return elements
}

describe("Lab", () => {
  for (const { tamper, invariant } of LabBugs.all) {
    it.effect(
      `catches ${tamper.name} with "${invariant}", shrinks it, and the seed replays it`,
      () =>
        Effect.gen(function*() {
          const checker = Invariants.all.find((candidate) => candidate.name === invariant)!
          const options = { runs: 400, seed: 7, tamper, invariants: [checker] }
          const result = yield* Lab.check(options)
          assert.strictEqual(result._tag, "Failed", Lab.describe(result))
          if (result._tag !== "Failed") return
          assert.strictEqual(result.violation.invariant, invariant)
          assert.isAtMost(size(result.shrunk), size(result.original))
          assert.include(Lab.describe(result), `seed 7`)
          // The printed seed finds the same failure and shrinks it to the same case.
          const again = yield* Lab.check(options)
          assert.strictEqual(again._tag, "Failed")
          if (again._tag !== "Failed") return
          assert.deepStrictEqual(again.shrunk, result.shrunk)
          // Its trace replays byte for byte (in fresh services) and still fails.
          yield* Simulation.reset
          const replayed = yield* Lab.replay(result.trace, { tamper, invariants: [checker] })
          assert.isTrue(replayed.identical, JSON.stringify(replayed.firstDifference))
          assert.strictEqual(replayed.violation?.invariant, invariant)
          // Without the bug, the same experiment passes that invariant.
          const fixed = yield* Simulation.run(result.shrunk)
          assert.isUndefined(checker.check(fixed))
        }).pipe(provideNode),
      60_000
    )
  }

  it.effect("a user's own invariant is checked like the built-in ones (docs/lab.md)", () =>
    Effect.gen(function*() {
      const quick = Invariants.make("quick", "every run ends within 2 virtual hours", (trace, fail) =>
        trace.end <= 7_200_000 ? undefined : fail(`the run took ${trace.end} ms`))
      const passed = yield* Lab.check({ runs: 40, seed: 1, invariants: [...Invariants.all, quick] })
      assert.strictEqual(passed._tag, "Passed", Lab.describe(passed))
      const instant = Invariants.make("instant", "nothing takes virtual time", (trace, fail) =>
        trace.end === 0 ? undefined : fail(`the run took ${trace.end} ms`, { at: trace.end }))
      const failed = yield* Lab.check({ runs: 40, seed: 1, invariants: [instant] })
      assert.strictEqual(failed._tag, "Failed")
      assert.include(Lab.describe(failed), "FAILED instant: the run took")
    }).pipe(provideNode), 60_000)

  it.effect("a trace replays byte-identically from its experiment, across fresh services", () =>
    Effect.gen(function*() {
      const experiment: LabGenerators.Experiment = {
        config: { cap: 2, admission: "queue", maxDepth: 2, maxSteps: 6, heartbeatSecs: 30 },
        nodes: [
          { parent: 0, role: "general", detached: false, work: 1, delayMs: 400, tokens: 50, fault: "retryable" },
          { parent: 1, role: "general", detached: false, work: 2, delayMs: 900, tokens: 70, fault: "none" },
          { parent: 0, role: "explore", detached: true, work: 0, delayMs: 5000, tokens: 10, fault: "hang" },
          { parent: 2, role: "general", detached: false, work: 0, delayMs: 100, tokens: 10, fault: "fatal" },
          { parent: 0, role: "general", detached: false, work: 1, delayMs: 250, tokens: 10, fault: "crash" }
        ],
        schedule: [
          { after: 500, op: "send_input", target: 0 },
          { after: 700, op: "cancel", target: 0 },
          { after: 100, op: "jump", target: 45 },
          { after: 100, op: "resume", target: 1 }
        ]
      }
      const first = yield* Simulation.run(experiment, { seed: 3 })
      yield* Simulation.reset
      const second = yield* Simulation.run(experiment, { seed: 3 })
      assert.strictEqual(Simulation.encode(second), Simulation.encode(first))
      const decoded = yield* Simulation.decode(Simulation.encode(first))
      const replayed = yield* Lab.replay(decoded)
      assert.isTrue(replayed.identical, JSON.stringify(replayed.firstDifference))
      // The trace shows what happened: all four agents and the operations, with outcomes.
      assert.includeMembers(first.records.map((r) => r.agent), ["n1", "n3", "n5"])
      assert.deepStrictEqual(first.ops.map((op) => op.op), ["send_input", "cancel", "jump", "resume"])
      assert.isUndefined(Invariants.firstViolation(first))
    }).pipe(provideNode))

  it.effect("a trace that is not one is a typed error naming what is wrong", () =>
    Effect.gen(function*() {
      const notJson = yield* Effect.flip(Simulation.decode("{"))
      assert.include(notJson.message, "not JSON")
      const notTrace = yield* Effect.flip(Simulation.decode(`{"version":2}`))
      assert.include(notTrace.message, "version 1")
    }))

  it.effect("the SVG report parses and holds one lane per agent", () =>
    Effect.gen(function*() {
      const trace = yield* Simulation.run(LabGenerators.balanced(7, 2, { cap: 2 }))
      const text = LabReport.svg(trace)
      const elements = parseXml(text)
      assert.strictEqual(elements[0]!.name, "svg")
      const lanes = elements.filter((e) => e.name === "g" && e.attributes["class"] === "lane")
      assert.deepStrictEqual(lanes.map((e) => e.attributes["data-agent"]), ["n0", "n1", "n2", "n3", "n4", "n5", "n6"])
      // Under a cap of 2 the concurrency line never goes above 2, and reaches it.
      const peak = Math.max(...LabReport.concurrency(trace).map(([, n]) => n))
      assert.strictEqual(peak, 2)
    }).pipe(provideNode))
})
