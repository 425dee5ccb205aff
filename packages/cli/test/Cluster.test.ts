// Cluster mode on the command line, without a database: where the cluster URL comes from
// (--cluster > FIBRIL_CLUSTER_URL > [cluster] url), `fibril config` masking its password, and
// the events a client follows (ClusterEvents) from a tree run on TestRunner.
import { assert, describe, it } from "@effect/vitest"
import * as ClusterClient from "@fibril/cluster/ClusterClient"
import type { AgentRow } from "@fibril/cluster/ClusterStore"
import type { AgentEvent } from "@fibril/core/AgentEvents"
import { Effect, FileSystem, Option, Path } from "effect"
import * as Prompt from "effect/ai/Prompt"
import { provideNode, setup } from "../../cluster/test/support.ts"
import * as ClusterCommand from "../src/ClusterCommand.ts"
import * as ClusterEvents from "../src/ClusterEvents.ts"
import { fibril } from "./run.ts"

describe("cluster mode: the URL", () => {
  it("the flag wins over FIBRIL_CLUSTER_URL, which wins over [cluster] url; none: the embedded runtime", () => {
    const env = { FIBRIL_CLUSTER_URL: "postgres://env/db" }
    assert.strictEqual(
      ClusterCommand.clusterUrl(Option.some("postgres://flag/db"), env, "postgres://file/db"),
      "postgres://flag/db"
    )
    assert.strictEqual(ClusterCommand.clusterUrl(Option.none(), env, "postgres://file/db"), "postgres://env/db")
    assert.strictEqual(ClusterCommand.clusterUrl(Option.none(), {}, "postgres://file/db"), "postgres://file/db")
    assert.strictEqual(ClusterCommand.clusterUrl(Option.some(""), { FIBRIL_CLUSTER_URL: "" }, ""), undefined)
    assert.strictEqual(ClusterCommand.clusterUrl(Option.none(), {}, undefined), undefined)
  })

  it.live("[cluster] url is a config key; fibril config shows it with the password masked", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const path = yield* Path.Path
      const dir = yield* fs.makeTempDirectoryScoped()
      yield* fs.makeDirectory(path.join(dir, ".fibril"))
      yield* fs.writeFileString(
        path.join(dir, ".fibril", "config.toml"),
        `[cluster]\nurl = "postgres://fibril:s3cret@db.example:5432/fibril"\n`
      )
      const text = yield* fibril(["config"], { cwd: dir })
      assert.strictEqual(text.exitCode, 0, text.stderr)
      assert.include(text.stdout, "[cluster]\nurl = \"postgres://***@db.example:5432/fibril\"")
      const json = yield* fibril(["config", "--json"], { cwd: dir })
      assert.strictEqual(json.exitCode, 0, json.stderr)
      assert.include(json.stdout, "postgres://***@db.example:5432/fibril")
      assert.notInclude(text.stdout + json.stdout, "s3cret")
      // A misspelt key is named, like any other table's.
      yield* fs.writeFileString(path.join(dir, ".fibril", "config.toml"), `[cluster]\nurls = "x"\n`)
      const bad = yield* fibril(["config"], { cwd: dir })
      assert.strictEqual(bad.exitCode, 2)
      assert.include(bad.stderr, "unknown key cluster.urls; did you mean cluster.url?")
    }).pipe(Effect.scoped, provideNode))
})

