// The bounds of the shell's sandbox (docs/security.md, "Shell sandbox bounds"), each attack
// run for real under bubblewrap, then the disk and the host's processes checked: a
// descriptor the Fibril process inherited, /tmp and /dev/shm filled past their size, a fork
// loop, a memory hog; and without bubblewrap, a writer's `setsid` child outliving its call.
import { assert, describe, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { fileURLToPath } from "node:url"
import * as Permission from "../src/Permission.ts"
import * as Roles from "../src/Roles.ts"
import type * as Sandbox from "../src/Sandbox.ts"
import type * as Shell from "../src/tools/Shell.ts"
import { context, pidsWith, provide, setup } from "./tools/harness.ts"

type Harness = Effect.Success<ReturnType<typeof setup>>

const as = (role: Roles.RoleName) => ({
  ...context,
  role,
  depth: 1,
  rules: Permission.derive(Permission.allowAll, {
    label: `${role} sub-agent at depth 1`,
    postures: Roles.roles[role].postures,
    writeScope: Roles.roles[role].writeScope
  })
})

const shell = (h: Harness, role: Roles.RoleName, command: string) =>
  Effect.map(h.call("shell", { command }, as(role)), (out) => out as Shell.Result)

/** A number no other test's `sleep` uses, to find its processes on the host. */
const marker = () => String(500_000 + Math.floor(Math.random() * 400_000))

const small = (options: Partial<Sandbox.Options>) => setup({ sandbox: options })

describe.skipIf(process.platform !== "linux")("shell sandbox bounds, under bubblewrap", () => {
  it.live("/tmp and /dev/shm are full at tmp_size_mb, and /dev holds nothing", () =>
    Effect.gen(function*() {
      const h = yield* small({ tmpSizeMb: 4 })
      for (const dir of ["/tmp", "/dev/shm"]) {
        const result = yield* shell(h, "explore", `head -c 9000000 /dev/zero > ${dir}/big; ls -l ${dir}/big`)
        assert.strictEqual(result.sandbox, "read-only")
        assert.include(result.stderr, "No space left on device", dir)
        const size = Number(result.stdout.trim().split(/\s+/)[4])
        assert.isAtMost(size, 4 * 1024 * 1024, `${dir} took ${size} bytes`)
      }
      const dev = yield* shell(h, "explore", "head -c 1000 /dev/zero > /dev/big")
      assert.notStrictEqual(dev.exit_code, 0)
      assert.include(dev.stderr, "Read-only file system")
      // Within the size, scratch space still works.
      const fits = yield* shell(h, "explore", "head -c 1000000 /dev/zero > /tmp/ok && wc -c < /tmp/ok")
      assert.deepStrictEqual([fits.exit_code, fits.stdout], [0, "1000000\n"])
    }).pipe(provide))

  it.live("a fork loop starts no more than max_processes, and none outlives the call", () =>
    Effect.gen(function*() {
      const h = yield* small({ maxProcesses: 32 })
      const sleeper = marker()
      // The inner shell dies at its first failed fork; its sleeps stay (children of pid 1),
      // and pid 1 counts the namespace's processes through /proc without forking.
      const result = yield* shell(
        h,
        "explore",
        `sh -c 'for i in $(seq 1 400); do sleep ${sleeper} & done' 2>/dev/null; set -- /proc/[0-9]*; echo $#`
      )
      const running = Number(result.stdout.trim())
      assert.isAtLeast(running, 8, result.stderr)
      assert.isAtMost(running, 32, `${running} processes ran in the sandbox`)
      assert.deepStrictEqual(pidsWith(sleeper), [], "a sleep outlived the call")
    }).pipe(provide))

  it.live("a process cannot take more memory than memory_mb", () =>
    Effect.gen(function*() {
      const h = yield* small({ memoryMb: 64 })
      // Debian's python3, as the network tests use: 150 MB in one allocation.
      const result = yield* shell(h, "explore", `/usr/bin/python3 -c "x = bytearray(150_000_000); print(len(x))"`)
      assert.notStrictEqual(result.stdout.trim(), "150000000", "150 MB were allocated")
      assert.include(result.stderr, "MemoryError")
    }).pipe(provide))

  // The fixture runs with `node file.ts`, as the other process fixtures do (Node >= 22.18).
  const stripsTypes = (process.features as { readonly typescript?: unknown }).typescript !== undefined
  it.live.skipIf(!stripsTypes)(
    "a descriptor the Fibril process inherited is not writable from explore's shell",
    () =>
      Effect.gen(function*() {
        const h = yield* setup()
        const target = h.path.join(h.outside, "inherited.txt")
        yield* h.fs.writeFileString(target, "before\n")
        const fixture = fileURLToPath(new URL("./fixtures/exploreShell.ts", import.meta.url))
        const attack = [
          "bash -c 'echo through-200 >&200'",
          "echo through-proc > /proc/self/fd/200",
          "echo through-201 > /proc/self/fd/201",
          "ls -l /proc/self/fd/ | sed 's/.* \\([0-9]* ->\\)/\\1/'"
        ].join("; ")
        const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
        // fd 200 open for append, fd 201 read-write, both without close-on-exec (bash's exec).
        const handle = yield* spawner.spawn(
          ChildProcess.make(
            "bash",
            ["-c", `exec 200>>"$1" 201<>"$1"; exec "$2" "$3" "$4"`, "bash", target, process.execPath, fixture, attack],
            { cwd: h.root }
          )
        )
        const [stdout, stderr, code] = yield* Effect.all(
          [
            Stream.mkString(Stream.decodeText(handle.stdout)),
            Stream.mkString(Stream.decodeText(handle.stderr)),
            handle.exitCode
          ],
          { concurrency: "unbounded" }
        )
        assert.strictEqual(Number(code), 0, stderr)
        const result = JSON.parse(stdout) as Shell.Result
        assert.strictEqual(result.sandbox, "read-only")
        assert.strictEqual(yield* h.fs.readFileString(target), "before\n", result.stdout + result.stderr)
        assert.notInclude(result.stdout, target, "the command saw the file behind a descriptor")
      }).pipe(Effect.scoped, provide)
  )
})

describe("shell without a sandbox (bwrap missing): nothing a call started outlives it", () => {
  const missing = { bwrapPath: "/nonexistent/fibril-test/bwrap" }

  it.live("a writer's setsid and double-forked children are killed when the call ends", () =>
    Effect.gen(function*() {
      const h = yield* small(missing)
      for (let i = 0; i < 3; i++) {
        const detached = marker()
        const result = yield* shell(
          h,
          "implementer",
          `setsid sleep ${detached} > /dev/null 2>&1 & (setsid sh -c 'sleep ${detached}' > /dev/null 2>&1 &); echo launched`
        )
        assert.deepStrictEqual([result.exit_code, result.stdout, result.sandbox], [0, "launched\n", "none"])
        assert.deepStrictEqual(pidsWith(detached), [], "a setsid'd sleep outlived the call")
      }
    }).pipe(provide))
})
