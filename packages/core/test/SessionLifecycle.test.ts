// Session's own bookkeeping, driven through its layer with the ScriptedModel: restoring a
// transcript, closing tool calls a run left without results, the lifecycle events, the inbox,
// budgets of tokens and wall time, reassigning a role, and the errors it gives.
// (Written against the survivors of `npm run mutate -- packages/core/src/Session.ts`.)
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { ScriptedModel } from "@fibril/testkit"
import { Context, Deferred, Effect, Exit, Fiber, FileSystem, Layer, Option, PubSub, Schema } from "effect"
import { LanguageModel, Prompt } from "effect/ai"
import { TestClock } from "effect/testing"
import * as AgentEventsModule from "../src/AgentEvents.ts"
import { type AgentEvent, AgentEvents } from "../src/AgentEvents.ts"
import * as Fibril from "../src/Fibril.ts"
import * as FibrilConfig from "../src/FibrilConfig.ts"
import * as Models from "../src/Models.ts"
import * as Permission from "../src/Permission.ts"
import * as Roles from "../src/Roles.ts"
import * as SessionModule from "../src/Session.ts"
import { Session } from "../src/Session.ts"
import * as ToolRegistry from "../src/ToolRegistry.ts"
import * as Workspace from "../src/Workspace.ts"
import { provideNode, setup } from "./support.ts"

const user = (text: string) => Prompt.makeMessage("user", { content: [Prompt.makePart("text", { text })] })
const call = (id: string, name = "list_dir") =>
  Prompt.makePart("tool-call", { id, name, params: {}, providerExecuted: false })
const result = (id: string, name = "list_dir") =>
  Prompt.makePart("tool-result", { id, name, isFailure: false, result: "ok", providerExecuted: false })

const kinds = (events: ReadonlyArray<AgentEvent>, agentId: string) =>
  events.filter((e) => e.agent.agentId === agentId).map((e) =>
    e.reason === undefined ? e.type : `${e.type}:${e.reason}`
  )

describe("Session: restore and dangling tool calls", () => {
  it.effect("a restored run's unanswered calls get an Interrupted result before the next prompt; answered ones are kept", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ text: "resumed" }], repeat_last: true }] })
      const session = get(Session)
      const handed: Array<Prompt.Message> = []
      const observer: SessionModule.RunObserver = {
        onMessage: (_, message) => Effect.sync(() => void handed.push(message))
      }
      const system = Prompt.makeMessage("system", { content: "RESTORED SYSTEM" })
      const assistant = Prompt.makeMessage("assistant", { content: [call("c1"), call("c2"), call("c3")] })
      const answered = Prompt.makeMessage("tool", { content: [result("c1")] })
      const info = yield* session.restore({
        id: "agent_restored",
        depth: 0,
        role: Roles.roles.general,
        model: "default",
        description: "was running",
        transcript: [system, user("first"), assistant, answered],
        observer
      })
      assert.deepStrictEqual(
        [info.id, info.parentId, info.depth, info.role, info.model, info.description, info.running],
        ["agent_restored", undefined, 0, "general", "default", "was running", false]
      )
      const answer = yield* session.prompt("agent_restored", "go on")
      assert.strictEqual(answer.text, "resumed")
      const transcript = yield* session.transcript("agent_restored")
      assert.strictEqual(transcript[0], system, "the recorded system message is kept, not rebuilt")
      assert.deepStrictEqual(transcript.map((m) => m.role), [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
        "assistant"
      ])
      assert.strictEqual(transcript[3], answered, "the result that landed is untouched")
      const closed = transcript[4]!
      assert.strictEqual(closed.role, "tool")
      const parts = closed.role === "tool" ? closed.content : []
      assert.deepStrictEqual(
        parts.map((p) => p.type === "tool-result" ? p.providerExecuted : undefined),
        [false, false],
        "Fibril closed them, not the provider"
      )
      assert.deepStrictEqual(parts.map((p) => p.type === "tool-result" ? [p.id, p.name, p.isFailure] : []), [
        ["c2", "list_dir", true],
        ["c3", "list_dir", true]
      ])
      assert.deepStrictEqual(parts[0]!.type === "tool-result" ? parts[0]!.result : undefined, {
        error: "Interrupted",
        message: "the run was interrupted before this call finished; its effects are unknown"
      })
      // The store is handed the closing message first, then the new user message.
      assert.strictEqual(handed[0], closed)
      assert.strictEqual(handed[1], transcript[5])
      // A second prompt has nothing left to close.
      yield* session.prompt("agent_restored", "again")
      assert.deepStrictEqual(
        handed.slice(3).map((m) => m?.role),
        ["user", "assistant"],
        "nothing closed, nothing handed"
      )
      const after = yield* session.transcript("agent_restored")
      assert.deepStrictEqual(after.slice(7).map((m) => m.role), ["user", "assistant"])
    }).pipe(provideNode))

  it.effect("a run whose last message is the user's, or whose calls all answered, gets nothing added", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ text: "fine" }], repeat_last: true }] })
      const session = get(Session)
      const complete = [
        user("first"),
        Prompt.makeMessage("assistant", { content: [call("a")] }),
        Prompt.makeMessage("tool", { content: [result("a")] })
      ]
      for (const [id, transcript] of [["agent_u", [user("only")]], ["agent_c", complete]] as const) {
        yield* session.restore({ id, depth: 0, role: Roles.roles.general, model: "default", transcript })
        yield* session.prompt(id, "next")
        const roles = (yield* session.transcript(id)).map((m) => m.role)
        assert.deepStrictEqual(roles, ["system", ...transcript.map((m) => m.role), "user", "assistant"])
      }
    }).pipe(provideNode))

  it.effect("restore builds the system message when the transcript has none, returns a live session unchanged, narrows to what was recorded", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ text: "child answer" }], repeat_last: true }] })
      const session = get(Session)
      const parent = yield* session.create()
      const restored = yield* session.restore({
        id: "agent_child",
        parentId: parent.id,
        depth: 1,
        role: Roles.roles.explore,
        model: "default",
        recorded: { allow: ["read_file", "grep"] },
        budgets: { maxSteps: 7 },
        transcript: [
          user("task"),
          Prompt.makeMessage("assistant", { content: [Prompt.makePart("text", { text: "x" })] })
        ]
      })
      assert.strictEqual(restored.parentId, parent.id)
      assert.strictEqual(restored.depth, 1)
      assert.deepStrictEqual(Permission.toJson(restored.rules).allow, ["read_file", "grep"])
      const transcript = yield* session.transcript("agent_child")
      assert.deepStrictEqual(transcript.map((m) => m.role), ["system", "user", "assistant"])
      const system = transcript[0]!
      assert.include(system.role === "system" ? system.content : "", "role=explore depth=1")
      // A fork of the restored session starts from its whole restored history (before it ran again).
      const fork = yield* session.createChild("agent_child", { role: Roles.roles.explore, forkContext: true })
      const forked = yield* session.transcript(fork.id)
      assert.strictEqual(forked[1], transcript[1])
      assert.strictEqual(forked[2], transcript[2])
      // Restoring an id that is live gives the live session, not a rebuilt one.
      yield* session.prompt("agent_child", "more")
      const again = yield* session.restore({
        id: "agent_child",
        depth: 1,
        role: Roles.roles.general,
        model: "default",
        transcript: []
      })
      assert.strictEqual(again.steps, 1)
      assert.strictEqual(again.role, "explore")
      assert.strictEqual((yield* session.transcript("agent_child")).length, 5)
    }).pipe(provideNode))
})

