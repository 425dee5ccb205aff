#!/usr/bin/env node
// The `fibril` executable (built to dist/bin.js; in the repository `npm run fibril` runs this source).
import { readFileSync } from "node:fs"
import * as NodeModule from "node:module"
import { homedir } from "node:os"
import { join } from "node:path"

// Node's compile cache (22.1+; without it, just slower): the ~400-500 modules the CLI imports
// below are compiled from source by the first process only, and later ones read V8's code cache.
// Enabled here, before `main` imports anything, so that every command gains: `fibril mcp` is
// started by each session of an MCP client (docs/performance.md, start-up). The cache holds code
// that is run without being compiled again, so it lives in the user's own cache directory
// ($XDG_CACHE_HOME or ~/.cache), never in Node's default, the system's shared temp directory,
// where another local user could create it first. NODE_COMPILE_CACHE=<dir> (Node enables that
// one itself, and this call leaves it) moves it; NODE_DISABLE_COMPILE_CACHE=1 turns it off.
NodeModule.enableCompileCache?.(
  join(process.env["XDG_CACHE_HOME"] || join(homedir(), ".cache"), "fibril", "node-compile-cache")
)

// `fibril --version` answers before the CLI, Effect and the core are loaded (they take most of
// the start-up time); the same line the CLI prints.
if (process.argv.length === 3 && process.argv[2] === "--version") {
  const { version } = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as {
    readonly version: string
  }
  process.stdout.write(`fibril v${version}\n`)
} else {
  await main()
}

async function main() {
  const [NodeRuntime, Cause, Console, Effect, Exit, Cli, Shutdown] = await Promise.all([
    import("@effect/platform-node/NodeRuntime"),
    import("effect/Cause"),
    import("effect/Console"),
    import("effect/Effect"),
    import("effect/Exit"),
    import("./Cli.ts"),
    import("./Shutdown.ts")
  ])

  // Ctrl-C, SIGTERM and SIGHUP interrupt the run (NodeRuntime listens for SIGINT and SIGTERM;
  // a closed terminal's SIGHUP is handed to it as SIGTERM): the tree is cancelled, its shell
  // process groups are killed, and the process exits 128 + the signal's number. The first
  // signal is remembered so that the run can say what cancelled it.
  const signals = {
    SIGINT: { code: 130, label: "Ctrl-C" },
    SIGTERM: { code: 143, label: "SIGTERM" },
    SIGHUP: { code: 129, label: "SIGHUP (the terminal closed)" }
  }
  // The first signal also bounds how long the process may take to end (Shutdown.ts): a
  // finalizer stuck behind a blocked file operation must not keep it alive for good.
  let received: keyof typeof signals | undefined
  const receive = (signal: keyof typeof signals) => {
    received ??= signal
    Shutdown.signalled(signals[received].code, signals[received].label)
  }
  process.on("SIGINT", () => receive("SIGINT"))
  process.on("SIGTERM", () => receive("SIGTERM"))
  process.on("SIGHUP", () => {
    receive("SIGHUP")
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
    ).pipe(
      // A crash (a defect: a bug, not a reported error) is told on stderr. runMain's own report
      // logs it to stdout, which `fibril mcp` reserves for JSON-RPC and `--json` for events.
      Effect.tapCause((cause) => Cause.hasInterruptsOnly(cause) ? Effect.void : Console.error(Cause.pretty(cause)))
    ),
    {
      disableErrorReporting: true,
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
}
