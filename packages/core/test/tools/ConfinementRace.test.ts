// The races of issue 29, run for real: a separate process swaps paths inside the workspace
// while the file tools work on them, and the disk is checked afterwards.
// - A directory swapped for a symlink to a directory outside, under write_file (flat and with
//   parents to create) and edit_file: nothing may be created or changed outside.
// - A regular file swapped for a FIFO, under read_file, edit_file and grep: every call ends
//   within a bound, and a normal read_file afterwards is served (no libuv thread is stuck).
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import * as nodeFs from "node:fs"
import * as nodePath from "node:path"
import { provide, setup } from "./harness.ts"

type Harness = Effect.Success<ReturnType<typeof setup>>

/**
 * A node process that flips `ws/<name>` for `ms` milliseconds: `link` swaps the directory for
 * a symlink to `target` (and back), `fifo` swaps the regular file for a FIFO (and back). Each
 * state is held for a few microseconds. It prints "go" once it runs and its swap count at the end.
 */
const swapperSource = String.raw`
const fs = require("node:fs")
const [mode, dir, name, target, ms] = process.argv.slice(1)
process.chdir(dir)
const hold = () => { const t = process.hrtime.bigint(); while (process.hrtime.bigint() - t < 20000n) {} }
const tryIt = (f) => { try { f() } catch {} }
const end = Date.now() + Number(ms)
let swaps = 0
process.stdout.write("go\n")
while (Date.now() < end) {
  if (mode === "link") {
    // d -> d.real, d = link to outside, then back. A directory a tool created meanwhile is removed.
    try { fs.renameSync(name, name + ".real") } catch { tryIt(() => fs.rmSync(name, { recursive: true, force: true })) }
    tryIt(() => fs.symlinkSync(target, name))
    hold()
    tryIt(() => fs.unlinkSync(name))
    tryIt(() => fs.renameSync(name + ".real", name))
    hold()
  } else {
    tryIt(() => fs.renameSync(name, name + ".reg"))
    tryIt(() => fs.renameSync(name + ".fifo", name))
    hold()
    tryIt(() => fs.renameSync(name, name + ".fifo"))
    tryIt(() => fs.renameSync(name + ".reg", name))
    hold()
  }
  swaps++
}
process.stdout.write(String(swaps) + "\n")
`

/** Starts the swapper and waits until it runs; it is killed (and awaited) when the scope ends. */
const swapper = (args: ReadonlyArray<string>) =>
  Effect.acquireRelease(
    Effect.callback<ChildProcess>((resume) => {
      const child = spawn(process.execPath, ["-e", swapperSource, ...args], { stdio: ["ignore", "pipe", "inherit"] })
      child.stdout.once("data", () => resume(Effect.succeed(child)))
    }),
    // Killed and waited for: a swapper still renaming while the temp dir is removed makes the
    // removal fail (ENOTEMPTY).
    (child) =>
      Effect.callback<void>((resume) => {
        if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.void)
        child.once("exit", () => resume(Effect.void))
        child.kill("SIGKILL")
      })
  )

/** Every entry under `dir`, recursively, with the content of each file. */
const snapshot = (dir: string): Record<string, string> => {
  const found: Record<string, string> = {}
  for (const entry of nodeFs.readdirSync(dir, { recursive: true, withFileTypes: true })) {
    const full = nodePath.join(entry.parentPath, entry.name)
    found[nodePath.relative(dir, full)] = entry.isFile()
      ? nodeFs.readFileSync(full, "utf8")
      : `<${entry.isDirectory() ? "dir" : "other"}>`
  }
  return found
}

/** The tool calls of one round, `n` of each kind, all on paths under `ws/d`. */
const attackCalls = (h: Harness, round: number, n: number) => {
  const calls: Array<Effect.Effect<unknown, unknown>> = []
  for (let i = 0; i < n; i++) {
    calls.push(h.call("write_file", { path: `d/w-${round}-${i}.txt`, content: "written by the tool\n" }))
    calls.push(h.call("write_file", { path: `d/p-${round}-${i}/sub/f.txt`, content: "nested\n" }))
    calls.push(h.call("edit_file", { path: `d/e-${i}.txt`, old_string: "original", new_string: `edited ${round}` }))
  }
  return calls
}

