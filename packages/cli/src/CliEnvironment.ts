/**
 * What every command reads from the process it runs in: the environment it was started with
 * (read once, at the edge, by `processEnvironment`), the exit code it chooses, and from those
 * its workspace and that workspace's configuration.
 *
 * Command modules take these services from here, not from Cli.ts, which registers them: so no
 * command module imports the root command back.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as os from "node:os"
import * as path from "node:path"
import * as ConfigFlags from "./ConfigFlags.ts"
import * as Workspace from "./Workspace.ts"

/** The process exit code the command chose. */
export class ExitCode extends Context.Service<ExitCode, Ref.Ref<number>>()("@fibril/cli/ExitCode") {}

export const setExit = (code: number) => ExitCode.use((ref) => Ref.set(ref, code))

/** What the process was started with: read once, at the edge. */
export interface Environment {
  readonly env: Readonly<Record<string, string | undefined>>
  readonly home: string
  readonly cwd: string
  readonly tty: boolean
  /** stdin is a terminal too: a person can answer questions there (`fibril run`, TerminalApprovals). */
  readonly stdinTty?: boolean | undefined
  /** What interrupted the process, once a signal has (`Ctrl-C`, `SIGTERM`, …). */
  readonly interruptedBy?: (() => string | undefined) | undefined
}
export class ProcessEnvironment extends Context.Service<ProcessEnvironment, Environment>()("@fibril/cli/Environment") {}

/** The environment of this process (for bin.ts). */
export const processEnvironment = (): Environment => ({
  env: { ...process.env },
  home: os.homedir(),
  cwd: process.cwd(),
  tty: process.stdout.isTTY === true,
  stdinTty: process.stdin.isTTY === true
})

/** The workspace of a command: `--cwd`, else the project around the current directory (Workspace.ts). */
export const resolveCwd = (flag: Option.Option<string>) => ProcessEnvironment.use((e) => Workspace.resolve(flag, e))

/** The configuration of the workspace `cwd` (ConfigFlags.ts: `--no-strict` applied, warnings logged). */
export const loadConfig = (cwd: string) => ProcessEnvironment.use((e) => ConfigFlags.load(e, cwd))

/** The workspace's file store. */
export const stateDir = (cwd: string) => path.join(cwd, ".fibril", "state")

/**
 * `[cluster] url` of the workspace's config files (FIBRIL_CLUSTER_URL is read by the caller
 * first). A config that cannot be read gives none: the commands that only consult it (agents)
 * behave as before, and those that need it load it again and report the problem.
 */
export const configuredCluster = (cwd: string) =>
  loadConfig(cwd).pipe(Effect.map((config) => config.settings.cluster.url), Effect.orElseSucceed(() => undefined))
