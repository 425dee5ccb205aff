// Checked claims, a part of the sub-agent contract (SubAgentContract.test.ts) in a file of its
// own: on both engines (engines.ts), a child's EVIDENCE and CHANGES are checked against what its
// transcript shows it did, and the parent reads the same `claims` in `task`, `agent_wait` and
// `agent_result`. One run per engine: a truthful child and a lying one, side by side.
import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Effect } from "effect"
import { type Engine, engines } from "./engines.ts"

const answer = (changes: string, evidence: string) =>
  `SUMMARY:\ndone\n\nCHANGES:\n${changes}\n\nEVIDENCE:\n${evidence}\n\nRISKS:\nnone\n\nBLOCKERS:\nnone`

// Each child writes a three-line file, reads two of its lines back and runs one command.
const work = (file: string, command: string): ReadonlyArray<ScriptedModel.Turn> => [
  { tool_calls: [{ name: "write_file", args: { path: file, content: "one\ntwo\nthree\n" } }] },
  { tool_calls: [{ name: "read_file", args: { path: file, offset: 2, limit: 2 } }] },
  { tool_calls: [{ name: "shell", args: { command } }] }
]

const truthful = answer(
  `- ${"honest.txt"}: written`,
  ["honest.txt:2-3 say two and three", "$ exit 0 → exit 0", "ran `exit 0`"].join("\n")
)

const lying = answer(
  ["- liar.txt: written", "- other.txt: also changed"].join("\n"),
  [
    "never.txt:1 has the answer",
    "liar.txt:2-9 has the rest",
    "`npm test` passed",
    "`exit 3` exit 0"
  ].join("\n")
)

const expectedLies = [
  { claim: "changed other.txt", why: "no write_file or edit_file call of it changed other.txt" },
  { claim: "never.txt:1", why: "it never read, grepped or wrote never.txt" },
  {
    claim: "liar.txt:2-9",
    why: "lines 2-9 of liar.txt are beyond what it read or wrote (it saw lines 1-3, 2-3)"
  },
  { claim: "`npm test` exit 0", why: "it never ran this command (no shell call with this exact command line)" },
  { claim: "`exit 3` exit 0", why: "its last run of it exited 3, not exit 0" }
]

const claimsOf = (result: unknown) => (result as { claims?: unknown }).claims

const contract = (engine: Engine) => {
  const test = engine.live ? it.live : it.effect

  test("claims: the parent reads which claims the child's record backs, and why the others are not", () =>
    Effect.gen(function*() {
      const run = yield* engine.run({
        rules: [
          { match: { depth: 1, prompt: "honest" }, turns: [...work("honest.txt", "exit 0"), { text: truthful }] },
          { match: { depth: 1, prompt: "lie" }, turns: [...work("liar.txt", "exit 3"), { text: lying }] },
          {
            match: { depth: 0 },
            respond: (c) => {
              switch (c.turn) {
                case 0:
                  return {
                    tool_calls: [
                      { name: "task", args: { description: "honest", prompt: "honest work" } },
                      { name: "agent_spawn", args: { description: "liar", prompt: "lie about it" } }
                    ]
                  }
                case 1: {
                  const id = (c.toolResults[1]?.result as { agent_id?: string } | undefined)?.agent_id ?? "missing"
                  return { tool_calls: [{ name: "agent_wait", args: { ids: [id] } }] }
                }
                case 2: {
                  const id = (c.toolResults[1]?.result as { agent_id?: string } | undefined)?.agent_id ?? "missing"
                  return { tool_calls: [{ name: "agent_result", args: { agent_id: id } }] }
                }
                default:
                  return { text: "root done" }
              }
            }
          }
        ]
      })
      assert.strictEqual(run.text, "root done")
      // Both children completed (else there are no claims to read): when not, say how each ended.
      const ended = run.agents.map(({ depth, reason, status }) => ({ depth, status, reason }))
      assert.deepStrictEqual(
        ended.filter((agent) => agent.status !== "completed"),
        [],
        `every agent completed: ${JSON.stringify(ended)}`
      )
      const [task, , waited, result] = run.toolResults
      // The truthful child: every claim backed (its change, its citation, its command twice over).
      assert.deepStrictEqual(claimsOf(task!.result), { checked: 4, verified: 4, unverified: [] })
      assert.strictEqual((task!.result as { status: string }).status, "completed")
      // The lying one: each lie listed with its reason; the result still completed.
      const lies = { checked: 6, verified: 1, unverified: expectedLies }
      const [completed] = (waited!.result as { completed: ReadonlyArray<unknown> }).completed
      assert.deepStrictEqual(claimsOf(completed), lies)
      assert.deepStrictEqual(claimsOf(result!.result), lies)
      assert.strictEqual((result!.result as { status: string }).status, "completed")
    }))
}

for (const engine of engines) {
  describe(`the sub-agent contract (claims): ${engine.name}`, () => contract(engine))
}