describe("Session: lifecycle", () => {
  it.effect("events: started, step, completed; a failure's reason; an interruption, or a cancellation with its reason", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({
        rules: [
          { match: { prompt: "ok" }, turns: [{ text: "fine" }] },
          { match: { prompt: "fail" }, turns: [{ error: { kind: "fatal", message: "bad request" } }] },
          { match: { prompt: "hang" }, turns: [{ hang: true }] }
        ]
      })
      const session = get(Session)
      const subscription = yield* get(AgentEvents).subscribe
      const seen: Array<AgentEvent> = []
      const observer: SessionModule.RunObserver = { onEvent: (e) => void seen.push(e) }

      const ok = yield* session.create({ observer })
      yield* session.prompt(ok.id, "ok")
      assert.deepStrictEqual(kinds(yield* PubSub.takeAll(subscription), ok.id), [
        "spawned",
        "started",
        "step",
        "completed"
      ])
      assert.deepStrictEqual(
        kinds(seen, ok.id),
        ["spawned", "started", "step", "completed"],
        "the hook sees each event"
      )

      const failing = yield* session.create({ observer })
      yield* Effect.flip(session.prompt(failing.id, "fail"))
      const failed = kinds(yield* PubSub.takeAll(subscription), failing.id)
      assert.strictEqual(failed.length, 3)
      assert.match(failed[2]!, /^failed:.*bad request/)

      const interrupted = yield* session.create({ observer })
      const fiber = yield* Effect.forkChild(session.prompt(interrupted.id, "hang"))
      yield* Effect.yieldNow
      const running = yield* session.info(interrupted.id)
      assert.isTrue(running.running)
      assert.isTrue(running.waitingOnModel)
      assert.isTrue(Option.isSome(session.scopeOf(interrupted.id)))
      const busy = yield* Effect.flip(session.prompt(interrupted.id, "again"))
      assert.strictEqual(busy._tag, "SessionBusy")
      assert.strictEqual(
        busy.message,
        `session "${interrupted.id}" is already running a prompt; wait for it to finish`
      )
      yield* Fiber.interrupt(fiber)
      const stopped = yield* session.info(interrupted.id)
      assert.deepStrictEqual([stopped.running, stopped.waitingOnModel], [false, false])
      assert.isTrue(Option.isNone(session.scopeOf(interrupted.id)))
      assert.deepStrictEqual(kinds(yield* PubSub.takeAll(subscription), interrupted.id).slice(1), [
        "started",
        "interrupted:interrupted"
      ])

      // Marked cancelled: the same interruption is a cancellation with the reason; the next
      // run starts unmarked.
      const again = yield* Effect.forkChild(session.prompt(interrupted.id, "hang"))
      yield* Effect.yieldNow
      yield* session.markCancelled(interrupted.id, "the user stopped it")
      yield* session.markCancelled("agent_nobody", "ignored")
      yield* Fiber.interrupt(again)
      const third = yield* Effect.forkChild(session.prompt(interrupted.id, "hang"))
      yield* Effect.yieldNow
      yield* Fiber.interrupt(third)
      assert.deepStrictEqual(kinds(yield* PubSub.takeAll(subscription), interrupted.id), [
        "started",
        "cancelled:the user stopped it",
        "started",
        "interrupted:interrupted"
      ])
    }).pipe(Effect.scoped, provideNode))

  it.effect("unknown and disposed sessions fail with SessionNotFound naming the id", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ text: "fine" }] }] })
      const session = get(Session)
      const agent = yield* session.create()
      yield* session.dispose(agent.id)
      for (
        const attempt of [
          session.info(agent.id),
          session.transcript(agent.id),
          session.prompt(agent.id, "hi"),
          session.deliver(agent.id, "hi", false),
          session.reassign(agent.id, { role: Roles.roles.explore }),
          session.createChild(agent.id, { role: Roles.roles.explore })
        ]
      ) {
        const error = yield* Effect.flip(attempt as Effect.Effect<unknown, { readonly message: string; _tag: string }>)
        assert.strictEqual(error._tag, "SessionNotFound")
        assert.strictEqual(error.message, `no session with id "${agent.id}"`)
      }
      assert.deepStrictEqual(yield* session.takeUnread(agent.id), [])
    }).pipe(provideNode))

  it.effect("allowed_tools naming tools that do not exist is refused, naming them and the tools there are", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ text: "fine" }] }] })
      const session = get(Session)
      const one = yield* Effect.flip(session.create({ role: "custom", allowedTools: ["read_file", "reed_file"] }))
      assert.strictEqual(one._tag, "InvalidRoleRequest")
      assert.include(
        one.message,
        "allowed_tools names a tool that does not exist: \"reed_file\"; the tools are: read_file,"
      )
      const two = yield* Effect.flip(
        session.createChild(undefined, { role: Roles.roles.explore, allowedTools: ["nope", "grep", "nada"] })
      )
      assert.include(two.message, "allowed_tools names tools that do not exist: \"nope\", \"nada\"; the tools are: ")
    }).pipe(provideNode))
})

