import { assert, describe, it } from "@effect/vitest"
import { Result, Schema } from "effect"
import * as Permission from "../src/Permission.ts"
import * as Roles from "../src/Roles.ts"
import * as Session from "../src/Session.ts"

const toolNames = ["read_file", "write_file", "shell", "task", "todowrite", "grep", "remember", "agent_spawn"] as const
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

// A tree of agents: the configuration's denials at the root, then one level per depth, each
// with a role, maybe a markdown definition and maybe a caller's allowed_tools; then agent_assign
// calls moving agents of the tree to other roles.
const Definition = Schema.Struct({
  allow: Schema.optionalKey(Schema.Array(ToolName)),
  deny: Schema.Array(ToolName)
})
const Level = Schema.Struct({
  role: Roles.RoleName,
  definition: Schema.optionalKey(Definition),
  allowedTools: Schema.optionalKey(Schema.Array(ToolName))
})
const Assign = Schema.Struct({
  level: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 4 })),
  role: Roles.RoleName,
  definition: Schema.optionalKey(Definition)
})
const Tree = Schema.Struct({
  configDeny: Schema.Array(ToolName),
  maxDepth: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 5 })),
  levels: Schema.Array(Level).check(Schema.isMinLength(1), Schema.isMaxLength(5)),
  assigns: Schema.Array(Assign).check(Schema.isMaxLength(4))
})

/** Rules that allow exactly what `ceiling` allows (nothing above it). */
const ceilingRules = (ceiling: Permission.Ceiling) => Permission.derive(Permission.allowAll, ceiling)

const within = (outer: Permission.Rules, inner: Permission.Rules, what: string) =>
  assert.isTrue(Permission.narrows(outer, inner, universe), what)

