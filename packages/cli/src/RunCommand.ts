/**
 * `fibril run` and `fibril demo`: one root agent (and its sub-agents) on a prompt, in this
 * process on the workspace's file store (Runtime.ts), or as a client of the cluster
 * (`--cluster`, ClusterCommand.ts); and the scripted scenario on the ScriptedModel.
 */
import { Argument, Command, Flag } from "effect/cli"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Stdio from "effect/Stdio"
import * as Stream from "effect/Stream"
import * as path from "node:path"
import { loadConfig, ProcessEnvironment, resolveCwd, setExit, stateDir as stateDirOf } from "./CliEnvironment.ts"
import * as CliFlags from "./CliFlags.ts"
import * as ClusterCommand from "./ClusterCommand.ts"
import * as Output from "./Output.ts"
import * as TracingFlag from "./TracingFlag.ts"
import { UsageError } from "./UsageError.ts"

/** Where `fibril run --agui` sends the tree: nowhere (stdout carries the AG-UI lines). */
const silent: Output.Output = { line: () => Effect.void }

/**
 * The prompt of `fibril run`: the argument, `-` (stdin) or `--prompt-file FILE` (`-`: stdin),
 * exactly one of them, not empty. A file or stdin has no size limit (an argument does).
 */
const readPrompt = Effect.fn("fibril.run.prompt")(function*(
  argument: Option.Option<string>,
  file: Option.Option<string>,
  /** Where the command was typed: the file is relative to it. */
  invocationDir: string
) {
  const fail = (problem: string) => Effect.fail(new UsageError({ problem }))
  if (Option.isSome(argument) && Option.isSome(file)) {
    return yield* fail("Give the prompt either as an argument or with --prompt-file, not both.")
  }
  const source = Option.isSome(file) ? file.value : Option.getOrUndefined(argument)
  if (source === undefined) {
    return yield* fail(
      "No prompt. Give it as an argument (fibril run \"…\"), in a file (--prompt-file FILE), or on stdin (fibril run - < prompt.md)."
    )
  }
  const fromStdin = source === "-"
  const text = fromStdin
    ? yield* Effect.flatMap(Stdio.Stdio, (stdio) => stdio.stdin.pipe(Stream.decodeText(), Stream.mkString)).pipe(
      Effect.catch((error) => fail(`cannot read the prompt from stdin: ${error.message}`))
    )
    : Option.isSome(file)
    ? yield* Effect.flatMap(FileSystem.FileSystem, (fs) => fs.readFileString(path.resolve(invocationDir, source))).pipe(
      Effect.catch((error) => fail(`--prompt-file ${source}: cannot read it (${error.message})`))
    )
    : source
  if (text.trim() === "") {
    return yield* fail(
      `The prompt is empty${
        fromStdin ? " (nothing on stdin)" : Option.isSome(file) ? ` (${source})` : ""
      }: say what the agent should do.`
    )
  }
  return text
})

