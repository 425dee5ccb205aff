import { assert, describe, it } from "@effect/vitest"
import { Schema } from "effect"
import * as Permission from "../src/Permission.ts"

const toolNames = ["read_file", "write_file", "shell", "task", "todowrite", "grep", "remember"] as const
const pathNames = ["src", "src/a.ts", ".fibril/plans", ".fibril/plans/p.md", "docs/x.md", ""] as const
const universe = {
  tools: toolNames.flatMap((name) => Permission.postures.map((posture) => [name, posture] as const)),
  paths: [...pathNames, "other/file.ts"]
}

const ToolName = Schema.Literals(toolNames)
const PathName = Schema.Literals(pathNames)

const RulesInput = Schema.Struct({
  allowAll: Schema.Boolean,
  allow: Schema.Array(ToolName),
  deny: Schema.Array(ToolName),
  postures: Schema.Array(Permission.Posture),
  scopeAll: Schema.Boolean,
  scope: Schema.Array(PathName)
})

const RequestInput = Schema.Struct({
  allow: Schema.optionalKey(Schema.Array(ToolName)),
  deny: Schema.optionalKey(Schema.Array(ToolName)),
  postures: Schema.optionalKey(Schema.Array(Permission.Posture)),
  writeScope: Schema.optionalKey(Schema.Array(PathName))
})

const toRules = (input: typeof RulesInput.Type): Permission.Rules => ({
  label: "parent",
  allow: input.allowAll ? "all" : new Set(input.allow),
  deny: new Set(input.deny),
  postures: new Set(input.postures),
  writeScope: input.scopeAll ? "all" : new Set(input.scope.map(Permission.normalizePrefix))
})

describe("Permission", () => {
  it.prop(
    "derive only narrows, for random parent rules and child requests (and grandchildren)",
    [RulesInput, RequestInput, RequestInput],
    ([parentInput, request, grandRequest]) => {
      const parent = toRules(parentInput)
      const child = Permission.derive(parent, request)
      const grandchild = Permission.derive(child, grandRequest)
      assert.isTrue(Permission.narrows(parent, child, universe), "child exceeds parent")
      assert.isTrue(Permission.narrows(child, grandchild, universe), "grandchild exceeds child")
      assert.isTrue(Permission.narrows(parent, grandchild, universe), "grandchild exceeds grandparent")
      for (const denied of parent.deny) assert.isTrue(child.deny.has(denied))
    },
    { arbitrary: { runs: 500 } }
  )

  it("a child that asks for everything gets no more than its parent", () => {
    const parent = Permission.derive(Permission.allowAll, { postures: ["read"], deny: ["shell"] })
    const child = Permission.derive(parent, {
      allow: toolNames,
      postures: Permission.postures,
      writeScope: [""]
    })
    assert.isFalse(Permission.decide(child, "write_file", "write", ["a.txt"]).allowed)
    assert.isFalse(Permission.decide(child, "shell", "read", []).allowed)
    assert.isTrue(Permission.decide(child, "read_file", "read", []).allowed)
  })

  it("denials say why", () => {
    const rules = Permission.derive(Permission.allowAll, {
      label: "explore sub-agent at depth 1",
      deny: ["task"],
      postures: ["read", "shell"]
    })
    const denied = Permission.decide(rules, "task", "spawn", [])
    assert.deepStrictEqual(denied, { allowed: false, reason: "\"task\" is denied for the explore sub-agent at depth 1" })
    const posture = Permission.decide(rules, "write_file", "write", ["a"])
    assert.deepStrictEqual(posture, {
      allowed: false,
      reason: "the explore sub-agent at depth 1 may not use write tools"
    })
  })

  it("write scopes: only inside the prefixes, never by a ../ detour", () => {
    const rules = Permission.derive(Permission.allowAll, { label: "plan sub-agent", writeScope: [".fibril/plans"] })
    assert.isTrue(Permission.decide(rules, "write_file", "write", [".fibril/plans/p.md"]).allowed)
    assert.isTrue(Permission.decide(rules, "write_file", "write", ["./.fibril/plans/a/b.md"]).allowed)
    assert.isFalse(Permission.decide(rules, "write_file", "write", [".fibril/plans/../../src/x.ts"]).allowed)
    assert.isFalse(Permission.decide(rules, "write_file", "write", [".fibril/plansX/p.md"]).allowed)
    assert.isFalse(Permission.decide(rules, "write_file", "write", []).allowed)
  })
})
