import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Layer, Result, Schema } from "effect"
import * as Approvals from "../src/Approvals.ts"
import * as Permission from "../src/Permission.ts"
import * as Roles from "../src/Roles.ts"
import * as Session from "../src/Session.ts"
import * as Workspace from "../src/Workspace.ts"

const toolNames = ["read_file", "write_file", "shell", "task", "todowrite", "grep", "remember", "agent_spawn"] as const
const pathNames = ["src", "src/a.ts", ".fibril/plans", ".fibril/plans/p.md", "docs/x.md", ""] as const
// Rule entries with argument patterns (rule 5 and denials): judged on a command or a path.
const patternEntries = ["shell(git push *)", "write_file(src/**)", "read_file(docs/*)", "remember(.fibril/**)"] as const
const commands = ["git push origin main", "git push", "git status"]
const universe = {
  tools: toolNames.flatMap((name) => Permission.postures.map((posture) => [name, posture] as const)),
  paths: [...pathNames, "other/file.ts"],
  commands
}

const ToolName = Schema.Literals(toolNames)
const PathName = Schema.Literals(pathNames)
const PatternEntry = Schema.Literals(patternEntries)
/** An ask entry: a tool name, a posture, or a tool with an argument pattern. */
const AskName = Schema.Union([ToolName, Permission.Posture, PatternEntry])
/** A deny entry of a definition or the configuration: a tool name or a pattern. */
const DenyName = Schema.Union([ToolName, PatternEntry])

const RulesInput = Schema.Struct({
  allowAll: Schema.Boolean,
  allow: Schema.Array(ToolName),
  deny: Schema.Array(ToolName),
  postures: Schema.Array(Permission.Posture),
  scopeAll: Schema.Boolean,
  scope: Schema.Array(PathName),
  ask: Schema.Array(AskName)
})

const RequestInput = Schema.Struct({
  allow: Schema.optionalKey(Schema.Array(ToolName)),
  deny: Schema.optionalKey(Schema.Array(ToolName)),
  postures: Schema.optionalKey(Schema.Array(Permission.Posture)),
  writeScope: Schema.optionalKey(Schema.Array(PathName)),
  ask: Schema.optionalKey(Schema.Array(AskName))
})

const toRules = (input: typeof RulesInput.Type): Permission.Rules => ({
  label: "parent",
  allow: input.allowAll ? "all" : new Set(input.allow),
  deny: new Set(input.deny),
  postures: new Set(input.postures),
  writeScope: input.scopeAll ? "all" : new Set(input.scope.map(Permission.normalizePrefix)),
  ask: new Set(input.ask)
})

