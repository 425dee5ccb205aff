// The shell's operating-system sandbox. Every attack runs for real against a real temp
// workspace (a git repository with uncommitted changes), then the disk is checked. The
// same attacks run twice: with bubblewrap, and with a bwrap path that does not exist (no
// sandbox), where a read-only agent gets no shell at all.
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Schedule } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import * as net from "node:net"
import * as FibrilConfig from "../src/FibrilConfig.ts"
import * as Permission from "../src/Permission.ts"
import * as Roles from "../src/Roles.ts"
import * as Sandbox from "../src/Sandbox.ts"
import type * as ToolRegistry from "../src/ToolRegistry.ts"
import type * as Shell from "../src/tools/Shell.ts"
import * as Trust from "../src/Trust.ts"
import { context, pidsWith, provide, setup } from "./tools/harness.ts"

type Harness = Effect.Success<ReturnType<typeof setup>>

/** The rules a sub-agent of `role` gets under a root that may do everything. */
const rulesOf = (role: Roles.RoleName): Permission.Rules =>
  Permission.derive(Permission.allowAll, {
    label: `${role} sub-agent at depth 1`,
    postures: Roles.roles[role].postures,
    writeScope: Roles.roles[role].writeScope
  })

const as = (role: Roles.RoleName): ToolRegistry.ToolCallContext => ({
  ...context,
  role,
  depth: 1,
  rules: rulesOf(role)
})

const shell = (h: Harness, role: Roles.RoleName, command: string) =>
  Effect.map(h.call("shell", { command }, as(role)), (out) => out as Shell.Result)

/** A shell call that must not run: the model's result is a SandboxUnavailable denial. */
const denied = Effect.fn("denied")(function*(h: Harness, role: Roles.RoleName, command: string) {
  const error = yield* Effect.flip(h.call("shell", { command }, as(role)))
  assert.strictEqual(error._tag, "SandboxUnavailable", error.message)
  assert.include(error.message, `shell is not available to the ${role} sub-agent at depth 1`)
  assert.include(error.message, "install bubblewrap")
  assert.include(error.message, `[sandbox.roles.${role}]`)
  assert.include(error.message, "Nothing was run")
})

const run = (cwd: string, command: string, args: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
    const code = yield* spawner.exitCode(ChildProcess.make(command, [...args], { cwd, stdin: "ignore" }))
    assert.strictEqual(Number(code), 0, `${command} ${args.join(" ")}`)
  })

/** The workspace as a git repository: v.txt committed, then changed and not committed. */
const gitWorkspace = Effect.fn("gitWorkspace")(function*(h: Harness) {
  const git = (...args: ReadonlyArray<string>) =>
    run(h.root, "git", ["-c", "user.name=t", "-c", "user.email=t@example.com", ...args])
  yield* git("init", "-q")
  yield* h.write("v.txt", "committed\n")
  yield* git("add", "v.txt")
  yield* git("commit", "-q", "-m", "one")
  yield* h.write("v.txt", "uncommitted work\n")
})

/** Nothing an attack could have touched has changed. */
const untouched = Effect.fn("untouched")(function*(h: Harness) {
  assert.strictEqual(yield* h.read("v.txt"), "uncommitted work\n")
  assert.isFalse(yield* h.fs.exists(h.path.join(h.root, "w.txt")))
  assert.isFalse(yield* h.fs.exists(h.path.join(h.dir, "outside.txt")))
  assert.deepStrictEqual(yield* h.fs.readDirectory(h.outside), [])
})

/** A number no other test's `sleep` uses, to find its processes on the host. */
const marker = () => String(500_000 + Math.floor(Math.random() * 400_000))

/** Waits until `count` processes with `marker` run on the host. */
const waitFor = (tag: string, count: number) =>
  Effect.suspend(() => pidsWith(tag).length >= count ? Effect.void : Effect.fail("not running yet")).pipe(
    Effect.retry({ schedule: Schedule.spaced("20 millis"), times: 250 })
  )