describe("Session: inbox", () => {
  it.effect("a delivery with interrupt cancels the model call in flight and the step is taken again with the message", () =>
    Effect.gen(function*() {
      const calls: Array<number> = []
      const inCall = yield* Deferred.make<void>()
      const { get } = yield* setup({
        rules: [{
          respond: (c) =>
            Effect.suspend(() => {
              calls.push(c.messages.length)
              return calls.length === 1
                ? Effect.andThen(Deferred.succeed(inCall, undefined), Effect.never)
                : Effect.succeed({ text: "saw the news" })
            })
        }]
      })
      const session = get(Session)
      const subscription = yield* get(AgentEvents).subscribe
      const agent = yield* session.create()
      const fiber = yield* Effect.forkChild(session.prompt(agent.id, "start"))
      yield* Deferred.await(inCall)
      yield* Effect.yieldNow
      assert.isTrue((yield* session.info(agent.id)).waitingOnModel)
      yield* session.deliver(agent.id, "news", true)
      const answer = yield* Fiber.join(fiber)
      assert.strictEqual(answer.text, "saw the news")
      assert.strictEqual(answer.steps, 1, "the cut step is not counted")
      const texts = (yield* session.transcript(agent.id)).map((m) =>
        m.role === "user" ? (m.content[0] as { text: string }).text : m.role
      )
      assert.deepStrictEqual(texts, ["system", "start", "news", "assistant"])
      assert.strictEqual(calls.length, 2)
      const events = kinds(yield* PubSub.takeAll(subscription), agent.id)
      assert.deepStrictEqual(events, ["spawned", "started", "step", "completed"], "no retry, no failure")
    }).pipe(Effect.scoped, provideNode))

  it.effect("a delivery without interrupt waits for the step; one delivered after the answer is left unread", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const { get } = yield* setup({
        rules: [{
          respond: (c) =>
            c.turn === 0 ? Effect.as(Deferred.await(gate), { text: "first" }) : Effect.succeed({ text: "second" })
        }]
      })
      const session = get(Session)
      const agent = yield* session.create()
      const fiber = yield* Effect.forkChild(session.prompt(agent.id, "start"))
      yield* Effect.yieldNow
      yield* session.deliver(agent.id, "later", false)
      yield* session.deliver(agent.id, "and more", false)
      yield* Deferred.succeed(gate, undefined)
      const answer = yield* Fiber.join(fiber)
      // The queued message kept the run going for one more step.
      assert.strictEqual(answer.text, "second")
      assert.strictEqual(answer.steps, 2, "both queued messages go with the next step")
      const roles = (yield* session.transcript(agent.id)).map((m) => m.role)
      assert.deepStrictEqual(roles, ["system", "user", "assistant", "user", "user", "assistant"])
      yield* session.deliver(agent.id, "too late", true)
      yield* session.deliver(agent.id, "and this", false)
      assert.deepStrictEqual(yield* session.takeUnread(agent.id), ["too late", "and this"])
      assert.deepStrictEqual(yield* session.takeUnread(agent.id), [])
    }).pipe(provideNode))
})

describe("Session: budgets", () => {
  it.effect("max_tokens counts the session's own usage; tree_max_tokens its whole tree's", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({
        rules: [{ turns: [{ text: "big", usage: { input: 60, output: 40 } }], repeat_last: true }]
      })
      const session = get(Session)
      const root = yield* session.create()
      yield* session.prompt(root.id, "root work")
      const exact = yield* session.createChild(root.id, { role: Roles.roles.explore, budgets: { maxTokens: 100 } })
      const fits = yield* session.prompt(exact.id, "fits")
      assert.strictEqual(fits.usage.input + fits.usage.output, 100)
      const small = yield* session.createChild(root.id, { role: Roles.roles.explore, budgets: { maxTokens: 99 } })
      const own = yield* Effect.flip(session.prompt(small.id, "too big"))
      assert.deepStrictEqual(own._tag === "BudgetExceeded" ? [own.budget, own.limit] : [], ["max_tokens", 99])
      // The tree has used 300 by now (root, two children); a child allowed 400 for the tree
      // fails after its own 100 only once the tree is past it.
      const tree = yield* session.createChild(root.id, { role: Roles.roles.explore, budgets: { treeMaxTokens: 400 } })
      yield* session.prompt(tree.id, "fits the tree")
      const over = yield* Effect.flip(session.prompt(tree.id, "past the tree"))
      assert.deepStrictEqual(over._tag === "BudgetExceeded" ? [over.budget, over.limit] : [], ["tree_max_tokens", 400])
      const info = yield* session.info(root.id)
      assert.strictEqual(info.treeUsage.input + info.treeUsage.output, 500)
      assert.deepStrictEqual(info.usageSteps, { reported: 5, estimated: 0 })
      assert.strictEqual(info.usage.input + info.usage.output, 100)
    }).pipe(provideNode))

  it.effect("max_wall_secs ends a run that takes longer (TestClock)", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ hang: true }] }] }, { apiTimeoutSecs: 1000 })
      const session = get(Session)
      const root = yield* session.create()
      const child = yield* session.createChild(root.id, { role: Roles.roles.explore, budgets: { maxWallSecs: 30 } })
      const fiber = yield* Effect.forkChild(session.prompt(child.id, "slow"))
      yield* TestClock.adjust("29999 millis")
      assert.isUndefined(fiber.pollUnsafe())
      yield* TestClock.adjust("1 millis")
      const exit = yield* Fiber.await(fiber)
      assert.isTrue(Exit.isFailure(exit))
      const error = Exit.isFailure(exit) ? exit.cause.reasons.find((r) => r._tag === "Fail") : undefined
      const failure = error?._tag === "Fail"
        ? error.error as { _tag: string; budget: string; limit: number }
        : undefined
      assert.deepStrictEqual([failure?._tag, failure?.budget, failure?.limit], ["BudgetExceeded", "max_wall_secs", 30])
      assert.isFalse((yield* session.info(child.id)).running)
    }).pipe(provideNode))

  it.effect("a child's step budget is [subagents] max_steps, or its own; a root's is max_steps", () =>
    Effect.gen(function*() {
      const { get } = yield* setup(
        { rules: [{ turns: [{ tool_calls: [{ name: "list_dir", args: {} }] }], repeat_last: true }] },
        { maxSteps: 4, childMaxSteps: 2 }
      )
      const session = get(Session)
      const root = yield* session.create()
      const steps = function*(id: string) {
        const error = yield* Effect.flip(session.prompt(id, "loop"))
        return error._tag === "BudgetExceeded" ? error.limit : -1
      }
      assert.strictEqual(yield* steps(root.id), 4)
      assert.strictEqual(yield* steps((yield* session.createChild(root.id, { role: Roles.roles.explore })).id), 2)
      const own = yield* session.createChild(root.id, { role: Roles.roles.explore, budgets: { maxSteps: 3 } })
      assert.strictEqual(yield* steps(own.id), 3)
    }).pipe(provideNode))
})

