/**
 * What `fibril lab run --help` names: the built-in invariants, the planted bugs and the chunk
 * size of a run over worker threads. Written out here because the help is printed without
 * loading the lab (@fibril/testkit and Effect's property testing: a fifth of the CLI's code;
 * docs/performance.md, start-up); Lab.test.ts checks these lists against the lab's own.
 */

/** `Invariants.all`'s names, in order. */
export const invariants: ReadonlyArray<string> = [
  "cap",
  "admission",
  "terminal",
  "cancel-cascade",
  "nothing-left",
  "permissions",
  "result-once",
  "round-trip",
  "budgets",
  "resume-extends",
  "liveness",
  "no-rerun"
]

/** `LabBugs.all`'s tamper names, in order. */
export const plantedBugs: ReadonlyArray<string> = [
  "cap+1",
  "reject-below-cap",
  "duplicate-terminal",
  "cancel-skips-grandchildren",
  "leak-model-calls",
  "widen-child-tools",
  "result-carries-transcript",
  "store-drops-tool-calls",
  "step-budget+2",
  "resume-rewrites-transcript",
  "no-request-timeout",
  "tool-calls-run-twice"
]

/** Runs per chunk when a run is spread over worker threads (LabParallel.ts). */
export const chunkRuns = 250