const missingBwrap = { bwrapPath: "/nonexistent/fibril-test/bwrap" }

describe("Sandbox policy", () => {
  const writeTools = ["write_file", "edit_file"]

  it("an agent's shell writes no more than its write tools", () => {
    assert.deepStrictEqual(Sandbox.accessOf(rulesOf("explore"), writeTools), { _tag: "none" })
    assert.deepStrictEqual(Sandbox.accessOf(rulesOf("verifier"), writeTools), { _tag: "none" })
    assert.deepStrictEqual(Sandbox.accessOf(rulesOf("implementer"), writeTools), { _tag: "all" })
    assert.deepStrictEqual(Sandbox.accessOf(rulesOf("plan"), writeTools), {
      _tag: "under",
      prefixes: [".fibril/plans"]
    })
    // The write posture, but no write tool allowed by name (allowed_tools: read_file, shell).
    const narrowed = Permission.derive(Permission.allowAll, { allow: ["read_file", "shell"] })
    assert.deepStrictEqual(Sandbox.accessOf(narrowed, writeTools), { _tag: "none" })
    const denyingWrites = Permission.derive(Permission.allowAll, { deny: writeTools })
    assert.deepStrictEqual(Sandbox.accessOf(denyingWrites, writeTools), { _tag: "none" })
  })

  it("the configured mode is a ceiling: read-only agents stay read-only, off is explicit", () => {
    const policy = (options: Partial<Sandbox.Options>, role: string, access: Sandbox.Access) =>
      Sandbox.policyFor({ ...Sandbox.defaults, ...options }, role, role, access)
    const none: Sandbox.Access = { _tag: "none" }
    const all: Sandbox.Access = { _tag: "all" }
    assert.strictEqual(policy({}, "explore", none).mode, "read-only")
    assert.strictEqual(policy({}, "implementer", all).mode, "workspace-write")
    assert.strictEqual(policy({ mode: "read-only" }, "implementer", all).mode, "read-only")
    assert.strictEqual(policy({ roles: { explore: { mode: "workspace-write" } } }, "explore", none).mode, "read-only")
    assert.strictEqual(policy({ roles: { verifier: { mode: "off" } } }, "verifier", none).mode, "off")
    assert.strictEqual(policy({ roles: { verifier: { mode: "off" } } }, "explore", none).mode, "read-only")
    assert.isFalse(policy({}, "explore", none).network)
    assert.isTrue(policy({ roles: { explore: { network: true } } }, "explore", none).network)
    // plan: read-only, with its write scope writable; a configured read-only mode drops it.
    const plan = policy({ writablePaths: ["/cache"] }, "plan", { _tag: "under", prefixes: [".fibril/plans"] })
    assert.deepStrictEqual([plan.mode, plan.writable], ["read-only", [".fibril/plans", "/cache"]])
    assert.deepStrictEqual(
      policy({ mode: "read-only" }, "plan", { _tag: "under", prefixes: [".fibril/plans"] }).writable,
      []
    )
    assert.deepStrictEqual(
      policy({ writablePaths: ["/a"], roles: { implementer: { writablePaths: ["/b"] } } }, "implementer", all).writable,
      ["/b"]
    )
  })

  it("bubblewrap gets a pid namespace, no capabilities, and the mounts in order", () => {
    const args = Sandbox.bwrapArgs({
      workspace: "/tmp/x/ws",
      mode: "workspace-write",
      network: false,
      protected: ["/tmp/x/ws/.git"],
      writable: ["/cache"],
      seccomp: true,
      limits: { tmpSizeMb: 8, maxProcesses: 32, memoryMb: 100 },
      script: "echo hi"
    })
    const text = args.join(" ")
    for (
      const flag of ["--unshare-all --as-pid-1", "--cap-drop ALL", "--die-with-parent", "--new-session", "--seccomp 3"]
    ) {
      assert.include(text, flag)
    }
    assert.notInclude(text, "--share-net")
    assert.include(
      text,
      "--ro-bind / / --dev /dev --proc /proc --size 8388608 --tmpfs /tmp --size 8388608 --tmpfs /dev/shm " +
        "--remount-ro /dev --ro-bind /tmp/x /tmp/x --bind /tmp/x/ws /tmp/x/ws " +
        "--ro-bind /tmp/x/ws/.git /tmp/x/ws/.git --bind /cache /cache"
    )
    assert.deepStrictEqual(args.slice(-8), [
      "--",
      "prlimit",
      "--nproc=32",
      `--data=${100 * 1024 * 1024}`,
      "--",
      "sh",
      "-c",
      "echo hi"
    ])
    const readOnly = Sandbox.bwrapArgs({
      workspace: "/home/me/ws",
      mode: "read-only",
      network: true,
      protected: [],
      writable: [],
      seccomp: false,
      limits: Sandbox.defaults,
      script: "ls"
    }).join(" ")
    assert.notInclude(readOnly, "--bind ")
    assert.include(readOnly, "--share-net")
    // What the command reads under /tmp (an MCP server's script there) comes back read-only,
    // after the private /tmp; a path elsewhere is already there.
    const reading = Sandbox.bwrapArgs({
      workspace: "/home/me/ws",
      mode: "read-only",
      network: true,
      protected: [],
      writable: [],
      readable: ["/tmp/checkout/node_modules/server/index.js", "/usr/bin/node"],
      seccomp: false,
      limits: Sandbox.defaults,
      script: "ls"
    }).join(" ")
    assert.include(reading, "--tmpfs /dev/shm --remount-ro /dev --ro-bind /tmp/checkout /tmp/checkout --unshare-all")
  })

  it("the seccomp program is whole instructions, for the architectures it knows", () => {
    assert.strictEqual(Sandbox.seccompFilter("x64")?.length, 11 * 8)
    assert.strictEqual(Sandbox.seccompFilter("arm64")?.length, 11 * 8)
    assert.isUndefined(Sandbox.seccompFilter("riscv64"))
  })
})

