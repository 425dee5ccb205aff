// "Always allow", saved: `[permissions] allow` answers an ask rule's question without asking
// (through the real services and the ScriptedModel), never a call the rules deny; and
// `AllowAlways.save` adds a tool to the user's config file, keeping everything else in it.
import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Effect, FileSystem, Path, Schema } from "effect"
import { createRequire } from "node:module"
import * as AllowAlways from "../src/AllowAlways.ts"
import * as Approvals from "../src/Approvals.ts"
import * as FibrilConfig from "../src/FibrilConfig.ts"
import { SubAgentManager } from "../src/SubAgentManager.ts"
import { provideNode, report, setup } from "./support.ts"

const Toml = createRequire(import.meta.url)("smol-toml") as typeof import("smol-toml")

const script: ScriptedModel.ScriptInput = {
  rules: [{
    match: { prompt: "writer" },
    respond: (c) =>
      c.turn === 0
        ? { tool_calls: [{ name: "write_file", args: { path: "out.txt", content: "hi" } }] }
        : { text: report(`write said: ${JSON.stringify(c.lastToolResults[0]?.result)}`) }
  }]
}

/** A writer at depth 1 under `rules`, with an approver that would deny anything it is asked. */
const runWriter = (rules: { readonly ask: ReadonlyArray<string>; readonly deny: ReadonlyArray<string> }) =>
  Effect.gen(function*() {
    const approvals = yield* Approvals.make({
      allow: ["write_file"],
      policy: () => ({ decision: "deny", reason: "asked", by: "policy" })
    })
    return yield* Effect.gen(function*() {
      const { fs, get, path, root } = yield* setup(script, { maxDepth: 2 }, rules)
      const manager = get(SubAgentManager)
      const parent = yield* manager.spawn(undefined, { prompt: "parent", role: "general" })
      const writer = yield* manager.spawn(parent.agent_id, { prompt: "writer", role: "general" })
      const done = yield* manager.result(writer.agent_id, { block: true })
      const record = yield* manager.workerRecord(
        (yield* manager.list({ includeArchived: true })).find((a) => a.agent_id === writer.agent_id)!
      )
      return { done, record, written: yield* fs.exists(path.join(root, "out.txt")) }
    }).pipe(Effect.provideService(Approvals.Approvals, approvals))
  })