describe("cluster mode: the events a client follows", () => {
  // A child can run whole between two looks of the follower (a scripted one often does): the
  // first look sees it ended, with all its messages. It still started, before its first step.
  it("an agent first seen ended is spawned, started, stepped, then ended, in that order", () => {
    const row = (agentId: string, parentId: string | null, status: AgentRow["status"]): AgentRow => ({
      agentId,
      parentId,
      rootId: "root",
      depth: parentId === null ? 0 : 1,
      role: "general",
      model: "m",
      description: agentId,
      prompt: "p",
      detached: false,
      workspace: "/w",
      status,
      run: 1,
      executionId: "e",
      text: null,
      reason: null,
      steps: 0,
      toolCalls: 0,
      tokens: 0
    })
    const at = (step: number) => ({ run: 1, step, slot: 0 })
    const known = new Map()
    const first = ClusterEvents.eventsOf(
      {
        agents: [row("root", null, "running")],
        messages: [{
          agentId: "root",
          at: at(0),
          message: Prompt.makeMessage("assistant", {
            content: [Prompt.makePart("tool-call", { id: "c", name: "task", params: {}, providerExecuted: false })]
          })
        }],
        cursor: { transcript: 1, agents: 1 }
      },
      known,
      1
    )
    // The root is spawned too, as the embedded runtime publishes it.
    assert.deepStrictEqual(first.map((e) => e.type), ["spawned", "started", "step", "tool_call"])
    const second = ClusterEvents.eventsOf(
      {
        agents: [row("child", "root", "completed")],
        messages: [
          {
            agentId: "child",
            at: at(-1),
            message: Prompt.makeMessage("user", { content: [Prompt.makePart("text", { text: "look" })] })
          },
          {
            agentId: "child",
            at: at(0),
            message: Prompt.makeMessage("assistant", { content: [Prompt.makePart("text", { text: "done" })] })
          }
        ],
        cursor: { transcript: 3, agents: 2 }
      },
      known,
      2
    )
    // The answer's text comes whole, before its step (the cluster does not stream).
    assert.deepStrictEqual(second.map((e) => `${e.agent.agentId}:${e.type}`), [
      "child:spawned",
      "child:started",
      "child:text",
      "child:step",
      "child:completed"
    ])
    assert.strictEqual(second.find((e) => e.type === "text")!.text, "done")
    // An agent ended before it ran (cancelled while queued) never started.
    const third = ClusterEvents.eventsOf(
      {
        agents: [row("queued", "root", "cancelled")],
        messages: [],
        cursor: { transcript: 3, agents: 3 }
      },
      known,
      3
    )
    assert.deepStrictEqual(third.map((e) => `${e.agent.agentId}:${e.type}`), ["queued:spawned", "queued:cancelled"])
  })

  // The child's row is written in the transaction of the answer that asked for it, so one look
  // reads both: its `spawned` still comes after that answer's tool call, as embedded.
  it("a child is spawned after the tool call that asked for it, though its row is read first", () => {
    const row = (agentId: string, parentId: string | null, status: AgentRow["status"]): AgentRow => ({
      agentId,
      parentId,
      rootId: "root",
      depth: parentId === null ? 0 : 1,
      role: "general",
      model: "m",
      description: agentId,
      prompt: "p",
      detached: false,
      workspace: "/w",
      status,
      run: 0,
      executionId: "e",
      text: null,
      reason: null,
      steps: 0,
      toolCalls: 0,
      tokens: 0
    })
    const message = (agentId: string, step: number, content: Prompt.Message) => ({
      agentId,
      at: { run: 0, step, slot: 100 },
      message: content
    })
    const asked = Prompt.makeMessage("assistant", {
      content: [
        Prompt.makePart("text", { text: "delegating" }),
        Prompt.makePart("tool-call", { id: "c", name: "task", params: {}, providerExecuted: false })
      ]
    })
    const events = ClusterEvents.eventsOf(
      {
        agents: [row("root", null, "running"), row("child", "root", "running")],
        messages: [
          message("root", 0, asked),
          message("child", 0, Prompt.makeMessage("assistant", { content: [Prompt.makePart("text", { text: "ok" })] }))
        ],
        cursor: { transcript: 2, agents: 2 }
      },
      new Map(),
      1,
      { text: false }
    )
    assert.deepStrictEqual(
      events.map((e) => `${e.agent.agentId}:${e.tool === undefined ? e.type : `${e.type}:${e.tool}`}`),
      [
        "root:spawned",
        "root:started",
        "root:step",
        "root:tool_call:task",
        "child:spawned",
        "child:started",
        "child:step"
      ]
    )
  })

  it.live("a tree run on TestRunner: every agent's steps, tool calls and end reach the follower, in order", () =>
    Effect.gen(function*() {
      const built = yield* setup({
        rules: [
          {
            match: { depth: 1 },
            turns: [{ tool_calls: [{ name: "list_dir", args: {} }] }, { text: "child done" }]
          },
          {
            match: { depth: 0 },
            turns: [{ tool_calls: [{ name: "task", args: { prompt: "look", description: "a look" } }] }, {
              text: "root done"
            }]
          }
        ]
      })
      const seen: Array<AgentEvent> = []
      const id = yield* built.provide(ClusterClient.start({ prompt: "go", workspace: built.root }))
      const follower = yield* built.provide(
        ClusterEvents.follow(id, (event) => Effect.sync(() => void seen.push(event)), 5)
      )
      yield* built.provide(ClusterClient.await_(id))
      yield* follower.drain
      yield* follower.stop
      const of = (depth: number) =>
        seen.filter((e) => e.agent.depth === depth).map((e) => e.tool === undefined ? e.type : `${e.type}:${e.tool}`)
      assert.deepStrictEqual(of(0), [
        "spawned",
        "started",
        "step",
        "tool_call:task",
        "tool_result:task",
        "text",
        "step",
        "completed"
      ])
      assert.deepStrictEqual(of(1), [
        "spawned",
        "started",
        "step",
        "tool_call:list_dir",
        "tool_result:list_dir",
        "text",
        "step",
        "completed"
      ])
      // Counts from the transcript, tokens of the agent's tree (as embedded events carry them).
      const rows = yield* built.store.list
      const last = (depth: number) => seen.filter((e) => e.agent.depth === depth).at(-1)!.agent
      assert.deepStrictEqual([last(1).step, last(1).toolCalls, last(1).usage.output], [2, 1, rows[1]!.tokens])
      assert.deepStrictEqual([last(0).step, last(0).toolCalls, last(0).usage.output], [
        2,
        1,
        rows[0]!.tokens + rows[1]!.tokens
      ])
      const child = seen.find((e) => e.agent.depth === 1)!
      assert.strictEqual(child.agent.parentId, id)
      assert.strictEqual(child.agent.description, "a look")
      // The child ended before its parent's task returned.
      const index = (p: (e: AgentEvent) => boolean) => seen.findIndex(p)
      assert.isBelow(
        index((e) => e.agent.depth === 1 && e.type === "completed"),
        index((e) => e.agent.depth === 0 && e.type === "tool_result")
      )
    }).pipe(Effect.scoped, provideNode))
})
