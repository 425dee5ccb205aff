/**
 * `fibril lab` — the orchestration lab from the command line (docs/lab.md):
 *
 *   fibril lab run --runs 10000 --seed 42 [--invariants cap,terminal] [--invariants-from mine.mjs] [--config bounds.json] [--out trace.json] [--workers N]
 *   fibril lab replay trace.json [--invariants-from mine.mjs]
 *   fibril lab report trace.json [--out run.svg] [--png] [--invariants-from mine.mjs]
 *
 * `run` generates experiments, runs each through the real runtime under a virtual clock and
 * checks the invariants, with a progress line and a summary; a failure is shrunk, printed with
 * its seed, and its trace is written (default `lab-trace.json`) for `replay` and `report`.
 * With `--workers N` (0: one per core) the runs are spread over worker threads in seeded
 * chunks (LabParallel.ts).
 */
import { Argument, Command, Flag } from "effect/cli"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { spawnSync } from "node:child_process"
import { availableParallelism } from "node:os"
import * as path from "node:path"
import * as LabNames from "./LabNames.ts"
import { UsageError } from "./UsageError.ts"

export interface Context<R> {
  /** Where relative paths are resolved. */
  readonly cwd: Effect.Effect<string, never, R>
  readonly tty: Effect.Effect<boolean, never, R>
  readonly setExit: (code: number) => Effect.Effect<void, never, R>
}

const usage = (problem: string) => new UsageError({ problem })

/**
 * The lab, imported when a subcommand runs: parsing and `--help` do not load it (LabNames.ts
 * holds what the help names).
 */
const loadLab = Effect.promise(() =>
  Promise.all([import("@fibril/testkit"), import("./LabInvariants.ts"), import("./LabParallel.ts")])
)

const tamperByName = (name: string | undefined) =>
  Effect.flatMap(loadLab, ([{ LabBugs }]) => {
    if (name === undefined) return Effect.succeed(undefined)
    const found = LabBugs.all.find((bug) => bug.tamper.name === name)
    return found === undefined
      ? Effect.fail(
        usage(`unknown --tamper "${name}"; the planted bugs are: ${LabBugs.all.map((b) => b.tamper.name).join(", ")}`)
      )
      : Effect.succeed(found.tamper)
  })

const readText = (file: string, what: string) =>
  Effect.flatMap(FileSystem.FileSystem, (fs) => fs.readFileString(file)).pipe(
    Effect.catch((error) => Effect.fail(usage(`${what} ${file}: cannot read it (${error.message})`)))
  )

const readBounds = (file: string) =>
  Effect.flatMap(
    readText(file, "--config"),
    (text) =>
      Effect.try({ try: () => JSON.parse(text) as unknown, catch: () => usage(`--config ${file}: not JSON`) }).pipe(
        Effect.flatMap((json) =>
          Effect.flatMap(
            loadLab,
            ([{ LabGenerators }]) =>
              Schema.decodeUnknownEffect(LabGenerators.BoundsJson)(json, { onExcessProperty: "error", errors: "all" })
          )
        ),
        Effect.mapError((error) =>
          error instanceof UsageError ? error : usage(
            `--config ${file}: ${error.message} (accepted: maxNodes, maxOps, config {cap, admission, maxDepth, maxSteps, heartbeatSecs}, faults, ops)`
          )
        )
      )
  )

const readTrace = (file: string) =>
  Effect.flatMap(
    readText(file, "trace"),
    (text) =>
      Effect.flatMap(
        loadLab,
        ([{ Simulation }]) => Effect.mapError(Simulation.decode(text), (error) => usage(`${file}: ${error.message}`))
      )
  )

const write = (file: string, text: string) =>
  Effect.flatMap(FileSystem.FileSystem, (fs) => fs.writeFileString(file, text))