describe("[sandbox] configuration", () => {
  it.live("is read from the project file, per role, and from the environment", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      yield* h.write(
        ".fibril/config.toml",
        [
          "[sandbox]",
          `mode = "read-only"`,
          "network = true",
          `writable_paths = ["cache", "/var/cache/x"]`,
          `bwrap_path = "/opt/bwrap"`,
          "",
          "[sandbox.roles.verifier]",
          `mode = "off"`,
          "",
          "[sandbox.roles.reader]",
          "network = false",
          `writable_paths = []`
        ].join("\n")
      )
      // The file widens the sandbox (network, writable paths, bwrap_path): read as written once trusted.
      yield* Trust.trust({ workspace: h.root, home: h.outside, now: new Date(0) })
      const { settings } = yield* FibrilConfig.load({ cwd: h.root, home: h.outside, env: {} })
      assert.deepStrictEqual(settings.sandbox, {
        mode: "read-only",
        network: true,
        writablePaths: ["cache", "/var/cache/x"],
        bwrapPath: "/opt/bwrap",
        tmpSizeMb: 256,
        maxProcesses: 256,
        memoryMb: 4096,
        roles: {
          verifier: { mode: "off", network: undefined, writablePaths: undefined },
          reader: { mode: undefined, network: false, writablePaths: [] }
        }
      })
      const env = yield* FibrilConfig.load({
        cwd: h.outside,
        home: h.outside,
        env: {
          FIBRIL_SANDBOX_MODE: "off",
          FIBRIL_SANDBOX_NETWORK: "true",
          FIBRIL_SANDBOX_WRITABLE_PATHS: "a,b",
          FIBRIL_SANDBOX_ROLES_VERIFIER_MODE: "read-only"
        }
      })
      assert.deepStrictEqual(
        [env.settings.sandbox.mode, env.settings.sandbox.network, env.settings.sandbox.writablePaths],
        ["off", true, ["a", "b"]]
      )
      // Role names are case-insensitive: the environment's VERIFIER is the verifier role.
      assert.strictEqual(env.settings.sandbox.roles["verifier"]?.mode, "read-only")
      assert.strictEqual(Sandbox.policyFor(env.settings.sandbox, "Verifier", "v", { _tag: "none" }).mode, "read-only")
      const defaults = yield* FibrilConfig.load({ cwd: h.outside, home: h.outside, env: {} })
      assert.deepStrictEqual(defaults.settings.sandbox, Sandbox.defaults)
    }).pipe(provide))
})

