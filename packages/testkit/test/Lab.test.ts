// The lab against deliberately broken runtimes (each invariant must catch its planted bug,
// shrink it and replay it from the printed seed), byte-identical replay, and the SVG report.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { Invariants, Lab, LabBugs, LabGenerators, LabReport, Simulation } from "../src/index.ts"

const provideNode = Effect.provide(NodeServices.layer)

const size = (e: LabGenerators.Experiment) => e.nodes.length + e.schedule.length

/** The nodes of a tree depth first, each parent before its children. */
const preorder = (nodes: ReadonlyArray<LabGenerators.TreeNode>) => {
  const out: Array<number> = []
  const visit = (index: number) => {
    out.push(index)
    nodes[index]!.children.forEach(visit)
  }
  visit(0)
  return out
}

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

/** The picture's texts: attributes and content (entities decoded). */
const textsOf = (svg: string) =>
  [...svg.matchAll(/<text((?:\s+[\w:-]+="[^"]*")*)>([^<]*)<\/text>/g)].map((match) => ({
    attributes: Object.fromEntries([...match[1]!.matchAll(/([\w:-]+)="([^"]*)"/g)].map((a) => [a[1]!, a[2]!])),
    content: match[2]!.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, "\"").replace(/&amp;/g, "&")
  }))