describe("Permission", () => {
  it.prop(
    "effective rules are within every ceiling (parent, role, definition, allowed_tools, policy) at every depth, before and after assigns",
    [Tree],
    ([tree]) => {
      const root = Permission.derive(Permission.allowAll, { deny: tree.configDeny })
      const rules: Array<Permission.Rules> = []
      const grants: Array<Permission.Grant> = []
      tree.levels.forEach((level, depth) => {
        const parent = depth === 0 ? root : rules[depth - 1]!
        const grant = Session.grantFor(depth, tree.maxDepth, Roles.roles[level.role], {
          allowedTools: level.allowedTools,
          definition: level.definition
        })
        const effective = Permission.effective(parent, grant)
        within(parent, effective, `depth ${depth} exceeds its parent`)
        within(root, effective, `depth ${depth} exceeds the configuration`)
        within(ceilingRules(grant.role), effective, `depth ${depth} exceeds its role ${level.role}`)
        if (level.definition !== undefined) within(ceilingRules(level.definition), effective, "exceeds its definition")
        within(ceilingRules({ allow: level.allowedTools }), effective, `depth ${depth} exceeds its allowed_tools`)
        within(ceilingRules(grant.policy ?? {}), effective, `depth ${depth} exceeds the runtime policy`)
        // Policy in words: sub-agents never delegate with task; nobody spawns at max depth; no
        // read-only role leaves a note in memory.
        if (depth > 0) assert.isFalse(Permission.allowsTool(effective, "task", "spawn"))
        if (depth >= tree.maxDepth) assert.isFalse(Permission.allowsTool(effective, "agent_spawn", "spawn"))
        if (!Roles.roles[level.role].postures.has("write") || Roles.roles[level.role].writeScope !== undefined) {
          assert.isFalse(Permission.decide(effective, "remember", "memory", [".fibril/memory.md"]).allowed)
        }
        rules.push(effective)
        grants.push(grant)
      })
      for (const assign of tree.assigns) {
        const depth = assign.level % rules.length
        const current = rules[depth]!
        const parent = depth === 0 ? root : rules[depth - 1]!
        const grant = Session.grantFor(depth, tree.maxDepth, Roles.roles[assign.role], {
          definition: assign.definition
        })
        const next = Permission.reassign(current, parent, grant)
        if (Result.isFailure(next)) {
          assert.isAbove(next.failure.length, 0)
          continue
        }
        within(current, next.success, `an assign to ${assign.role} widened depth ${depth}`)
        within(ceilingRules(grant.role), next.success, `after an assign, depth ${depth} exceeds ${assign.role}`)
        within(parent, next.success, "after an assign, exceeds its parent")
        rules[depth] = next.success
        // Descendants meet their parent's new rules (Session.reassign).
        for (let below = depth + 1; below < rules.length; below++) {
          rules[below] = Permission.intersect(rules[below]!, rules[below - 1]!)
          within(rules[below - 1]!, rules[below]!, "a descendant exceeds its reassigned ancestor")
        }
      }
    },
    { arbitrary: { runs: 300 } }
  )

  it.prop(
    "assigning an agent the role it already has is never refused and changes nothing",
    [Tree],
    ([tree]) => {
      const root = Permission.derive(Permission.allowAll, { deny: tree.configDeny })
      let parent = root
      tree.levels.forEach((level, depth) => {
        const options = { allowedTools: level.allowedTools, definition: level.definition }
        const grant = Session.grantFor(depth, tree.maxDepth, Roles.roles[level.role], options)
        const current = Permission.effective(parent, grant)
        const again = Permission.reassign(current, parent, { ...grant, allowedTools: undefined })
        assert.isTrue(Result.isSuccess(again), `refused: ${Result.isFailure(again) ? again.failure.join("; ") : ""}`)
        if (Result.isSuccess(again)) {
          within(again.success, current, "the same role lost permissions")
          within(current, again.success, "the same role gained permissions")
        }
        parent = current
      })
    },
    { arbitrary: { runs: 200 } }
  )

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
    assert.deepStrictEqual(denied, {
      allowed: false,
      reason: "\"task\" is denied for the explore sub-agent at depth 1"
    })
    const posture = Permission.decide(rules, "write_file", "write", ["a"])
    assert.deepStrictEqual(posture, {
      allowed: false,
      reason: "the explore sub-agent at depth 1 may not use write tools"
    })
  })

  it("memory is a write: it needs the write posture and its file inside the write scope", () => {
    const reader = Permission.derive(Permission.allowAll, { label: "explore sub-agent", postures: ["read", "memory"] })
    assert.deepStrictEqual(Permission.decide(reader, "remember", "memory", [".fibril/memory.md"]), {
      allowed: false,
      reason: "the explore sub-agent may not use memory tools: memory is a write, and it may not write"
    })
    assert.isFalse(Permission.allowsTool(reader, "remember", "memory"))
    const planner = Permission.derive(Permission.allowAll, { label: "plan sub-agent", writeScope: [".fibril/plans"] })
    assert.isFalse(Permission.decide(planner, "remember", "memory", [".fibril/memory.md"]).allowed)
    assert.isTrue(Permission.decide(Permission.allowAll, "remember", "memory", [".fibril/memory.md"]).allowed)
  })

  it("reassign: narrowing is the meet; a role granting a posture or write path the agent lacks is refused", () => {
    const general = Session.grantFor(1, 2, Roles.roles.general)
    const parent = Permission.derive(Permission.allowAll, {})
    const current = Permission.effective(parent, general)
    const review = Permission.reassign(current, parent, Session.grantFor(1, 2, Roles.roles.review))
    assert.isTrue(Result.isSuccess(review))
    if (Result.isSuccess(review)) {
      assert.isFalse(Permission.allowsTool(review.success, "write_file", "write"))
      assert.isFalse(Permission.allowsTool(review.success, "shell", "shell"))
      assert.isTrue(Permission.allowsTool(review.success, "read_file", "read"))
      const back = Permission.reassign(review.success, parent, general)
      assert.deepStrictEqual(back, Result.fail(["the write, shell, spawn, memory postures"]))
    }
    const plan = Permission.effective(parent, Session.grantFor(1, 2, Roles.roles.plan))
    const implementer = Permission.reassign(plan, parent, Session.grantFor(1, 2, Roles.roles.implementer))
    assert.deepStrictEqual(
      implementer,
      Result.fail([
        "the memory posture",
        "writing anywhere (it may write only under .fibril/plans)"
      ])
    )
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
