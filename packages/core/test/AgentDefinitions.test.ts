import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Arbitrary, Effect, FileSystem, Result, Schema } from "effect"
import * as path from "node:path"
import * as AgentDefinitions from "../src/AgentDefinitions.ts"

// ---------------------------------------------------------------------------
// Fixtures: what users of each harness actually write
// ---------------------------------------------------------------------------

/** Claude Code's documented examples: a comma-separated `tools` string, `model: inherit`. */
const claudeCodeReviewer = `---
name: code-reviewer
description: Expert code review specialist. Proactively reviews code for quality, security, and maintainability. Use immediately after writing or modifying code.
tools: Read, Grep, Glob, Bash
model: inherit
---

You are a senior code reviewer ensuring high standards of code quality and security.

When invoked:
1. Run git diff to see recent changes
2. Focus on modified files
3. Begin review immediately
`

const claudeDebugger = `---
name: debugger
description: Debugging specialist for errors, test failures, and unexpected behavior. Use proactively when encountering any issues.
tools: Read, Edit, Bash, Grep, Glob
---

You are an expert debugger specializing in root cause analysis.
`

const claudeDataScientist = `---
name: data-scientist
description: Data analysis expert for SQL queries, BigQuery operations, and data insights.
tools: Bash, Read, Write
model: sonnet
---

You are a data scientist specializing in SQL and BigQuery analysis.
`

/**
 * What Claude Code's agent generator writes: an unquoted description full of `: `, which
 * strict YAML rejects. No `tools`: it inherits everything. `maxTurns`, a YAML-list deny list.
 */
const claudeGenerated = `---
name: test-runner
description: Use this agent when code changes need their tests run. Examples: <example>Context: The user has just fixed a bug. user: "I fixed the off-by-one in the pager" assistant: "Let me use the test-runner agent to run the affected tests"</example>
maxTurns: 12
disallowedTools:
  - Write
  - Edit
color: green
---
Run the tests closest to the change first, then the whole suite.
`

/** An unknown tool and tools with no Fibril counterpart: warnings, the file still loads. */
const claudeResearcher = `---
name: researcher
description: Researches libraries and APIs before we adopt them.
tools: Read, WebSearch, WebFetch, Frobnicate
---
Summarise what you find with links.
`

/** opencode's documented examples: `mode`, `model`, `temperature`, `tools` booleans. */
const opencodeSecurityAuditor = `---
description: Performs security audits and identifies vulnerabilities
mode: subagent
model: anthropic/claude-sonnet-4-20250514
temperature: 0.1
tools:
  write: false
  edit: false
---
You are a security expert. Focus on identifying potential security issues.

Look for:
- Input validation vulnerabilities
- Authentication and authorization flaws
`

/** opencode `permission`: edit denied, bash per-pattern with an "ask" fallback. */
const opencodeCarefulReviewer = `---
description: Reviews code for quality and best practices without changing it
mode: subagent
permission:
  edit: deny
  bash:
    "*": ask
    "git diff": allow
    "git log*": allow
  webfetch: deny
---
You are in code review mode. Focus on code quality, potential bugs and performance.
`

const opencodeDocsWriter = `---
description: Writes and maintains project documentation
mode: subagent
tools:
  bash: false
---
You are a technical writer. Create clear, comprehensive documentation.
`

/** A primary agent, under the plural directory name: loaded, not usable as a subagent_type. */
const opencodePrimary = `---
description: Fast build agent for small changes
mode: primary
model: openai/gpt-4.1-mini
---
Make the change, run the tests, stop.
`

/** Fibril's own format: every field. */
const fibrilMigrator = `---
name: migrator
description: Moves call sites from the v1 client API to v2, one package at a time.
role: implementer
tools: [read_file, grep, glob, edit_file, shell, todowrite]
denied_tools: todowrite
model: gpt-4.1-mini
max_steps: 40
---
Migrate one package per run. Keep behaviour identical; run the package's tests after each file.
`

