/**
 * LabGenerators — the inputs of an orchestration experiment as Schemas and shrinking
 * `Arbitrary` values: a configuration, an agent tree with a script and a fault per agent, and a
 * schedule of operations from outside.
 *
 * An `Experiment` is plain JSON. Its shape is chosen so that shrinking is meaningful: the tree
 * is a flat list of nodes whose `parent` is taken modulo the node's position (shrinking a parent
 * to 0 hangs the node under the root; dropping nodes drops subtrees' members), faults shrink
 * to `"none"`, delays to 0 and the schedule to fewer, earlier operations. The smallest failing
 * experiment is therefore a small tree with few faults and few operations.
 */
import * as Arbitrary from "effect/Arbitrary"
import * as Schema from "effect/Schema"

const int = (minimum: number, maximum: number) => Schema.Int.pipe(Schema.check(Schema.isBetween({ minimum, maximum })))

/** What goes wrong with an agent's final model turn. */
export const Fault = Schema.Literals(["none", "retryable", "fatal", "hang", "crash"])
export type Fault = typeof Fault.Type

/** One agent of the tree (node `i` of `nodes` is agent `n<i+1>`; `n0` is the root). */
export const Node = Schema.Struct({
  /** The parent, as `parent % (i + 1)`: 0 is the root, `k` is node `n<k>`. */
  parent: int(0, 1000),
  role: Schema.Literals(["general", "explore"]),
  detached: Schema.Boolean,
  /** Spawned with `fork_context`: it starts from a copy of its parent's conversation. */
  fork: Schema.optionalKey(Schema.Boolean),
  /** Tool-call turns before the answer (calls of a tool that does not exist: tool errors). */
  work: int(0, 3),
  /** Virtual milliseconds each model turn of this agent takes. */
  delayMs: int(0, 5000),
  /** Output tokens its answer reports. */
  tokens: int(0, 2000),
  fault: Fault
})
export type Node = typeof Node.Type

/** An operation applied from outside at a virtual time. `target` picks a node modulo the count. */
export const Op = Schema.Struct({
  /** Virtual milliseconds after the previous operation. */
  after: int(0, 20_000),
  op: Schema.Literals(["cancel", "send_input", "resume", "assign", "kill", "jump", "crash"]),
  target: int(0, 1000)
})
export type Op = typeof Op.Type

export const Config = Schema.Struct({
  /** `maxConcurrent` of the manager (generated: 1-4). */
  cap: int(1, 50),
  admission: Schema.Literals(["queue", "reject"]),
  /** Deepest level that may still spawn (root = 0; generated: 1-3). */
  maxDepth: int(1, 5),
  /** Model steps per sub-agent run. */
  maxSteps: int(2, 8),
  heartbeatSecs: int(1, 600)
})
export type Config = typeof Config.Type

/**
 * The session settings every lab run uses (not generated): one retry after 500 ms, a model call
 * given 60 s. The liveness invariant derives its bound from them.
 */
export const sessionSettings = { maxRetries: 1, retryBaseMs: 500, retryMaxMs: 500, apiTimeoutSecs: 60 } as const

export const Experiment = Schema.Struct({
  config: Config,
  nodes: Schema.Array(Node),
  schedule: Schema.Array(Op)
})
export type Experiment = typeof Experiment.Type

/** Bounds of generated experiments. */
export interface Bounds {
  readonly maxNodes?: number | undefined
  readonly maxOps?: number | undefined
  /** Fix the configuration instead of generating it. */
  readonly config?: Partial<Config> | undefined
  /** Which faults may be generated (default: all). */
  readonly faults?: ReadonlyArray<Fault> | undefined
  /** Which outside operations may be generated (default: all but `crash`, which is opt-in: each run with one opens SQLite stores). */
  readonly ops?: ReadonlyArray<Op["op"]> | undefined
}

/** `Bounds` as JSON (the `--config` file of `fibril lab run`); unknown keys are errors. */
export const BoundsJson = Schema.Struct({
  maxNodes: Schema.optionalKey(int(1, 60)),
  maxOps: Schema.optionalKey(int(0, 60)),
  config: Schema.optionalKey(Schema.Struct({
    cap: Schema.optionalKey(Config.fields.cap),
    admission: Schema.optionalKey(Config.fields.admission),
    maxDepth: Schema.optionalKey(Config.fields.maxDepth),
    maxSteps: Schema.optionalKey(Config.fields.maxSteps),
    heartbeatSecs: Schema.optionalKey(Config.fields.heartbeatSecs)
  })),
  faults: Schema.optionalKey(Schema.Array(Fault)),
  ops: Schema.optionalKey(Schema.Array(Op.fields.op))
})

const pick = <const A extends string | number>(values: ReadonlyArray<A>): Arbitrary.Arbitrary<A> =>
  Arbitrary.map(Arbitrary.schema(int(0, values.length - 1)), (i) => values[i]!)