describe("Session: reassign", () => {
  it.effect("reassigning narrows the session and every descendant; a widening role is refused and changes nothing", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ text: "fine" }] }] }, { maxDepth: 3 })
      const session = get(Session)
      const root = yield* session.create()
      const child = yield* session.createChild(root.id, { role: Roles.roles.general })
      const grandchild = yield* session.createChild(child.id, { role: Roles.roles.general })
      const greatGrandchild = yield* session.createChild(grandchild.id, { role: Roles.roles.general })
      const other = yield* session.createChild(root.id, { role: Roles.roles.general })
      const narrowed = yield* session.reassign(child.id, { role: Roles.roles.explore })
      assert.strictEqual(narrowed.role, "explore")
      const writes = (rules: Permission.Rules) => rules.postures.has("write")
      assert.isFalse(writes(narrowed.rules))
      assert.isFalse(writes((yield* session.info(grandchild.id)).rules), "the grandchild narrows too")
      assert.isFalse(writes((yield* session.info(greatGrandchild.id)).rules), "and its child")
      assert.isTrue(writes((yield* session.info(other.id)).rules), "a sibling is untouched")
      assert.isTrue(writes((yield* session.info(root.id)).rules), "the parent is untouched")
      const refused = yield* Effect.flip(session.reassign(child.id, { role: Roles.roles.general }))
      assert.strictEqual(refused._tag, "PermissionWidening")
      assert.deepStrictEqual(
        refused._tag === "PermissionWidening" ? [refused.agentId, refused.from, refused.to] : [],
        [child.id, "explore", "general"]
      )
      const after = yield* session.info(child.id)
      assert.strictEqual(after.role, "explore")
      assert.isFalse(writes(after.rules))
      // A root is narrowed against the root rules.
      const rootNarrowed = yield* session.reassign(root.id, { role: Roles.roles.review })
      assert.strictEqual(rootNarrowed.role, "review")
      assert.isFalse(writes(rootNarrowed.rules))
    }).pipe(provideNode))
})