describe("confinement under races", () => {
  it.live(
    "a directory swapped for a symlink to outside while write_file and edit_file run: nothing lands outside",
    () =>
      Effect.gen(function*() {
        const h = yield* setup()
        const perKind = 40
        // The directory the tools write into, and decoys outside with the same names.
        nodeFs.mkdirSync(nodePath.join(h.root, "d"))
        for (let i = 0; i < perKind; i++) {
          nodeFs.writeFileSync(nodePath.join(h.root, "d", `e-${i}.txt`), "original inside\n")
          nodeFs.writeFileSync(nodePath.join(h.outside, `e-${i}.txt`), "original outside\n")
        }
        const before = snapshot(h.outside)

        yield* swapper(["link", h.root, "d", h.outside, "60000"])
        let refused = 0
        let landed = 0
        for (let round = 0; round < 10; round++) {
          const exits = yield* Effect.forEach(attackCalls(h, round, perKind), (call) => Effect.exit(call), {
            concurrency: 16
          })
          for (const exit of exits) {
            if (Exit.isSuccess(exit)) landed++
            else if (JSON.stringify(exit.cause).includes("OutsideWorkspace")) refused++
          }
        }
        const after = snapshot(h.outside)
        assert.deepStrictEqual(after, before, "nothing outside was created or changed")
        // The race really ran: some calls met the link (refused), some met the directory.
        assert.isAbove(refused, 0, "some calls found the link and were refused")
        assert.isAbove(landed, 0, "some calls found the directory and wrote")
      }).pipe(Effect.scoped, provide),
    120_000
  )

  it.live(
    "a file swapped for a FIFO under read_file, edit_file and grep: every call ends, and read_file is still served",
    () =>
      Effect.gen(function*() {
        const h = yield* setup()
        const names = Array.from({ length: 6 }, (_, i) => `f${i}`)
        for (const name of names) {
          nodeFs.writeFileSync(nodePath.join(h.root, name), "original line\n")
          execFileSync("mkfifo", [nodePath.join(h.root, `${name}.fifo`)])
        }
        nodeFs.writeFileSync(nodePath.join(h.root, "plain.txt"), "plain\n")
        // Should a read block on a FIFO (the bug), open each FIFO for writing once the test is
        // over, so the stuck threads get an end of file and the test process can exit.
        yield* Effect.addFinalizer(() =>
          Effect.sync(() => {
            for (const name of names) {
              for (const path of [name, `${name}.fifo`, `${name}.reg`]) {
                try {
                  nodeFs.closeSync(
                    nodeFs.openSync(
                      nodePath.join(h.root, path),
                      nodeFs.constants.O_WRONLY | nodeFs.constants.O_NONBLOCK
                    )
                  )
                } catch {
                  // not a FIFO, or no reader
                }
              }
            }
          })
        )
        for (const name of names) yield* swapper(["fifo", h.root, name, "", "60000"])

        const bound = "5 seconds"
        let timedOut = 0
        let refused = 0
        for (let round = 0; round < 15; round++) {
          const calls = names.flatMap((name) => [
            h.call("read_file", { path: name }),
            h.call("edit_file", { path: name, old_string: "original", new_string: "original kept" }),
            h.call("grep", { pattern: "line", path: name })
          ])
          const exits = yield* Effect.forEach(
            calls,
            (call) =>
              Effect.exit(call.pipe(
                Effect.timeoutOrElse({ duration: bound, orElse: () => Effect.sync(() => void timedOut++) })
              )),
            { concurrency: "unbounded" }
          )
          for (const exit of exits) {
            if (Exit.isFailure(exit) && JSON.stringify(exit.cause).includes("not a regular file")) refused++
          }
        }
        assert.strictEqual(timedOut, 0, "no call waited on a FIFO")
        assert.isAbove(refused, 0, "some calls met the FIFO and were refused")
        // More than four such calls ran at once above; a normal read is still served at once.
        const plain = yield* h.text("read_file", { path: "plain.txt" }).pipe(
          Effect.timeoutOrElse({ duration: bound, orElse: () => Effect.succeed("timed out") })
        )
        assert.strictEqual(plain, "     1\tplain")
      }).pipe(Effect.scoped, provide),
    120_000
  )
})