/** Experiments within `bounds`, shrinking towards fewer nodes, fewer faults and fewer operations. */
export const experiment = (bounds: Bounds = {}): Arbitrary.Arbitrary<Experiment> => {
  const faults = bounds.faults ?? Fault.literals
  const ops = bounds.ops ?? Op.fields.op.literals.filter((op) => op !== "crash")
  const fixed = bounds.config ?? {}
  const field = <K extends keyof Config>(key: K, arbitrary: Arbitrary.Arbitrary<Config[K]>) =>
    fixed[key] === undefined ? arbitrary : Arbitrary.Constant(fixed[key] as Config[K])
  const config = Arbitrary.all({
    cap: field("cap", Arbitrary.schema(int(1, 4))),
    admission: field("admission", pick(Config.fields.admission.literals)),
    maxDepth: field("maxDepth", Arbitrary.schema(int(1, 3))),
    // A few values each: every distinct configuration is a separately built runtime.
    maxSteps: field("maxSteps", pick([2, 4, 8] as const)),
    heartbeatSecs: field("heartbeatSecs", pick([5, 30, 300] as const))
  })
  const node = Arbitrary.all({
    parent: Arbitrary.schema(Node.fields.parent),
    role: pick(Node.fields.role.literals),
    detached: Arbitrary.map(Arbitrary.schema(int(0, 4)), (n) => n === 4),
    fork: Arbitrary.map(Arbitrary.schema(int(0, 3)), (n) => n === 3),
    work: Arbitrary.schema(Node.fields.work),
    delayMs: Arbitrary.schema(Node.fields.delayMs),
    tokens: Arbitrary.schema(Node.fields.tokens),
    // "none" first so that shrinking goes there; faults are one in two.
    fault: Arbitrary.map(
      Arbitrary.schema(int(0, 2 * faults.length - 1)),
      (i): Fault => (i < faults.length ? "none" : faults[i - faults.length]!)
    )
  })
  const op = Arbitrary.all({
    after: Arbitrary.schema(Op.fields.after),
    op: pick(ops),
    target: Arbitrary.schema(Op.fields.target)
  })
  return Arbitrary.all({
    config,
    nodes: Arbitrary.array(node, { minLength: 1, maxLength: bounds.maxNodes ?? 6 }),
    schedule: Arbitrary.array(op, { maxLength: bounds.maxOps ?? 6 })
  })
}

/** The tree an experiment describes: node `k` (0 = root) with its parent, depth and children. */
export interface TreeNode {
  readonly index: number
  readonly label: string
  readonly parent: number | undefined
  readonly depth: number
  readonly children: ReadonlyArray<number>
  readonly spec: Node | undefined
}

/** Resolves `parent` indices: node i+1's parent is `parent % (i+1)`, moved up so that only agents above `maxDepth` spawn. */
export const tree = (input: Experiment): ReadonlyArray<TreeNode> => {
  const parents: Array<number | undefined> = [undefined]
  const depths = [0]
  input.nodes.forEach((spec, i) => {
    let parent = spec.parent % (i + 1)
    while (depths[parent]! > input.config.maxDepth - 1 && parent !== 0) parent = parents[parent]!
    parents.push(parent)
    depths.push(depths[parent]! + 1)
  })
  return parents.map((parent, index) => ({
    index,
    label: `n${index}`,
    parent,
    depth: depths[index]!,
    children: parents.flatMap((p, child) => (p === index && child !== index ? [child] : [])),
    spec: index === 0 ? undefined : input.nodes[index - 1]
  }))
}

/** A tree of exactly `count` agents (root included) with fan-out `fanOut`, no faults, no operations. */
export const balanced = (count: number, fanOut: number, config: Partial<Config> = {}): Experiment => ({
  config: { cap: 10, admission: "queue", maxDepth: 3, maxSteps: 8, heartbeatSecs: 300, ...config },
  nodes: Array.from({ length: count - 1 }, (_, i) => ({
    parent: Math.floor(i / fanOut),
    role: "general" as const,
    detached: false,
    work: 1,
    delayMs: 100 + (i % 7) * 50,
    tokens: 100,
    fault: "none" as const
  })),
  schedule: []
})

/**
 * The same experiment written as a person would: every value the simulation takes modulo
 * something is given as what it means. Nodes are renumbered in tree order (depth first, each
 * parent before its children, siblings in their order), each `parent` is the node it resolves
 * to (not `871`, taken modulo the node's position), an operation's `target` is the node it
 * picks (`target - 1` of `n<target>`), a `jump`'s the seconds it moves the clock (`% 600`), and
 * `kill`'s and `crash`'s, which pick nothing, 0; `fork: false` is left out. The tree, the
 * agents' scripts and the schedule are the same, so the run is the same under other names.
 *
 * An `assign` picks its role by the parity of `target`: when renumbering would change that
 * parity (an even node count), the nodes keep their order and only the values are resolved.
 */
export const normalise = (input: Experiment): Experiment => {
  const nodes = tree(input)
  const count = input.nodes.length
  const preorder: Array<number> = []
  const visit = (index: number) => {
    preorder.push(index)
    for (const child of nodes[index]!.children) visit(child)
  }
  visit(0)
  const picked = (target: number) => (count === 0 ? 0 : 1 + (target % count))
  const renumber = (order: ReadonlyArray<number>) => {
    const position = new Map(order.map((index, at) => [index, at]))
    return (index: number) => position.get(index)!
  }
  const treeOrder = renumber(preorder)
  const keepsRoles = input.schedule.every((step) =>
    step.op !== "assign" || count === 0 || count % 2 === 1 ||
    (treeOrder(picked(step.target)) - 1) % 2 === step.target % 2
  )
  const newIndex = keepsRoles ? treeOrder : (index: number) => index
  const order = keepsRoles ? preorder : nodes.map((node) => node.index)
  const target = (step: Op): number => {
    if (step.op === "jump") return step.target % 600
    if (step.op === "kill" || step.op === "crash" || count === 0) return 0
    const resolved = newIndex(picked(step.target)) - 1
    // An odd count: the smallest target with the same node and the same parity (the role).
    if (step.op === "assign" && resolved % 2 !== step.target % 2) return resolved + count
    return resolved
  }
  return {
    config: input.config,
    nodes: order.slice(1).map((index) => {
      const { fork, ...spec } = nodes[index]!.spec!
      return { ...spec, parent: newIndex(nodes[index]!.parent!), ...(fork === true ? { fork } : {}) }
    }),
    schedule: input.schedule.map((step) => ({ ...step, target: target(step) }))
  }
}
