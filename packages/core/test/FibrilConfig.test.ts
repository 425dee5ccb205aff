import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Schema } from "effect"
import * as path from "node:path"
import * as Toml from "smol-toml"
import * as FibrilConfig from "../src/FibrilConfig.ts"
import * as Trust from "../src/Trust.ts"

/** A temp dir with `project/` (cwd) and `home/`; `write` puts a `.fibril/config.toml` into one of them. */
const sandbox = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const dir = yield* fs.makeTempDirectoryScoped()
  const cwd = path.join(dir, "project")
  const home = path.join(dir, "home")
  const write = (root: string, toml: string) =>
    Effect.gen(function*() {
      yield* fs.makeDirectory(path.join(root, ".fibril"), { recursive: true })
      const file = path.join(root, ".fibril", "config.toml")
      yield* fs.writeFileString(file, toml)
      return file
    })
  const load = (env: Record<string, string> = {}) => FibrilConfig.load({ cwd, home, env })
  return { cwd, home, write, load }
})

/** `{ "agent.max_steps": 0 }` -> `[agent]\nmax_steps = 0\n` */
const tomlOf = (entries: Readonly<Record<string, number | string>>): string => {
  const sections = new Map<string, Array<string>>()
  for (const [key, value] of Object.entries(entries)) {
    const [section = "", name = ""] = key.split(".")
    sections.set(section, [...(sections.get(section) ?? []), `${name} = ${JSON.stringify(value)}`])
  }
  return [...sections].map(([section, lines]) => `[${section}]\n${lines.join("\n")}\n`).join("\n")
}

/** The spec's ranges, written out independently of the implementation's table. */
const ranges: ReadonlyArray<{
  readonly key: string
  readonly get: (s: FibrilConfig.Settings) => number | undefined
  readonly low: readonly [given: number, used: number]
  readonly high?: readonly [given: number, used: number]
  /** Other keys clamped as a consequence of `high`. */
  readonly alsoHigh?: ReadonlyArray<FibrilConfig.Clamped>
}> = [
  { key: "agent.max_steps", get: (s) => s.agent.maxSteps, low: [0, 1], high: [1001, 1000] },
  {
    key: "agent.api_timeout_secs",
    get: (s) => s.agent.apiTimeoutSecs,
    low: [-5, 1],
    high: [1801, 1800],
    alsoHigh: [{ key: "subagents.heartbeat_timeout_secs", given: 300, used: 1830 }]
  },
  { key: "agent.max_retries", get: (s) => s.agent.maxRetries, low: [-1, 0], high: [11, 10] },
  { key: "agent.retry_base_ms", get: (s) => s.agent.retryBaseMs, low: [9, 10], high: [60_001, 60_000] },
  { key: "agent.retry_max_ms", get: (s) => s.agent.retryMaxMs, low: [99, 100], high: [600_001, 600_000] },
  { key: "subagents.max_concurrent", get: (s) => s.subagents.maxConcurrent, low: [0, 1], high: [21, 20] },
  { key: "subagents.max_depth", get: (s) => s.subagents.maxDepth, low: [-1, 0], high: [6, 5] },
  // Below 30 it is also raised to the default api timeout (120) + 30.
  {
    key: "subagents.heartbeat_timeout_secs",
    get: (s) => s.subagents.heartbeatTimeoutSecs,
    low: [29, 150],
    high: [3601, 3600]
  },
  { key: "subagents.max_steps", get: (s) => s.subagents.maxSteps, low: [0, 1], high: [1001, 1000] },
  { key: "subagents.max_tokens", get: (s) => s.subagents.maxTokens, low: [0, 1] },
  { key: "subagents.max_wall_secs", get: (s) => s.subagents.maxWallSecs, low: [0, 1], high: [86_401, 86_400] },
  { key: "subagents.tree_max_tokens", get: (s) => s.subagents.treeMaxTokens, low: [-3, 1] },
  { key: "tools.shell_timeout_secs", get: (s) => s.tools.shellTimeoutSecs, low: [0, 1], high: [3601, 3600] },
  { key: "tools.max_output_chars", get: (s) => s.tools.maxOutputChars, low: [999, 1000], high: [1_000_001, 1_000_000] }
]

const clampCases = ranges.flatMap(({ alsoHigh = [], get, high, key, low }) => [
  { name: `${key} below min`, key, get, given: low[0], used: low[1], also: [] },
  ...(high === undefined ? [] : [{ name: `${key} above max`, key, get, given: high[0], used: high[1], also: alsoHigh }])
])