describe("Session: system messages and forks", () => {
  it.effect("the system message is the role header, the workspace, the prompt and the memory section; shared per role and depth", () =>
    Effect.gen(function*() {
      const { get, fs, path, root } = yield* setup({ rules: [{ turns: [{ text: "fine" }] }] })
      const session = get(Session)
      const systemOf = (id: string) =>
        Effect.map(session.transcript(id), (t) => t[0]!.role === "system" ? t[0]!.content : "")
      const plain = yield* session.create({ systemPrompt: "CUSTOM PROMPT" })
      assert.strictEqual(
        yield* systemOf(plain.id),
        `${Roles.header("general", 0)}\nWorkspace: ${root}\n\nCUSTOM PROMPT`
      )
      yield* fs.makeDirectory(path.join(root, ".fibril"), { recursive: true })
      yield* fs.writeFileString(path.join(root, ".fibril", "memory.md"), "- the build uses make\n")
      const remembering = yield* session.create({ systemPrompt: "CUSTOM PROMPT" })
      const withMemory = yield* systemOf(remembering.id)
      assert.isTrue(withMemory.startsWith(`${Roles.header("general", 0)}\nWorkspace: ${root}\n\nCUSTOM PROMPT\n\n`))
      assert.include(withMemory, "the build uses make")
      // Siblings share one system message; another depth or role gets its own.
      const a = yield* session.createChild(plain.id, { role: Roles.roles.explore })
      const b = yield* session.createChild(remembering.id, { role: Roles.roles.explore })
      const c = yield* session.createChild(a.id, { role: Roles.roles.explore })
      const d = yield* session.createChild(plain.id, { role: Roles.roles.review })
      const first = (id: string) => Effect.map(session.transcript(id), (t) => t[0]!)
      assert.strictEqual(yield* first(a.id), yield* first(b.id))
      assert.include(yield* systemOf(a.id), Roles.roles.explore.prompt)
      assert.include(yield* systemOf(a.id), "the build uses make")
      assert.notStrictEqual(yield* first(c.id), yield* first(a.id))
      assert.include(yield* systemOf(c.id), Roles.header("explore", 2))
      assert.include(yield* systemOf(d.id), Roles.header("review", 1))
      // After a hand edit a new conversation reads the file again; a sub-agent inherits what
      // this process last read.
      yield* fs.writeFileString(path.join(root, ".fibril", "memory.md"), "- the build uses bazel now\n")
      const child = yield* session.createChild(plain.id, { role: Roles.roles.verifier })
      assert.include(yield* systemOf(child.id), "the build uses make")
      assert.notInclude(yield* systemOf(child.id), "bazel")
      const fresh = yield* session.create({ systemPrompt: "CUSTOM PROMPT" })
      assert.include(yield* systemOf(fresh.id), "the build uses bazel now")
    }).pipe(provideNode))

  it.effect("a fork starts from the parent's last request and says it is a fork and who it is; a plain child starts empty", () =>
    Effect.gen(function*() {
      const { get, root } = yield* setup({
        rules: [{ turns: [{ tool_calls: [{ name: "list_dir", args: {} }] }, { text: "parent done" }] }]
      })
      const session = get(Session)
      const parent = yield* session.create()
      yield* session.prompt(parent.id, "parent task")
      const history = yield* session.transcript(parent.id)
      const fork = yield* session.createChild(parent.id, { role: Roles.roles.explore, forkContext: true })
      const forked = yield* session.transcript(fork.id)
      assert.strictEqual(forked[0], history[0], "the parent's system message, byte-identical")
      // The last request was the system message, the task, the tool call and its result.
      assert.deepStrictEqual(forked.slice(1, 4), history.slice(1, 4))
      const texts = forked.slice(4).map((m) => m.role === "user" ? (m.content[0] as { text: string }).text : m.role)
      assert.deepStrictEqual(texts, [
        "[fork] You are a forked sub-agent: the conversation above is your parent's, shared for context. " +
        "Do not continue the parent's work; do only the task that follows.",
        `${Roles.header("explore", 1)}\nWorkspace: ${root}\n\n${Roles.roles.explore.prompt}`
      ])
      const plain = yield* session.createChild(parent.id, { role: Roles.roles.explore })
      assert.strictEqual((yield* session.transcript(plain.id)).length, 1)
      const orphan = yield* session.createChild(undefined, { role: Roles.roles.explore, forkContext: true })
      const info = yield* session.info(orphan.id)
      assert.deepStrictEqual([info.depth, info.parentId, info.model], [1, undefined, "default"])
      assert.strictEqual((yield* session.transcript(orphan.id)).length, 1)
    }).pipe(provideNode))

  it.effect("a retry is published with its attempt, reason and delay; info counts tool calls and the last tool", () =>
    Effect.gen(function*() {
      const { get } = yield* setup(
        {
          rules: [{
            turns: [
              {
                error: { kind: "retryable", message: "overloaded", retry_after_ms: 1500, times: 1 },
                tool_calls: [{ name: "list_dir", args: {} }]
              },
              { text: "done" }
            ]
          }]
        },
        { maxRetries: 2, retryBaseMs: 1000, retryMaxMs: 30_000 }
      )
      const session = get(Session)
      const subscription = yield* get(AgentEvents).subscribe
      const agent = yield* session.create()
      const fiber = yield* Effect.forkChild(session.prompt(agent.id, "go"))
      yield* TestClock.adjust("31 seconds")
      const answer = yield* Fiber.join(fiber)
      assert.deepStrictEqual([answer.steps, answer.toolCalls], [2, 1])
      const retries = (yield* PubSub.takeAll(subscription)).filter((e) => e.type === "retry")
      assert.strictEqual(retries.length, 1)
      assert.strictEqual(
        retries[0]!.reason,
        "attempt 1 failed (RateLimitError: ScriptedModel.generateText: Rate limit exceeded. Retry after 1s 500ms); " +
          "retrying in 1500 ms"
      )
      const info = yield* session.info(agent.id)
      assert.deepStrictEqual([info.steps, info.toolCalls, info.lastTool], [2, 1, "list_dir"])
    }).pipe(Effect.scoped, provideNode))
})

describe("Session: rules of new agents", () => {
  it.effect("a definition, extra denials or another spec of the same role name are not served a sibling's cached rules", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ text: "fine" }] }] })
      const session = get(Session)
      const plainRoot = yield* session.create()
      const denyingRoot = yield* session.create({ deny: ["shell"] })
      assert.isFalse(plainRoot.rules.deny.has("shell"))
      assert.isTrue(denyingRoot.rules.deny.has("shell"))
      const plain = yield* session.createChild(plainRoot.id, { role: Roles.roles.general })
      const defined = yield* session.createChild(plainRoot.id, {
        role: Roles.roles.general,
        definition: { allow: ["read_file"] }
      })
      const denying = yield* session.createChild(plainRoot.id, { role: Roles.roles.general, deny: ["grep"] })
      assert.deepStrictEqual(Permission.toJson(defined.rules).allow, ["read_file"])
      assert.notDeepEqual(Permission.toJson(plain.rules).allow, ["read_file"])
      assert.isTrue(denying.rules.deny.has("grep"))
      assert.isFalse(plain.rules.deny.has("grep"))
      // A role spec of the same name but a narrower ceiling (an agent definition named like a
      // built-in role) gets its own rules.
      // Siblings of one role with other allowed_tools (none given, an empty list, another list).
      const all = yield* session.createChild(plainRoot.id, { role: Roles.roles.explore })
      const none = yield* session.createChild(plainRoot.id, { role: Roles.roles.explore, allowedTools: [] })
      const reads = yield* session.createChild(plainRoot.id, { role: Roles.roles.explore, allowedTools: ["read_file"] })
      const greps = yield* session.createChild(plainRoot.id, { role: Roles.roles.explore, allowedTools: ["grep"] })
      assert.deepStrictEqual(
        [all, none, reads, greps].map((c) => Permission.toJson(c.rules).allow),
        [Permission.toJson(all.rules).allow, [], ["read_file"], ["grep"]]
      )
      assert.notDeepEqual(Permission.toJson(all.rules).allow, [])
      const readOnly: Roles.RoleSpec = { ...Roles.roles.general, postures: Roles.roles.explore.postures }
      const narrowed = yield* session.createChild(plainRoot.id, { role: readOnly })
      assert.isTrue(plain.rules.postures.has("write"))
      assert.isFalse(narrowed.rules.postures.has("write"))
    }).pipe(provideNode))
})