/** Name from the file, base role through an alias, tools as a comma-separated string. */
const fibrilScout = `---
description: Finds where things are defined and used, and reports paths with line numbers.
role: Explorer
tools: read_file, grep, glob, list_dir
---
Search broadly first, then read only what answers the question.
`

// Bad files, one problem each.
const malformedYaml = `---
name: broken
description: Has a list that never closes
tools: [read_file, grep
---
body
`
const noFrontmatter = `# Notes

This file has no frontmatter at all.
`
const missingDescription = `---
mode: subagent
---
I have no description.
`
const aliasName = `---
name: Worker
description: Does work.
---
Work.
`

type Files = Readonly<Record<string, string>>

/** A temp root with `files` (root-relative path -> text) written into it. */
const workspace = (files: Files) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const root = yield* fs.makeTempDirectoryScoped()
    for (const [relative, text] of Object.entries(files)) {
      const file = path.join(root, relative)
      yield* fs.makeDirectory(path.dirname(file), { recursive: true })
      yield* fs.writeFileString(file, text)
    }
    return root
  })

const ok = (file: string, text: string, format: AgentDefinitions.Format): AgentDefinitions.Parsed => {
  const parsed = AgentDefinitions.parse(file, text, format)
  if (Result.isFailure(parsed)) return assert.fail(parsed.failure.message)
  return parsed.success
}

const problem = (file: string, text: string, format: AgentDefinitions.Format): AgentDefinitions.AgentFileProblem => {
  const parsed = AgentDefinitions.parse(file, text, format)
  if (Result.isSuccess(parsed)) return assert.fail(`expected a problem, got ${JSON.stringify(parsed.success)}`)
  return parsed.failure
}

const byName = (definitions: ReadonlyArray<AgentDefinitions.AgentDefinition>, name: string) =>
  definitions.find((d) => d.name === name) ?? assert.fail(`no definition named ${name}`)

// ---------------------------------------------------------------------------
// load
// ---------------------------------------------------------------------------