// A tree of agents: the configuration's denials at the root, then one level per depth, each
// with a role, maybe a markdown definition and maybe a caller's allowed_tools; then agent_assign
// calls moving agents of the tree to other roles.
const Definition = Schema.Struct({
  allow: Schema.optionalKey(Schema.Array(ToolName)),
  deny: Schema.Array(DenyName),
  ask: Schema.optionalKey(Schema.Array(AskName))
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
  configDeny: Schema.Array(DenyName),
  configAsk: Schema.Array(AskName),
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
      const root = Permission.derive(Permission.allowAll, { deny: tree.configDeny, ask: tree.configAsk })
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
      const root = Permission.derive(Permission.allowAll, { deny: tree.configDeny, ask: tree.configAsk })
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

  // Rule 5: ask is the middle outcome of the meet, and a person's answers never reach a denial.
  // One path inside and one outside each write scope the generators use, and one elsewhere.
  const gatePaths = ["src/a.ts", ".fibril/plans/p.md", "other/file.ts", "docs/x.md", ".fibril/memory.md"]
  const gateCalls = gatePaths.flatMap((file) => [undefined, ...commands].map((command) => [file, command] as const))
  const Standing = Schema.Struct({
    level: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 4 })),
    tool: ToolName
  })
  it.prop(
    "no sequence of rules, subtree \"always\" answers and depths lets a call run that its rules deny; ask only narrows",
    [Tree, Schema.Array(Standing).check(Schema.isMaxLength(6))],
    ([tree, answers]) => {
      const root = Permission.derive(Permission.allowAll, { deny: tree.configDeny, ask: tree.configAsk })
      const path = tree.levels.map((_, depth) => `agent-${depth}`)
      // "Always allow" answered for subtrees of the chain, whatever the tool's rules there say.
      const standing = answers.map((answer) => ({ subtree: `agent-${answer.level % path.length}`, tool: answer.tool }))
      let parent = root
      tree.levels.forEach((level, depth) => {
        const grant = Session.grantFor(depth, tree.maxDepth, Roles.roles[level.role], {
          allowedTools: level.allowedTools,
          definition: level.definition
        })
        const rules = Permission.effective(parent, grant)
        for (const [name, posture] of universe.tools) {
          for (const [file, command] of gateCalls) {
            const judged = Permission.judge(rules, name, posture, [file], command)
            const gated = Approvals.gate(judged, standing, path.slice(0, depth + 1), name)
            const denied = !Permission.decide(rules, name, posture, [file], command).allowed
            if (denied) assert.strictEqual(gated, "deny", `${name}/${posture} ran at depth ${depth} though denied`)
            // An ask anywhere above (config, an ancestor's definition) still asks here, unless answered.
            const above = Permission.judge(parent, name, posture, [file], command).outcome
            if (!denied && above === "ask" && !Approvals.covers(standing, path.slice(0, depth + 1), name)) {
              assert.strictEqual(gated, "ask", `${name}/${posture} lost its ask at depth ${depth}`)
            }
            assert.strictEqual(
              Permission.meetOutcome(judged.outcome, above),
              judged.outcome,
              `depth ${depth} is wider than its parent for ${name}/${posture}`
            )
          }
        }
        parent = rules
      })
    },
    { arbitrary: { runs: 80 } }
  )

  it("ask: judged after denials, with the entry that asked; the root takes [permissions] ask; records keep it", () => {
    const rules = Permission.derive(Permission.allowAll, { label: "review sub-agent", ask: ["shell", "write"] })
    assert.deepStrictEqual(Permission.judge(rules, "shell", "shell", []), {
      outcome: "ask",
      reason: "\"shell\" is an ask tool for the review sub-agent"
    })
    assert.deepStrictEqual(Permission.judge(rules, "remember", "memory", [".fibril/memory.md"]), {
      outcome: "ask",
      reason: "write tools ask for the review sub-agent"
    })
    assert.deepStrictEqual(Permission.judge(rules, "read_file", "read", []), { outcome: "allow" })
    const narrowed = Permission.derive(rules, { deny: ["shell"] })
    assert.strictEqual(Permission.judge(narrowed, "shell", "shell", []).outcome, "deny")
    // A ceiling without `ask` (an older record's) keeps what was asked.
    const again = Permission.derive(Permission.allowAll, Permission.ceilingFromJson(Permission.toJson(rules)))
    assert.deepStrictEqual([...again.ask].sort(), ["shell", "write"])
    const old = Permission.ceilingFromJson({ allow: "all", deny: [], postures: ["read"], write_scope: "all" })
    assert.strictEqual(Permission.derive(rules, old).ask.size, 2)
  })

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

  // An oracle written apart from Permission.ts: what one ceiling allows, read off its fields.
  const inPrefix = (prefixes: ReadonlyArray<string>, path: string) => {
    const normal = Permission.normalizePrefix(path)
    return prefixes.map(Permission.normalizePrefix).some((prefix) =>
      prefix === "" || normal === prefix || normal.startsWith(`${prefix}/`)
    )
  }
  const oracle = (
    ceiling: {
      readonly allow?: ReadonlyArray<string> | undefined
      readonly deny?: ReadonlyArray<string> | undefined
      readonly postures?: ReadonlyArray<Permission.Posture> | undefined
      readonly writeScope?: ReadonlyArray<string> | undefined
    },
    name: string,
    posture: Permission.Posture,
    path: string
  ) =>
    (ceiling.allow === undefined || ceiling.allow.includes(name)) &&
    !(ceiling.deny ?? []).includes(name) &&
    (ceiling.postures === undefined || Permission.required(posture).every((p) => ceiling.postures!.includes(p))) &&
    (!Permission.writes(posture) || ceiling.writeScope === undefined || inPrefix(ceiling.writeScope, path))

  it.prop(
    "derive is exactly the meet: a child may do a thing if and only if its parent and its request both allow it",
    [RulesInput, RequestInput],
    ([parentInput, request]) => {
      // Narrowing alone would pass with a child that may do nothing; this pins the child down.
      const parent = {
        allow: parentInput.allowAll ? undefined : parentInput.allow,
        deny: parentInput.deny,
        postures: parentInput.postures,
        writeScope: parentInput.scopeAll ? undefined : parentInput.scope
      }
      const child = Permission.derive(toRules(parentInput), request)
      for (const [name, posture] of universe.tools) {
        for (const path of universe.paths) {
          const expected = oracle(parent, name, posture, path) && oracle(request, name, posture, path)
          assert.strictEqual(
            Permission.decide(child, name, posture, [path]).allowed,
            expected,
            `${name} (${posture}) on "${path}"`
          )
          if (path === "") {
            assert.strictEqual(
              Permission.allowsTool(child, name, posture),
              Permission.decideTool(child, name, posture).allowed,
              `allowsTool and decideTool disagree on ${name} (${posture})`
            )
          }
        }
      }
    },
    { arbitrary: { runs: 100 } }
  )

  it.prop(
    "rules stored as JSON come back as the same rules, and decode with RulesJson",
    [RulesInput],
    ([input]) => {
      const rules = toRules(input)
      const stored = Schema.decodeUnknownSync(Permission.RulesJson)(
        JSON.parse(JSON.stringify(Permission.toJson(rules)))
      )
      const back = Permission.derive(Permission.allowAll, Permission.ceilingFromJson(stored))
      assert.isTrue(Permission.narrows(rules, back, universe), "the stored rules allow more")
      assert.isTrue(Permission.narrows(back, rules, universe), "the stored rules allow less")
      // As a ceiling on anything, they give no more than the stored rules.
      assert.isTrue(Permission.narrows(rules, Permission.intersect(Permission.allowAll, back), universe))
    },
    { arbitrary: { runs: 200 } }
  )

  it("narrows says no when a child can do one thing its parent cannot", () => {
    const reader = Permission.derive(Permission.allowAll, { postures: ["read"] })
    const planner = Permission.derive(Permission.allowAll, { writeScope: [".fibril/plans"] })
    assert.isTrue(Permission.narrows(Permission.allowAll, reader, universe))
    assert.isFalse(Permission.narrows(reader, Permission.allowAll, universe))
    // Only one (tool, path) pair differs: writing outside the plans directory.
    assert.isFalse(Permission.narrows(planner, Permission.allowAll, universe))
    assert.isFalse(
      Permission.narrows(planner, Permission.allowAll, { tools: [["write_file", "write"]], paths: ["src/a.ts"] })
    )
    assert.isTrue(
      Permission.narrows(planner, Permission.allowAll, { tools: [["write_file", "write"]], paths: [".fibril/plans"] })
    )
  })

  it("meetNames: undefined is no limit, two lists meet", () => {
    assert.strictEqual(Permission.meetNames(undefined, undefined), undefined)
    assert.deepStrictEqual(Permission.meetNames(["a", "b"], undefined), ["a", "b"])
    assert.deepStrictEqual(Permission.meetNames(undefined, ["c"]), ["c"])
    assert.deepStrictEqual(Permission.meetNames(["a", "b", "c"], ["c", "a", "d"]), ["a", "c"])
    assert.deepStrictEqual(Permission.meetNames(["a"], []), [])
  })

  it("write scopes meet prefix by prefix, after normalizing", () => {
    const parent = Permission.derive(Permission.allowAll, { writeScope: ["src", "./docs/"] })
    const child = Permission.derive(parent, { writeScope: ["src/core", "docs", "test"] })
    assert.deepStrictEqual([...(child.writeScope as ReadonlySet<string>)].sort(), ["docs", "src/core"])
    const wider = Permission.derive(parent, { writeScope: [""] })
    assert.deepStrictEqual([...(wider.writeScope as ReadonlySet<string>)].sort(), ["docs", "src"])
    assert.strictEqual(Permission.normalizePrefix("a//b\\c/./d/../e/"), "a/b/c/e")
    assert.isTrue(Permission.inScope(new Set(["a/b"]), "a/b"))
    assert.isTrue(Permission.inScope(new Set(["a/b"]), "./a/b/c"))
    assert.isFalse(Permission.inScope(new Set(["a/b"]), "a/bc"))
    assert.isFalse(Permission.inScope(new Set(), "a"))
    assert.isTrue(Permission.inScope("all", "../anything"))
  })

  it("denials name what is allowed instead: the tool list, or none; the write scope, or nothing", () => {
    const listed = Permission.derive(Permission.allowAll, { label: "custom agent", allow: ["read_file", "grep"] })
    assert.deepStrictEqual(Permission.decide(listed, "shell", "shell", []), {
      allowed: false,
      reason: "\"shell\" is not among the tools allowed for the custom agent (read_file, grep)"
    })
    const none = Permission.derive(Permission.allowAll, { label: "custom agent", allow: [] })
    assert.deepStrictEqual(Permission.decide(none, "grep", "read", []), {
      allowed: false,
      reason: "\"grep\" is not among the tools allowed for the custom agent (none)"
    })
    const plan = Permission.derive(Permission.allowAll, { label: "plan sub-agent", writeScope: [".fibril/plans"] })
    assert.deepStrictEqual(Permission.decide(plan, "write_file", "write", ["src/a.ts"]), {
      allowed: false,
      reason: "the plan sub-agent may write only under .fibril/plans, not \"src/a.ts\""
    })
    assert.deepStrictEqual(Permission.decide(plan, "write_file", "write", []), {
      allowed: false,
      reason: "the plan sub-agent may write only under .fibril/plans"
    })
    const nowhere = Permission.derive(plan, { label: "boxed agent", writeScope: ["src"] })
    assert.deepStrictEqual(Permission.decide(nowhere, "edit_file", "write", ["src/a.ts"]), {
      allowed: false,
      reason: "the boxed agent may write only under nothing, not \"src/a.ts\""
    })
    // Reading is not bound by the write scope.
    assert.isTrue(Permission.decide(nowhere, "read_file", "read", ["src/a.ts"]).allowed)
  })

  it("widening names the write paths a role would add outside the current scope, and nothing for paths inside it", () => {
    const current = Permission.derive(Permission.allowAll, { writeScope: ["src"] })
    const inside = Permission.derive(Permission.allowAll, { writeScope: ["src/core"] })
    const outside = Permission.derive(Permission.allowAll, { writeScope: ["src/core", "docs"] })
    assert.deepStrictEqual(Permission.widening(current, inside), [])
    assert.deepStrictEqual(Permission.widening(current, outside), ["writing under docs (it may write only under src)"])
    // A target that cannot write at all adds no path, whatever its scope says.
    const reader = Permission.derive(Permission.allowAll, { postures: ["read"] })
    assert.deepStrictEqual(Permission.widening(current, reader), [])
    const nothing = Permission.derive(Permission.allowAll, { writeScope: [] })
    assert.deepStrictEqual(Permission.widening(nothing, Permission.allowAll), [
      "writing anywhere (it may write only under nothing)"
    ])
  })

  it.effect("the service: the configuration's denials at the root, and write paths judged where they really lead", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      yield* fs.makeDirectory(`${root}/.fibril/plans`, { recursive: true })
      yield* fs.makeDirectory(`${root}/src`)
      yield* fs.symlink(`${root}/src`, `${root}/.fibril/plans/link`)
      const permission = yield* Effect.provide(
        Effect.gen(function*() {
          return yield* Permission.Permission
        }),
        Permission.layer({ deny: ["shell"] }).pipe(Layer.provide(Workspace.layer(root)))
      )
      assert.isTrue(permission.root.deny.has("shell"))
      assert.strictEqual(permission.root.allow, "all")
      const denied = yield* Effect.flip(permission.checkTool(permission.root, { name: "shell", posture: "shell" }))
      assert.strictEqual(denied._tag, "PermissionDenied")
      assert.strictEqual(
        denied.message,
        "permission denied for tool \"shell\": \"shell\" is denied for the agent. Nothing was executed."
      )
      yield* permission.checkTool(permission.root, { name: "grep", posture: "read" })
      const plan = permission.derive(permission.root, { label: "plan sub-agent", writeScope: [".fibril/plans"] })
      const write = { name: "write_file", posture: "write" as const }
      // Absolute paths are made workspace-relative before they are judged.
      yield* permission.check(plan, write, [`${root}/.fibril/plans/p.md`])
      yield* permission.check(plan, write, [".fibril/plans/new/p.md"])
      const throughLink = yield* Effect.flip(permission.check(plan, write, [".fibril/plans/link/x.ts"]))
      assert.include(throughLink.reason, "not \"src/x.ts\"")
      const outside = yield* Effect.flip(permission.check(plan, write, [`${root}/src/a.ts`]))
      assert.include(outside.reason, "not \"src/a.ts\"")
      // Without a write scope, or for a reading tool, paths do not matter.
      yield* permission.check(permission.root, write, [".fibril/plans/link/x.ts"])
      yield* permission.check(plan, { name: "read_file", posture: "read" }, [".fibril/plans/link/x.ts"])
    }).pipe(Effect.provide(NodeServices.layer)))

  it("PermissionWidening says what the role would add and what to do instead", () => {
    const error = new Permission.PermissionWidening({
      agentId: "a1",
      from: "review",
      to: "general",
      grants: ["the write posture", "writing anywhere (it may write only under nothing)"]
    })
    assert.strictEqual(
      error.message,
      "refused: assigning agent a1 from review to general would widen its permissions (general grants the write " +
        "posture; writing anywhere (it may write only under nothing), which it does not have). A running agent's " +
        "permissions only narrow: assign a role at most as permissive, or spawn a new agent with role general. " +
        "Nothing was changed."
    )
  })

  it.effect("edge cases a mutation run found: no paths, a write-scoped child, a path outside the workspace", () =>
    Effect.gen(function*() {
      // A writer without a write scope needs no path; one with a scope does.
      assert.isTrue(Permission.decide(Permission.allowAll, "write_file", "write", []).allowed)
      // narrows must judge the child on the path too: a child writing under src is not within a planner.
      const planner = Permission.derive(Permission.allowAll, { writeScope: [".fibril/plans"] })
      const srcWriter = Permission.derive(Permission.allowAll, { writeScope: ["src"] })
      assert.isFalse(
        Permission.narrows(planner, srcWriter, { tools: [["write_file", "write"]], paths: ["src/a.ts"] })
      )
      // Every path outside the scope is named.
      assert.deepStrictEqual(
        Permission.widening(
          Permission.derive(Permission.allowAll, { writeScope: ["src"] }),
          Permission.derive(Permission.allowAll, { writeScope: ["docs", "test"] })
        ),
        ["writing under docs, test (it may write only under src)"]
      )
      const fs = yield* FileSystem.FileSystem
      const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      const permission = yield* Effect.provide(
        Effect.gen(function*() {
          return yield* Permission.Permission
        }),
        Permission.layer().pipe(Layer.provide(Workspace.layer(root)))
      )
      assert.strictEqual(permission.root.deny.size, 0)
      const plan = permission.derive(permission.root, { label: "plan sub-agent", writeScope: [".fibril/plans"] })
      // Outside the workspace the path cannot be resolved: it is judged by its lexical form.
      const outside = yield* Effect.flip(
        permission.check(plan, { name: "write_file", posture: "write" }, ["../outside.txt"])
      )
      assert.strictEqual(outside._tag, "PermissionDenied")
      assert.include(outside.reason, "may write only under .fibril/plans")
      // A link inside the scope that leads out of the workspace cannot be resolved either: its
      // lexical form decides here (in scope), and the tool itself refuses the path.
      const elsewhere = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      yield* fs.makeDirectory(`${root}/.fibril/plans`, { recursive: true })
      yield* fs.symlink(elsewhere, `${root}/.fibril/plans/out`)
      yield* permission.check(plan, { name: "write_file", posture: "write" }, [".fibril/plans/out/x.md"])
    }).pipe(Effect.provide(NodeServices.layer)))
})
