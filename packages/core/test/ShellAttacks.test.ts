// "Read-only means read-only", through the shell: sub-agents spawned by a root agent (the
// real services, Fibril.layer over a ScriptedModel) run the attacks as tool calls against a
// real git repository with uncommitted work. Each test checks the disk afterwards and what
// the child's model read. The same tests run with bubblewrap and with no sandbox (a bwrap
// path that does not exist), where read-only roles get a denial and nothing runs.
import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Effect, Fiber, FileSystem, Path, Schedule } from "effect"
import type { Prompt } from "effect/ai"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import type * as Sandbox from "../src/Sandbox.ts"
import { Session } from "../src/Session.ts"
import type * as Shell from "../src/tools/Shell.ts"
import { provideNode, report, setup } from "./support.ts"
import { pidsWith } from "./tools/harness.ts"

const toolResults = (messages: ReadonlyArray<Prompt.Message>) =>
  messages.flatMap((m) => m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [p] : []) : [])

/** A workspace `<dir>/ws` beside `<dir>/outside`, the workspace a git repo with v.txt changed but not committed. */
const workspace = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
  const dir = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
  const root = path.join(dir, "ws")
  yield* fs.makeDirectory(root)
  yield* fs.makeDirectory(path.join(dir, "outside"))
  const git = (...args: ReadonlyArray<string>) =>
    spawner.exitCode(
      ChildProcess.make("git", ["-c", "user.name=t", "-c", "user.email=t@example.com", ...args], { cwd: root })
    )
  yield* git("init", "-q")
  yield* fs.writeFileString(path.join(root, "v.txt"), "committed\n")
  yield* git("add", "v.txt")
  yield* git("commit", "-q", "-m", "one")
  yield* fs.writeFileString(path.join(root, "v.txt"), "uncommitted work\n")
  /** Nothing the attacks aim at has changed. */
  const untouched = Effect.gen(function*() {
    assert.strictEqual(yield* fs.readFileString(path.join(root, "v.txt")), "uncommitted work\n")
    assert.isFalse(yield* fs.exists(path.join(root, "w.txt")))
    assert.isFalse(yield* fs.exists(path.join(dir, "outside.txt")))
    assert.deepStrictEqual(yield* fs.readDirectory(path.join(dir, "outside")), [])
    assert.isTrue(yield* fs.exists(path.join(root, ".git", "HEAD")))
  })
  return { dir, root, fs, path, untouched }
})

/** A child of `role` that runs each command as one shell call (all in one turn), then reports. */
const child = (role: string, commands: ReadonlyArray<string>): ScriptedModel.Rule => ({
  match: { role },
  turns: [
    {
      tool_calls: [
        { name: "shell", args: { command: commands[0]! } },
        ...commands.slice(1).map((command) => ({ name: "shell", args: { command } }))
      ]
    },
    { text: report("tried") }
  ]
})

/** A root that hands one task to each role, one after the other, then answers "done". */
const root = (...roles: ReadonlyArray<string>): ScriptedModel.Rule => ({
  match: { depth: 0 },
  turns: [
    ...roles.map((role) => ({
      tool_calls: [{ name: "task", args: { description: role, prompt: `as ${role}`, subagent_type: role } }] as const
    })),
    { text: "done" }
  ]
})

type Outcome =
  | { readonly ran: true; readonly result: Shell.Result }
  | { readonly ran: false; readonly error: string; readonly message: string }

/** What each child's model read back from its shell calls, by role. */
const outcomes = Effect.fn("outcomes")(function*(session: Session["Service"], parentId: string) {
  const byRole = new Map<string, Array<Outcome>>()
  for (const task of toolResults(yield* session.transcript(parentId))) {
    const { agent_id } = task.result as { agent_id: string }
    const info = yield* session.info(agent_id)
    byRole.set(
      info.role,
      toolResults(yield* session.transcript(agent_id)).map((r): Outcome =>
        r.isFailure
          ? { ran: false, ...(r.result as { error: string; message: string }) }
          : { ran: true, result: r.result as Shell.Result }
      )
    )
  }
  return byRole
})

const variants: ReadonlyArray<
  { readonly name: string; readonly sandboxed: boolean; readonly sandbox: Partial<Sandbox.Options> }
> = [
  { name: "with bubblewrap", sandboxed: true, sandbox: {} },
  { name: "without a sandbox", sandboxed: false, sandbox: { bwrapPath: "/nonexistent/fibril-test/bwrap" } }
]

const attacks = ["git checkout -- v.txt", "echo pwned > w.txt", "touch ../outside.txt"]

