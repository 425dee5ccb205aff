/**
 * The `fibril` command (effect/cli). Entry point wiring lives here: the core layers, the
 * model, and the Node platform services.
 */
import { NodeServices } from "@effect/platform-node"
import * as Fibril from "@fibril/core/Fibril"
import * as FibrilConfig from "@fibril/core/FibrilConfig"
import { ScriptedModel } from "@fibril/testkit"
import { Console, Effect, Layer } from "effect"
import { Command } from "effect/cli"
import * as Demo from "./Demo.ts"
import * as DemoScript from "./DemoScript.ts"

export const version = "0.1.0"

const consoleOutput = (tty: boolean): Demo.Output => ({
  line: (text) => Console.log(text),
  redraw: tty
    ? (previous, lines) =>
      Effect.sync(() => {
        const up = previous > 0 ? `\x1b[${previous}A\x1b[J` : ""
        process.stdout.write(`${up}${lines.join("\n")}\n`)
      })
    : undefined
})

export const demo = Command.make(
  "demo",
  {},
  Effect.fn("fibril.demo.command")(function*() {
    const cwd = process.cwd()
    const config = yield* FibrilConfig.FibrilConfig
    yield* Demo.run(consoleOutput(process.stdout.isTTY === true), cwd).pipe(
      Effect.provide(
        Fibril.layerFromSettings(cwd, config.settings).pipe(
          Layer.provide(ScriptedModel.layer(DemoScript.script))
        )
      )
    )
  })
).pipe(Command.withDescription("Run a scripted scenario (ScriptedModel) with real tools on the current directory"))

export const fibril = Command.make("fibril").pipe(
  Command.withDescription("Fibril: an Effect-native sub-agent runtime"),
  Command.withSubcommands([demo])
)

/** Runs the CLI on `argv` (without the node and script paths). */
export const run = (argv: ReadonlyArray<string>) =>
  Command.runWith(fibril, { version })(argv).pipe(
    Effect.provide(FibrilConfig.layerConfig),
    Effect.provide(NodeServices.layer),
    Effect.scoped
  )