export const run = Command.make(
  "run",
  {
    prompt: Argument.String("prompt").pipe(
      Argument.withDescription("What the root agent should do; - reads it from stdin"),
      Argument.optional
    ),
    promptFile: Flag.String("prompt-file").pipe(
      Flag.withDescription("Read the prompt from this file (- for stdin), instead of the argument"),
      Flag.optional
    ),
    model: CliFlags.model,
    baseUrl: CliFlags.baseUrl,
    role: Flag.String("role").pipe(Flag.withDescription("Role of the root agent (default general)"), Flag.optional),
    maxConcurrent: CliFlags.maxConcurrent,
    cwd: CliFlags.cwd,
    json: CliFlags.jsonLines,
    waitDetached: Flag.Boolean("wait-detached").pipe(
      Flag.withDescription("When the root agent is done, wait for detached agents still running (default: stop them)"),
      Flag.withDefault(false)
    ),
    otlp: TracingFlag.otlp,
    stream: Flag.Boolean("stream").pipe(
      Flag.withDescription("Stream each model answer as it arrives (--no-stream: ask for whole answers)"),
      Flag.withDefault(true)
    ),
    approve: CliFlags.approveRun,
    cluster: ClusterCommand.clusterFlag,
    ui: Flag.Boolean("ui").pipe(
      Flag.withDescription("Serve a live web page of the run (127.0.0.1, a token in the printed URL) until Ctrl-C"),
      Flag.withDefault(false)
    ),
    agui: Flag.Boolean("agui").pipe(
      Flag.withDescription("Print the run's events as AG-UI 1.0 events, one JSON object per line, instead of the tree"),
      Flag.withDefault(false)
    )
  },
  Effect.fn("fibril.run.command")(function*(flags) {
    // The runtime and the run's views, imported when a run starts: parsing and help do not load them.
    const [Run, RunRecords, Runtime, UiCommand] = yield* Effect.promise(() =>
      Promise.all([import("./Run.ts"), import("./RunRecords.ts"), import("./Runtime.ts"), import("./UiCommand.ts")])
    )
    const environment = yield* ProcessEnvironment
    const cwd = yield* resolveCwd(flags.cwd)
    const prompt = yield* readPrompt(flags.prompt, flags.promptFile, environment.cwd)
    const config = yield* loadConfig(cwd)
    const clusterUrl = ClusterCommand.clusterUrl(flags.cluster, environment.env, config.settings.cluster.url)
    // Spans to `--otlp` (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), on a cluster too: its root hangs under this run's.
    const tracing = TracingFlag.layer(flags.otlp, environment.env, config.settings)
    if (clusterUrl !== undefined && (flags.ui || flags.agui)) {
      return yield* new UsageError({
        problem: `--${
          flags.ui ? "ui" : "agui"
        } serves a run of this process; a cluster's agents are on \`fibril ui --cluster <url>\``
      })
    }
    if (clusterUrl !== undefined && Option.isSome(flags.approve)) {
      return yield* new UsageError({
        problem:
          "--approve decides the questions of this process's agents; a cluster's questions wait for any process (or ask_timeout_secs): answer them with `fibril agents answer <id> allow|deny --cluster <url>` or `fibril ui --cluster <url>`, or add the tools to [permissions] allow in the workers' configuration"
      })
    }
    if (clusterUrl !== undefined) {
      return yield* setExit(
        yield* Effect.provide(
          ClusterCommand.run({
            url: clusterUrl,
            prompt,
            cwd,
            role: Option.getOrUndefined(flags.role),
            model: Option.getOrUndefined(flags.model),
            json: flags.json,
            stream: flags.stream,
            output: Output.console(environment.tty && !flags.json)
          }).pipe(Effect.withSpan("fibril.run", { root: true })),
          tracing
        )
      )
    }
    // On a terminal without --approve, the person at it answers questions (TerminalApprovals.ts):
    // they wait for that answer (or the timeout). Off a terminal nothing waits for a person.
    const fromStdin = Option.getOrUndefined(flags.prompt) === "-" || Option.getOrUndefined(flags.promptFile) === "-"
    const answerHere = Option.isNone(flags.approve) && environment.tty && environment.stdinTty === true &&
      !fromStdin && !flags.json && !flags.agui
    const approve = answerHere ? "wait" as const : Option.getOrElse(flags.approve, () => "deny" as const)
    const core = yield* Runtime.make(environment, cwd, config.settings, { ...flags, approve })
    const code = yield* Effect.scoped(Effect.gen(function*() {
      // Both listen before the root starts, so they see the run from its first event.
      if (flags.ui) {
        yield* UiCommand.forRun({
          stateDir: stateDirOf(cwd),
          cap: config.settings.subagents.maxConcurrent,
          prices: config.settings.permissions.usdPerMtok
        })
      }
      const agui = flags.agui ? yield* UiCommand.printAgUi : undefined
      const exitCode = yield* Run.run(
        {
          prompt,
          role: Option.getOrUndefined(flags.role),
          json: flags.json || flags.agui,
          waitDetached: flags.waitDetached,
          interruptedBy: environment.interruptedBy,
          answerHere: answerHere ? { home: environment.home } : undefined
        },
        flags.agui ? silent : Output.console(environment.tty && !flags.json)
      ).pipe(
        // Its records committed (or a clear error naming the one that is not), before the exit code.
        Effect.flatMap((runCode) => RunRecords.settle(runCode, true))
      )
      if (agui !== undefined) yield* Fiber.join(agui)
      if (flags.ui) {
        // The finished tree stays on the page (and its transcripts) until the person is done with it.
        yield* Console.error(`fibril ui: the run has ended (exit code ${exitCode}); the page stays up until Ctrl-C`)
        yield* Effect.never
      }
      return exitCode
    })).pipe(
      // The trace's root, opened under the exporter (the command's own span is not exported).
      Effect.withSpan("fibril.run", { root: true }),
      Effect.provide(Layer.mergeAll(core.layer, tracing))
    )
    yield* setExit(code)
  })
).pipe(
  Command.withDescription("Run one agent (and its sub-agents) on a prompt, drawing the tree of agents as they work"),
  Command.withExamples([
    {
      command: "fibril run \"Find the HTTP routes and summarise them\" --model deepseek-chat",
      description: "On a real model (OPENAI_API_KEY, OPENAI_BASE_URL)"
    },
    { command: "fibril run --prompt-file task.md", description: "A long prompt from a file" },
    { command: "git diff | fibril run - --role review", description: "The prompt from stdin" },
    {
      command: "fibril run \"Explore\" --model scripted:script.json --json",
      description: "Offline on a scripted model, one JSON event per line"
    }
  ])
)

export const demo = Command.make(
  "demo",
  {
    cwd: CliFlags.cwd,
    scenario: Flag.Literals("scenario", ["explore", "worktrees"]).pipe(
      Flag.withDescription(
        "explore (default): explorers and a reviewer on this project; worktrees: isolated implementers and agent_merge in a temporary git repository"
      ),
      Flag.withDefault("explore" as const)
    )
  },
  Effect.fn("fibril.demo.command")(function*(flags) {
    const [Demo, DemoScript, DemoWorktrees, Fibril, ScriptedModel] = yield* Effect.promise(() =>
      Promise.all([
        import("./Demo.ts"),
        import("./DemoScript.ts"),
        import("./DemoWorktrees.ts"),
        import("@fibril/core/Fibril"),
        import("@fibril/testkit/ScriptedModel")
      ])
    )
    const environment = yield* ProcessEnvironment
    if (flags.scenario === "worktrees") {
      return yield* Effect.scoped(DemoWorktrees.run(Output.console(environment.tty)))
    }
    const cwd = yield* resolveCwd(flags.cwd)
    const config = yield* loadConfig(cwd)
    // Paced like a real model on a terminal, so the tree is seen growing; at once otherwise.
    const script = DemoScript.script({ paced: environment.tty })
    yield* Demo.run(Output.console(environment.tty), cwd).pipe(
      Effect.provide(Fibril.layerFromSettings(cwd, config.settings).pipe(Layer.provide(ScriptedModel.layer(script))))
    )
  })
).pipe(
  Command.withDescription("A scripted scenario (ScriptedModel, no key, no network) with real tools on this project"),
  Command.withExamples([{
    command: "fibril demo",
    description: "Three explorers in parallel, then a reviewer, on this project's files"
  }, {
    command: "fibril demo --scenario worktrees",
    description: "Three isolated implementers edit one file; two merges, a conflict as data, resolved by delegating"
  }])
)