describe("AgentDefinitions.load", () => {
  it.effect("loads agents in all three formats", () =>
    Effect.gen(function*() {
      const root = yield* workspace({
        ".fibril/agents/migrator.md": fibrilMigrator,
        ".fibril/agents/scout.md": fibrilScout,
        ".claude/agents/code-reviewer.md": claudeCodeReviewer,
        ".claude/agents/debugger.md": claudeDebugger,
        ".claude/agents/data-scientist.md": claudeDataScientist,
        ".claude/agents/test-runner.md": claudeGenerated,
        ".opencode/agent/security-auditor.md": opencodeSecurityAuditor,
        ".opencode/agent/careful-reviewer.md": opencodeCarefulReviewer,
        ".opencode/agent/docs-writer.md": opencodeDocsWriter,
        ".opencode/agents/build-fast.md": opencodePrimary,
        ".claude/agents/README.txt": "not an agent"
      })
      const result = yield* AgentDefinitions.load(root)
      assert.deepStrictEqual(result.problems, [])
      // fibril, then claude, then opencode (agent/ before agents/); by file name within each.
      assert.deepStrictEqual(result.definitions.map((d) => `${d.source.format}:${d.name}`), [
        "fibril:migrator",
        "fibril:scout",
        "claude:code-reviewer",
        "claude:data-scientist",
        "claude:debugger",
        "claude:test-runner",
        "opencode:careful-reviewer",
        "opencode:docs-writer",
        "opencode:security-auditor",
        "opencode:build-fast"
      ])

      assert.deepStrictEqual(byName(result.definitions, "migrator"), {
        name: "migrator",
        description: "Moves call sites from the v1 client API to v2, one package at a time.",
        baseRole: "implementer",
        allowedTools: ["read_file", "grep", "glob", "edit_file", "shell"],
        deniedTools: ["todowrite"],
        model: "gpt-4.1-mini",
        maxSteps: 40,
        prompt: "Migrate one package per run. Keep behaviour identical; run the package's tests after each file.",
        source: { path: path.join(root, ".fibril/agents/migrator.md"), format: "fibril" },
        usableAsSubagent: true
      })
      const scout = byName(result.definitions, "scout")
      assert.strictEqual(scout.baseRole, "explore")
      assert.deepStrictEqual(scout.allowedTools, ["read_file", "grep", "glob", "list_dir"])
      assert.isUndefined(scout.model)

      const reviewer = byName(result.definitions, "code-reviewer")
      assert.deepStrictEqual(reviewer.allowedTools, ["read_file", "grep", "glob", "shell"])
      assert.isUndefined(reviewer.model) // inherit
      assert.strictEqual(reviewer.baseRole, "general")
      assert.isTrue(reviewer.prompt.startsWith("You are a senior code reviewer"))
      assert.isTrue(reviewer.prompt.endsWith("3. Begin review immediately"))
      assert.deepStrictEqual(byName(result.definitions, "debugger").allowedTools, [
        "read_file",
        "edit_file",
        "shell",
        "grep",
        "glob"
      ])
      const scientist = byName(result.definitions, "data-scientist")
      assert.deepStrictEqual(scientist.allowedTools, ["shell", "read_file", "write_file"])
      assert.strictEqual(scientist.model, "sonnet")
      const runner = byName(result.definitions, "test-runner")
      assert.isUndefined(runner.allowedTools) // no tools: inherits
      assert.deepStrictEqual(runner.deniedTools, ["write_file", "edit_file"])
      assert.strictEqual(runner.maxSteps, 12)
      assert.include(runner.description, `user: "I fixed the off-by-one in the pager"`)

      const auditor = byName(result.definitions, "security-auditor")
      assert.strictEqual(auditor.model, "anthropic/claude-sonnet-4-20250514")
      assert.isUndefined(auditor.allowedTools)
      assert.deepStrictEqual(auditor.deniedTools, ["write_file", "edit_file"])
      assert.isTrue(auditor.usableAsSubagent)
      assert.deepStrictEqual(byName(result.definitions, "careful-reviewer").deniedTools, ["write_file", "edit_file"])
      assert.deepStrictEqual(byName(result.definitions, "careful-reviewer").askTools, ["shell"])
      assert.deepStrictEqual(byName(result.definitions, "docs-writer").deniedTools, ["shell"])
      const primary = byName(result.definitions, "build-fast")
      assert.isFalse(primary.usableAsSubagent)
      assert.strictEqual(primary.source.path, path.join(root, ".opencode/agents/build-fast.md"))

      const warned = (file: string, text: string) =>
        assert.isTrue(
          result.warnings.some((w) => w.startsWith(path.join(root, file)) && w.includes(text)),
          `no warning for ${file} containing ${text}: ${result.warnings.join("\n")}`
        )
      warned(".claude/agents/test-runner.md", "read leniently by quoting the value of description")
      warned(".opencode/agent/security-auditor.md", "temperature not supported")
      warned(".opencode/agent/careful-reviewer.md", `permission.bash has per-pattern rules`)
      warned(".opencode/agents/build-fast.md", "mode is primary")
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("a bad file is reported with its path and the problem; the other files still load", () =>
    Effect.gen(function*() {
      const root = yield* workspace({
        ".fibril/agents/broken.md": malformedYaml,
        ".fibril/agents/scout.md": fibrilScout,
        ".claude/agents/notes.md": noFrontmatter,
        ".claude/agents/worker.md": aliasName,
        ".claude/agents/researcher.md": claudeResearcher,
        ".claude/agents/debugger.md": claudeDebugger,
        ".opencode/agent/helper.md": missingDescription,
        ".opencode/agent/review.md": opencodeDocsWriter, // named after its file: the role "review"
        ".opencode/agent/docs-writer.md": opencodeDocsWriter
      })
      const at = (relative: string) => path.join(root, relative)
      const result = yield* AgentDefinitions.load(root)

      assert.deepStrictEqual(result.definitions.map((d) => d.name), ["scout", "debugger", "researcher", "docs-writer"])
      assert.deepStrictEqual(
        result.problems.map((p) => [p.path, p.reason]),
        [
          [
            at(".fibril/agents/broken.md"),
            "YAML: Flow sequence in block collection must be sufficiently indented and end with a ] at line 4, column 24"
          ],
          [at(".claude/agents/notes.md"), "no frontmatter (expected a block between --- lines)"],
          [
            at(".claude/agents/worker.md"),
            `name "Worker" collides with an alias of the built-in role general (rename the agent)`
          ],
          [at(".opencode/agent/helper.md"), "missing description"],
          [
            at(".opencode/agent/review.md"),
            `file name: name "review" collides with the built-in role review (rename the agent)`
          ]
        ]
      )
      for (const p of result.problems) {
        assert.strictEqual(p._tag, "AgentFileProblem")
        assert.strictEqual(p.message, `agent definition ${p.path}: ${p.reason}`)
      }
      // The unknown tool is a warning, not a problem: the researcher loads with what maps.
      assert.deepStrictEqual(byName(result.definitions, "researcher").allowedTools, ["read_file"])
      const researcher = result.warnings.filter((w) => w.startsWith(at(".claude/agents/researcher.md")))
      assert.deepStrictEqual(researcher.map((w) => w.slice(at(".claude/agents/researcher.md").length)), [
        `: tools: "WebSearch" has no Fibril equivalent; skipped`,
        `: tools: "WebFetch" has no Fibril equivalent; skipped`,
        `: tools: "Frobnicate" is not a known Claude Code tool; skipped`
      ])
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("a name is unique in any case: the first by precedence wins, the shadowed file is a warning", () =>
    Effect.gen(function*() {
      const root = yield* workspace({
        ".fibril/agents/code-reviewer.md": `---\ndescription: Fibril's reviewer\nrole: review\n---\nReview.`,
        ".claude/agents/code-reviewer.md": claudeCodeReviewer.replace("name: code-reviewer", "name: Code-Reviewer"),
        ".opencode/agent/code-reviewer.md": opencodeDocsWriter
      })
      const result = yield* AgentDefinitions.load(root)
      assert.deepStrictEqual(result.problems, [])
      assert.strictEqual(result.definitions.length, 1)
      const kept = result.definitions[0]
      assert.strictEqual(kept?.source.format, "fibril")
      assert.strictEqual(kept?.baseRole, "review")
      assert.deepStrictEqual(result.warnings, [
        `${path.join(root, ".claude/agents/code-reviewer.md")}: agent "Code-Reviewer" is shadowed by ${
          path.join(root, ".fibril/agents/code-reviewer.md")
        } (precedence: fibril > claude > opencode)`,
        `${path.join(root, ".opencode/agent/code-reviewer.md")}: agent "code-reviewer" is shadowed by ${
          path.join(root, ".fibril/agents/code-reviewer.md")
        } (precedence: fibril > claude > opencode)`
      ])
      assert.strictEqual(AgentDefinitions.find(result.definitions, "CODE-REVIEWER"), kept)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("a file that cannot be read is a problem too", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const root = yield* workspace({ ".claude/agents/debugger.md": claudeDebugger })
      yield* fs.makeDirectory(path.join(root, ".claude/agents/folder.md"))
      const result = yield* AgentDefinitions.load(root)
      assert.deepStrictEqual(result.definitions.map((d) => d.name), ["debugger"])
      assert.strictEqual(result.problems.length, 1)
      assert.strictEqual(result.problems[0]?.path, path.join(root, ".claude/agents/folder.md"))
      assert.match(result.problems[0]?.reason ?? "", /^cannot read: /)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("no agent directories: nothing loaded, nothing wrong", () =>
    Effect.gen(function*() {
      const root = yield* workspace({ "README.md": "# project" })
      assert.deepStrictEqual(yield* AgentDefinitions.load(root), { definitions: [], problems: [], warnings: [] })
    }).pipe(Effect.provide(NodeServices.layer)))
})

// ---------------------------------------------------------------------------
// parse
// ---------------------------------------------------------------------------

describe("AgentDefinitions.parse", () => {
  const claude = (tools: string, extra = "") =>
    ok("a/x.md", `---\nname: x\ndescription: d\ntools: ${tools}\n${extra}---\n`, "claude")

  it("maps every Claude Code tool name, in any case", () => {
    const { definition, warnings } = claude(
      "Read, Write, Edit, MultiEdit, Bash, Grep, Glob, LS, TodoWrite, Task, Agent, read"
    )
    assert.deepStrictEqual(definition.allowedTools, [
      "read_file",
      "write_file",
      "edit_file",
      "shell",
      "grep",
      "glob",
      "list_dir",
      "todowrite",
      "task"
    ])
    assert.deepStrictEqual(warnings, [])
  })

  it("Claude Code: a YAML list works like the string; argument patterns never widen access", () => {
    assert.deepStrictEqual(claude("[Read, Grep]").definition.allowedTools, ["read_file", "grep"])
    assert.deepStrictEqual(claude("[]").definition.allowedTools, [])
    const { definition, warnings } = claude(
      `Read, Bash(git log:*, git diff:*), mcp__github__create_issue`,
      "disallowedTools: Bash(rm:*)\n"
    )
    // An MCP tool keeps its Claude Code name (McpTools lists them so).
    assert.deepStrictEqual(definition.allowedTools, ["read_file", "mcp__github__create_issue"])
    assert.deepStrictEqual(definition.deniedTools, ["shell"])
    assert.deepStrictEqual(warnings, [
      `a/x.md: tools: "Bash(git log:*, git diff:*)" restricts Bash to certain arguments,` +
      " which Fibril cannot enforce; skipped",
      `a/x.md: disallowedTools: "Bash(rm:*)" denies all of shell (argument patterns are not supported)`
    ])
  })

  it("Claude Code: unsupported fields are named in a warning", () => {
    const { warnings } = claude("Read", "hooks: {}\nmcpServers: [github]\n")
    assert.deepStrictEqual(warnings, ["a/x.md: hooks not supported by Fibril; ignored"])
  })

  it("Claude Code: permissionMode adds asks or makes the agent read-only, never loosens", () => {
    const mode = (value: string) => claude("Read, Edit, Bash", `permissionMode: ${value}\n`)
    for (const value of ["default", "manual"]) {
      assert.deepStrictEqual(mode(value).definition.askTools, ["write", "shell"], value)
      assert.strictEqual(mode(value).definition.baseRole, "general")
    }
    assert.deepStrictEqual(mode("acceptEdits").definition.askTools, ["shell"])
    assert.strictEqual(mode("plan").definition.baseRole, "review")
    assert.strictEqual(mode("dontAsk").definition.baseRole, "review")
    assert.include(mode("dontAsk").warnings[0], "read-only")
    for (const value of ["auto", "bypassPermissions"]) {
      const { definition, warnings } = mode(value)
      assert.isUndefined(definition.askTools)
      assert.strictEqual(definition.baseRole, "general")
      assert.include(warnings[0], "cannot widen Fibril's rules")
    }
    const bad = problem("a/x.md", "---\nname: x\ndescription: d\npermissionMode: yolo\n---\n", "claude")
    assert.include(bad.reason, "permissionMode must be one of default, manual, acceptEdits, plan, dontAsk")
  })

  it("Claude Code: mcpServers names configured servers and defines others inline", () => {
    const { definition, warnings } = claude(
      "Read",
      "mcpServers:\n  - github\n  - local:\n      command: node\n      args: [server.js]\n  - bad:\n      cmd: x\n"
    )
    assert.deepStrictEqual(definition.mcpServers?.names, ["github", "local"])
    assert.deepStrictEqual(definition.mcpServers?.inline.map((server) => [server.name, server.transport]), [[
      "local",
      "stdio"
    ]])
    assert.strictEqual(warnings.length, 1)
    assert.include(warnings[0]!, `a/x.md: mcpServers: MCP server "bad"`)
    assert.include(warnings[0]!, "unknown key cmd")
  })

  it("Fibril and opencode files take mcpServers as Claude Code writes it", () => {
    const fibril = ok(
      "f/tracker.md",
      "---\nname: tracker\ndescription: d\nmcpServers: [github, { local: { command: node } }]\n---\nTrack.",
      "fibril"
    )
    assert.deepStrictEqual(fibril.definition.mcpServers?.names, ["github", "local"])
    assert.deepStrictEqual(fibril.warnings, [])
    const opencode = ok("o/tracker.md", "---\ndescription: d\nmcpServers:\n  - github\n---\nTrack.", "opencode")
    assert.deepStrictEqual(opencode.definition.mcpServers?.names, ["github"])
  })

  it("opencode: ask, and patterns that only allow or ask, make the tool ask; a denying pattern denies it", () => {
    const { definition, warnings } = ok("o/careful-reviewer.md", opencodeCarefulReviewer, "opencode")
    assert.isUndefined(definition.allowedTools)
    assert.deepStrictEqual(definition.deniedTools, ["write_file", "edit_file"])
    assert.deepStrictEqual(definition.askTools, ["shell"])
    assert.deepStrictEqual(warnings, [
      "o/careful-reviewer.md: permission.bash has per-pattern rules, which Fibril cannot enforce; shell is asked"
    ])
    const asked = ok("o/a.md", `---\ndescription: d\npermission:\n  bash: ask\n  edit: allow\n---\n`, "opencode")
    assert.deepStrictEqual(asked.definition.deniedTools, [])
    assert.deepStrictEqual(asked.definition.askTools, ["shell"])
    assert.deepStrictEqual(asked.warnings, [])
    const mixed = ok(
      "o/m.md",
      `---\ndescription: d\npermission:\n  bash:\n    "*": ask\n    "rm *": deny\n---\n`,
      "opencode"
    )
    assert.deepStrictEqual(mixed.definition.deniedTools, ["shell"])
    assert.isUndefined(mixed.definition.askTools)
    const fibril = ok("f/a.md", `---\ndescription: d\nask_tools: [shell, write_file]\n---\n`, "fibril")
    assert.deepStrictEqual(fibril.definition.askTools, ["shell", "write_file"])
    const allAllowed = ok("o/b.md", `---\ndescription: d\npermission:\n  bash:\n    "git *": allow\n---\n`, "opencode")
    assert.deepStrictEqual(allAllowed.definition.deniedTools, [])
  })

  it("opencode: under \"*\": allow, each asking or denying pattern is a rule of its own; the tool stays allowed", () => {
    const { definition, warnings } = ok(
      "o/p.md",
      `---\ndescription: d\npermission:\n  bash:\n    "*": allow\n    "git push *": ask\n    "rm *": deny\n` +
        `  edit:\n    "*": allow\n    ".github/**": deny\n---\n`,
      "opencode"
    )
    assert.isUndefined(definition.allowedTools)
    assert.deepStrictEqual(definition.askTools, ["shell(git push *)"])
    assert.deepStrictEqual(definition.deniedTools, ["shell(rm *)", "write_file(.github/**)", "edit_file(.github/**)"])
    assert.deepStrictEqual(warnings, [])
    const fibril = ok(
      "f/p.md",
      `---\ndescription: d\nask_tools: ["shell(git push *)"]\ndenied_tools: ["write_file(.github/**)"]\n---\n`,
      "fibril"
    )
    assert.deepStrictEqual(fibril.definition.askTools, ["shell(git push *)"])
    assert.deepStrictEqual(fibril.definition.deniedTools, ["write_file(.github/**)"])
    assert.deepStrictEqual(fibril.warnings, [])
  })

  it("opencode: a \"*\" entry switching everything off makes an allow list of what later entries enable", () => {
    const text = `---\ndescription: d\ntools:\n  "*": false\n  read: true\n  grep: true\n  webfetch: true\n---\n`
    const { definition, warnings } = ok("o/readonly.md", text, "opencode")
    assert.deepStrictEqual(definition.allowedTools, ["read_file", "grep"])
    assert.deepStrictEqual(warnings, [`o/readonly.md: tools: "webfetch" has no Fibril equivalent; skipped`])
    const permission = ok("o/p.md", `---\ndescription: d\npermission:\n  "*": deny\n  read: allow\n---\n`, "opencode")
    assert.deepStrictEqual(permission.definition.allowedTools, ["read_file"])
    const globbed = ok("o/g.md", `---\ndescription: d\ntools:\n  "todo*": false\n---\n`, "opencode")
    assert.deepStrictEqual(globbed.definition.deniedTools, ["todowrite", "todoread"])
  })

  it("opencode: the name is the file's; mode all is usable, primary and disabled are not", () => {
    const named = ok("o/helper.md", `---\nname: Something Else\ndescription: d\n---\n`, "opencode")
    assert.strictEqual(named.definition.name, "helper")
    assert.isTrue(named.definition.usableAsSubagent)
    assert.deepStrictEqual(named.warnings, [
      `o/helper.md: name "Something Else" ignored; opencode agents are named after their file ("helper")`
    ])
    const disabled = ok("o/d.md", `---\ndescription: d\nmode: subagent\ndisable: true\nsteps: 5\n---\n`, "opencode")
    assert.isFalse(disabled.definition.usableAsSubagent)
    assert.strictEqual(disabled.definition.maxSteps, 5)
    assert.strictEqual(
      problem("o/m.md", `---\ndescription: d\nmode: sometimes\n---\n`, "opencode").reason,
      `mode must be "primary", "subagent" or "all"`
    )
    assert.strictEqual(
      problem("o/t.md", `---\ndescription: d\ntools: [read]\n---\n`, "opencode").reason,
      "tools must map tool names to true or false"
    )
  })

  it("Fibril: tool names in any case and agent_* patterns; unknown names and fields are warnings", () => {
    const text = `---
description: d
tools: [Read_File, "agent_*", Read]
max-steps: 3
---
`
    const { definition, warnings } = ok("f/delegator.md", text, "fibril")
    assert.strictEqual(definition.name, "delegator")
    assert.strictEqual(definition.baseRole, "general")
    assert.deepStrictEqual(definition.allowedTools, [
      "read_file",
      "agent_spawn",
      "agent_open",
      "agent_wait",
      "agent_result",
      "agent_cancel",
      "agent_close",
      "agent_list",
      "agent_send_input",
      "agent_eval",
      "agent_resume",
      "agent_assign",
      "agent_merge"
    ])
    assert.deepStrictEqual(warnings, [
      "f/delegator.md: unknown field(s) max-steps; ignored",
      `f/delegator.md: tools: unknown tool "Read" (did you mean read_file?); skipped`
    ])
  })

  it("readable problems, all of them at once", () => {
    const reason = (text: string, format: AgentDefinitions.Format = "fibril") => problem("f/x.md", text, format).reason
    assert.strictEqual(reason(`---\nname: x\n---\n`), "missing description")
    assert.strictEqual(reason(`---\ndescription: "  "\n---\n`), "description must not be empty")
    assert.strictEqual(
      reason(`---\ndescription: d\ntools: 3\nmax_steps: 2.5\n---\n`),
      "tools must be a list or a comma-separated string; max_steps must be a positive integer"
    )
    assert.strictEqual(
      reason(`---\ndescription: d\nrole: custom\n---\n`),
      `role "custom" is not one of ${AgentDefinitions.baseRoles.join(", ")} (aliases accepted)`
    )
    assert.strictEqual(reason(`---\ndescription: d\n`), "frontmatter is not closed (expected a --- line after it)")
    assert.strictEqual(reason(`---\n- a list\n---\n`), "frontmatter must be a mapping of keys to values")
    assert.strictEqual(
      reason(`---\ndescription: d\nmodel: *gpt\n---\n`),
      "YAML: Unresolved alias (the anchor must be set before the alias): gpt"
    )
    assert.strictEqual(
      reason(`---\ndescription: a\ndescription: b\n---\n`),
      "YAML: Map keys must be unique at line 3, column 1"
    )
    assert.strictEqual(reason(`---\ndescription: d\n---\n`, "claude"), "missing name")
    assert.strictEqual(
      reason(`---\nname: code reviewer\ndescription: d\n---\n`, "claude"),
      `name "code reviewer" must start with a letter or digit` +
        ` and use only letters, digits, "-", "_" and "." (at most 64)`
    )
  })

  it("body, BOM, CRLF and an empty prompt", () => {
    const crlf = "\uFEFF---\r\ndescription: d\r\nmodel: inherit\r\n---\r\n\r\n  Hello\r\n\r\n"
    const { definition } = ok("f/x.md", crlf, "fibril")
    assert.strictEqual(definition.prompt, "Hello")
    assert.isUndefined(definition.model)
    assert.strictEqual(ok("f/y.md", "---\ndescription: d\n---", "fibril").definition.prompt, "")
  })

  it.effect("fibrilTools names exactly the tools Fibril registers", () =>
    Effect.gen(function*() {
      // Imported lazily so this module's tests do not depend on the whole tool stack loading.
      const [builtin, remember, agents] = yield* Effect.promise(() =>
        Promise.all([
          import("../src/BuiltinTools.ts"),
          import("../src/tools/Remember.ts"),
          import("../src/tools/Agents.ts")
        ])
      )
      // The sub-agent tools' names (`task` included) come from their one list of definitions.
      const registered = [...builtin.names, remember.name, ...agents.names]
      assert.deepStrictEqual([...AgentDefinitions.fibrilTools].sort(), [...registered].sort())
      const mapped = [...Object.values(AgentDefinitions.claudeTools), ...Object.values(AgentDefinitions.opencodeTools)]
      for (const tool of mapped.flat()) assert.include(registered, tool)
    }))
})

// ---------------------------------------------------------------------------
// properties
// ---------------------------------------------------------------------------

/** Frontmatter built from YAML's significant pieces, so the parser's error paths are exercised. */
const yamlPiece = Schema.Literals([
  "name",
  "description",
  "tools",
  "mode",
  "permission",
  "model",
  ":",
  ": ",
  " ",
  "\n",
  "  ",
  "- ",
  "[",
  "]",
  "{",
  "}",
  ",",
  "&a ",
  "*a",
  "'",
  "\"",
  "#",
  "|",
  ">",
  "!!str ",
  "%YAML 1.2",
  "---",
  "...",
  "Read",
  "bash",
  "deny",
  "ask",
  "true",
  "1.5",
  "\t",
  "?",
  "@",
  "`",
  "\\",
  "__proto__",
  "constructor"
])
const yamlish = Arbitrary.array(Arbitrary.schema(Schema.Union([yamlPiece, Schema.String])), { maxLength: 40 })
  .pipe(Arbitrary.map((pieces) => `---\n${pieces.join("")}\n---\nbody`))

describe("AgentDefinitions properties", () => {
  const formats: ReadonlyArray<AgentDefinitions.Format> = ["fibril", "claude", "opencode"]
  const total = (text: string) => {
    for (const format of formats) {
      const parsed = AgentDefinitions.parse("p/agent.md", text, format)
      if (Result.isFailure(parsed)) {
        assert.strictEqual(parsed.failure.path, "p/agent.md")
        assert.isAbove(parsed.failure.reason.length, 0)
      } else {
        const { definition } = parsed.success
        assert.isAbove(definition.description.length, 0)
        for (const tool of [...(definition.allowedTools ?? []), ...definition.deniedTools]) {
          assert.include(AgentDefinitions.fibrilTools, tool)
        }
      }
    }
  }

  it.prop("parse is total on arbitrary text", [Schema.String], ([text]) => total(text))

  it.prop("parse is total on YAML-like frontmatter", [yamlish], ([text]) => total(text), {
    arbitrary: { runs: 1000 }
  })
})