const variants = [
  { name: "with bubblewrap", sandboxed: true, options: {} },
  { name: "without a sandbox (bwrap missing)", sandboxed: false, options: missingBwrap }
] as const

for (const variant of variants) {
  describe.skipIf(variant.sandboxed && process.platform !== "linux")(`shell ${variant.name}`, () => {
    const make = (options: Partial<Sandbox.Options> = {}) => setup({ sandbox: { ...variant.options, ...options } })

    it.live("explore: git checkout, echo > file and touch ../outside change nothing", () =>
      Effect.gen(function*() {
        const h = yield* make()
        yield* gitWorkspace(h)
        const attacks = [
          "git checkout -- v.txt",
          "echo pwned > w.txt",
          "touch ../outside.txt",
          "touch ../outside/x",
          // As root, a kept CAP_SYS_ADMIN could make the read-only bind writable again.
          `mount -o remount,bind,rw '${h.root}' && echo pwned > w.txt`
        ]
        for (const attack of attacks) {
          if (!variant.sandboxed) {
            yield* denied(h, "explore", attack)
            continue
          }
          const result = yield* shell(h, "explore", attack)
          assert.strictEqual(result.sandbox, "read-only")
          assert.notStrictEqual(result.exit_code, 0, attack)
          assert.match(result.stderr, /Read-only file system|read-only|permission denied/i, attack)
        }
        yield* untouched(h)
        if (variant.sandboxed) {
          // Reading still works, and so does a private /tmp (gone after the call).
          const read = yield* shell(h, "explore", "cat v.txt && git status --short && echo t > /tmp/t && cat /tmp/t")
          assert.deepStrictEqual([read.exit_code, read.stdout], [0, "uncommitted work\n M v.txt\nt\n"])
        }
      }).pipe(provide))

    it.live("verifier: rm and git clean leave the files in place", () =>
      Effect.gen(function*() {
        const h = yield* make()
        yield* gitWorkspace(h)
        yield* h.write("untracked.txt", "keep me\n")
        for (const attack of ["rm -f v.txt", "rm -rf .git", "git clean -fdx", "git stash"]) {
          if (!variant.sandboxed) yield* denied(h, "verifier", attack)
          else assert.notStrictEqual((yield* shell(h, "verifier", attack)).exit_code, 0, attack)
        }
        yield* untouched(h)
        assert.strictEqual(yield* h.read("untracked.txt"), "keep me\n")
        assert.isTrue(yield* h.fs.exists(h.path.join(h.root, ".git", "HEAD")))
      }).pipe(provide))

    it.live("plan: writes only under its plan directory", () =>
      Effect.gen(function*() {
        const h = yield* make()
        yield* gitWorkspace(h)
        yield* h.fs.makeDirectory(h.path.join(h.root, ".fibril", "plans"), { recursive: true })
        if (!variant.sandboxed) return yield* denied(h, "plan", "echo plan > .fibril/plans/p.md")
        const inside = yield* shell(h, "plan", "echo plan > .fibril/plans/p.md")
        assert.deepStrictEqual([inside.exit_code, inside.sandbox], [0, "read-only"])
        assert.strictEqual(yield* h.read(".fibril/plans/p.md"), "plan\n")
        assert.notStrictEqual((yield* shell(h, "plan", "echo pwned > w.txt")).exit_code, 0)
        assert.notStrictEqual((yield* shell(h, "plan", "echo x > .fibril/config.toml")).exit_code, 0)
        yield* untouched(h)
      }).pipe(provide))

    it.live("a read-only agent's setsid escape dies when the call ends, and when it is interrupted", () =>
      Effect.gen(function*() {
        const h = yield* make()
        if (!variant.sandboxed) return yield* denied(h, "explore", `setsid sleep ${marker()} &`)
        // Several times: a teardown that trails the call's end shows up as a survivor now and then.
        for (let i = 0; i < 5; i++) {
          const detached = marker()
          const result = yield* shell(h, "explore", `setsid sleep ${detached} > /dev/null 2>&1 & echo launched`)
          assert.deepStrictEqual([result.exit_code, result.stdout], [0, "launched\n"])
          assert.deepStrictEqual(pidsWith(detached), [], "the setsid'd sleep outlived the call")
        }

        const escaped = marker()
        const fiber = yield* Effect.forkChild(
          shell(h, "explore", `(setsid sh -c 'sleep ${escaped}' &); nohup sleep ${escaped} & sleep 60`)
        )
        yield* waitFor(escaped, 2)
        const pids = pidsWith(escaped)
        const started = Date.now()
        yield* Fiber.interrupt(fiber)
        assert.isBelow(Date.now() - started, 1_000, "interrupting took a second or more")
        assert.deepStrictEqual(pidsWith(escaped), [], `still alive: ${pids.join(", ")}`)
      }).pipe(provide))

    it.live("a writer writes inside the workspace, not outside it nor into .git", () =>
      Effect.gen(function*() {
        const h = yield* make()
        yield* gitWorkspace(h)
        const inside = yield* shell(h, "implementer", "echo made > made.txt && mkdir -p sub && echo x > sub/y")
        assert.strictEqual(inside.exit_code, 0, inside.stderr)
        assert.strictEqual(yield* h.read("made.txt"), "made\n")
        const outside = yield* shell(h, "implementer", "touch ../outside.txt")
        const hook = yield* shell(h, "implementer", "echo 'echo owned' > .git/hooks/pre-commit")
        if (variant.sandboxed) {
          assert.deepStrictEqual([inside.sandbox, outside.sandbox], ["workspace-write", "workspace-write"])
          assert.notStrictEqual(outside.exit_code, 0)
          assert.include(outside.stderr, "Read-only file system")
          assert.isFalse(yield* h.fs.exists(h.path.join(h.dir, "outside.txt")))
          assert.notStrictEqual(hook.exit_code, 0)
          assert.isFalse(yield* h.fs.exists(h.path.join(h.root, ".git", "hooks", "pre-commit")))
        } else {
          // No sandbox: a writer's commands run unconfined, and the result says so.
          assert.deepStrictEqual([inside.sandbox, outside.sandbox, outside.exit_code], ["none", "none", 0])
          assert.isTrue(yield* h.fs.exists(h.path.join(h.dir, "outside.txt")))
        }
      }).pipe(provide))

    it.live("mode off for a role runs its commands unconfined, by explicit choice", () =>
      Effect.gen(function*() {
        const h = yield* make({ roles: { explore: { mode: "off" } } })
        const result = yield* shell(h, "explore", "echo chosen > w.txt")
        assert.deepStrictEqual([result.exit_code, result.sandbox], [0, "none"])
        assert.strictEqual(yield* h.read("w.txt"), "chosen\n")
        // Other read-only roles are unaffected.
        if (variant.sandboxed) assert.notStrictEqual((yield* shell(h, "verifier", "echo x > v2.txt")).exit_code, 0)
        else yield* denied(h, "verifier", "echo x > v2.txt")
      }).pipe(provide))
  })
}