const invariantsFrom = Flag.String("invariants-from").pipe(
  Flag.withDescription(
    "A module (.mjs, .js, .ts) whose exports are invariants of your own, { name, description, check(trace) }, checked with the built-in ones"
  ),
  Flag.optional
)
/** `fibril lab run`: generate and run experiments, check invariants, shrink and save a failure. */
const runCommand = <R>(context: Context<R>) =>
  Command.make(
    "run",
    {
      runs: Flag.Int("runs").pipe(Flag.withDescription("Experiments to run"), Flag.withDefault(1000)),
      seed: Flag.Int("seed").pipe(Flag.withDescription("The seed (default: a random one, printed)"), Flag.optional),
      invariants: Flag.String("invariants").pipe(
        Flag.withDescription(`Comma-separated, of: ${LabNames.invariants.join(", ")} (default all)`),
        Flag.optional
      ),
      invariantsFrom,
      config: Flag.String("config").pipe(
        Flag.withDescription("A JSON file of bounds: maxNodes, maxOps, config {cap, admission, …}, faults, ops"),
        Flag.optional
      ),
      out: Flag.String("out").pipe(
        Flag.withDescription("Where a failure's trace is written (default lab-trace.json)"),
        Flag.optional
      ),
      tamper: Flag.String("tamper").pipe(
        Flag.withDescription(`Run against a planted bug: ${LabNames.plantedBugs.join(", ")}`),
        Flag.optional
      ),
      workers: Flag.Int("workers").pipe(
        Flag.withDescription(
          `Worker threads (0: one per core, ${availableParallelism()} here); with more than one, the runs go in seeded chunks of ${LabNames.chunkRuns}`
        ),
        Flag.withDefault(1)
      )
    },
    (flags) =>
      Effect.gen(function*() {
        const [{ Lab, Simulation }, LabInvariants, LabParallel] = yield* loadLab
        const cwd = yield* context.cwd
        if (flags.runs < 1) return yield* Effect.fail(usage(`--runs must be at least 1 (got ${flags.runs})`))
        if (flags.workers < 0) {
          return yield* Effect.fail(usage(`--workers must be 0 (one per core) or more (got ${flags.workers})`))
        }
        const workers = flags.workers === 0 ? availableParallelism() : flags.workers
        const invariants = yield* LabInvariants.select(cwd, flags.invariants, flags.invariantsFrom)
        if (workers > 1 && Option.isSome(flags.invariantsFrom)) {
          // Functions do not cross to worker threads (LabParallel.ts): such a run is one thread's.
          return yield* Effect.fail(
            usage("--invariants-from runs in one thread: leave out --workers (or give --workers 1)")
          )
        }
        const bounds = Option.isSome(flags.config)
          ? yield* readBounds(path.resolve(cwd, flags.config.value))
          : undefined
        const tamper = yield* tamperByName(Option.getOrUndefined(flags.tamper))
        const tty = yield* context.tty
        const seed = Option.getOrElse(flags.seed, () => Math.floor(Math.random() * 2 ** 31))
        yield* Console.error(
          `lab: ${flags.runs} experiments, seed ${seed}${workers > 1 ? `, ${workers} worker threads` : ""}`
        )
        const step = Math.max(1, Math.floor(flags.runs / (tty ? 100 : 10)))
        const started = performance.now()
        const progress = (done: number) => {
          if (done % step !== 0 && done !== flags.runs) return
          const rate = done / ((performance.now() - started) / 1000)
          const width = 30
          const bar = "#".repeat(Math.round((Math.min(done, flags.runs) / flags.runs) * width)).padEnd(width, ".")
          const text = `[${bar}] ${done}/${flags.runs} ${rate.toFixed(0)}/s`
          process.stderr.write(tty ? `\r${text}` : `${text}\n`)
        }
        const parallel = workers > 1
          ? yield* Effect.mapError(
            LabParallel.check({
              runs: flags.runs,
              seed,
              workers,
              bounds,
              invariants: invariants.map((invariant) => invariant.name),
              tamper: tamper?.name,
              onProgress: progress
            }),
            (error) => usage(error.message)
          )
          : undefined
        const result = parallel !== undefined ? parallel.result : yield* Lab.check({
          runs: flags.runs,
          seed,
          invariants,
          bounds,
          tamper,
          onProgress: progress
        })
        if (tty) process.stderr.write("\n")
        yield* Simulation.reset
        const rate = (flags.runs * 1000) / result.elapsedMs
        if (result._tag === "Passed") {
          yield* Console.log(
            `passed: ${result.runs} experiments, ${invariants.length} invariants, seed ${seed}, ${
              (result.elapsedMs / 1000).toFixed(1)
            } s (${rate.toFixed(0)} experiments/s)`
          )
          return
        }
        const file = path.resolve(cwd, Option.getOrElse(flags.out, () => "lab-trace.json"))
        yield* write(file, Simulation.encode(result.trace))
        yield* Console.log(Lab.describe(result).replace(/\n {2}replay: .*$/, ""))
        const chunk = parallel?.chunk
        if (chunk !== undefined) {
          yield* Console.log(
            `  found in chunk ${chunk.index} of this run: fibril lab run --seed ${chunk.seed} --runs ${chunk.runs} --workers 1 finds it again in one thread`
          )
        }
        const own = Option.match(flags.invariantsFrom, {
          onNone: () => "",
          onSome: (module) => ` --invariants-from ${path.resolve(cwd, module)}`
        })
        yield* Console.log(
          `  trace: ${file}\n  replay: fibril lab replay ${file}${own}\n  picture: fibril lab report ${file}${own}`
        )
        yield* context.setExit(1)
      })
  ).pipe(Command.withDescription("Generate and run experiments, check invariants, shrink and save a failure"))