/** Where a text runs from and to, by its anchor, at 0.6 em a character (wider than most sans-serif text). */
const horizontalExtent = (label: ReturnType<typeof textsOf>[number]): readonly [number, number] => {
  const x = Number(label.attributes["x"])
  const width = label.content.length * Number(label.attributes["font-size"] ?? 11) * 0.6
  const anchor = label.attributes["text-anchor"] ?? "start"
  return anchor === "end" ? [x - width, x] : anchor === "middle" ? [x - width / 2, x + width / 2] : [x, x + width]
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
          // The shrunk experiment is written as a person reads it (tree order, values resolved).
          assert.deepStrictEqual(LabGenerators.normalise(result.shrunk), result.shrunk)
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

  it.effect(
    "a shrunk experiment is normalised (nodes in tree order, no raw modulo values) and fails the same way",
    () =>
      Effect.gen(function*() {
        // cancel-skips-grandchildren at seed 7 shrinks to a node whose raw parent is 217 and a
        // cancel whose target is taken modulo the node count.
        const tamper = LabBugs.cancelSkipsGrandchildren
        const options = { runs: 400, seed: 7, tamper, invariants: Invariants.all }
        const result = yield* Lab.check(options)
        assert.strictEqual(result._tag, "Failed", Lab.describe(result))
        if (result._tag !== "Failed") return
        result.shrunk.nodes.forEach((node, i) => assert.isAtMost(node.parent, i, JSON.stringify(result.shrunk)))
        for (const step of result.shrunk.schedule) {
          assert.isBelow(step.target, Math.max(1, 2 * result.shrunk.nodes.length))
        }
        assert.notInclude(JSON.stringify(result.shrunk), `"fork":false`)
        assert.deepStrictEqual(result.trace.experiment, result.shrunk)
        // The printed experiment is the one that fails: run from its own JSON, it breaks the same
        // invariant on the same agent at the same time, and its saved trace replays byte for byte.
        yield* Simulation.reset
        const fromText = yield* Simulation.run(JSON.parse(JSON.stringify(result.shrunk)), { tamper })
        const again = Invariants.firstViolation(fromText)
        assert.deepStrictEqual(
          { invariant: again?.invariant, agent: again?.agent, at: again?.at },
          { invariant: result.violation.invariant, agent: result.violation.agent, at: result.violation.at }
        )
        const replayed = yield* Lab.replay(result.trace, { tamper })
        assert.isTrue(replayed.identical, JSON.stringify(replayed.firstDifference))
        assert.strictEqual(replayed.violation?.invariant, result.violation.invariant)
      }).pipe(provideNode),
    60_000
  )

  it.prop(
    "normalise keeps the tree and the schedule's meaning, in tree order, and is a fixed point",
    [LabGenerators.experiment({
      maxNodes: 8,
      maxOps: 6,
      ops: ["cancel", "send_input", "resume", "assign", "kill", "jump", "crash"]
    })],
    ([experiment]) => {
      const normalised = LabGenerators.normalise(experiment)
      assert.deepStrictEqual(LabGenerators.normalise(normalised), normalised)
      const before = LabGenerators.tree(experiment)
      const after = LabGenerators.tree(normalised)
      // Each node's parent precedes it and resolves to itself (no modulo, no lift).
      normalised.nodes.forEach((node, i) => assert.strictEqual(after[i + 1]!.parent, node.parent))
      // Depth first (each subtree a run of nodes after its root), except where renumbering
      // would change an assign's role (it goes by the target's parity): then the order is kept.
      const count = experiment.nodes.length
      const depthFirst = preorder(after).every((index, at) => index === at)
      if (!depthFirst) {
        assert.isTrue(count % 2 === 0 && experiment.schedule.some((step) => step.op === "assign"))
        const specs = (e: LabGenerators.Experiment) =>
          e.nodes.map((node) => {
            const { fork: _, parent: __, ...spec } = node
            return spec
          })
        assert.deepStrictEqual(specs(normalised), specs(experiment))
      }
      // The same shape: the same tree read depth first (depth, fan-out and node spec, fork unset or true).
      const shape = (nodes: ReadonlyArray<LabGenerators.TreeNode>) => {
        const out: Array<string> = []
        const visit = (index: number) => {
          const node = nodes[index]!
          const { parent: _, fork, ...spec } = node.spec ?? { parent: 0, fork: false }
          out.push(JSON.stringify([node.depth, node.children.length, spec, fork === true]))
          node.children.forEach(visit)
        }
        visit(0)
        return out
      }
      assert.deepStrictEqual(shape(after), shape(before))
      // Each operation picks the node it picked (renamed), with the same role for an assign and
      // the same seconds for a jump.
      const place = new Map(preorder(before).map((index, at) => [index, at]))
      const placeAfter = new Map(preorder(after).map((index, at) => [index, at]))
      experiment.schedule.forEach((step, i) => {
        const next = normalised.schedule[i]!
        assert.strictEqual(next.op, step.op)
        assert.strictEqual(next.after, step.after)
        if (step.op === "jump") return assert.strictEqual(next.target, step.target % 600)
        if (step.op === "kill" || step.op === "crash") return assert.strictEqual(next.target, 0)
        assert.strictEqual(
          placeAfter.get(1 + (next.target % count)),
          place.get(1 + (step.target % count)),
          JSON.stringify({ experiment, normalised })
        )
        if (step.op === "assign") assert.strictEqual(next.target % 2, step.target % 2)
      })
    },
    { arbitrary: { runs: 500 } }
  )

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
      // It prints what the invariant gave, and nothing it did not (no "agent - at - ms; evidence null").
      assert.include(Lab.describe(failed), "\n  counterexample: at ")
      assert.notMatch(Lab.describe(failed), /agent -|evidence null|\n {2}evidence/)
    }).pipe(provideNode), 60_000)

  it.effect(
    "a plain-object invariant's counterexample is printed with the agent, time and evidence it returned",
    () =>
      Effect.gen(function*() {
        // Plain data and a function (what a module for `--invariants-from` exports), returning
        // its own object: `t` as the trace names times, and fields of its own as evidence.
        const firstChild: Invariants.Invariant = {
          name: "no-children",
          description: "the root spawns nobody",
          check: (trace) => {
            const spawned = trace.events.find((event) => event.type === "spawned" && event.agent !== "n0")
            return spawned === undefined ? undefined : {
              message: `${spawned.agent} was spawned`,
              agent: spawned.agent,
              t: spawned.t,
              depth: spawned.depth,
              spawnedBy: "n0"
            } as Invariants.Counterexample
          }
        }
        const failed = yield* Lab.check({ runs: 20, seed: 1, invariants: [firstChild], bounds: { maxNodes: 2 } })
        assert.strictEqual(failed._tag, "Failed")
        if (failed._tag !== "Failed") return
        assert.deepStrictEqual(
          { ...failed.violation },
          {
            invariant: "no-children",
            message: "n1 was spawned",
            agent: "n1",
            at: failed.violation.at,
            evidence: { depth: 1, spawnedBy: "n0" }
          }
        )
        assert.isNumber(failed.violation.at)
        const text = Lab.describe(failed)
        assert.include(
          text,
          `FAILED no-children: n1 was spawned\n  counterexample: agent n1 at ${failed.violation.at} ms (virtual)\n  evidence: {"depth":1,"spawnedBy":"n0"}`
        )
        // A check may also answer with a message, or false (the description is the message).
        const asText = Invariants.counterexampleOf(firstChild, "too many")
        assert.deepStrictEqual(asText, { invariant: "no-children", message: "too many" })
        assert.deepStrictEqual(Invariants.counterexampleOf(firstChild, false), {
          invariant: "no-children",
          message: "the root spawns nobody"
        })
        assert.isUndefined(Invariants.counterexampleOf(firstChild, true))
      }).pipe(provideNode),
    60_000
  )

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

  it.effect(
    "the picture of a failure shows it: fitted time axis, the violation marked, the invariant named, y scale, nothing clipped",
    () =>
      Effect.gen(function*() {
        const tamper = LabBugs.capPlusOne
        const result = yield* Lab.check({ runs: 300, seed: 7, tamper })
        assert.strictEqual(result._tag, "Failed")
        if (result._tag !== "Failed") return
        const { trace, violation } = result
        assert.strictEqual(violation.invariant, "cap")
        const text = LabReport.svg(trace, { violation })
        const elements = parseXml(text)
        const svgElement = elements[0]!
        const [, , width, height] = svgElement.attributes["viewBox"]!.split(" ").map(Number)

        // The time axis ends near the last thing that happened, not at the 30 s the run idled to.
        const last = Math.max(...trace.events.map((e) => e.t), ...trace.requests.map((r) => r.t))
        assert.isAbove(trace.end, 10 * last)
        const axis = elements.find((e) => e.attributes["class"] === "time-axis")!
        const tMax = Number(axis.attributes["data-t-max"])
        assert.isAtLeast(tMax, last)
        assert.isAtMost(tMax, 2 * Math.max(last, 1))
        const ticks = textsOf(text).filter((t) => t.attributes["class"] === "x-tick")
        assert.strictEqual(Number(ticks[ticks.length - 1]!.attributes["data-t"]), tMax)

        // The violation is marked on its agent's lane at its time.
        const mark = elements.find((e) => e.name === "g" && e.attributes["class"] === "violation")!
        assert.deepStrictEqual(
          [mark.attributes["data-invariant"], mark.attributes["data-agent"], Number(mark.attributes["data-at"])],
          ["cap", violation.agent, violation.at]
        )
        const marker = elements.find((e) => e.name === "circle" && e.attributes["class"] === "marker")!
        const x0 = Number(axis.attributes["data-x0"])
        const x1 = Number(axis.attributes["data-x1"])
        assert.closeTo(Number(marker.attributes["cx"]), x0 + (violation.at! / tMax) * (x1 - x0), 0.5)
        const lane = elements.find((e) =>
          e.attributes["class"] === "lane" && e.attributes["data-agent"] === violation.agent
        )!
        const top = Number(lane.attributes["data-top"])
        const cy = Number(marker.attributes["cy"])
        assert.isTrue(cy > top && cy < top + Number(lane.attributes["data-height"]))
        assert.include(textsOf(text).find((t) => t.attributes["class"] === "violation-label")!.content, "cap violated")

        // The invariant heads the picture, and is its title.
        assert.match(text, /<title>invariant cap violated: 2 sub-agents working at once/)
        assert.include(
          textsOf(text).find((t) => t.attributes["class"] === "heading")!.content,
          "invariant cap violated"
        )

        // The working-agents chart has a y scale from 0 to at least the peak (2).
        const yTicks = textsOf(text).filter((t) => t.attributes["class"] === "y-tick").map((t) => Number(t.content))
        assert.includeMembers(yTicks, [0, 1, 2])

        // Every text lies inside the picture (a generous width estimate: 0.6 em a character).
        for (const label of textsOf(text)) {
          const [left, right] = horizontalExtent(label)
          const y = Number(label.attributes["y"])
          const fontSize = Number(label.attributes["font-size"] ?? 11)
          assert.isTrue(left >= 0 && right <= width! && y - fontSize >= 0 && y <= height!, JSON.stringify(label))
        }
      }).pipe(provideNode),
    60_000
  )

  it.effect("nothing is clipped at any width, and a violation without a time outlines its agent's lane", () =>
    Effect.gen(function*() {
      const trace = yield* Simulation.run(LabGenerators.balanced(12, 3, { cap: 2 }))
      const violation = { invariant: "mine", message: "a very long message ".repeat(20), agent: "n5" }
      for (const width of [480, 640, 960, 1400]) {
        const text = LabReport.svg(trace, { violation, width })
        const [, , w, h] = parseXml(text)[0]!.attributes["viewBox"]!.split(" ").map(Number)
        for (const label of textsOf(text)) {
          const [left, right] = horizontalExtent(label)
          const y = Number(label.attributes["y"])
          assert.isTrue(left >= 0 && right <= w! && y - 11 >= 0 && y <= h!, `${width}: ${JSON.stringify(label)}`)
        }
        assert.match(text, /<rect class="marker" [^>]*stroke="#c0392b"/)
      }
    }).pipe(provideNode))

  it.effect("the SVG report parses and holds one lane per agent", () =>
    Effect.gen(function*() {
      const trace = yield* Simulation.run(LabGenerators.balanced(7, 2, { cap: 2 }))
      const text = LabReport.svg(trace)
      const elements = parseXml(text)
      assert.strictEqual(elements[0]!.name, "svg")
      const lanes = elements.filter((e) => e.name === "g" && e.attributes["class"] === "lane")
      // In tree order: each agent's children under it.
      assert.deepStrictEqual(lanes.map((e) => e.attributes["data-agent"]), ["n0", "n1", "n3", "n4", "n2", "n5", "n6"])
      // Under a cap of 2 the concurrency line never goes above 2, and reaches it.
      const peak = Math.max(...LabReport.concurrency(trace).map(([, n]) => n))
      assert.strictEqual(peak, 2)
    }).pipe(provideNode))
})