describe("FibrilConfig", () => {
  it.effect("defaults with no files and an empty env", () =>
    Effect.gen(function*() {
      const { load } = yield* sandbox
      const resolved = yield* load()
      assert.deepStrictEqual(resolved.settings, FibrilConfig.defaults)
      assert.deepStrictEqual(resolved.clamped, [])
      assert.deepStrictEqual(resolved.sources, [])
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("project file overrides user file, env overrides both", () =>
    Effect.gen(function*() {
      const { cwd, home, load, write } = yield* sandbox
      const userFile = yield* write(
        home,
        `model = "user-model"\n[agent]\nmax_steps = 10\nmax_retries = 5\n[tools]\nshell_timeout_secs = 60\n`
      )
      const projectFile = yield* write(cwd, `model = "project-model"\n[agent]\nmax_steps = 20\nretry_base_ms = 500\n`)

      const files = yield* load()
      assert.strictEqual(files.settings.model, "project-model")
      assert.strictEqual(files.settings.agent.maxSteps, 20)
      assert.strictEqual(files.settings.agent.retryBaseMs, 500)
      assert.strictEqual(files.settings.agent.maxRetries, 5)
      assert.strictEqual(files.settings.tools.shellTimeoutSecs, 60)
      assert.strictEqual(files.settings.agent.retryMaxMs, FibrilConfig.defaults.agent.retryMaxMs)
      assert.deepStrictEqual(files.sources, [projectFile, userFile])

      const withEnv = yield* load({
        FIBRIL_MODEL: "env-model",
        FIBRIL_AGENT_MAX_STEPS: "30",
        FIBRIL_AGENT_MAX_RETRIES: "7",
        FIBRIL_AGENT_API_TIMEOUT_SECS: "200",
        FIBRIL_SUBAGENTS_MAX_CONCURRENT: "4"
      })
      assert.strictEqual(withEnv.settings.model, "env-model")
      assert.strictEqual(withEnv.settings.agent.maxSteps, 30)
      assert.strictEqual(withEnv.settings.agent.maxRetries, 7)
      assert.strictEqual(withEnv.settings.agent.apiTimeoutSecs, 200)
      assert.strictEqual(withEnv.settings.subagents.maxConcurrent, 4)
      assert.strictEqual(withEnv.settings.agent.retryBaseMs, 500)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("ignores env vars without the FIBRIL_ prefix", () =>
    Effect.gen(function*() {
      const { load } = yield* sandbox
      const resolved = yield* load({ MODEL: "x", AGENT_MAX_STEPS: "7", fibril_model: "y" })
      assert.deepStrictEqual(resolved.settings, FibrilConfig.defaults)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect.each(clampCases)("clamps $name", ({ also, get, given, key, used }) =>
    Effect.gen(function*() {
      const { cwd, load, write } = yield* sandbox
      yield* write(cwd, tomlOf({ [key]: given }))
      const resolved = yield* load()
      assert.strictEqual(get(resolved.settings), used)
      assert.deepStrictEqual(resolved.clamped, [{ key, given, used }, ...also])
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("in-range values are kept and not recorded", () =>
    Effect.gen(function*() {
      const { cwd, load, write } = yield* sandbox
      yield* write(cwd, tomlOf(Object.fromEntries(ranges.map(({ key, low }) => [key, low[1]]))))
      const resolved = yield* load({
        FIBRIL_SUBAGENTS_HEARTBEAT_TIMEOUT_SECS: "31",
        FIBRIL_AGENT_API_TIMEOUT_SECS: "1"
      })
      assert.deepStrictEqual(resolved.clamped, [])
      assert.strictEqual(resolved.settings.subagents.maxTokens, 1)
      assert.strictEqual(resolved.settings.subagents.heartbeatTimeoutSecs, 31)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("api_timeout_secs 0 means the default 120", () =>
    Effect.gen(function*() {
      const { cwd, load, write } = yield* sandbox
      yield* write(cwd, tomlOf({ "agent.api_timeout_secs": 0 }))
      const resolved = yield* load()
      assert.strictEqual(resolved.settings.agent.apiTimeoutSecs, 120)
      assert.deepStrictEqual(resolved.clamped, [])
      const fromEnv = yield* load({ FIBRIL_AGENT_API_TIMEOUT_SECS: "0" })
      assert.strictEqual(fromEnv.settings.agent.apiTimeoutSecs, 120)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("heartbeat is raised to api_timeout_secs + 30 and recorded", () =>
    Effect.gen(function*() {
      const { cwd, load, write } = yield* sandbox
      yield* write(cwd, tomlOf({ "agent.api_timeout_secs": 600, "subagents.heartbeat_timeout_secs": 300 }))
      const resolved = yield* load()
      assert.strictEqual(resolved.settings.subagents.heartbeatTimeoutSecs, 630)
      assert.deepStrictEqual(resolved.clamped, [{ key: "subagents.heartbeat_timeout_secs", given: 300, used: 630 }])
      // The default heartbeat is raised as well when only the api timeout grows.
      const unset = yield* load({ FIBRIL_AGENT_API_TIMEOUT_SECS: "1800", FIBRIL_SUBAGENTS_HEARTBEAT_TIMEOUT_SECS: "" })
      assert.strictEqual(unset.settings.subagents.heartbeatTimeoutSecs, 1830)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("reads strings, admission, [subagents.models] and permissions.deny", () =>
    Effect.gen(function*() {
      const { cwd, home, load, write } = yield* sandbox
      yield* write(home, `[subagents.models]\nignored = "because the project table wins"\n`)
      yield* write(
        cwd,
        [
          `[subagents]`,
          `admission = "queue"`,
          `default_model = "d"`,
          `worker_model = "w"`,
          `explorer_model = "e"`,
          `awaiter_model = "a"`,
          `review_model = "r"`,
          `custom_model = "c"`,
          `[subagents.models]`,
          `worker = "gpt-worker"`,
          `"code-review" = "gpt-review"`,
          `[permissions]`,
          `deny = ["shell", "write_file"]`
        ].join("\n")
      )
      const { settings } = yield* load()
      assert.strictEqual(settings.subagents.admission, "queue")
      assert.deepStrictEqual(
        [
          settings.subagents.defaultModel,
          settings.subagents.workerModel,
          settings.subagents.explorerModel,
          settings.subagents.awaiterModel,
          settings.subagents.reviewModel,
          settings.subagents.customModel
        ],
        ["d", "w", "e", "a", "r", "c"]
      )
      assert.deepStrictEqual(settings.subagents.models, { worker: "gpt-worker", "code-review": "gpt-review" })
      assert.deepStrictEqual(settings.permissions.deny, ["shell", "write_file"])

      const env = yield* load({
        FIBRIL_PERMISSIONS_DENY: "shell,edit_file",
        FIBRIL_SUBAGENTS_ADMISSION: "reject",
        FIBRIL_SUBAGENTS_MODELS: "explorer=gpt-explorer,worker=gpt-w2"
      })
      assert.deepStrictEqual(env.settings.permissions.deny, ["shell", "edit_file"])
      assert.deepStrictEqual(env.settings.subagents.models, { explorer: "gpt-explorer", worker: "gpt-w2" })
      assert.strictEqual(env.settings.subagents.admission, "reject")
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("a non-integer fails with ConfigInvalid naming the key", () =>
    Effect.gen(function*() {
      const { cwd, load, write } = yield* sandbox
      const error = yield* Effect.flip(load({ FIBRIL_AGENT_MAX_STEPS: "abc" }))
      assert.strictEqual(error._tag, "ConfigInvalid")
      if (error._tag !== "ConfigInvalid") return
      assert.strictEqual(error.key, "agent.max_steps")
      assert.include(error.message, "agent.max_steps")
      assert.include(error.message, "FIBRIL_AGENT_MAX_STEPS")
      assert.include(error.message, `got "abc"`)
      assert.include(error.message, "an integer")
      assert.include(error.message, "1..1000")

      yield* write(cwd, tomlOf({ "tools.shell_timeout_secs": 1.5 }))
      const fromFile = yield* Effect.flip(load())
      assert.strictEqual(fromFile._tag === "ConfigInvalid" ? fromFile.key : fromFile._tag, "tools.shell_timeout_secs")
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("an unknown admission fails with ConfigInvalid listing the accepted values", () =>
    Effect.gen(function*() {
      const { cwd, load, write } = yield* sandbox
      yield* write(cwd, tomlOf({ "subagents.admission": "wait" }))
      const error = yield* Effect.flip(load())
      assert.strictEqual(error._tag, "ConfigInvalid")
      assert.include(error.message, "subagents.admission")
      assert.include(error.message, `"reject"`)
      assert.include(error.message, `"queue"`)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("malformed TOML fails with ConfigFileError naming the file and position", () =>
    Effect.gen(function*() {
      const { home, load, write } = yield* sandbox
      const file = yield* write(home, `[agent\nmax_steps = 3\n`)
      const error = yield* Effect.flip(load())
      assert.strictEqual(error._tag, "ConfigFileError")
      if (error._tag !== "ConfigFileError") return
      assert.strictEqual(error.path, file)
      assert.include(error.message, file)
      assert.include(error.message, "line 1, column")
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("layer provides the loaded FibrilConfig service", () =>
    Effect.gen(function*() {
      const { cwd, home, write } = yield* sandbox
      const file = yield* write(cwd, tomlOf({ "subagents.max_depth": 9 }))
      const resolved = yield* Effect.provide(
        Effect.gen(function*() {
          return yield* FibrilConfig.FibrilConfig
        }),
        FibrilConfig.layer({ cwd, home, env: {} })
      )
      assert.strictEqual(resolved.settings.subagents.maxDepth, 5)
      assert.deepStrictEqual(resolved.clamped, [{ key: "subagents.max_depth", given: 9, used: 5 }])
      assert.deepStrictEqual(resolved.sources, [file])
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("layerSettings merges overrides into the defaults section by section", () =>
    Effect.gen(function*() {
      const { clamped, settings, sources } = yield* FibrilConfig.FibrilConfig
      assert.strictEqual(settings.model, "m")
      assert.deepStrictEqual(settings.agent, { ...FibrilConfig.defaults.agent, maxSteps: 5000 })
      assert.deepStrictEqual(settings.subagents, {
        ...FibrilConfig.defaults.subagents,
        admission: "queue",
        maxTokens: 10
      })
      assert.deepStrictEqual(settings.tools, FibrilConfig.defaults.tools)
      assert.deepStrictEqual([clamped, sources], [[], []])
    }).pipe(
      Effect.provide(
        FibrilConfig.layerSettings({
          model: "m",
          agent: { maxSteps: 5000 },
          subagents: { admission: "queue", maxTokens: 10 }
        })
      )
    ))

  it.effect.prop(
    "subagents.max_concurrent is always within 1..20 and kept when in range",
    [Schema.Int],
    ([given]) =>
      Effect.gen(function*() {
        const { load } = yield* sandbox
        // Via the env string, so -0 arrives as 0.
        const input = String(given)
        const { clamped, settings } = yield* load({ FIBRIL_SUBAGENTS_MAX_CONCURRENT: input })
        const used = settings.subagents.maxConcurrent
        assert.isTrue(used >= 1 && used <= 20)
        if (given >= 1 && given <= 20) {
          assert.strictEqual(used, given)
          assert.deepStrictEqual(clamped, [])
        } else {
          assert.deepStrictEqual(clamped, [{ key: "subagents.max_concurrent", given: Number(input), used }])
        }
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer))
  )
})

describe("FibrilConfig says what is wrong", () => {
  it.effect("unknown tables and keys fail with each one's file, line and nearest valid name", () =>
    Effect.gen(function*() {
      const { cwd, home, load, write } = yield* sandbox
      const projectFile = yield* write(
        cwd,
        [
          `modle = "gpt"`,
          `[permisions]`,
          `deny = ["shell"]`,
          `[agent]`,
          `max_step = 3`,
          `max_concurrent = 2`,
          `[subagents.models]`,
          `"any-role" = "free-form keys are fine here"`,
          `[wibble]`,
          `x = 1`
        ].join("\n")
      )
      const userFile = yield* write(home, `[tools]\nshell_timeout = 5\n`)
      const error = yield* Effect.flip(load())
      assert.strictEqual(error._tag, "ConfigUnknownKeys")
      if (error._tag !== "ConfigUnknownKeys") return
      assert.deepStrictEqual(error.problems, [
        { file: projectFile, line: 1, key: "modle", kind: "key", suggestion: "model" },
        { file: projectFile, line: 2, key: "permisions", kind: "table", suggestion: "[permissions]" },
        { file: projectFile, line: 5, key: "agent.max_step", kind: "key", suggestion: "agent.max_steps" },
        {
          file: projectFile,
          line: 6,
          key: "agent.max_concurrent",
          kind: "key",
          suggestion: "subagents.max_concurrent"
        },
        { file: projectFile, line: 9, key: "wibble", kind: "table" },
        { file: userFile, line: 2, key: "tools.shell_timeout", kind: "key", suggestion: "tools.shell_timeout_secs" }
      ])
      assert.include(error.message, `${projectFile}, line 2: unknown table [permisions]; did you mean [permissions]?`)
      assert.include(error.message, "--no-strict")
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("not strict (the option, strict = false, FIBRIL_STRICT=false): the same problems are warnings", () =>
    Effect.gen(function*() {
      const { cwd, home, load, write } = yield* sandbox
      const file = yield* write(cwd, `[permisions]\ndeny = ["shell"]\n[agent]\nmax_steps = 7\n`)
      const byOption = yield* FibrilConfig.load({ cwd, home, env: {}, strict: false })
      assert.deepStrictEqual(byOption.warnings, [
        `${file}, line 1: unknown table [permisions]; did you mean [permissions]?`
      ])
      assert.strictEqual(byOption.settings.agent.maxSteps, 7)
      // The misspelt table is not read: nothing is denied.
      assert.deepStrictEqual(byOption.settings.permissions.deny, [])
      const byEnv = yield* load({ FIBRIL_STRICT: "false" })
      assert.strictEqual(byEnv.warnings.length, 1)
      yield* write(cwd, `strict = false\n[permisions]\ndeny = ["shell"]\n`)
      const byKey = yield* load()
      assert.strictEqual(byKey.warnings.length, 1)
      yield* write(cwd, `strict = 3\n`)
      const bad = yield* Effect.flip(load())
      assert.strictEqual(bad._tag, "ConfigInvalid")
      assert.include(bad.message, `strict (${file}, line 1)`)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("a wrongly typed value names the file, the line and the key, not an unset variable", () =>
    Effect.gen(function*() {
      const { cwd, home, load, write } = yield* sandbox
      yield* write(cwd, `model = "m"\n[agent]\nmax_retries = 2\n`)
      const userFile = yield* write(home, `[agent]\n\n# the budget\nmax_steps = "ten"\n`)
      const error = yield* Effect.flip(load())
      assert.strictEqual(error._tag, "ConfigInvalid")
      if (error._tag !== "ConfigInvalid") return
      assert.strictEqual(error.source, `${userFile}, line 4`)
      assert.include(error.message, `Invalid config value for agent.max_steps (${userFile}, line 4): got "ten"`)
      assert.notInclude(error.message, "FIBRIL_AGENT_MAX_STEPS")
      // From the environment, the variable is named.
      const fromEnv = yield* Effect.flip(load({ FIBRIL_AGENT_MAX_STEPS: "lots" }))
      assert.include(fromEnv.message, "(environment variable FIBRIL_AGENT_MAX_STEPS)")
      // A dotted key at the top level is found too.
      yield* write(home, `tools.shell_timeout_secs = true\n`)
      const dotted = yield* Effect.flip(load())
      assert.include(dotted.message, `tools.shell_timeout_secs (${userFile}, line 1)`)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("a denial of an unknown tool is an error listing the known tools, with Claude Code names mapped", () =>
    Effect.gen(function*() {
      const { cwd, load, write } = yield* sandbox
      const file = yield* write(cwd, `[permissions]\ndeny = ["Bash", "write-file", "teleport", "grep"]\n`)
      const error = yield* Effect.flip(load())
      assert.strictEqual(error._tag, "ConfigUnknownTool")
      if (error._tag !== "ConfigUnknownTool") return
      assert.deepStrictEqual(error.unknown, [
        { name: "Bash", suggestion: "shell" },
        { name: "write-file", suggestion: "write_file" },
        { name: "teleport" }
      ])
      assert.strictEqual(error.source, `${file}, line 2`)
      assert.include(error.message, `"Bash" (did you mean "shell"?)`)
      assert.include(error.message, "Known tools: read_file, list_dir, grep")
      // Not downgraded by --no-strict: a denial that matches nothing would deny nothing.
      const lax = yield* Effect.flip(load({ FIBRIL_STRICT: "false" }))
      assert.strictEqual(lax._tag, "ConfigUnknownTool")
      const env = yield* Effect.flip(load({ FIBRIL_PERMISSIONS_DENY: "Bash" }))
      assert.include(env.message, "permissions.deny (environment variable FIBRIL_PERMISSIONS_DENY)")
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("[permissions] ask takes tool names and postures; an unknown entry is an error naming both lists", () =>
    Effect.gen(function*() {
      const { cwd, load, write } = yield* sandbox
      yield* write(
        cwd,
        `[permissions]\nask = ["shell", "write"]\nask_timeout_secs = 90\nfan_out_max_agents = 8\n` +
          `fan_out_max_usd = 0.5\n[permissions.usd_per_mtok]\nscripted = 3\n`
      )
      const { settings } = yield* load()
      assert.deepStrictEqual(settings.permissions.ask, ["shell", "write"])
      assert.strictEqual(settings.permissions.askTimeoutSecs, 90)
      assert.strictEqual(settings.permissions.fanOutMaxAgents, 8)
      assert.strictEqual(settings.permissions.fanOutMaxUsd, 0.5)
      assert.deepStrictEqual(settings.permissions.usdPerMtok, { scripted: 3 })
      const error = yield* Effect.flip(load({ FIBRIL_PERMISSIONS_ASK: "Bash,writes" }))
      assert.strictEqual(error._tag, "ConfigUnknownTool")
      assert.include(error.message, `permissions.ask (environment variable FIBRIL_PERMISSIONS_ASK)`)
      assert.include(error.message, `"Bash" (did you mean "shell"?)`)
      assert.include(error.message, `"writes" (did you mean "write`)
      assert.include(error.message, "asks nothing. Known tools and postures: read_file")
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("[permissions] ask and deny take tool(pattern) entries; the tool a pattern names must exist", () =>
    Effect.gen(function*() {
      const { cwd, load, write } = yield* sandbox
      yield* write(cwd, `[permissions]\nask = ["shell(git push *)"]\ndeny = ["write_file(.github/**)"]\n`)
      const { settings } = yield* load()
      assert.deepStrictEqual(settings.permissions.ask, ["shell(git push *)"])
      assert.deepStrictEqual(settings.permissions.deny, ["write_file(.github/**)"])
      const asked = yield* Effect.flip(load({ FIBRIL_PERMISSIONS_ASK: "shel(git push *)" }))
      assert.strictEqual(asked._tag, "ConfigUnknownTool")
      assert.include(asked.message, `"shel" (did you mean "shell"?)`)
      const denied = yield* Effect.flip(load({ FIBRIL_PERMISSIONS_DENY: "Write(src/**)" }))
      assert.include(denied.message, `"Write" (did you mean "write_file"?)`)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("every setting can be written in a file: the key registry knows each field of Settings", () =>
    Effect.gen(function*() {
      const { cwd, load, write } = yield* sandbox
      const snake = (key: string) => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)
      // The defaults as a TOML document, unset values given a value of their type.
      const asToml = (value: unknown, key: string): unknown => {
        if (value === undefined) {
          return key.endsWith("Model") || key === "model" ? "m" : key === "url" ? "postgres://localhost/fibril" : 5
        }
        if (typeof value !== "object" || value === null || Array.isArray(value)) return value
        const entries = Object.entries(value).map(([k, v]) => [snake(k), asToml(v, k)] as const)
        return Object.fromEntries(key === "roles" ? [["explore", {}]] : entries)
      }
      const file = yield* write(cwd, Toml.stringify(asToml(FibrilConfig.defaults, "") as Record<string, unknown>))
      const resolved = yield* load().pipe(Effect.catchTag("ConfigUnknownKeys", (error) => Effect.die(error.message)))
      assert.deepStrictEqual(resolved.warnings, [])
      assert.deepStrictEqual(resolved.sources, [file])
    }).pipe(Effect.provide(NodeServices.layer)))

  it("keyLines finds tables, keys, dotted and quoted keys", () => {
    const lines = FibrilConfig.keyLines(
      [
        `# comment`,
        `model = "m"`,
        `agent.max_steps = 3`,
        `[ subagents . models ]  # models`,
        `"code-review" = "x"`,
        `[[servers]]`,
        `name = 'a'`
      ].join("\n")
    )
    assert.strictEqual(lines.get("model"), 2)
    assert.strictEqual(lines.get("agent"), 3)
    assert.strictEqual(lines.get("agent.max_steps"), 3)
    assert.strictEqual(lines.get("subagents.models"), 4)
    assert.strictEqual(lines.get("subagents.models.code-review"), 5)
    assert.strictEqual(lines.get("servers.name"), 7)
  })
})

describe("FibrilConfig, exactly (tests from its mutation run)", () => {
  const withFile = (toml: string, env: Record<string, string> = {}, options: { readonly trusted?: boolean } = {}) =>
    Effect.gen(function*() {
      const { cwd, home, load, write } = yield* sandbox
      const file = yield* write(cwd, toml)
      if (options.trusted === true) yield* Trust.trust({ workspace: cwd, home, now: new Date(0) })
      return { file, result: yield* Effect.result(load(env)) }
    })
  const failure = (toml: string, env: Record<string, string> = {}) =>
    Effect.gen(function*() {
      const { file, result } = yield* withFile(toml, env)
      assert.isTrue(result._tag === "Failure", `expected ${toml} to fail`)
      return { file, error: (result as { readonly failure: FibrilConfig.LoadError }).failure }
    })
  const problemsOf = (toml: string) =>
    Effect.gen(function*() {
      const { error, file } = yield* failure(toml)
      assert.strictEqual(error._tag, "ConfigUnknownKeys")
      return {
        file,
        problems: error._tag === "ConfigUnknownKeys" ? error.problems : [],
        message: error.message
      }
    })

  it("describeUnknown words a key without a line, with and without a suggestion", () => {
    assert.strictEqual(
      FibrilConfig.describeUnknown({ file: "/c.toml", key: "agent.max_step", kind: "key" }),
      "/c.toml: unknown key agent.max_step"
    )
    assert.strictEqual(
      FibrilConfig.describeUnknown({ file: "/c.toml", line: 3, key: "tols", kind: "table", suggestion: "[tools]" }),
      "/c.toml, line 3: unknown table [tols]; did you mean [tools]?"
    )
  })

  it.effect("the unknown-keys error lists each problem on its own line; a key in an inline table has no line", () =>
    Effect.gen(function*() {
      const { file, message, problems } = yield* problemsOf(`agent = { max_step = 3 }\nwibble = 1\n`)
      assert.deepStrictEqual(problems, [
        { file, key: "agent.max_step", kind: "key", suggestion: "agent.max_steps" },
        { file, line: 2, key: "wibble", kind: "key" }
      ])
      assert.strictEqual(
        message,
        "Unknown configuration (fix the names, or use --no-strict or strict = false to only warn):\n" +
          `  ${file}: unknown key agent.max_step; did you mean agent.max_steps?\n` +
          `  ${file}, line 2: unknown key wibble`
      )
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("unknown tables under known ones, and keys in per-role tables, with the right suggestions", () =>
    Effect.gen(function*() {
      const { file, problems } = yield* problemsOf(
        [
          `[agent.extra]`,
          `x = 1`,
          `[sandbox.roles]`,
          `x = 1`,
          `[deny]`,
          `x = 1`,
          `[subagents.model]`,
          `x = 1`,
          `[agent]`,
          `tools = 1`,
          `[sandbox.roles.verifier]`,
          `mode = "off"`,
          `modes = "off"`,
          `[sandbox.roles.verifier.deeper]`,
          `y = 2`
        ].join("\n")
      )
      assert.deepStrictEqual([...problems].sort((a, b) => (a.line ?? 0) - (b.line ?? 0)), [
        // A table below a known one that is not in the registry (not read as [agent]).
        { file, line: 1, key: "agent.extra", kind: "table" },
        // [sandbox.roles] holds only role tables: the `*` of the registry is not a name to suggest.
        { file, line: 4, key: "sandbox.roles.x", kind: "key" },
        // A table is not looked for as a key elsewhere (permissions.deny is a key, not a table).
        { file, line: 5, key: "deny", kind: "table" },
        { file, line: 7, key: "subagents.model", kind: "table", suggestion: "[subagents.models]" },
        // Only [agent]'s own tables are suggested there, and `tools` is no key anywhere.
        { file, line: 10, key: "agent.tools", kind: "key" },
        { file, line: 13, key: "sandbox.roles.verifier.modes", kind: "key", suggestion: "sandbox.roles.verifier.mode" },
        { file, line: 14, key: "sandbox.roles.verifier.deeper", kind: "table" }
      ])
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("a denial of unknown tools: one, or several, worded exactly", () =>
    Effect.gen(function*() {
      const cwd = "/nonexistent-fibril-test"
      const load = (deny: string) =>
        Effect.flip(
          FibrilConfig.load({ cwd, home: cwd, env: { FIBRIL_PERMISSIONS_DENY: deny }, knownTools: ["a", "b"] })
        )
      const one = yield* load("teleport")
      assert.strictEqual(
        one.message,
        `permissions.deny (environment variable FIBRIL_PERMISSIONS_DENY) names an unknown tool: "teleport"; ` +
          "a denial that matches no tool denies nothing. Known tools: a, b"
      )
      const two = yield* load("teleport,aa")
      assert.strictEqual(
        two.message,
        `permissions.deny (environment variable FIBRIL_PERMISSIONS_DENY) names unknown tools: "teleport", ` +
          `"aa" (did you mean "a"?); a denial that matches no tool denies nothing. Known tools: a, b`
      )
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("a wrongly typed value: the problem is the first line of what was expected, after the value given", () =>
    Effect.gen(function*() {
      const { error, file } = yield* failure(`[subagents]\nmax_tokens = "lots"\n`)
      assert.deepStrictEqual({ ...error } as Record<string, unknown>, {
        _tag: "ConfigInvalid",
        key: "subagents.max_tokens",
        envVar: "FIBRIL_SUBAGENTS_MAX_TOKENS",
        source: `${file}, line 2`,
        problem: `got "lots" (Expected a string representing a finite number)`,
        accepted: "an integer >= 1 (smaller values are clamped)"
      })
      // In an inline table the file is named without a line.
      const inline = yield* failure(`agent = { max_steps = "x" }\n`)
      assert.strictEqual(inline.error._tag === "ConfigInvalid" ? inline.error.source : "", inline.file)
      // An empty variable is unset: the file that holds the value is named.
      const empty = yield* failure(`[agent]\nmax_steps = "x"\n`, { FIBRIL_AGENT_MAX_STEPS: "" })
      assert.strictEqual(empty.error._tag === "ConfigInvalid" ? empty.error.source : "", `${empty.file}, line 2`)
      // A role table that is not a table of the right keys: no single value to quote.
      const role = yield* failure(`[sandbox.roles.v]\nmode = "bad"\n`)
      assert.strictEqual(role.error._tag, "ConfigInvalid")
      if (role.error._tag !== "ConfigInvalid") return
      assert.strictEqual(role.error.key, "sandbox.roles")
      assert.strictEqual(role.error.problem, `Expected "read-only" | "workspace-write" | "off"`)
      assert.strictEqual(
        role.error.accepted,
        `tables [sandbox.roles.<role>] with mode ("read-only" | "workspace-write" | "off"), network (true or false) and writable_paths (an array of paths)`
      )
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("each key names what it accepts", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<readonly [string, string, string]> = [
        [`[subagents]\nadmission = "wait"`, "subagents.admission", `"reject" | "queue"`],
        [
          `[subagents.models]\nworker = { a = 1 }`,
          "subagents.models",
          `a table of role name = model id strings ("role=model,role=model" in the environment)`
        ],
        [
          `[permissions]\ndeny = [1, [2]]`,
          "permissions.deny",
          "an array of tool names (comma-separated in the environment)"
        ],
        [`[sandbox]\nmode = "x"`, "sandbox.mode", `"read-only" | "workspace-write" | "off"`],
        [`[sandbox]\nnetwork = "maybe"`, "sandbox.network", "true or false"],
        [
          `[sandbox]\nwritable_paths = [[1]]`,
          "sandbox.writable_paths",
          "an array of paths, absolute or relative to the workspace (comma-separated in the environment)"
        ],
        [`strict = 3`, "strict", "true or false"]
      ]
      for (const [toml, key, accepted] of cases) {
        const { error } = yield* failure(toml)
        assert.strictEqual(error._tag, "ConfigInvalid", toml)
        if (error._tag !== "ConfigInvalid") continue
        assert.deepStrictEqual([error.key, error.envVar, error.accepted], [
          key,
          `FIBRIL_${key.replaceAll(".", "_").toUpperCase()}`,
          accepted
        ], toml)
      }
      const { error } = yield* failure(`strict = 3`)
      assert.strictEqual(error._tag === "ConfigInvalid" ? error.problem : "", "not true or false")
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("[sandbox] and its role tables are read; role names are lower-cased", () =>
    Effect.gen(function*() {
      const { result } = yield* withFile(
        // The file widens the sandbox: read as written in a trusted workspace (Trust.test.ts).
        [
          `[sandbox]`,
          `mode = "off"`,
          `network = true`,
          `writable_paths = ["/a", "b"]`,
          `bwrap_path = "/bin/bw"`,
          `[sandbox.roles.Verifier]`,
          `mode = "read-only"`,
          `[sandbox.roles.x]`,
          `network = true`,
          `writable_paths = ["c"]`
        ].join("\n"),
        {},
        { trusted: true }
      )
      assert.isTrue(result._tag === "Success")
      if (result._tag !== "Success") return
      assert.deepStrictEqual(result.success.settings.sandbox, {
        mode: "off",
        network: true,
        writablePaths: ["/a", "b"],
        bwrapPath: "/bin/bw",
        tmpSizeMb: 256,
        maxProcesses: 256,
        memoryMb: 4096,
        roles: {
          verifier: { mode: "read-only", network: undefined, writablePaths: undefined },
          x: { mode: undefined, network: true, writablePaths: ["c"] }
        }
      })
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("a file value of the wrong TOML type is an error naming file, line and key, never a silent default", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<readonly [string, string, string, string]> = [
        [`model = 42`, "model", "line 1", `got 42 (a number)`],
        [
          `[agent]\nmax_steps = [1]`,
          "agent.max_steps",
          "line 2",
          `got [1] (an array with an entry that is not a string)`
        ],
        [`[agent]\nmax_retries = { a = 1 }`, "agent.max_retries", "line 2", `got {"a":1} (a table`],
        [`[sandbox]\nbwrap_path = 3`, "sandbox.bwrap_path", "line 2", `got 3 (a number)`],
        [`[sandbox]\nnetwork = [true]`, "sandbox.network", "line 2", `got [true] (an array`],
        [`[cluster]\nurl = true`, "cluster.url", "line 2", `got true (a boolean)`],
        [`[subagents.models]\nworker = 1`, "subagents.models", "line 1", `got {"worker":1} (a table with an entry`],
        [`[permissions]\ndeny = [1]`, "permissions.deny", "line 2", `got [1] (an array with an entry`],
        [`[subagents]\nadmission = 2025-01-01`, "subagents.admission", "line 2", `got 2025-01-01 (a date)`]
      ]
      for (const [toml, key, line, problem] of cases) {
        const { error, file } = yield* failure(toml)
        assert.strictEqual(error._tag, "ConfigInvalid", toml)
        if (error._tag !== "ConfigInvalid") continue
        assert.strictEqual(error.key, key, toml)
        assert.strictEqual(error.source, `${file}, ${line}`, toml)
        assert.include(error.problem, problem, toml)
      }
      // What the environment may say as a string, a file may too: Config reads it.
      const lenient = yield* withFile(
        `strict = "yes"\n[agent]\nmax_steps = "12"\n[permissions]\ndeny = "shell"\n[sandbox]\nnetwork = "false"\n`
      )
      assert.isTrue(lenient.result._tag === "Success")
      if (lenient.result._tag !== "Success") return
      assert.strictEqual(lenient.result.success.settings.agent.maxSteps, 12)
      assert.deepStrictEqual(lenient.result.success.settings.permissions.deny, ["shell"])
      assert.strictEqual(lenient.result.success.settings.sandbox.network, false)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("an environment variable for one role's sandbox key changes that key only", () =>
    Effect.gen(function*() {
      const { cwd, home, load, write } = yield* sandbox
      yield* write(
        cwd,
        [
          `[sandbox.roles.explore]`,
          `network = true`,
          `[sandbox.roles.verifier]`,
          `mode = "read-only"`,
          `writable_paths = ["node_modules/.vite"]`
        ].join("\n")
      )
      yield* write(
        home,
        `[sandbox.roles.verifier]\nnetwork = true\nmode = "off"\n[sandbox.roles.review]\nmode = "off"\n`
      )
      // The project's writable_paths widen the verifier's sandbox: read as written once trusted.
      yield* Trust.trust({ workspace: cwd, home, now: new Date(0) })
      const resolved = yield* load({ FIBRIL_SANDBOX_ROLES_VERIFIER_MODE: "workspace-write" })
      assert.deepStrictEqual(resolved.settings.sandbox.roles, {
        // The project's table over the user's, key by key; the variable over both.
        verifier: { mode: "workspace-write", network: true, writablePaths: ["node_modules/.vite"] },
        explore: { mode: undefined, network: true, writablePaths: undefined },
        review: { mode: "off", network: undefined, writablePaths: undefined }
      })
      const bad = yield* Effect.flip(load({ FIBRIL_SANDBOX_ROLES_VERIFIER_MODE: "wide-open" }))
      assert.strictEqual(bad._tag, "ConfigInvalid")
      assert.include(bad.message, "sandbox.roles")
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("a config path that cannot be read (a directory) is a ConfigFileError naming it", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const { cwd, load } = yield* sandbox
      const file = path.join(cwd, ".fibril", "config.toml")
      yield* fs.makeDirectory(file, { recursive: true })
      const error = yield* Effect.flip(load())
      assert.strictEqual(error._tag, "ConfigFileError")
      if (error._tag !== "ConfigFileError") return
      assert.strictEqual(error.path, file)
      assert.match(error.reason, /\S/)
    }).pipe(Effect.provide(NodeServices.layer)))

  it.effect("when cwd is home, the one file is read once", () =>
    Effect.gen(function*() {
      const { cwd, write } = yield* sandbox
      const file = yield* write(cwd, `model = "m"\n`)
      const resolved = yield* FibrilConfig.load({ cwd, home: cwd, env: {} })
      assert.deepStrictEqual(resolved.sources, [file])
      assert.strictEqual(resolved.settings.model, "m")
    }).pipe(Effect.provide(NodeServices.layer)))

  it("fromSettings merges every section and has no warnings", () => {
    const resolved = FibrilConfig.fromSettings({
      permissions: { deny: ["shell"] },
      sandbox: { mode: "off" },
      tools: { maxOutputChars: 5000 }
    })
    assert.deepStrictEqual(resolved.settings.permissions, { ...FibrilConfig.defaults.permissions, deny: ["shell"] })
    assert.deepStrictEqual(resolved.settings.sandbox, { ...FibrilConfig.defaults.sandbox, mode: "off" })
    assert.deepStrictEqual(resolved.settings.tools, { ...FibrilConfig.defaults.tools, maxOutputChars: 5000 })
    assert.deepStrictEqual(resolved.warnings, [])
  })

  // HOME is pointed at an empty dir so a developer's own ~/.fibril/config.toml cannot interfere
  // (where the runner uses worker threads, os.homedir() may still see the real one).
  it.effect("layerConfig reads the process's environment", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const home = yield* fs.makeTempDirectoryScoped()
      const saved = { home: process.env["HOME"], model: process.env["FIBRIL_MODEL"] }
      const restore = (key: string, value: string | undefined) => {
        if (value === undefined) delete process.env[key]
        else process.env[key] = value
      }
      process.env["HOME"] = home
      process.env["FIBRIL_MODEL"] = "from-the-process"
      const resolved = yield* Effect.provide(
        Effect.gen(function*() {
          return yield* FibrilConfig.FibrilConfig
        }),
        FibrilConfig.layerConfig
      ).pipe(Effect.ensuring(Effect.sync(() => {
        restore("HOME", saved.home)
        restore("FIBRIL_MODEL", saved.model)
      })))
      assert.strictEqual(resolved.settings.model, "from-the-process")
    }).pipe(Effect.provide(NodeServices.layer)))

  it("keyLines: quoted keys with escapes, literal keys, repeated tables and keys keep their first line", () => {
    const lines = FibrilConfig.keyLines(
      [
        `"say \\"hi\\"" = 1`,
        `'lit.eral' = 2`,
        `[[servers]]`,
        `name = "a"`,
        `[[servers]]`,
        `name = "b"`,
        `[subagents.models]`,
        `worker = "w"`
      ].join("\n")
    )
    assert.strictEqual(lines.get(`say "hi"`), 1)
    assert.strictEqual(lines.get("lit.eral"), 2)
    assert.strictEqual(lines.get("servers"), 3)
    assert.strictEqual(lines.get("servers.name"), 4)
    assert.strictEqual(lines.get("subagents.models.worker"), 8)
    // A key line adds paths below its table, not the table's own parents.
    assert.isFalse(lines.has("subagents"))
    assert.isFalse(lines.has(""))
  })
})