/** `fibril lab replay`: a saved trace's experiment again, compared byte for byte. */
const replayCommand = <R>(context: Context<R>) =>
  Command.make(
    "replay",
    {
      trace: Argument.String("trace").pipe(Argument.withDescription("A trace file (fibril lab run --out)")),
      invariantsFrom
    },
    (flags) =>
      Effect.gen(function*() {
        const [{ Lab, Simulation }, LabInvariants] = yield* loadLab
        const cwd = yield* context.cwd
        const file = path.resolve(cwd, flags.trace)
        const invariants = yield* LabInvariants.select(cwd, Option.none(), flags.invariantsFrom)
        const trace = yield* readTrace(file)
        const tamper = yield* tamperByName(trace.tamper)
        const replayed = yield* Lab.replay(trace, { tamper, invariants })
        yield* Simulation.reset
        yield* Console.log(
          replayed.identical
            ? `identical: the run replays byte for byte (${replayed.trace.events.length} events, ${replayed.trace.records.length} agents, ${replayed.trace.end} ms virtual)`
            : `DIFFERENT at line ${replayed.firstDifference?.line}: expected ${replayed.firstDifference?.expected.trim()}, got ${replayed.firstDifference?.actual.trim()}`
        )
        yield* Console.log(
          replayed.violation === undefined
            ? "invariants: all hold"
            : [
              `invariant ${replayed.violation.invariant} fails: ${replayed.violation.message}`,
              ...Lab.whereAndEvidence(replayed.violation)
            ].join("\n")
        )
        if (!replayed.identical || replayed.violation !== undefined) yield* context.setExit(1)
      })
  ).pipe(Command.withDescription("Run a saved trace's experiment again and compare, byte for byte"))

/** `fibril lab report`: an SVG (or PNG) of a run. */
const reportCommand = <R>(context: Context<R>) =>
  Command.make(
    "report",
    {
      trace: Argument.String("trace").pipe(Argument.withDescription("A trace file")),
      out: Flag.String("out").pipe(
        Flag.withDescription("The SVG file (default: the trace's name, .svg)"),
        Flag.optional
      ),
      png: Flag.Boolean("png").pipe(
        Flag.withDescription("Also a PNG, with rsvg-convert or ImageMagick's convert if one is installed"),
        Flag.withDefault(false)
      ),
      invariantsFrom
    },
    (flags) =>
      Effect.gen(function*() {
        const [{ Invariants, LabReport }, LabInvariants] = yield* loadLab
        const cwd = yield* context.cwd
        const file = path.resolve(cwd, flags.trace)
        const invariants = yield* LabInvariants.select(cwd, Option.none(), flags.invariantsFrom)
        const trace = yield* readTrace(file)
        const svgFile = path.resolve(cwd, Option.getOrElse(flags.out, () => file.replace(/(\.json)?$/, ".svg")))
        // The picture marks the first invariant the run breaks (the trace holds the run, not the verdict).
        const violation = Invariants.firstViolation(trace, invariants)
        yield* write(svgFile, LabReport.svg(trace, { violation }))
        yield* Console.log(
          `wrote ${svgFile} (${LabReport.lanes(trace).length} agents${
            violation === undefined
              ? "; every invariant holds"
              : `; marks ${violation.invariant}${violation.agent === undefined ? "" : ` on ${violation.agent}`}${
                violation.at === undefined ? "" : ` at ${violation.at} ms`
              }`
          })`
        )
        if (flags.png) {
          const pngFile = svgFile.replace(/\.svg$/, "") + ".png"
          // The first renderer present: librsvg's rsvg-convert, else ImageMagick's convert.
          const renderers: ReadonlyArray<readonly [string, ReadonlyArray<string>]> = [
            ["rsvg-convert", ["-o", pngFile, svgFile]],
            ["convert", [svgFile, pngFile]]
          ]
          const used = yield* Effect.sync(() =>
            renderers.find(([command, args]) => {
              const converted = spawnSync(command, args, { stdio: "ignore", timeout: 60_000 })
              return converted.error === undefined && converted.status === 0
            })
          )
          yield* Console.log(
            used !== undefined
              ? `wrote ${pngFile} (${used[0]})`
              : "no PNG: neither rsvg-convert nor ImageMagick's convert is installed (or both failed); the SVG opens in any browser"
          )
        }
      })
  ).pipe(Command.withDescription("An SVG of a run: concurrency over virtual time and one timeline lane per agent"))

export const make = <R>(context: Context<R>) =>
  Command.make("lab").pipe(
    Command.withDescription(
      "The orchestration lab: generated agent trees, faults and operations run deterministically, invariants checked, failures shrunk and replayable"
    ),
    Command.withExamples([
      { command: "fibril lab run --runs 10000 --seed 42", description: "Check every invariant on 10,000 experiments" },
      { command: "fibril lab replay lab-trace.json", description: "Run a saved failure again, byte for byte" },
      { command: "fibril lab report lab-trace.json --out run.svg", description: "A picture of the run" }
    ]),
    Command.withSubcommands([
      runCommand(context),
      replayCommand(context),
      reportCommand(context)
    ])
  )