describe("Session: hooks", () => {
  it.effect("onMessage sees every message in order, each tool result on its own; beforeModelCall runs before each call; beforeFinish can go on", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({
        rules: [{
          turns: [
            { tool_calls: [{ name: "list_dir", args: {} }, { name: "glob", args: { pattern: "*" } }] },
            { text: "first answer" },
            { text: "second answer" }
          ]
        }]
      })
      const session = get(Session)
      const log: Array<string> = []
      let finishes = 0
      const observer: SessionModule.RunObserver = {
        beforeFinish: (id) =>
          Effect.sync(() => {
            log.push(`beforeFinish ${id === agent.id}`)
            return finishes++ === 0 ? "children reported" : undefined
          }),
        onMessage: (id, message) =>
          Effect.sync(() => {
            const parts = message.role === "tool" || message.role === "assistant" ? message.content.length : 1
            log.push(`${message.role}/${parts} ${id === agent.id}`)
          }),
        beforeModelCall: (id) => Effect.sync(() => void log.push(`call ${id === agent.id}`))
      }
      const agent = yield* session.create({ observer })
      const answer = yield* session.prompt(agent.id, "go")
      assert.strictEqual(answer.text, "second answer")
      assert.deepStrictEqual(log, [
        "user/1 true",
        "call true",
        "assistant/2 true",
        "tool/1 true",
        "tool/1 true",
        "call true",
        "assistant/1 true",
        "beforeFinish true",
        "user/1 true",
        "call true",
        "assistant/1 true",
        "beforeFinish true"
      ])
      const transcript = yield* session.transcript(agent.id)
      const handedBack = transcript.at(-2)!
      assert.deepStrictEqual(handedBack.role === "user" ? handedBack.content[0] : undefined, {
        ...Prompt.makePart("text", { text: "children reported" })
      })
    }).pipe(provideNode))

  it.effect("a failed run's reason redacts credentials in URLs", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({
        rules: [{ turns: [{ error: { kind: "fatal", message: "refused by https://bob:hunter2@api.example.com/v1" } }] }]
      })
      const session = get(Session)
      const subscription = yield* get(AgentEvents).subscribe
      const agent = yield* session.create()
      yield* Effect.flip(session.prompt(agent.id, "go"))
      const failed = (yield* PubSub.takeAll(subscription)).find((e) => e.type === "failed")!
      assert.include(failed.reason!, "api.example.com/v1")
      assert.notInclude(failed.reason!, "hunter2")
    }).pipe(Effect.scoped, provideNode))
})

describe("Session: usage a provider does not report", () => {
  it.effect("is estimated from the request and the answer, and counted as estimated up the tree", () =>
    Effect.gen(function*() {
      // A provider whose finish part has no token counts (ScriptedModel always reports them).
      const unreporting = Layer.effect(
        LanguageModel.LanguageModel,
        LanguageModel.make({
          generateText: () =>
            Effect.succeed([
              { type: "text", text: "an answer of some length" },
              { type: "finish", reason: "stop", usage: { inputTokens: {}, outputTokens: {} } }
            ] as never),
          streamText: () => Effect.die("not used") as never
        })
      )
      const fs = yield* FileSystem.FileSystem
      const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      const context = yield* Layer.build(Fibril.layer({ cwd: root }).pipe(Layer.provide(unreporting)))
      const session = Context.get(context, Session)
      const parent = yield* session.create()
      const child = yield* session.createChild(parent.id, { role: Roles.roles.explore })
      const first = yield* session.prompt(child.id, "a short task")
      const second = yield* session.prompt(child.id, "a second task, after the first answer")
      // The estimate counts what was sent: the second request holds the first exchange too.
      assert.isAbove(first.usage.input, 0)
      assert.isAbove(first.usage.output, 0)
      assert.isAbove(second.usage.input, first.usage.input)
      assert.strictEqual(second.usage.output, first.usage.output)
      const parentInfo = yield* session.info(parent.id)
      assert.deepStrictEqual(parentInfo.usageSteps, { reported: 0, estimated: 2 })
      assert.strictEqual(parentInfo.treeUsage.input, first.usage.input + second.usage.input)
      assert.deepStrictEqual((yield* session.info(child.id)).usageSteps, { reported: 0, estimated: 2 })
    }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
})

describe("Session: what a new agent is given", () => {
  it.effect("a root gets its role's prompt, the default model and its label; children lose task/todowrite, and spawn at max_depth", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ text: "fine" }] }] }, { maxDepth: 2 })
      const session = get(Session)
      const root = yield* session.create()
      assert.strictEqual(root.model, "default")
      assert.strictEqual(root.rules.label, "general agent")
      const system = (yield* session.transcript(root.id))[0]!
      assert.isTrue((system.role === "system" ? system.content : "").endsWith(Roles.roles.general.prompt))
      assert.isFalse(root.rules.deny.has("task"))
      assert.isTrue(root.rules.postures.has("spawn"))
      const child = yield* session.createChild(root.id, { role: Roles.roles.general })
      assert.strictEqual(child.rules.label, "general sub-agent at depth 1")
      assert.isTrue(child.rules.deny.has("task") && child.rules.deny.has("todowrite"))
      assert.isTrue(child.rules.postures.has("spawn"), "below max_depth a child may spawn")
      const grandchild = yield* session.createChild(child.id, { role: Roles.roles.general })
      assert.isFalse(grandchild.rules.postures.has("spawn"), "at max_depth nobody spawns")
    }).pipe(provideNode))
})

