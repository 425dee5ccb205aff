// What a workspace's own .fibril/config.toml may widen before it is trusted: real files in a
// temp HOME and workspace, read through FibrilConfig.load as every command reads them.
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, FileSystem, Schema } from "effect"
import * as path from "node:path"
import * as Toml from "smol-toml"
import * as FibrilConfig from "../src/FibrilConfig.ts"
import * as Trust from "../src/Trust.ts"

const setup = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const dir = yield* fs.makeTempDirectoryScoped()
  const cwd = path.join(dir, "repo")
  const home = path.join(dir, "home")
  const write = (root: string, toml: string) =>
    Effect.gen(function*() {
      yield* fs.makeDirectory(path.join(root, ".fibril"), { recursive: true })
      yield* fs.writeFileString(path.join(root, ".fibril", "config.toml"), toml)
    })
  const load = (env: Record<string, string> = {}) => FibrilConfig.load({ cwd, home, env })
  const trust = Trust.trust({ workspace: cwd, home, now: new Date(0) })
  return { fs, cwd, home, write, load, trust }
})

const keysOf = (resolved: FibrilConfig.Resolved) => resolved.trust?.widenings.map((widening) => widening.key) ?? []

describe("a project config that widens the sandbox", () => {
  it.effect("is ignored until trusted, each widening named with its line; narrower settings apply at once", () =>
    Effect.gen(function*() {
      const { load, trust, write, cwd } = yield* setup
      yield* write(
        cwd,
        [
          "[subagents]",
          "max_concurrent = 3",
          "[sandbox]",
          `mode = "off"`,
          "network = true",
          `writable_paths = ["/", "cache"]`,
          `bwrap_path = "./evil"`,
          "[sandbox.roles.explore]",
          `mode = "workspace-write"`,
          "[sandbox.roles.verifier]",
          `mode = "read-only"`
        ].join("\n")
      )
      const untrusted = yield* load()
      // explore's "workspace-write" is what every role has by default: no widening.
      assert.deepStrictEqual(untrusted.settings.sandbox, {
        ...FibrilConfig.defaults.sandbox,
        roles: {
          explore: { mode: "workspace-write", network: undefined, writablePaths: undefined },
          verifier: { mode: "read-only", network: undefined, writablePaths: undefined }
        }
      })
      // What widens nothing applies.
      assert.strictEqual(untrusted.settings.subagents.maxConcurrent, 3)
      assert.strictEqual(untrusted.trust?.status, "untrusted")
      assert.deepStrictEqual(keysOf(untrusted), [
        "sandbox.mode",
        "sandbox.network",
        "sandbox.writable_paths",
        "sandbox.bwrap_path"
      ])
      assert.strictEqual(untrusted.trust?.widenings[0]?.line, 4)
      // An ignored setting is not named as where a value came from; what applied is.
      assert.isUndefined(untrusted.origins["sandbox.bwrap_path"])
      assert.isDefined(untrusted.origins["subagents.max_concurrent"])
      assert.include(untrusted.trust?.widenings[2]?.effect, `makes /, ${path.join(cwd, "cache")} writable`)
      assert.include(Trust.describe(untrusted.trust!), `fibril trust ${untrusted.trust?.workspace}`)

      yield* trust
      const trusted = yield* load()
      assert.strictEqual(trusted.trust?.status, "trusted")
      assert.strictEqual(trusted.settings.sandbox.mode, "off")
      assert.deepStrictEqual(trusted.settings.sandbox.writablePaths, ["/", "cache"])
      assert.strictEqual(trusted.settings.sandbox.bwrapPath, "./evil")
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.effect("a role's mode is compared with what the user gives that role; the environment's keys are not the file's", () =>
    Effect.gen(function*() {
      const { load, write, cwd, home } = yield* setup
      yield* write(home, `[sandbox]\nmode = "read-only"\n[sandbox.roles.worker]\nmode = "workspace-write"\n`)
      yield* write(
        cwd,
        `[sandbox]\nmode = "workspace-write"\n[sandbox.roles.worker]\nmode = "workspace-write"\n[sandbox.roles.explore]\nmode = "off"\n`
      )
      const resolved = yield* load()
      assert.deepStrictEqual(keysOf(resolved), ["sandbox.mode", "sandbox.roles.explore.mode"])
      assert.strictEqual(resolved.settings.sandbox.mode, "read-only")
      assert.strictEqual(resolved.settings.sandbox.roles["worker"]?.mode, "workspace-write")
      assert.isUndefined(resolved.settings.sandbox.roles["explore"]?.mode)
      // FIBRIL_SANDBOX_MODE is the user's own choice and wins over the file anyway.
      const fromEnv = yield* load({ FIBRIL_SANDBOX_MODE: "read-only", FIBRIL_SANDBOX_ROLES_EXPLORE_MODE: "read-only" })
      assert.isUndefined(fromEnv.trust)
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.effect("a project deny list cannot drop the user's denials untrusted: the lists are united", () =>
    Effect.gen(function*() {
      const { load, trust, write, cwd, home } = yield* setup
      yield* write(home, `[permissions]\ndeny = ["shell"]\n`)
      yield* write(cwd, `[permissions]\ndeny = ["write_file"]\n`)
      const untrusted = yield* load()
      assert.deepStrictEqual([...untrusted.settings.permissions.deny].sort(), ["shell", "write_file"])
      assert.deepStrictEqual(keysOf(untrusted), ["permissions.deny"])
      yield* trust
      assert.deepStrictEqual((yield* load()).settings.permissions.deny, ["write_file"])
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.effect("a config changed since it was trusted is untrusted again; revoke removes the entry", () =>
    Effect.gen(function*() {
      const { load, trust, write, cwd, home } = yield* setup
      yield* write(cwd, `[sandbox]\nnetwork = true\n`)
      yield* trust
      assert.isTrue((yield* load()).settings.sandbox.network)
      yield* write(cwd, `[sandbox]\nnetwork = true\nwritable_paths = ["/"]\n`)
      const changed = yield* load()
      assert.strictEqual(changed.trust?.status, "changed")
      assert.isFalse(changed.settings.sandbox.network)
      assert.deepStrictEqual(changed.settings.sandbox.writablePaths, [])
      assert.isTrue(yield* Trust.revoke({ workspace: cwd, home }))
      assert.strictEqual((yield* load()).trust?.status, "untrusted")
      assert.isFalse(yield* Trust.revoke({ workspace: cwd, home }))
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.effect("the list holds the real path: a symlinked workspace is the same workspace", () =>
    Effect.gen(function*() {
      const { fs, load, write, cwd, home } = yield* setup
      yield* write(cwd, `[sandbox]\nnetwork = true\n`)
      const link = `${cwd}-link`
      yield* fs.symlink(cwd, link)
      yield* Trust.trust({ workspace: link, home, now: new Date(0) })
      assert.strictEqual((yield* load()).trust?.status, "trusted")
      const entries = yield* Trust.list(fs, home)
      assert.deepStrictEqual(entries.map((entry) => entry.path), [yield* fs.realPath(cwd)])
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

  it.effect("a user config file has its full power, trusted or not", () =>
    Effect.gen(function*() {
      const { load, write, home } = yield* setup
      yield* write(home, `[sandbox]\nmode = "off"\nnetwork = true\nwritable_paths = ["/"]\n`)
      const resolved = yield* load()
      assert.isUndefined(resolved.trust)
      assert.strictEqual(resolved.settings.sandbox.mode, "off")
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
})

// --- Property: untrusted, a project file never widens any role's posture ---

const Mode = Schema.Literals(["read-only", "workspace-write", "off"])
const PathName = Schema.Literals(["/", "cache", "/tmp/x", ".git", "sub/dir"])
const Posture = Schema.Struct({
  mode: Schema.optionalKey(Mode),
  network: Schema.optionalKey(Schema.Boolean),
  writable_paths: Schema.optionalKey(Schema.Array(PathName))
})
const RoleName = Schema.Literals(["explore", "worker", "verifier"])
const Sandbox = Schema.Struct({
  ...Posture.fields,
  bwrap_path: Schema.optionalKey(Schema.Literals(["bwrap", "/tmp/evil"])),
  tmp_size_mb: Schema.optionalKey(Schema.Literals([64, 256, 4096])),
  max_processes: Schema.optionalKey(Schema.Literals([32, 256, 4096])),
  memory_mb: Schema.optionalKey(Schema.Literals([512, 4096, 16384])),
  roles: Schema.optionalKey(Schema.Record(RoleName, Posture))
})
const File = Schema.Struct({
  sandbox: Schema.optionalKey(Sandbox),
  permissions: Schema.optionalKey(Schema.Struct({ deny: Schema.Array(Schema.Literals(["shell", "write_file"])) }))
})

const rank = { "read-only": 0, "workspace-write": 1, off: 2 } as const
const postureOf = (settings: FibrilConfig.Settings, role: string, cwd: string) => {
  const own = settings.sandbox.roles[role]
  const mode = own?.mode ?? settings.sandbox.mode
  return {
    mode: rank[mode],
    // `off` has the network and every path.
    network: mode === "off" || (own?.network ?? settings.sandbox.network),
    writable: new Set((own?.writablePaths ?? settings.sandbox.writablePaths).map((entry) => path.resolve(cwd, entry)))
  }
}

describe("Trust (property)", () => {
  it.effect.prop(
    "untrusted, every role's sandbox, its bounds and the deny list are at most what the user's own config gives",
    [File, File],
    ([project, user]) =>
      Effect.gen(function*() {
        const { load, write, cwd, home, fs } = yield* setup
        yield* write(home, Toml.stringify(user))
        const base = (yield* load()).settings
        yield* write(cwd, Toml.stringify(project))
        const resolved = yield* load()
        const settings = resolved.settings
        assert.strictEqual(settings.sandbox.bwrapPath, base.sandbox.bwrapPath)
        assert.isAtMost(settings.sandbox.tmpSizeMb, base.sandbox.tmpSizeMb)
        assert.isAtMost(settings.sandbox.maxProcesses, base.sandbox.maxProcesses)
        assert.isAtMost(settings.sandbox.memoryMb, base.sandbox.memoryMb)
        for (const tool of base.permissions.deny) assert.include(settings.permissions.deny, tool)
        for (const role of ["explore", "worker", "verifier", "general"]) {
          const got = postureOf(settings, role, cwd)
          const allowed = postureOf(base, role, cwd)
          assert.isAtMost(got.mode, allowed.mode, role)
          if (got.network) assert.isTrue(allowed.network, `${role} got the network`)
          if (got.mode < 2) { for (const entry of got.writable) assert.isTrue(allowed.writable.has(entry), entry) }
        }
        yield* fs.remove(path.join(cwd, ".fibril"), { recursive: true })
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
    { arbitrary: { runs: 60 } }
  )
})
