/**
 * Sandbox — the operating-system sandbox `shell` commands run in.
 *
 * Permissions decide which tools an agent may call; once `shell` is allowed, the command
 * line can do anything its process can. So the shell's reach follows the agent's write
 * permission through the kernel: an agent that may not write runs its commands with the
 * whole file system read-only (a private `/tmp` is writable and gone after the call); an
 * agent that may write gets the workspace writable, with `.git` and `.fibril` still
 * read-only (hooks and config there run code, or widen permissions, outside the sandbox).
 * Neither has network by default: a new network namespace (loopback only) and a seccomp
 * filter against Unix sockets, which reach host daemons (Docker, D-Bus) past any mount.
 *
 * On Linux the sandbox is bubblewrap (`bwrap`), called directly: one small binary, a pid
 * namespace whose pid 1 is the command, so every process it started (`setsid` and double
 * forks included) dies with it, `--die-with-parent`, `--new-session`, and all capabilities
 * dropped (as root, a kept `CAP_SYS_ADMIN` could remount the read-only binds). Whether it
 * works here is probed once, by running `true` under the same flags, and cached for the life
 * of the layer. (`@anthropic-ai/sandbox-runtime` wraps the same tool with network proxies;
 * docs/security.md says why Fibril calls it directly.)
 *
 * Every sandbox is bounded (docs/security.md, "Shell sandbox bounds"): a sized /tmp and
 * /dev/shm, /dev read-only, a process and memory cap (a cgroup where one can be made, else
 * rlimits), and no descriptor this process inherited reaches the command.
 *
 * Where no sandbox works, an agent that may not write gets no shell at all — a denial that
 * says why and how to enable it — never an unconfined one. An agent that may write runs its
 * commands unconfined, as it would without Fibril (`fibril config` says so).
 */
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Path from "effect/Path"
import type * as PlatformError from "effect/PlatformError"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { threadId } from "node:worker_threads"
import * as FibrilConfig from "./FibrilConfig.ts"
import * as HostProcess from "./internal/hostProcess.ts"
import * as Permission from "./Permission.ts"
import * as Roles from "./Roles.ts"
import { current as currentWorkspace, Workspace } from "./Workspace.ts"

/** How far a shell command may write: the whole file system read-only, the workspace writable, or no sandbox. */
export type Mode = FibrilConfig.SandboxMode

/** `[sandbox]` settings; see FibrilConfig. */
export type Options = FibrilConfig.SandboxSettings

/** The `[sandbox]` defaults, as the configuration has them. */
export const defaults: Options = FibrilConfig.defaults.sandbox

/** The bounds of one sandbox: its tmpfs sizes, processes and memory. */
export interface Limits {
  /** Size of the private /tmp, and of /dev/shm, each. */
  readonly tmpSizeMb: number
  /** Processes (threads included) of the sandboxed command, all together. */
  readonly maxProcesses: number
  /** Memory of the command: all together in a cgroup, else each process's data segment. */
  readonly memoryMb: number
}

const mib = 1024 * 1024

/** Inside the workspace, read-only even where the workspace is writable (unless listed in `writable_paths`). */
export const protectedPaths: ReadonlyArray<string> = [".git", ".fibril"]

/** How much of the workspace an agent's permissions let it write. */
export type Access =
  | { readonly _tag: "none" }
  | { readonly _tag: "all" }
  | { readonly _tag: "under"; readonly prefixes: ReadonlyArray<string> }

/**
 * What the agent's own write tools may touch: nothing without the `write` posture or without
 * any write tool allowed by name (an agent given `read_file` and `shell` only is read-only);
 * otherwise its write scope. The shell never gets more than the agent's file tools.
 */
export const accessOf = (rules: Permission.Rules, writeTools: Iterable<string>): Access => {
  let any = false
  for (const tool of writeTools) {
    if (Permission.allowsTool(rules, tool, "write")) {
      any = true
      break
    }
  }
  if (!any) return { _tag: "none" }
  return rules.writeScope === "all" || rules.writeScope.has("")
    ? { _tag: "all" }
    : { _tag: "under", prefixes: [...rules.writeScope] }
}

