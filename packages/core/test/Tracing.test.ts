// Spans are real whenever a tracer is installed: agent, model and tool spans, each under the
// right parent. (Without one, the per-agent spans are skipped: internal/span.ts.)
import { assert, describe, it } from "@effect/vitest"
import { ScriptedModel } from "@fibril/testkit"
import { Effect, Option, Schema, Tracer } from "effect"
import { Session } from "../src/Session.ts"
import * as ToolRegistry from "../src/ToolRegistry.ts"
import { provideNode, report, setup } from "./support.ts"

interface Recorded {
  readonly name: string
  readonly span: Tracer.Span
}

/** A tracer that keeps every span it makes (Effect's native spans, so timing and exits are real). */
const recordingTracer = () => {
  const spans: Array<Recorded> = []
  const tracer = Tracer.make({
    span(options) {
      const span = Tracer.nativeTracer.span(options)
      spans.push({ name: options.name, span })
      return span
    }
  })
  return { spans, tracer }
}

const parentName = (span: Tracer.Span) =>
  Option.match(span.parent, {
    onNone: () => undefined,
    onSome: (parent) => parent._tag === "Span" ? parent.name : "external"
  })

const script: ScriptedModel.ScriptInput = {
  rules: [
    {
      match: { depth: 1 },
      turns: [{ tool_calls: [{ name: "list_dir", args: {} }] }, { text: report("listed") }]
    },
    {
      match: { depth: 0 },
      turns: [
        { tool_calls: [{ name: "task", args: { description: "d", prompt: "list it", subagent_type: "explore" } }] },
        { text: "done" }
      ]
    }
  ]
}

describe("tracing", () => {
  it.effect("with a tracer installed: agent, model and tool spans, under their parents, all ended", () =>
    Effect.gen(function*() {
      const { get } = yield* setup(script)
      const session = get(Session)
      const { spans, tracer } = recordingTracer()
      const answer = yield* Effect.gen(function*() {
        const parent = yield* session.create()
        return yield* session.prompt(parent.id, "go")
      }).pipe(Effect.withSpan("test.root"), Effect.withTracer(tracer))
      assert.strictEqual(answer.text, "done")
      const names = spans.map((s) => s.name)
      const byName = (name: string) => spans.filter((s) => s.name === name)
      const byPrefix = (prefix: string) => spans.filter((s) => s.name.startsWith(prefix))
      // Two agent runs (the root's and the child's), a task call and the run it waits on.
      assert.strictEqual(byPrefix("invoke_agent ").length, 2, names.join(", "))
      const [rootPrompt, childPrompt] = byPrefix("invoke_agent ")
      assert.strictEqual(parentName(rootPrompt!.span), "test.root")
      assert.strictEqual(byName("Session.create").length, 1)
      assert.strictEqual(parentName(byName("Session.create")[0]!.span), "test.root")
      const [task] = byName("tool.task")
      const [executeTask] = byName("execute_tool task")
      assert.strictEqual(executeTask!.span.parent.pipe(Option.getOrThrow), rootPrompt!.span)
      assert.strictEqual(task!.span.parent.pipe(Option.getOrThrow), executeTask!.span)
      const [run] = byName("SubAgentManager.run")
      assert.strictEqual(run!.span.parent.pipe(Option.getOrThrow), task!.span)
      assert.strictEqual(parentName(byName("Session.createChild")[0]!.span), "SubAgentManager.run")
      // The child's prompt runs in the agent's own fiber, forked under the run's span.
      assert.strictEqual(childPrompt!.span.parent.pipe(Option.getOrThrow), run!.span)
      // Model calls: two per agent, each under its agent's run.
      const models = byPrefix("chat ")
      assert.strictEqual(models.length, 4, names.join(", "))
      assert.deepStrictEqual(
        models.map((m) => m.span.parent.pipe(Option.getOrThrow)).map((p) => p === rootPrompt!.span ? "root" : "child")
          .sort(),
        ["child", "child", "root", "root"]
      )
      // The child's tool call, under the child's run.
      const [listDir] = byName("tool.list_dir")
      const [executeListDir] = byName("execute_tool list_dir")
      assert.strictEqual(executeListDir!.span.parent.pipe(Option.getOrThrow), childPrompt!.span)
      assert.strictEqual(listDir!.span.parent.pipe(Option.getOrThrow), executeListDir!.span)
      assert.isTrue(spans.every((s) => s.span.status._tag === "Ended"), "every span ended")
      assert.isTrue(byName("test.root")[0]!.span.traceId === listDir!.span.traceId, "one trace")
    }).pipe(provideNode))

  it.effect("without a tracer, the per-agent paths make no span; with one, a tool runs under its execute_tool span", () =>
    Effect.gen(function*() {
      const { get } = yield* setup({
        rules: [{ match: { depth: 0 }, turns: [{ tool_calls: [{ name: "whereami", args: {} }] }, { text: "done" }] }]
      })
      yield* get(ToolRegistry.ToolRegistry).register(ToolRegistry.define({
        name: "whereami",
        description: "names the current span",
        parameters: Schema.Struct({}),
        posture: "read",
        handler: () => Effect.orElseSucceed(Effect.map(Effect.currentSpan, (span) => span.name), () => "none")
      }))
      const session = get(Session)
      const seen = (tracer: Tracer.Tracer | undefined) =>
        Effect.gen(function*() {
          const agent = yield* session.create()
          const prompt = session.prompt(agent.id, "go").pipe(Effect.withSpan("caller"))
          yield* tracer === undefined ? prompt : Effect.withTracer(prompt, tracer)
          const transcript = yield* session.transcript(agent.id)
          return transcript.flatMap((m) =>
            m.role === "tool" ? m.content.flatMap((p) => p.type === "tool-result" ? [p.result] : []) : []
          )
        })
      // Effect's default tracer exports nothing: no agent or tool span, the caller's is current.
      assert.deepStrictEqual(yield* seen(undefined), ["caller"])
      assert.deepStrictEqual(yield* seen(recordingTracer().tracer), ["execute_tool whereami"])
    }).pipe(provideNode))
})
