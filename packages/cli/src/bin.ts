#!/usr/bin/env node
// The `fibril` executable (built to dist/bin.js; in the repository `npm run fibril` runs this source).
import { NodeRuntime } from "@effect/platform-node"
import { Cause, Effect, Exit } from "effect"
import * as Cli from "./Cli.ts"

// A closed terminal (SIGHUP) stops the run like SIGTERM: the tree is cancelled and its shell
// process groups are killed. The runtime listens for SIGTERM; this hands SIGHUP to it.
process.on("SIGHUP", () => void process.emit("SIGTERM"))

NodeRuntime.runMain(
  Effect.flatMap(Cli.main(process.argv.slice(2), Cli.processEnvironment()), (code) =>
    Effect.sync(() => {
      process.exitCode = code
    })),
  {
    // Ctrl-C interrupts the run: it cancels the agent tree and prints what was cancelled;
    // that ends the root agent as cancelled, which is exit code 1.
    teardown: (exit, onExit) =>
      onExit(Exit.isSuccess(exit) ? Number(process.exitCode ?? 0) : Cause.hasInterruptsOnly(exit.cause) ? 1 : 2)
  }
)