for (const variant of variants) {
  describe.skipIf(variant.sandboxed && process.platform !== "linux")(
    `shell attacks by sub-agents ${variant.name}`,
    () => {
      /** Every outcome is a refusal the model can read: a failed command, or (no sandbox) a denial. */
      const refused = (seen: ReadonlyArray<Outcome> | undefined, role: string, count: number) => {
        assert.strictEqual(seen?.length, count, role)
        for (const outcome of seen ?? []) {
          if (variant.sandboxed) {
            assert.isTrue(outcome.ran, role)
            if (outcome.ran) {
              assert.strictEqual(outcome.result.sandbox, "read-only")
              assert.notStrictEqual(outcome.result.exit_code, 0)
              assert.match(outcome.result.stderr, /Read-only file system/)
            }
          } else {
            assert.isFalse(outcome.ran, role)
            if (!outcome.ran) {
              assert.strictEqual(outcome.error, "SandboxUnavailable")
              assert.include(outcome.message, `shell is not available to the ${role} sub-agent`)
              assert.include(outcome.message, "install bubblewrap")
              assert.include(outcome.message, `mode = "off" under [sandbox.roles.${role}]`)
            }
          }
        }
      }

      it.live("explore's git checkout, echo > file and touch ../outside, and verifier's rm, change nothing", () =>
        Effect.gen(function*() {
          const ws = yield* workspace
          const { get } = yield* setup(
            {
              rules: [
                child("explore", attacks),
                child("verifier", ["rm -f v.txt", "rm -rf .git"]),
                root("explore", "verifier")
              ]
            },
            {},
            { root: ws.root, sandbox: variant.sandbox }
          )
          const session = get(Session)
          const parent = yield* session.create()
          assert.strictEqual((yield* session.prompt(parent.id, "go")).text, "done")
          const read = yield* outcomes(session, parent.id)
          refused(read.get("explore"), "explore", 3)
          refused(read.get("verifier"), "verifier", 2)
          yield* ws.untouched
        }).pipe(provideNode))

      it.live("an implementer writes inside the workspace; outside it only where no sandbox exists", () =>
        Effect.gen(function*() {
          const ws = yield* workspace
          const { get } = yield* setup(
            { rules: [child("implementer", ["echo made > made.txt", "touch ../outside.txt"]), root("implementer")] },
            {},
            { root: ws.root, sandbox: variant.sandbox }
          )
          const session = get(Session)
          const parent = yield* session.create()
          yield* session.prompt(parent.id, "go")
          const [inside, outside] = (yield* outcomes(session, parent.id)).get("implementer") ?? []
          assert.isTrue(inside?.ran && inside.result.exit_code === 0)
          assert.strictEqual(yield* ws.fs.readFileString(ws.path.join(ws.root, "made.txt")), "made\n")
          assert.isTrue(outside?.ran)
          if (outside?.ran !== true) return
          if (variant.sandboxed) {
            assert.strictEqual(outside.result.sandbox, "workspace-write")
            assert.notStrictEqual(outside.result.exit_code, 0)
            assert.include(outside.result.stderr, "Read-only file system")
            assert.isFalse(yield* ws.fs.exists(ws.path.join(ws.dir, "outside.txt")))
          } else {
            // The documented fallback: a writer's commands run unconfined, and it reads so.
            assert.deepStrictEqual([outside.result.sandbox, outside.result.exit_code], ["none", 0])
          }
        }).pipe(provideNode))

      it.live("an explore child's setsid escape is gone when its call ends and when the tree is interrupted", () =>
        Effect.gen(function*() {
          const ws = yield* workspace
          const finished = String(700_000 + Math.floor(Math.random() * 50_000))
          const hanging = String(750_000 + Math.floor(Math.random() * 50_000))
          const { get } = yield* setup(
            {
              rules: [
                {
                  ...child("explore", [`setsid sleep ${finished} > /dev/null 2>&1 & echo launched`]),
                  match: { prompt: "quick" }
                },
                {
                  ...child("explore", [
                    `(setsid sh -c 'sleep ${hanging}' &); nohup sleep ${hanging} > /dev/null 2>&1 & sleep 120`
                  ]),
                  match: { prompt: "slow" }
                },
                {
                  match: { depth: 0, prompt: "first" },
                  turns: [
                    {
                      tool_calls: [{
                        name: "task",
                        args: { description: "q", prompt: "quick", subagent_type: "explore" }
                      }]
                    },
                    { text: "done" }
                  ]
                },
                {
                  match: { depth: 0, prompt: "second" },
                  turns: [
                    {
                      tool_calls: [{
                        name: "task",
                        args: { description: "s", prompt: "slow", subagent_type: "explore" }
                      }]
                    },
                    { text: "never" }
                  ]
                }
              ]
            },
            {},
            { root: ws.root, sandbox: variant.sandbox }
          )
          const session = get(Session)
          const first = yield* session.create()
          yield* session.prompt(first.id, "first")
          const [quick] = (yield* outcomes(session, first.id)).get("explore") ?? []
          if (variant.sandboxed) assert.isTrue(quick?.ran && quick.result.stdout === "launched\n")
          else assert.isFalse(quick?.ran)
          assert.deepStrictEqual(pidsWith(finished), [], "the setsid'd sleep outlived the call")

          const second = yield* session.create()
          const fiber = yield* Effect.forkChild(session.prompt(second.id, "second"))
          if (!variant.sandboxed) {
            yield* Fiber.join(fiber)
            const [denied] = (yield* outcomes(session, second.id)).get("explore") ?? []
            assert.isFalse(denied?.ran)
            return assert.deepStrictEqual(pidsWith(hanging), [])
          }
          yield* Effect.suspend(() => pidsWith(hanging).length >= 2 ? Effect.void : Effect.fail("not yet")).pipe(
            Effect.retry({ schedule: Schedule.spaced("20 millis"), times: 250 })
          )
          const started = Date.now()
          yield* Fiber.interrupt(fiber)
          assert.isBelow(Date.now() - started, 1_000, "interrupting the tree took a second or more")
          assert.deepStrictEqual(pidsWith(hanging), [], "a process of the interrupted call survived")
        }).pipe(provideNode))
    }
  )
}