/** A role's access as its spec states it (for `fibril config`; a running agent's comes from its rules). */
export const accessOfRole = (role: Roles.RoleSpec): Access =>
  !role.postures.has("write")
    ? { _tag: "none" }
    : role.writeScope === undefined
    ? { _tag: "all" }
    : { _tag: "under", prefixes: role.writeScope }

/** The sandbox of one agent's shell. */
export interface Policy {
  /** The agent's role (or definition) name, the key of `[sandbox.roles.<name>]`. */
  readonly role: string
  /** Who the agent is, for messages ("explore sub-agent at depth 1"). */
  readonly label: string
  readonly mode: Mode
  readonly network: boolean
  /**
   * Writable besides what the mode opens: the agent's write scope when it may write only
   * under some prefixes (workspace-relative), then the configured `writable_paths`.
   */
  readonly writable: ReadonlyArray<string>
  /**
   * Unix sockets (which reach host daemons past any mount): by default open exactly when the
   * network is. `false` blocks them with the network on (a read-only agent's MCP server).
   */
  readonly unixSockets?: boolean | undefined
  /**
   * Paths the command itself needs to read that may lie under /tmp, which the sandbox
   * replaces with a private one (an MCP server's script in a checkout under /tmp): the
   * directory holding each under /tmp comes back read-only.
   */
  readonly readable?: ReadonlyArray<string> | undefined
}

/**
 * The policy for an agent in `role` with `access`: the configured mode (the role's override,
 * else `[sandbox] mode`) is the most the shell gets, and never more than the agent's
 * permissions — an agent that may not write is read-only whatever the mode says. `off`
 * runs commands without a sandbox, and is the only way to do so for a read-only agent.
 */
export const policyFor = (options: Options, role: string, label: string, access: Access): Policy => {
  const override = options.roles[role] ?? options.roles[role.toLowerCase()] ?? {}
  const configured = override.mode ?? options.mode
  const network = override.network ?? options.network
  const paths = override.writablePaths ?? options.writablePaths
  if (configured === "off") return { role, label, mode: "off", network: true, writable: [] }
  const mode: Mode = configured === "workspace-write" && access._tag === "all" ? "workspace-write" : "read-only"
  const scoped = mode === "read-only" && configured !== "read-only" && access._tag === "under" ? access.prefixes : []
  return { role, label, mode, network, writable: [...scoped, ...paths] }
}

/** Whether a sandbox works here. */
export type Status =
  | {
    readonly available: true
    readonly kind: "bubblewrap"
    readonly path: string
    /** Where a cgroup per call bounds processes and memory (empty: rlimits only). */
    readonly cgroups: ReadonlyArray<HostProcess.CgroupParent>
  }
  | { readonly available: false; readonly reason: string }

/** A read-only agent's shell, where no sandbox works: nothing runs. */
export class SandboxUnavailable extends Schema.TaggedError<SandboxUnavailable>()("SandboxUnavailable", {
  role: Schema.String,
  label: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `shell is not available to the ${this.label}: it may not write, so its commands run only inside a ` +
      `read-only operating-system sandbox, and none works here (${this.reason}). Nothing was run. ` +
      `To enable it, install bubblewrap (e.g. \`apt-get install bubblewrap\` or \`dnf install bubblewrap\`), ` +
      `or run this role's commands without a sandbox by setting mode = "off" under [sandbox.roles.${this.role}] ` +
      `in .fibril/config.toml. Meanwhile read_file, list_dir, grep and glob work.`
  }
}

/** Where a command runs; "none": unconfined (mode `off`, or a writing agent where no sandbox works). */
export type Confinement = "read-only" | "workspace-write" | "none"

