import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Schema } from "effect"
import * as path from "node:path"
import * as Toml from "smol-toml"
import * as FibrilConfig from "../src/FibrilConfig.ts"

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

  it.effect("every setting can be written in a file: the key registry knows each field of Settings", () =>
    Effect.gen(function*() {
      const { cwd, load, write } = yield* sandbox
      const snake = (key: string) => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)
      // The defaults as a TOML document, unset values given a value of their type.
      const asToml = (value: unknown, key: string): unknown => {
        if (value === undefined) return key.endsWith("Model") || key === "model" ? "m" : 5
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
