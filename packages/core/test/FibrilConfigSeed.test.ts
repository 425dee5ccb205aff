// A DeepSeek TUI / CodeWhale config file loads as the seed documents it: its `[subagents]`
// blocks verbatim (fixtures/seed), each value read as the Fibril key it means and shown with
// where it came from.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem } from "effect"
import { readFileSync } from "node:fs"
import * as path from "node:path"
import * as FibrilConfig from "../src/FibrilConfig.ts"

const seed = (name: string) => readFileSync(path.join(import.meta.dirname, "fixtures", "seed", name), "utf8")

/** Loads `toml` as a project's `.fibril/config.toml`; returns the result and the file's path. */
const loadProject = (toml: string, env: Record<string, string> = {}) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const cwd = yield* fs.makeTempDirectoryScoped()
    const file = path.join(cwd, ".fibril", "config.toml")
    yield* fs.makeDirectory(path.dirname(file))
    yield* fs.writeFileString(file, toml)
    const resolved = yield* FibrilConfig.load({ cwd, home: path.join(cwd, "no-home"), env })
    return { resolved, file }
  })

describe("the seed's [subagents] blocks, verbatim", () => {
  it.effect("the per-role models block: every key read, each value's source its file and line", () =>
    Effect.gen(function*() {
      const { resolved, file } = yield* loadProject(seed("models.toml"))
      const s = resolved.settings.subagents
      assert.deepStrictEqual(
        [s.defaultModel, s.workerModel, s.explorerModel, s.awaiterModel, s.reviewModel, s.customModel],
        [
          "deepseek-v4-flash",
          "deepseek-v4-pro",
          "deepseek-v4-flash",
          "deepseek-v4-flash",
          "deepseek-v4-pro",
          "deepseek-v4-pro"
        ]
      )
      assert.deepStrictEqual(s.models, { implementation: "deepseek-v4-pro" })
      assert.deepStrictEqual(resolved.warnings, [])
      assert.deepStrictEqual(resolved.origins, {
        "subagents.default_model": `${file}, line 2`,
        "subagents.worker_model": `${file}, line 3`,
        "subagents.explorer_model": `${file}, line 4`,
        "subagents.awaiter_model": `${file}, line 5`,
        "subagents.review_model": `${file}, line 6`,
        "subagents.custom_model": `${file}, line 7`,
        "subagents.models.implementation": `${file}, line 11`
      })
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.effect("[subagents] api_timeout_secs = 900 is agent.api_timeout_secs, shown as written", () =>
    Effect.gen(function*() {
      const { resolved, file } = yield* loadProject(seed("api-timeout.toml"))
      assert.strictEqual(resolved.settings.agent.apiTimeoutSecs, 900)
      // The heartbeat keeps 30 s above the model call it waits on, as the seed's does.
      assert.strictEqual(resolved.settings.subagents.heartbeatTimeoutSecs, 930)
      assert.deepStrictEqual(resolved.clamped, [{ key: "subagents.heartbeat_timeout_secs", given: 300, used: 930 }])
      assert.deepStrictEqual(resolved.warnings, [])
      assert.deepStrictEqual(resolved.origins, {
        "agent.api_timeout_secs": `subagents.api_timeout_secs in ${file}, line 2 (alias of agent.api_timeout_secs)`
      })
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.effect("the heartbeat block", () =>
    Effect.gen(function*() {
      const { resolved, file } = yield* loadProject(seed("heartbeat.toml"))
      assert.strictEqual(resolved.settings.subagents.heartbeatTimeoutSecs, 300)
      assert.deepStrictEqual(resolved.origins, { "subagents.heartbeat_timeout_secs": `${file}, line 2` })
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.effect("CodeWhale 0.9's Fleet role names (scout_model, planner_model, reviewer_model)", () =>
    Effect.gen(function*() {
      const { resolved, file } = yield* loadProject(seed("codewhale-0.9-models.toml"))
      const s = resolved.settings.subagents
      assert.deepStrictEqual(
        [s.defaultModel, s.workerModel, s.explorerModel, s.awaiterModel, s.reviewModel, s.customModel],
        [
          "deepseek-v4-flash",
          "deepseek-v4-pro",
          "deepseek-v4-flash",
          "deepseek-v4-flash",
          "deepseek-v4-pro",
          "deepseek-v4-pro"
        ]
      )
      assert.deepStrictEqual(s.models, { builder: "deepseek-v4-pro" })
      assert.strictEqual(
        resolved.origins["subagents.explorer_model"],
        `subagents.scout_model in ${file}, line 4 (alias of subagents.explorer_model)`
      )
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.effect("all of them in one file, with the seed's top-level max_subagents and budgets", () =>
    Effect.gen(function*() {
      const models = seed("models.toml").split("\n")
      const toml = [
        "max_subagents = 4",
        ...models.slice(0, 7), // [subagents] and its *_model keys
        "api_timeout_secs = 900",
        "heartbeat_timeout_secs = 1200",
        "default_max_steps = 120",
        "default_wall_time_secs = 1800",
        "token_budget = 100000",
        "",
        ...models.slice(8) // [subagents.models]
      ].join("\n")
      const { resolved, file } = yield* loadProject(toml)
      const { agent, subagents } = resolved.settings
      assert.deepStrictEqual(resolved.warnings, [])
      assert.strictEqual(subagents.maxConcurrent, 4)
      assert.strictEqual(agent.apiTimeoutSecs, 900)
      assert.strictEqual(subagents.heartbeatTimeoutSecs, 1200)
      assert.deepStrictEqual([subagents.maxSteps, subagents.maxWallSecs, subagents.treeMaxTokens], [120, 1800, 100_000])
      assert.strictEqual(
        resolved.origins["subagents.max_concurrent"],
        `max_subagents in ${file}, line 1 (alias of subagents.max_concurrent)`
      )
      assert.strictEqual(
        resolved.origins["subagents.tree_max_tokens"],
        `subagents.token_budget in ${file}, line 13 (alias of subagents.tree_max_tokens)`
      )
      assert.strictEqual(resolved.origins["subagents.heartbeat_timeout_secs"], `${file}, line 10`)
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
})

describe("a seed name next to its Fibril key", () => {
  it.effect("in one file: the Fibril key wins, and a warning names both", () =>
    Effect.gen(function*() {
      const { resolved, file } = yield* loadProject(
        "max_subagents = 3\n[agent]\napi_timeout_secs = 60\n[subagents]\nmax_concurrent = 5\napi_timeout_secs = 900\n"
      )
      assert.strictEqual(resolved.settings.agent.apiTimeoutSecs, 60)
      assert.strictEqual(resolved.settings.subagents.maxConcurrent, 5)
      assert.deepStrictEqual(resolved.origins["agent.api_timeout_secs"], `${file}, line 3`)
      assert.deepStrictEqual(resolved.warnings, [
        `${file}, line 6: subagents.api_timeout_secs = 900 (the seed's name of agent.api_timeout_secs) is ignored: ` +
        "agent.api_timeout_secs = 60 is set too (line 3), and the Fibril key wins",
        `${file}, line 1: max_subagents = 3 (the seed's name of subagents.max_concurrent) is ignored: ` +
        "subagents.max_concurrent = 5 is set too (line 5), and the Fibril key wins"
      ])
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.effect("across sources the usual precedence: the project's seed name over the user's Fibril key, env over both", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      const cwd = path.join(dir, "project")
      const home = path.join(dir, "home")
      for (
        const [root, toml] of [[cwd, "[subagents]\napi_timeout_secs = 900\n"], [
          home,
          "[agent]\napi_timeout_secs = 60\n"
        ]]
      ) {
        yield* fs.makeDirectory(path.join(root!, ".fibril"), { recursive: true })
        yield* fs.writeFileString(path.join(root!, ".fibril", "config.toml"), toml!)
      }
      const fromFiles = yield* FibrilConfig.load({ cwd, home, env: {} })
      assert.strictEqual(fromFiles.settings.agent.apiTimeoutSecs, 900)
      assert.deepStrictEqual(fromFiles.warnings, [])
      const fromEnv = yield* FibrilConfig.load({ cwd, home, env: { FIBRIL_AGENT_API_TIMEOUT_SECS: "30" } })
      assert.strictEqual(fromEnv.settings.agent.apiTimeoutSecs, 30)
      assert.strictEqual(
        fromEnv.origins["agent.api_timeout_secs"],
        "environment variable FIBRIL_AGENT_API_TIMEOUT_SECS"
      )
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.effect("a seed name with a wrongly typed value is an error naming it as written", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(loadProject("[subagents]\napi_timeout_secs = \"soon\"\n"))
      assert.strictEqual(error._tag, "ConfigInvalid")
      assert.include(error.message, "subagents.api_timeout_secs in ")
      assert.include(error.message, "line 2 (alias of agent.api_timeout_secs)")
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
})