/** What a shell call runs, and under which sandbox. */
export interface Launch {
  readonly command: ChildProcess.Command
  readonly sandbox: Confinement
  /** The cgroups `command` moves itself into (made before it starts, removed after). */
  readonly cgroup?: { readonly parents: ReadonlyArray<HostProcess.CgroupParent>; readonly name: string } | undefined
  /** Unconfined: the environment entry that marks every process it starts. */
  readonly marker?: string | undefined
}

/** A running command, and under which sandbox. */
export interface Spawned {
  readonly handle: ChildProcessSpawner.ChildProcessHandle
  readonly sandbox: Confinement
}

export class Sandbox extends Context.Service<Sandbox, {
  readonly options: Options
  /** Whether the sandbox works here: probed on first use (it runs `true` inside one), then cached. */
  readonly status: Effect.Effect<Status>
  readonly policy: (role: string, label: string, access: Access) => Policy
  /**
   * The process for `sh -c script` in the workspace root under `policy`, with `extra`
   * spawn options (kill signal, stdin). Fails for a read-only policy when no sandbox works.
   */
  readonly launch: (
    policy: Policy,
    script: string,
    extra: ChildProcess.CommandOptions
  ) => Effect.Effect<Launch, SandboxUnavailable>
  /**
   * Starts `launch`'s process in the current scope. Closing the scope stops it; for a
   * sandboxed one, the scope closes only once every process of the sandbox is gone.
   */
  readonly spawn: (launch: Launch) => Effect.Effect<Spawned, PlatformError.PlatformError, Scope.Scope>
}>()("@fibril/core/Sandbox") {}

// ---------------------------------------------------------------------------
// seccomp: no Unix sockets, no io_uring
// ---------------------------------------------------------------------------

const BPF_LD_W_ABS = 0x20
const BPF_JEQ_K = 0x15
const BPF_JGE_K = 0x35
const BPF_RET_K = 0x06
const SECCOMP_RET_ALLOW = 0x7fff0000
const SECCOMP_RET_ERRNO_EPERM = 0x00050001
const SECCOMP_RET_KILL_PROCESS = 0x80000000
const AF_UNIX = 1
/** Same number on x86_64 and aarch64: io_uring can open sockets without the `socket` syscall. */
const NR_IO_URING_SETUP = 425
const X32_SYSCALL_BIT = 0x40000000

const architectures: Readonly<
  Record<string, { readonly audit: number; readonly socket: number; readonly x32: boolean }>
> = {
  x64: { audit: 0xc000003e, socket: 41, x32: true },
  arm64: { audit: 0xc00000b7, socket: 198, x32: false }
}

/**
 * A classic BPF seccomp program (bwrap `--seccomp`): `socket(AF_UNIX, ...)` and
 * `io_uring_setup` fail with EPERM, x32 system calls too; a process of another architecture
 * (a 32-bit binary) is killed rather than let through unfiltered. Other sockets are left to
 * the network namespace. `undefined` on architectures without a table here.
 */
export const seccompFilter = (arch: string): Uint8Array | undefined => {
  const table = architectures[arch]
  if (table === undefined) return undefined
  // [code, jump if true, jump if false, k]; jumps are relative to the next instruction.
  const program: Array<readonly [number, number, number, number]> = [
    [BPF_LD_W_ABS, 0, 0, 4], // 0: arch
    [BPF_JEQ_K, 0, 8, table.audit], // 1: another arch -> 10 (kill)
    [BPF_LD_W_ABS, 0, 0, 0], // 2: syscall number
    [BPF_JGE_K, table.x32 ? 5 : 0, 0, table.x32 ? X32_SYSCALL_BIT : 0xffffffff], // 3: x32 -> 9 (deny)
    [BPF_JEQ_K, 0, 2, table.socket], // 4: not socket -> 7
    [BPF_LD_W_ABS, 0, 0, 16], // 5: args[0] (low half): the address family
    [BPF_JEQ_K, 2, 1, AF_UNIX], // 6: AF_UNIX -> 9 (deny), else -> 8 (allow)
    [BPF_JEQ_K, 1, 0, NR_IO_URING_SETUP], // 7: io_uring_setup -> 9 (deny)
    [BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW], // 8
    [BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO_EPERM], // 9
    [BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS] // 10
  ]
  const bytes = new Uint8Array(program.length * 8)
  const view = new DataView(bytes.buffer)
  program.forEach(([code, jt, jf, k], i) => {
    view.setUint16(i * 8, code, true)
    view.setUint8(i * 8 + 2, jt)
    view.setUint8(i * 8 + 3, jf)
    view.setUint32(i * 8 + 4, k >>> 0, true)
  })
  return bytes
}