describe("AllowAlways", () => {
  it.effect("[permissions] allow answers an ask without asking, and never reaches a denied call", () =>
    Effect.gen(function*() {
      const asked = yield* runWriter({ ask: ["write_file"], deny: [] })
      assert.isTrue(asked.written)
      assert.strictEqual(asked.record.approvals?.[0]?.by, Approvals.allowedByConfig)
      assert.strictEqual(asked.record.approvals?.[0]?.decision, "allow")
      // Denied by the rules, the allow entry is never consulted: nothing written, no question.
      const denied = yield* runWriter({ ask: ["write_file"], deny: ["write_file"] })
      assert.isFalse(denied.written)
      assert.include(denied.done.outcome?.summary ?? "", "denied")
      assert.strictEqual(denied.record.approvals?.length ?? 0, 0)
    }).pipe(Effect.scoped, provideNode))

  it.effect("save adds the tool to [permissions] allow of the user's file, keeping the rest; load reads it", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const home = yield* fs.makeTempDirectoryScoped()
      const file = AllowAlways.userFile(home)
      // No file yet: it is made.
      assert.strictEqual(yield* AllowAlways.save(home, "write_file"), file)
      assert.deepStrictEqual(Toml.parse(yield* fs.readFileString(file)), { permissions: { allow: ["write_file"] } })
      // A file of the user's, comments and other tables kept; the array grown in place.
      const mine =
        `# mine\nmodel = "m" # the model\n\n[permissions]\nask = ["shell", "write"]\nallow = [\n  "read",\n]\n\n[permissions.usd_per_mtok]\nm = 1\n`
      yield* fs.writeFileString(file, mine)
      yield* AllowAlways.save(home, "shell")
      yield* AllowAlways.save(home, "shell")
      const text = yield* fs.readFileString(file)
      assert.include(text, "# mine\nmodel = \"m\" # the model\n")
      assert.deepStrictEqual(Toml.parse(text), {
        model: "m",
        permissions: { ask: ["shell", "write"], allow: ["read", "shell"], usd_per_mtok: { m: 1 } }
      })
      // [permissions] without allow: the key is added under its header.
      yield* fs.writeFileString(file, "[permissions]\nask = [\"shell\"]\n[agent]\nmax_steps = 5\n")
      yield* AllowAlways.save(home, "shell")
      assert.deepStrictEqual(Toml.parse(yield* fs.readFileString(file)), {
        permissions: { ask: ["shell"], allow: ["shell"] },
        agent: { max_steps: 5 }
      })
      const loaded = yield* FibrilConfig.load({ cwd: path.join(home, "project"), home, env: {} })
      assert.deepStrictEqual(loaded.settings.permissions.allow, ["shell"])
      // A shape the edit cannot handle safely is left alone, with what to add by hand.
      const dotted = "permissions.allow = [\"read\"]\n"
      yield* fs.writeFileString(file, dotted)
      const error = yield* Effect.flip(AllowAlways.save(home, "shell"))
      assert.strictEqual(error._tag, "AllowNotSaved")
      assert.include(error.message, `allow = ["shell"] under [permissions]`)
      assert.strictEqual(yield* fs.readFileString(file), dotted)
    }).pipe(Effect.scoped, provideNode))

  it.effect("an allow entry that names no tool or posture is a typed error naming it", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const home = yield* fs.makeTempDirectoryScoped()
      yield* fs.makeDirectory(path.join(home, ".fibril"))
      yield* fs.writeFileString(AllowAlways.userFile(home), "[permissions]\nallow = [\"Bash\"]\n")
      const error = yield* Effect.flip(FibrilConfig.load({ cwd: path.join(home, "project"), home, env: {} }))
      assert.strictEqual(error._tag, "ConfigUnknownTool")
      assert.include(error.message, `permissions.allow`)
      assert.include(error.message, `"Bash" (did you mean "shell"?)`)
    }).pipe(Effect.scoped, provideNode))

  it.effect("an untrusted project's allow list keeps only what the user's own allows", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const home = yield* fs.makeTempDirectoryScoped()
      const cwd = path.join(home, "project")
      yield* fs.makeDirectory(path.join(cwd, ".fibril"), { recursive: true })
      yield* AllowAlways.save(home, "read")
      yield* fs.writeFileString(
        path.join(cwd, ".fibril", "config.toml"),
        "[permissions]\nallow = [\"read\", \"shell\"]\n"
      )
      const untrusted = yield* FibrilConfig.load({ cwd, home, env: {} })
      assert.deepStrictEqual(untrusted.settings.permissions.allow, ["read"])
      assert.deepStrictEqual(untrusted.trust?.widenings.map((widening) => widening.key), ["permissions.allow"])
      assert.include(untrusted.trust?.widenings[0]?.effect, "runs shell without asking")
    }).pipe(Effect.scoped, provideNode))

  // The edit's round trip, for files of random shapes: the tool is added once, all else kept.
  const Name = Schema.Literals(["read", "write", "shell", "write_file", "grep"])
  const Shape = Schema.Struct({
    allow: Schema.UndefinedOr(Schema.Array(Name).check(Schema.isMaxLength(4))),
    permissions: Schema.Boolean,
    multiline: Schema.Boolean,
    before: Schema.Boolean,
    after: Schema.Boolean,
    tool: Name
  })
  it.prop(
    "addTo adds the tool to [permissions] allow and changes nothing else, whatever the file",
    [Shape],
    ([shape]) => {
      const allow = shape.allow === undefined ? undefined : [...new Set(shape.allow)].filter((n) => n !== shape.tool)
      const list = (names: ReadonlyArray<string>) =>
        shape.multiline ? `[\n${names.map((n) => `  "${n}",`).join("\n")}\n]` : JSON.stringify(names)
      const text = [
        shape.before ? `model = "m" # mine\n[agent]\nmax_steps = 5\n` : "",
        shape.permissions || allow !== undefined
          ? `[permissions]\n# my rules\nask = ["shell"]\n${
            allow === undefined ? "" : `allow = ${list(allow)} # kept?\n`
          }`
          : "",
        shape.after ? `[permissions.usd_per_mtok]\nm = 1\n[sandbox]\nmode = "read-only"\n` : ""
      ].join("\n")
      const before = Toml.parse(text) as Record<string, Record<string, unknown>>
      const edited = AllowAlways.addTo(text, shape.tool, allow ?? [])
      assert.isDefined(edited)
      const after = Toml.parse(edited!) as Record<string, Record<string, unknown>>
      assert.deepStrictEqual(after["permissions"]?.["allow"], [...(allow ?? []), shape.tool], edited)
      const { permissions: _after, ...restAfter } = after
      const { permissions: _before, ...restBefore } = before
      assert.deepStrictEqual(restAfter, restBefore)
      const { allow: _a, ...permissionsAfter } = after["permissions"] ?? {}
      const { allow: _b, ...permissionsBefore } = before["permissions"] ?? {}
      assert.deepStrictEqual(permissionsAfter, permissionsBefore)
    },
    { arbitrary: { runs: 200 } }
  )
})