describe("Session: edges (tests from the second mutation run)", () => {
  const systemText = (message: Prompt.Message | undefined) => message?.role === "system" ? message.content : ""

  it.effect("a dangling call whose id an earlier, answered call also had is still closed", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ text: "fine" }], repeat_last: true }] })
      const session = get(Session)
      // Some providers number calls per turn: the second turn's call reuses "call_0".
      const transcript = [
        user("first"),
        Prompt.makeMessage("assistant", { content: [call("call_0")] }),
        Prompt.makeMessage("tool", { content: [result("call_0")] }),
        Prompt.makeMessage("assistant", { content: [call("call_0", "read_file")] })
      ]
      yield* session.restore({ id: "agent_reused", depth: 0, role: Roles.roles.general, model: "default", transcript })
      yield* session.prompt("agent_reused", "go on")
      const after = yield* session.transcript("agent_reused")
      assert.deepStrictEqual(after.map((m) => m.role), [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "user",
        "assistant"
      ])
      const closed = after[5]!
      assert.deepStrictEqual(
        closed.role === "tool" ? closed.content.map((p) => p.type === "tool-result" ? [p.id, p.name] : []) : [],
        [["call_0", "read_file"]]
      )
    }).pipe(provideNode))

  it.effect("restore of an empty transcript builds the system message and starts with no messages", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ text: "fine" }] }] })
      const session = get(Session)
      const info = yield* session.restore({
        id: "agent_empty",
        depth: 0,
        role: Roles.roles.general,
        model: "default",
        transcript: []
      })
      assert.strictEqual(info.id, "agent_empty")
      const transcript = yield* session.transcript("agent_empty")
      assert.strictEqual(transcript.length, 1)
      assert.include(systemText(transcript[0]), Roles.header("general", 0))
    }).pipe(provideNode))

  it.effect("reassign with a definition narrows to the definition's tools too", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ text: "fine" }] }] })
      const session = get(Session)
      const root = yield* session.create()
      const child = yield* session.createChild(root.id, { role: Roles.roles.general })
      const reassigned = yield* session.reassign(child.id, {
        role: Roles.roles.explore,
        definition: { allow: ["read_file"] }
      })
      assert.deepStrictEqual(Permission.toJson(reassigned.rules).allow, ["read_file"])
    }).pipe(provideNode))

  it.effect("scopeOf an unknown or idle session is none", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ text: "fine" }] }] })
      const session = get(Session)
      const root = yield* session.create()
      assert.isTrue(Option.isNone(session.scopeOf("agent_nobody")))
      assert.isTrue(Option.isNone(session.scopeOf(root.id)))
    }).pipe(provideNode))

  it.effect("a memory file that cannot be read leaves the system message without a memory section", () =>
    Effect.gen(function*() {
      const { get, fs, path, root } = yield* setup({ rules: [{ turns: [{ text: "fine" }] }] })
      const session = get(Session)
      // A directory where the file should be: reading it fails (not "not found").
      yield* fs.makeDirectory(path.join(root, ".fibril", "memory.md"), { recursive: true })
      const agent = yield* session.create({ systemPrompt: "CUSTOM PROMPT" })
      assert.strictEqual(
        systemText((yield* session.transcript(agent.id))[0]),
        `${Roles.header("general", 0)}\nWorkspace: ${root}\n\nCUSTOM PROMPT`
      )
      const child = yield* session.createChild(agent.id, { role: Roles.roles.explore })
      assert.isTrue(systemText((yield* session.transcript(child.id))[0]).endsWith(Roles.roles.explore.prompt))
    }).pipe(provideNode))

  it.effect("without a Memory service there is no memory section; a child runs on its parent's model", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const root = yield* fs.realPath(yield* fs.makeTempDirectoryScoped())
      const big = yield* ScriptedModel.make({ rules: [{ turns: [{ text: "answered by big" }], repeat_last: true }] })
      const small = yield* ScriptedModel.make({
        rules: [{ turns: [{ text: "answered by small" }], repeat_last: true }]
      })
      const resolved: Array<string> = []
      const catalog = Layer.succeed(
        Models.Models,
        Models.Models.of({
          defaultModel: "big",
          available: ["big", "small"],
          resolve: (model) => {
            resolved.push(model)
            return model === "small" ? Effect.succeed(small) : Effect.succeed(big)
          }
        })
      )
      const context = yield* Layer.build(
        SessionModule.layer().pipe(
          Layer.provide(
            Layer.mergeAll(ToolRegistry.layer, AgentEventsModule.layer, Permission.layer({ deny: [] })).pipe(
              Layer.provideMerge(Workspace.layer(root))
            )
          ),
          Layer.provide(catalog)
        )
      )
      const session = Context.get(context, Session)
      const parent = yield* session.create({ model: "small", systemPrompt: "CUSTOM PROMPT" })
      assert.strictEqual(
        systemText((yield* session.transcript(parent.id))[0]),
        `${Roles.header("general", 0)}\nWorkspace: ${root}\n\nCUSTOM PROMPT`
      )
      const child = yield* session.createChild(parent.id, { role: Roles.roles.explore })
      assert.strictEqual(child.model, "small")
      assert.deepStrictEqual(resolved, ["small"], "the parent's model is reused, not resolved again")
      assert.strictEqual((yield* session.prompt(child.id, "go")).text, "answered by small")
      const other = yield* session.createChild(parent.id, { role: Roles.roles.explore, model: "big" })
      assert.strictEqual(other.model, "big")
      assert.strictEqual((yield* session.prompt(other.id, "go")).text, "answered by big")
      assert.deepStrictEqual(resolved, ["small", "big"])
    }).pipe(Effect.scoped, provideNode))

  it.effect("the shared system messages are bounded: after 256 distinct ones the cache starts over", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ text: "fine" }] }] })
      const session = get(Session)
      const systemOf = (prompt: string) =>
        Effect.flatMap(
          session.create({ systemPrompt: prompt }),
          (info) => Effect.map(session.transcript(info.id), (t) => t[0]!)
        )
      const first = yield* systemOf("p0")
      for (let i = 1; i < 256; i++) yield* systemOf(`p${i}`)
      // 256 cached: all still shared.
      assert.strictEqual(yield* systemOf("p0"), first)
      assert.strictEqual(yield* systemOf("p128"), yield* systemOf("p128"))
      // The 257th starts the cache over with itself alone.
      const newest = yield* systemOf("p256")
      assert.strictEqual(yield* systemOf("p256"), newest, "the message that started it over is kept")
      const again = yield* systemOf("p0")
      assert.notStrictEqual(again, first, "an older one is built anew")
      // The count starts again from that one: 254 more fit before the next start over.
      for (let i = 257; i < 511; i++) yield* systemOf(`p${i}`)
      assert.strictEqual(yield* systemOf("p256"), newest)
      yield* systemOf("p511")
      assert.notStrictEqual(yield* systemOf("p256"), newest)
    }).pipe(provideNode))

  it.effect("siblings' shared rules are bounded per parent: after 64 distinct grants the cache starts over", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ text: "fine" }] }] })
      const session = get(Session)
      const parent = yield* session.create()
      const tools = ["read_file", "list_dir", "grep", "glob", "write_file", "edit_file", "shell", "remember"]
      // 64 distinct allowed_tools lists of tools that exist.
      const grants: Array<ReadonlyArray<string>> = []
      for (let i = 0; i < tools.length; i++) {
        for (let j = 0; j < tools.length; j++) grants.push(i === j ? [tools[i]!] : [tools[i]!, tools[j]!])
      }
      assert.strictEqual(new Set(grants.map((g) => g.join())).size, 64)
      const rulesOf = (allowedTools: ReadonlyArray<string>) =>
        Effect.map(session.createChild(parent.id, { role: Roles.roles.general, allowedTools }), (info) => info.rules)
      const first = yield* rulesOf(grants[0]!)
      for (const grant of grants.slice(1)) yield* rulesOf(grant)
      assert.strictEqual(yield* rulesOf(grants[0]!), first, "64 grants: all still shared")
      yield* rulesOf(["read_file", "grep", "glob"])
      assert.notStrictEqual(yield* rulesOf(grants[0]!), first, "the 65th started the cache over")
    }).pipe(provideNode))

  it.effect("with no onMessage hook, dangling calls are still closed before the next prompt", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ text: "fine" }], repeat_last: true }] })
      const session = get(Session)
      const transcript = [user("first"), Prompt.makeMessage("assistant", { content: [call("c1")] })]
      yield* session.restore({ id: "agent_quiet", depth: 0, role: Roles.roles.general, model: "default", transcript })
      assert.strictEqual((yield* session.prompt("agent_quiet", "go on")).text, "fine")
      const roles = (yield* session.transcript("agent_quiet")).map((m) => m.role)
      assert.deepStrictEqual(roles, ["system", "user", "assistant", "tool", "user", "assistant"])
    }).pipe(provideNode))

  it.effect("siblings whose allowed_tools read the same run together are not served each other's rules", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ text: "fine" }] }] })
      const registry = get(ToolRegistry.ToolRegistry)
      for (const name of ["probe", "xyz", "probex", "yz"]) {
        yield* registry.register(ToolRegistry.define({
          name,
          description: name,
          parameters: Schema.Struct({}),
          posture: "read",
          handler: () => Effect.succeed(name)
        }))
      }
      const session = get(Session)
      const parent = yield* session.create()
      const allowed = (allowedTools: ReadonlyArray<string>) =>
        Effect.map(
          session.createChild(parent.id, { role: Roles.roles.general, allowedTools }),
          (info) => Permission.toJson(info.rules).allow
        )
      assert.deepStrictEqual(yield* allowed(["probe", "xyz"]), ["probe", "xyz"])
      assert.deepStrictEqual(yield* allowed(["probex", "yz"]), ["probex", "yz"])
    }).pipe(provideNode))

  it.effect("a child's denials are exactly task and todowrite plus what it was given", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({ rules: [{ turns: [{ text: "fine" }] }] })
      const session = get(Session)
      const root = yield* session.create()
      const deny = (info: { readonly rules: Permission.Rules }) => [...Permission.toJson(info.rules).deny].sort()
      assert.deepStrictEqual(deny(root), [])
      assert.deepStrictEqual(deny(yield* session.createChild(root.id, { role: Roles.roles.general })), [
        "task",
        "todowrite"
      ])
      assert.deepStrictEqual(
        deny(yield* session.createChild(root.id, { role: Roles.roles.general, deny: ["shell"] })),
        ["shell", "task", "todowrite"]
      )
    }).pipe(provideNode))

  it("optionsFrom takes the loop's settings from [agent] and [subagents]", () => {
    const settings: FibrilConfig.Settings = {
      ...FibrilConfig.defaults,
      agent: { maxSteps: 7, apiTimeoutSecs: 11, maxRetries: 2, retryBaseMs: 13, retryMaxMs: 17 },
      subagents: { ...FibrilConfig.defaults.subagents, maxDepth: 3, maxSteps: 5 }
    }
    assert.deepStrictEqual(SessionModule.optionsFrom(settings), {
      maxSteps: 7,
      apiTimeoutSecs: 11,
      maxRetries: 2,
      retryBaseMs: 13,
      retryMaxMs: 17,
      maxDepth: 3,
      childMaxSteps: 5
    })
  })
})