// ---------------------------------------------------------------------------
// bubblewrap arguments
// ---------------------------------------------------------------------------

/** Everything `bwrapArgs` needs, with every path absolute and real. */
export interface Layout {
  readonly workspace: string
  readonly mode: "read-only" | "workspace-write"
  readonly network: boolean
  /** Existing protected directories inside the workspace (made read-only again under workspace-write). */
  readonly protected: ReadonlyArray<string>
  /** Existing extra writable paths. */
  readonly writable: ReadonlyArray<string>
  /** Paths to read under /tmp (Policy.readable): their top directory there comes back read-only. */
  readonly readable?: ReadonlyArray<string> | undefined
  /** Pass the seccomp program on fd 3. */
  readonly seccomp: boolean
  readonly limits: Limits
  readonly script: string
}

const privateTmp = "/tmp"

/**
 * bubblewrap's arguments for `layout`. Mount order matters (later mounts cover earlier
 * ones): the root read-only, fresh /dev and /proc, a private /tmp; when the workspace lies
 * under /tmp, the real directory holding it comes back read-only (so `../x` from the
 * workspace fails instead of landing in the private /tmp), then the workspace, the
 * protected directories, and the writable extras.
 */
export const bwrapArgs = (layout: Layout): Array<string> => {
  const args = [...boundedMounts(layout.limits)]
  const tops = new Set<string>()
  for (const path of [layout.workspace, ...(layout.readable ?? [])]) {
    const underTmp = path === privateTmp || path.startsWith(`${privateTmp}/`)
    if (underTmp) {
      tops.add(path === privateTmp ? privateTmp : `${privateTmp}/${path.slice(privateTmp.length + 1).split("/")[0]}`)
    }
  }
  for (const top of tops) args.push("--ro-bind", top, top)
  if (layout.mode === "workspace-write") {
    args.push("--bind", layout.workspace, layout.workspace)
    for (const path of layout.protected) args.push("--ro-bind", path, path)
  }
  for (const path of layout.writable) args.push("--bind", path, path)
  // The command is the namespace's pid 1 (no bwrap init in between): when it exits, the
  // kernel kills every other process in the namespace before bwrap sees the exit, so the
  // call never returns while a detached child still runs. With an init, bwrap reports the
  // exit first and the namespace dies a moment later.
  args.push("--unshare-all", "--as-pid-1")
  if (layout.network) args.push("--share-net")
  args.push("--cap-drop", "ALL", "--die-with-parent", "--new-session")
  if (layout.seccomp) args.push("--seccomp", "3")
  args.push("--info-fd", "4")
  args.push("--setenv", "TMPDIR", privateTmp, "--chdir", layout.workspace, "--", ...bounded(layout.limits))
  args.push("sh", "-c", layout.script)
  return args
}

/**
 * The root read-only, fresh /dev and /proc, and the only writable memory-backed mounts
 * sized: a private /tmp and /dev/shm of `tmpSizeMb` each; /dev itself (a tmpfs bubblewrap
 * fills with device nodes) read-only, so nothing can be stored there at all.
 */
const boundedMounts = (limits: Limits): Array<string> => {
  const size = String(limits.tmpSizeMb * mib)
  // dprint-ignore
  return [
    "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
    "--size", size, "--tmpfs", privateTmp, "--size", size, "--tmpfs", "/dev/shm", "--remount-ro", "/dev"
  ]
}