describe.skipIf(process.platform !== "linux")("shell with bubblewrap: network and sockets", () => {
  /** A TCP server and a Unix socket server on the host, closed with the scope. */
  const servers = (h: Harness) =>
    Effect.acquireRelease(
      Effect.promise(async () => {
        const socketPath = h.path.join(h.dir, "host.sock")
        const tcp = net.createServer((socket) => socket.end("tcp-hello\n"))
        const unix = net.createServer((socket) => socket.end("unix-hello\n"))
        await new Promise<void>((resolve) => tcp.listen(0, "127.0.0.1", resolve))
        await new Promise<void>((resolve) => unix.listen(socketPath, resolve))
        const address = tcp.address()
        return { tcp, unix, socketPath, port: typeof address === "object" && address !== null ? address.port : 0 }
      }),
      ({ tcp, unix }) =>
        Effect.promise(() => Promise.all([new Promise((r) => tcp.close(r)), new Promise((r) => unix.close(r))]))
    )

  /**
   * A one-liner that connects (a port on 127.0.0.1, or a Unix socket path) and prints what it
   * reads, or the error code. Debian's python3, not this test's node: the repository may live
   * under /tmp, which a sandboxed command sees as its own empty /tmp.
   */
  const python = [
    "import socket, sys, errno",
    "t = sys.argv[1]",
    "try:",
    "  s = socket.socket(socket.AF_UNIX) if t.startswith('/') else socket.socket()",
    "  s.connect(t if t.startswith('/') else ('127.0.0.1', int(t)))",
    "  sys.stdout.write(s.recv(100).decode())",
    "except OSError as e:",
    "  print(errno.errorcode.get(e.errno, str(e.errno)))",
    "  sys.exit(3)"
  ].join("\n")
  const connect = (target: string) => `/usr/bin/python3 -c "${python}" '${target}'`

  it.live("no network by default: host TCP and Unix sockets are unreachable; network = true opens both", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const { port, socketPath } = yield* servers(h)
      const tcp = connect(String(port))
      const unix = connect(socketPath)
      const offTcp = yield* shell(h, "explore", tcp)
      assert.deepStrictEqual([offTcp.exit_code, offTcp.stdout], [3, "ECONNREFUSED\n"])
      const offUnix = yield* shell(h, "implementer", unix)
      assert.deepStrictEqual([offUnix.exit_code, offUnix.stdout], [3, "EPERM\n"])

      // A socket under the private /tmp's real counterpart must be next to this workspace to be seen.
      const open = yield* setup({ sandbox: { network: true } })
      const near = yield* servers(open)
      assert.strictEqual((yield* shell(open, "explore", connect(String(near.port)))).stdout, "tcp-hello\n")
      assert.strictEqual((yield* shell(open, "explore", connect(near.socketPath))).stdout, "unix-hello\n")
    }).pipe(provide))

  it.live("writable_paths reopens a protected directory, and adds directories outside the workspace", () =>
    Effect.gen(function*() {
      const h = yield* setup({ sandbox: { writablePaths: [".git"] } })
      yield* gitWorkspace(h)
      const commit = yield* shell(
        h,
        "implementer",
        "git -c user.name=t -c user.email=t@e commit -qam two && git log --oneline | wc -l"
      )
      assert.deepStrictEqual([commit.exit_code, commit.stdout.trim()], [0, "2"], commit.stderr)

      const cache = yield* setup({ sandbox: { roles: { verifier: { writablePaths: [] } } } })
      const outside = yield* setup({ sandbox: { roles: { verifier: { writablePaths: [cache.outside] } } } })
      const written = yield* shell(outside, "verifier", `echo cached > '${cache.outside}/c.txt' && echo x > w.txt`)
      assert.notStrictEqual(written.exit_code, 0)
      assert.strictEqual(yield* outside.fs.readFileString(`${cache.outside}/c.txt`), "cached\n")
      assert.isFalse(yield* outside.fs.exists(outside.path.join(outside.root, "w.txt")))
    }).pipe(provide))

  it.live("a caller without rules (not an agent of the loop) gets a read-only shell", () =>
    Effect.gen(function*() {
      const h = yield* setup()
      const { rules: _, ...anonymous } = context
      const result = (yield* h.call("shell", { command: "echo x > w.txt" }, anonymous)) as Shell.Result
      assert.strictEqual(result.sandbox, "read-only")
      assert.isFalse(yield* h.fs.exists(h.path.join(h.root, "w.txt")))
    }).pipe(provide))
})
