#!/usr/bin/env node
// The `fibril` executable (built to dist/bin.js; in the repository `npm run fibril` runs this source).
import { NodeRuntime } from "@effect/platform-node"
import { Cause, Effect, Exit } from "effect"
import * as Cli from "./Cli.ts"

// Ctrl-C, SIGTERM and SIGHUP interrupt the run (NodeRuntime listens for SIGINT and SIGTERM;
// a closed terminal's SIGHUP is handed to it as SIGTERM): the tree is cancelled, its shell
// process groups are killed, and the process exits 128 + the signal's number. The first
// signal is remembered so that the run can say what cancelled it.
const signals = {
  SIGINT: { code: 130, label: "Ctrl-C" },
  SIGTERM: { code: 143, label: "SIGTERM" },
  SIGHUP: { code: 129, label: "SIGHUP (the terminal closed)" }
}
let received: keyof typeof signals | undefined
process.on("SIGINT", () => void (received ??= "SIGINT"))
process.on("SIGTERM", () => void (received ??= "SIGTERM"))
process.on("SIGHUP", () => {
  received ??= "SIGHUP"
  process.emit("SIGTERM")
})

NodeRuntime.runMain(
  Effect.flatMap(
    Cli.main(process.argv.slice(2), {
      ...Cli.processEnvironment(),
      interruptedBy: () => received && signals[received].label
    }),
    (code) =>
      Effect.sync(() => {
        process.exitCode = code
      })
  ),
  {
    teardown: (exit, onExit) =>
      onExit(
        Exit.isSuccess(exit)
          ? Number(process.exitCode ?? 0)
          : Cause.hasInterruptsOnly(exit.cause)
          ? signals[received ?? "SIGINT"].code
          : 2
      )
  }
)