/**
 * The first step inside the sandbox (util-linux `prlimit`, which then execs the command, so
 * the command stays pid 1): RLIMIT_NPROC, counted per user in the sandbox's own user
 * namespace, caps its processes for an ordinary user (root is exempt: the cgroup caps it);
 * RLIMIT_DATA caps each process's memory.
 */
const bounded = (limits: Limits): Array<string> => [
  "prlimit",
  `--nproc=${limits.maxProcesses}`,
  `--data=${limits.memoryMb * mib}`,
  "--"
]

/** The probe's sandbox: the same isolation and bounds as a real call, running `true`. */
const probeArgs = (seccomp: boolean, limits: Limits): Array<string> => [
  ...boundedMounts(limits),
  "--unshare-all",
  "--cap-drop",
  "ALL",
  "--die-with-parent",
  "--new-session",
  ...(seccomp ? ["--seccomp", "3"] : []),
  "--",
  ...bounded(limits),
  "true"
]

const withSeccomp = (
  filter: Uint8Array | undefined,
  options: ChildProcess.CommandOptions
): ChildProcess.CommandOptions =>
  filter === undefined
    ? options
    : { ...options, additionalFds: { fd3: { type: "input", stream: Stream.make(filter) } } }

/** fd 4: bubblewrap writes `{"child-pid": N}` there, the host pid of the sandbox's pid 1. */
const withInfo = (options: ChildProcess.CommandOptions): ChildProcess.CommandOptions => ({
  ...options,
  additionalFds: { ...options.additionalFds, fd4: { type: "output" } }
})

const childPid = (info: string): number | undefined => {
  const found = /"child-pid"\s*:\s*(\d+)/.exec(info)
  return found === null ? undefined : Number(found[1])
}

/** Between SIGKILL to the sandbox's pid 1 and bubblewrap's exit: the kernel's teardown of the namespace. */
const teardownGrace = Duration.seconds(2)

const probeTimeout = Duration.seconds(10)

export interface Host {
  /** `process.platform`, passed in at the edge. */
  readonly platform: string
  /** `process.arch`, for the seccomp program. */
  readonly arch: string
}

/** This process's platform and architecture (read at the edge, when a layer is built). */
export const currentHost: Effect.Effect<Host> = Effect.sync(() => ({ platform: process.platform, arch: process.arch }))

const unavailable = (reason: string): Status => ({ available: false, reason })

/**
 * Whether bubblewrap works here under `options`: runs `true` in a sandbox with the same
 * isolation as a real call (seccomp program included). Never fails; the reason is in the status.
 */
export const probe = (
  options: Pick<Options, "bwrapPath"> & Limits,
  host: Host
): Effect.Effect<Status, never, ChildProcessSpawner.ChildProcessSpawner> =>
  Effect.gen(function*() {
    const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
    const filter = seccompFilter(host.arch)
    if (host.platform !== "linux") {
      return unavailable(`no supported sandbox on ${host.platform} (Fibril uses bubblewrap, on Linux)`)
    }
    const run = Effect.gen(function*() {
      const handle = yield* spawner.spawn(
        ChildProcess.make(
          options.bwrapPath,
          probeArgs(filter !== undefined, options),
          withSeccomp(filter, {
            stdin: "ignore",
            stdout: "ignore"
          })
        )
      )
      const [stderr, code] = yield* Effect.all(
        [Stream.mkString(Stream.decodeText(handle.stderr)), handle.exitCode],
        { concurrency: "unbounded" }
      )
      return { stderr, code: Number(code) }
    }).pipe(Effect.scoped)
    const outcome = yield* run.pipe(
      Effect.timeoutOption(probeTimeout),
      Effect.result
    )
    if (outcome._tag === "Failure") {
      const error = outcome.failure
      return unavailable(
        `${options.bwrapPath} could not be started: ${error.reason._tag === "NotFound" ? "not found" : error.message}`
      )
    }
    if (outcome.success._tag === "None") {
      return unavailable(`${options.bwrapPath} did not finish within ${Duration.format(probeTimeout)}`)
    }
    const { code, stderr } = outcome.success.value
    if (code !== 0) {
      const said = stderr.trim().split("\n")[0] ?? ""
      return unavailable(`${options.bwrapPath} failed (exit ${code}${said === "" ? "" : `: ${said}`})`)
    }
    const cgroups = yield* Effect.sync(() => HostProcess.probeCgroups(`fibril-probe-${process.pid}`))
    const found: Status = { available: true, kind: "bubblewrap", path: options.bwrapPath, cgroups }
    return found
  }).pipe(Effect.withSpan("Sandbox.probe"))

