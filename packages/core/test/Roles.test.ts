import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import * as Roles from "../src/Roles.ts"

const spellings = Roles.roleNames.flatMap((name) => [name, ...Roles.aliases[name]].map((s) => [s, name] as const))
const expected = new Map(spellings)

const recase = (text: string, mask: ReadonlyArray<boolean>) =>
  [...text].map((c, i) => mask[i % Math.max(1, mask.length)] ? c.toUpperCase() : c.toLowerCase()).join("")

describe("Roles", () => {
  it.prop(
    "every role name and alias resolves, in any case",
    [Schema.Literals(spellings.map(([s]) => s)), Schema.Array(Schema.Boolean)],
    ([spelling, mask]) => {
      assert.strictEqual(Roles.canonical(recase(spelling, mask)), expected.get(spelling))
      assert.strictEqual(Roles.canonical(`  ${recase(spelling, mask)} `), expected.get(spelling))
    },
    { arbitrary: { runs: 500 } }
  )

  it("the DESIGN aliases", () => {
    const table: Record<string, string> = {
      worker: "general",
      "General-Purpose": "general",
      DEFAULT: "general",
      Explorer: "explore",
      exploration: "explore",
      planner: "plan",
      awaiter: "plan",
      planning: "plan",
      "code-review": "review",
      code_review: "review",
      Reviewer: "review",
      builder: "implementer",
      implement: "implementer",
      implementation: "implementer",
      tester: "verifier",
      validator: "verifier",
      verification: "verifier",
      verify: "verifier",
      fin: "tool_agent",
      "tool-agent": "tool_agent",
      toolagent: "tool_agent",
      executor: "tool_agent",
      execution: "tool_agent",
      custom: "custom"
    }
    for (const [alias, role] of Object.entries(table)) assert.strictEqual(Roles.canonical(alias), role, alias)
  })

  it.effect("an unknown role is a typed error listing every accepted name", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Roles.resolve("wizard"))
      assert.strictEqual(error._tag, "UnknownRole")
      assert.strictEqual(
        error.message,
        "unknown sub-agent type \"wizard\". Accepted (case-insensitive): general (worker, default, general-purpose), " +
          "explore (explorer, exploration), plan (planning, planner, awaiter), review (reviewer, code-review, code_review), " +
          "implementer (implement, implementation, builder), verifier (verify, verification, validator, tester), " +
          "tool_agent (tool-agent, toolagent, executor, execution, fin), custom"
      )
      assert.includeMembers([...error.accepted], ["general", "worker", "fin", "custom"])
    }))

  it.effect("custom needs a non-empty allowed_tools", () =>
    Effect.gen(function*() {
      const missing = yield* Effect.flip(Roles.forRequest("custom", undefined))
      assert.strictEqual(missing._tag, "InvalidRoleRequest")
      const empty = yield* Effect.flip(Roles.forRequest("custom", []))
      assert.strictEqual(empty._tag, "InvalidRoleRequest")
      const ok = yield* Roles.forRequest("custom", ["read_file"])
      assert.strictEqual(ok.name, "custom")
    }))

  it("postures: explore/plan/review/verifier cannot write freely; review has no shell or spawn", () => {
    for (const name of ["explore", "review", "verifier"] as const) {
      assert.isFalse(Roles.roles[name].postures.has("write"))
    }
    assert.deepStrictEqual(Roles.roles.plan.writeScope, [".fibril/plans"])
    assert.isFalse(Roles.roles.review.postures.has("shell"))
    assert.isFalse(Roles.roles.review.postures.has("spawn"))
    assert.isFalse(Roles.roles.tool_agent.postures.has("spawn"))
  })

  it("every role prompt ends with the five-section output contract", () => {
    for (const name of Roles.roleNames) {
      const prompt = Roles.roles[name].prompt
      assert.isTrue(prompt.endsWith(Roles.outputContract), name)
      const order = ["SUMMARY:", "CHANGES:", "EVIDENCE:", "RISKS:", "BLOCKERS:"].map((h) => prompt.lastIndexOf(h))
      assert.deepStrictEqual([...order].sort((a, b) => a - b), order, name)
    }
  })

  it.effect("the errors say what was wrong and what is accepted; the prompt starts with who the agent is", () =>
    Effect.gen(function*() {
      const unknown = yield* Effect.flip(Roles.resolve("wizard"))
      assert.strictEqual(
        unknown.message,
        `unknown sub-agent type "wizard". Accepted (case-insensitive): ${Roles.acceptedNames}`
      )
      const withCustom = new Roles.UnknownRole({ name: "x", accepted: [], custom: ["db-expert", "linter"] })
      assert.isTrue(
        withCustom.message.endsWith(
          "; agents defined in .fibril/agents, .claude/agents or .opencode/agent: db-expert, linter"
        )
      )
      assert.notInclude(new Roles.UnknownRole({ name: "x", accepted: [], custom: [] }).message, "agents defined")
      for (const tools of [undefined, []]) {
        const invalid = yield* Effect.flip(Roles.forRequest("custom", tools))
        assert.strictEqual(invalid._tag, "InvalidRoleRequest")
        assert.strictEqual(
          invalid.message,
          "invalid request for role custom: custom agents need a non-empty allowed_tools list"
        )
      }
      assert.strictEqual((yield* Roles.forRequest("custom", ["read_file"])).name, "custom")
      assert.strictEqual(Roles.header("explore", 2), "Fibril agent: role=explore depth=2")
      const prompt = Roles.systemPrompt(Roles.roles.plan, 1, "/repo")
      assert.isTrue(prompt.startsWith("Fibril agent: role=plan depth=1\nWorkspace: /repo\n\n"))
      assert.isTrue(prompt.endsWith(Roles.roles.plan.prompt))
      assert.deepStrictEqual(Roles.ceiling(Roles.roles.plan), {
        postures: Roles.roles.plan.postures,
        writeScope: Roles.roles.plan.writeScope
      })
    }))
})