/** The environment variable that marks the processes of one unconfined call. */
export const callMarker = "FIBRIL_SHELL_CALL"

/** `sh -c` that moves itself into each cgroup `name`, then execs `$0 "$@"` (bubblewrap). */
const joinCgroups = (parents: ReadonlyArray<HostProcess.CgroupParent>, name: string): string =>
  [...new Set(parents.map((parent) => `${parent.dir}/${name}/cgroup.procs`))]
    .map((procs) => `echo $$ > '${procs.replaceAll("'", `'\\''`)}'`)
    .concat(`exec "$0" "$@"`)
    .join(" && ")

/**
 * One call's cgroups, made with the limits before the process starts and removed once it
 * is gone (bubblewrap's exit means the pid namespace is empty; reaping may trail a little).
 */
const cgroupScoped = (parents: ReadonlyArray<HostProcess.CgroupParent>, name: string, limits: Limits) =>
  Effect.acquireRelease(
    Effect.sync(() =>
      HostProcess.makeCgroups(parents, name, {
        maxProcesses: limits.maxProcesses,
        memoryBytes: limits.memoryMb * mib
      })
    ),
    (dirs) =>
      Effect.suspend(() => dirs.every(HostProcess.removeCgroup) ? Effect.void : Effect.fail("cgroup not empty yet"))
        .pipe(Effect.retry({ schedule: Schedule.spaced("20 millis"), times: 100 }), Effect.ignore)
  )

/**
 * Launches of this thread, naming their cgroups with the process, the thread and a random part:
 * several sandboxes live in one process (the shell's, the MCP servers' read-only instances',
 * `fibril doctor`'s probes; lab workers are threads of it), and the cgroup tree is the host's,
 * where a process killed with SIGKILL leaves its cgroups behind for a later process of the same
 * pid to meet: a name made twice fails the launch (EEXIST).
 */
let launches = 0

export const make = Effect.fn("Sandbox.make")(function*(options: Options, host: Host) {
  const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const base = yield* Workspace
  const filter = seccompFilter(host.arch)
  const status = yield* Effect.cached(
    Effect.provideService(probe(options, host), ChildProcessSpawner.ChildProcessSpawner, spawner)
  )

  /** The real paths of those that exist; relative ones are workspace-relative and must stay inside it. */
  const existing = (workspace: Workspace["Service"], paths: ReadonlyArray<string>) =>
    Effect.map(
      Effect.forEach(paths, (given) =>
        (path.isAbsolute(given) ? Effect.succeed(given) : workspace.resolve(given)).pipe(
          Effect.flatMap((absolute) => fs.realPath(absolute)),
          Effect.map((real) => [real]),
          Effect.orElseSucceed((): Array<string> => [])
        )),
      (found) => found.flat()
    )

  // Every process an unconfined command starts inherits this entry in its environment,
  // also one that left the process group with `setsid`: the end of the call kills them all.
  let calls = 0
  const unconfined = (
    workspace: Workspace["Service"],
    script: string,
    extra: ChildProcess.CommandOptions
  ): Launch => {
    const value = `${process.pid}.${++calls}.${Math.random().toString(36).slice(2)}`
    return {
      command: ChildProcess.make("sh", ["-c", script], {
        ...extra,
        cwd: workspace.root,
        env: { ...extra.env, [callMarker]: value },
        extendEnv: true
      }),
      sandbox: "none",
      marker: `${callMarker}=${value}`
    }
  }

  const launch = Effect.fn("Sandbox.launch")(function*(
    policy: Policy,
    script: string,
    extra: ChildProcess.CommandOptions
  ) {
    // An isolated agent's commands run in, and may write only, its worktree.
    const workspace = yield* currentWorkspace(base)
    if (policy.mode === "off") return unconfined(workspace, script, extra)
    const found = yield* status
    if (!found.available) {
      if (policy.mode === "workspace-write") return unconfined(workspace, script, extra)
      return yield* new SandboxUnavailable({ role: policy.role, label: policy.label, reason: found.reason })
    }
    const protectedDirs = policy.mode === "workspace-write" ? yield* existing(workspace, protectedPaths) : []
    const writable = yield* existing(workspace, policy.writable)
    // With network on, Unix sockets are allowed too (unless the policy says otherwise): the
    // filter is what "no network" adds.
    const seccomp = policy.network && policy.unixSockets !== false ? undefined : filter
    const args = bwrapArgs({
      workspace: workspace.root,
      mode: policy.mode,
      network: policy.network,
      protected: protectedDirs,
      writable,
      readable: policy.readable,
      seccomp: seccomp !== undefined,
      limits: options,
      script
    })
    const spawnOptions = withInfo(withSeccomp(seccomp, { ...extra, cwd: workspace.root }))
    // Descriptors this process inherited would pass through bubblewrap to the command
    // (libuv closes none): each becomes the read end of an empty pipe in the child instead.
    const leaked = yield* Effect.sync(HostProcess.inheritableFds)
    const additionalFds = { ...spawnOptions.additionalFds }
    for (const fd of leaked) {
      if (fd !== 3 && fd !== 4) additionalFds[`fd${fd}`] = { type: "input", stream: Stream.empty }
    }
    const name = `fibril-${process.pid}-${threadId}-${++launches}-${Math.random().toString(36).slice(2, 8)}`
    const command = found.cgroups.length === 0
      ? ChildProcess.make(found.path, args, { ...spawnOptions, additionalFds })
      : ChildProcess.make("sh", ["-c", joinCgroups(found.cgroups, name), found.path, ...args], {
        ...spawnOptions,
        additionalFds
      })
    return {
      command,
      sandbox: policy.mode,
      cgroup: found.cgroups.length === 0 ? undefined : { parents: found.cgroups, name }
    } satisfies Launch
  })

  // The spawner stops a process by signalling its group: for bubblewrap that is the monitor
  // process, whose death reaches the sandbox (`--die-with-parent`) a moment *after* the
  // monitor is gone. So the sandbox's pid 1 is killed first: bubblewrap's wait for it ends
  // only once the kernel has killed every process of the pid namespace, then bubblewrap
  // exits, then the spawner's own finalizer finds nothing left to stop.
  const spawn = (planned: Launch) =>
    Effect.gen(function*() {
      if (planned.cgroup !== undefined) yield* cgroupScoped(planned.cgroup.parents, planned.cgroup.name, options)
      const handle = yield* spawner.spawn(planned.command)
      const marker = planned.marker
      if (marker !== undefined) {
        // Runs before the spawner's own finalizer (which signals the process group only, and
        // may finish after the call returned): every process the command started, in its
        // group or not, is killed before the call's result is given.
        yield* Effect.addFinalizer(() => Effect.sync(() => HostProcess.killWithEnv(marker)))
      }
      if (planned.sandbox === "none") return { handle, sandbox: planned.sandbox } satisfies Spawned
      const pid = yield* Deferred.make<number | undefined>()
      yield* Stream.mkString(Stream.decodeText(handle.getOutputFd(4))).pipe(
        Effect.map(childPid),
        Effect.orElseSucceed(() => undefined),
        Effect.flatMap((found) => Deferred.succeed(pid, found)),
        Effect.forkScoped
      )
      yield* Effect.addFinalizer(() =>
        Effect.gen(function*() {
          const running = yield* handle.isRunning.pipe(Effect.orElseSucceed(() => false))
          const inner = Deferred.isDoneUnsafe(pid) ? yield* Deferred.await(pid) : undefined
          if (!running || inner === undefined) return
          // While bubblewrap runs it has not reaped its child, so `inner` is still that child.
          yield* Effect.sync(() => {
            try {
              process.kill(inner, "SIGKILL")
            } catch {
              // already gone
            }
          })
          yield* handle.exitCode.pipe(Effect.timeoutOption(teardownGrace), Effect.ignore)
        })
      )
      return { handle, sandbox: planned.sandbox } satisfies Spawned
    })

  return Sandbox.of({
    options,
    status,
    policy: (role, label, access) => policyFor(options, role, label, access),
    launch,
    spawn
  })
})

/** The sandbox under `options` (usually `[sandbox]` from FibrilConfig), for this host. */
export const layer = (
  options: Partial<Options> = {}
): Layer.Layer<
  Sandbox,
  never,
  ChildProcessSpawner.ChildProcessSpawner | FileSystem.FileSystem | Path.Path | Workspace
> => Layer.effect(Sandbox, Effect.flatMap(currentHost, (host) => make({ ...defaults, ...options }, host)))

/** The effective shell of each built-in role under `options` and `status`, for `fibril config`. */
export const describeRoles = (
  options: Options,
  status: Status
): ReadonlyArray<{ readonly role: string; readonly shell: string }> =>
  Roles.roleNames.flatMap((name) => {
    const role = Roles.roles[name]
    if (!role.postures.has("shell")) return [{ role: name, shell: "no shell (role)" }]
    const policy = policyFor(options, name, name, accessOfRole(role))
    if (policy.mode === "off") return [{ role: name, shell: "unconfined (sandbox mode off)" }]
    if (!status.available) {
      return [{
        role: name,
        shell: policy.mode === "read-only" ? "no shell (no sandbox available)" : "unconfined (no sandbox available)"
      }]
    }
    const extras = policy.writable.length > 0 ? `, also writable: ${policy.writable.join(", ")}` : ""
    const narrowed = role.needsAllowedTools && policy.mode === "workspace-write"
      ? " (read-only unless its allowed_tools include a write tool)"
      : ""
    return [{ role: name, shell: `${policy.mode}${policy.network ? ", network" : ", no network"}${extras}${narrowed}` }]
  })

/**
 * The bounds a sandboxed command runs under, in words (for `fibril doctor`), and whether the
 * process cap holds: RLIMIT_NPROC does not bind root, so as root only a cgroup caps processes.
 */
export const describeBounds = (
  options: Options,
  status: Status,
  root: boolean
): { readonly enforced: boolean; readonly text: string } => {
  const cgroup = status.available && status.cgroups.some((parent) => parent.controller === "pids")
  const memoryInCgroup = status.available && status.cgroups.some((parent) => parent.controller === "memory")
  const tmp = `/tmp and /dev/shm ${options.tmpSizeMb} MiB each, /dev read-only`
  const processes = cgroup
    ? `${options.maxProcesses} processes (cgroup)`
    : root
    ? `processes not capped (running as root, and no writable cgroup: RLIMIT_NPROC does not bind root)`
    : `${options.maxProcesses} processes (RLIMIT_NPROC in the sandbox's user namespace)`
  const memory = memoryInCgroup
    ? `${options.memoryMb} MiB of memory in all (cgroup), and per process (RLIMIT_DATA)`
    : `${options.memoryMb} MiB of memory per process (RLIMIT_DATA)`
  return { enforced: cgroup || !root, text: `${tmp}; ${processes}; ${memory}; inherited descriptors replaced` }
}
