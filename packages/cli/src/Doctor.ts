/**
 * `fibril doctor`: what fibril needs, checked where it will run, each check with what to do
 * when it fails.
 *
 * - node: the version running fibril (>= 22.19);
 * - workspace: the project root and how it was found;
 * - config: the config files found, and their problems (the same errors a run would stop on);
 * - model: which model, built as `fibril run` builds it (ModelSelection.probe: the same layer,
 *   the id it starts on resolved), so that what stops a run at start fails here first with the
 *   same message; for an endpoint, whether OPENAI_API_KEY is set (never shown);
 * - endpoint: whether the endpoint answers `GET …/models` with the key, and lists the model;
 * - sandbox: whether bubblewrap confines `shell` here;
 * - store: whether `.fibril/state` is writable (or can be created), and which other live
 *   processes run agents on it (those hold a lease in its owners table);
 * - cluster: the cluster's URL when one is configured (password masked; not connected to), or
 *   not configured (the embedded runtime).
 *
 * Exit code 0 when no check failed (warnings allowed), 1 otherwise.
 */
import * as FibrilConfig from "@fibril/core/FibrilConfig"
import * as McpServers from "@fibril/core/McpServers"
import * as McpTools from "@fibril/core/McpTools"
import * as Sandbox from "@fibril/core/Sandbox"
import { redactText, redactUrl } from "@fibril/core/Secrets"
import * as SqliteSubAgentStore from "@fibril/core/SqliteSubAgentStore"
import * as SubAgentStore from "@fibril/core/SubAgentStore"
import * as Trust from "@fibril/core/Trust"
import * as WorkspaceLayer from "@fibril/core/Workspace"
import { OpenAiClient } from "@fibril/openai"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as FetchHttpClient from "effect/http/FetchHttpClient"
import * as HttpClient from "effect/http/HttpClient"
import * as HttpClientRequest from "effect/http/HttpClientRequest"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Path from "effect/Path"
import * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import { DatabaseSync } from "node:sqlite"
import * as ModelSelection from "./ModelSelection.ts"
import type * as Output from "./Output.ts"
import * as Workspace from "./Workspace.ts"

export type Status = "ok" | "warn" | "fail" | "skip"

export interface Check {
  readonly name: string
  readonly status: Status
  readonly detail: string
}

const check = (name: string, status: Status, detail: string): Check => ({ name, status, detail })

export const minimumNode = [22, 19] as const

/** `v24.21.0` against the minimum. */
export const nodeCheck = (version: string): Check => {
  const [major = 0, minor = 0] = version.replace(/^v/, "").split(".").map(Number)
  const ok = major > minimumNode[0] || (major === minimumNode[0] && minor >= minimumNode[1])
  return ok
    ? check("node", "ok", `${version} (fibril needs >= ${minimumNode.join(".")})`)
    : check(
      "node",
      "fail",
      `${version} is too old: fibril needs Node >= ${minimumNode.join(".")}; install a newer Node`
    )
}

export interface Input {
  readonly environment: {
    readonly env: Readonly<Record<string, string | undefined>>
    readonly home: string
    readonly cwd: string
  }
  readonly cwdFlag: Option.Option<string>
  readonly model: string | undefined
  readonly baseUrl: string | undefined
  readonly strict: boolean
  readonly nodeVersion: string
}

/** `GET {base}/models` with the key: reachable, refused, or not there. */
const endpointCheck = (selection: Extract<ModelSelection.Selection, { kind: "openai" }>) =>
  Effect.gen(function*() {
    const base = (selection.baseURL ?? OpenAiClient.defaultBaseURL).replace(/\/+$/, "")
    const shown = redactUrl(base)
    const client = yield* HttpClient.HttpClient
    const answer = yield* client.execute(
      HttpClientRequest.get(`${base}/models`).pipe(HttpClientRequest.bearerToken(Redacted.value(selection.apiKey)))
    ).pipe(Effect.timeout("10 seconds"), Effect.result)
    if (Result.isFailure(answer)) {
      const error = answer.failure
      const why = error._tag === "TimeoutError"
        ? "no answer in 10 s"
        : error.reason._tag === "TransportError"
        ? "unreachable"
        : error.message
      return check(
        "endpoint",
        "fail",
        `${shown}: ${redactText(why)}. Check OPENAI_BASE_URL / --base-url and the network.`
      )
    }
    const response = answer.success
    if (response.status === 401 || response.status === 403) {
      return check("endpoint", "fail", `${shown} refused the key (HTTP ${response.status}): check OPENAI_API_KEY`)
    }
    if (response.status >= 400) {
      return check(
        "endpoint",
        "warn",
        `${shown} answered GET /models with HTTP ${response.status}; the model id cannot be checked`
      )
    }
    const body = yield* Effect.orElseSucceed(response.json, () => undefined)
    const ids = typeof body === "object" && body !== null && "data" in body && Array.isArray(body.data)
      ? body.data.flatMap((m: unknown) => typeof m === "object" && m !== null && "id" in m ? [String(m.id)] : [])
      : []
    if (ids.length > 0 && !ids.includes(selection.model)) {
      return check(
        "endpoint",
        "warn",
        `${shown} is reachable, but does not list ${selection.model} among its ${ids.length} models`
      )
    }
    return check("endpoint", "ok", `${shown} is reachable${ids.length > 0 ? ` and lists ${selection.model}` : ""}`)
  }).pipe(Effect.provide(FetchHttpClient.layer))

/** The processes sharing the store (from its owners table), with their liveness. */
const storeCheck = (dir: string) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const stateDir = path.join(dir, ".fibril", "state")
    const database = path.join(stateDir, SqliteSubAgentStore.databaseFileName)
    if (!(yield* Effect.orElseSucceed(fs.exists(database), () => false))) {
      // Nothing is created here: the nearest existing directory must let the first run create it.
      let parent = stateDir
      while (!(yield* Effect.orElseSucceed(fs.exists(parent), () => false))) parent = path.dirname(parent)
      const info = yield* Effect.option(fs.stat(parent))
      if (Option.isSome(info) && info.value.type !== "Directory") {
        return check("store", "fail", `${stateDir} cannot be created: ${parent} is not a directory`)
      }
      const writable = yield* fs.access(parent, { writable: true }).pipe(
        Effect.as(true),
        Effect.orElseSucceed(() => false)
      )
      return writable
        ? check("store", "ok", `${stateDir} does not exist yet; the first run creates it (${parent} is writable)`)
        : check("store", "fail", `${stateDir} cannot be created: ${parent} is not writable`)
    }
    const opened = yield* SubAgentStore.SubAgentStore.use((store) =>
      Effect.gen(function*() {
        // The owners table: every process that has run agents on this store (fibril run, mcp, …).
        const rows = yield* Effect.sync(() => {
          const db = new DatabaseSync(database, { readOnly: true })
          try {
            return db.prepare("SELECT boot_id, pid, host FROM fibril_owners").all()
          } finally {
            db.close()
          }
        })
        const others: Array<string> = []
        for (const row of rows) {
          const boot = String(row["boot_id"])
          if (boot === store.owner.boot_id) continue
          if ((yield* store.liveness(boot)) === "alive") others.push(`pid ${String(row["pid"])}@${String(row["host"])}`)
        }
        return { others, warnings: store.warnings }
      })
    ).pipe(Effect.provide(SqliteSubAgentStore.layerSqlite({ dir: stateDir }).pipe(Layer.fresh)), Effect.result)
    if (Result.isFailure(opened)) {
      return check("store", "fail", `${database} cannot be used: ${redactText(opened.failure.message)}`)
    }
    const { others, warnings } = opened.success
    const shared = others.length === 0
      ? "no other live process runs agents on it"
      : `shared with ${others.length} other live process${others.length === 1 ? "" : "es"} running agents: ${
        others.join(", ")
      }`
    return check(
      "store",
      warnings.length > 0 ? "warn" : "ok",
      `${database} is writable; ${shared}${warnings.length > 0 ? `; ${warnings.join("; ")}` : ""}`
    )
  })

/**
 * Each configured MCP server started, its tools listed, and stopped again; or why it failed.
 * A stdio server's instance for agents that may not write runs in the read-only sandbox
 * (docs/mcp.md): it is started there too, since a server that writes as it starts fails there
 * alone; with no sandbox here, those agents cannot use it at all.
 */
const mcpChecks = (root: string, home: string, sandbox: Sandbox.Options, confined: boolean) =>
  McpServers.load({ cwd: root, home }).pipe(
    Effect.flatMap((servers) =>
      Effect.forEach(servers, (server) =>
        Effect.map(
          Effect.all([McpTools.probe(server), readOnlyCheck(server, sandbox, confined)], { concurrency: 2 }),
          ([probe, readOnly]) => [mcpCheck(`mcp ${probe.server.name}`, probe), ...readOnly]
        ), { concurrency: "unbounded" })
    ),
    Effect.map((checks) => checks.flat()),
    Effect.provide(WorkspaceLayer.layer(root)),
    Effect.catch((error) => Effect.succeed([check("mcp", "fail", error.message)]))
  )

const mcpCheck = (name: string, probe: McpTools.Probe) =>
  probe._tag === "Ready"
    ? check(name, "ok", `${probe.tools.length} tools (${probe.server.source}): ${probe.tools.join(", ")}`)
    : check(name, "fail", `${probe.reason} (${probe.server.source})`)

const readOnlyCheck = (server: McpServers.Server, sandbox: Sandbox.Options, confined: boolean) => {
  const name = `mcp ${server.name} (read-only)`
  if (server.transport !== "stdio" || sandbox.mode === "off") return Effect.succeed([])
  if (!confined) {
    return Effect.succeed([
      check(
        name,
        "warn",
        "agents that may not write cannot use it: it runs for them only in the sandbox, and none works here"
      )
    ])
  }
  return Effect.map(McpTools.probeReadOnly(server, sandbox), (probe) => [
    probe._tag === "Ready"
      ? check(name, "ok", `starts in the read-only sandbox (${probe.tools.length} tools)`)
      : check(
        name,
        "warn",
        `${probe.reason}: this is its instance for agents that may not write, in the read-only sandbox (its writer's is checked above); a server that writes as it starts needs that place in [sandbox] writable_paths`
      )
  ])
}

/** Every check, in order. */
export const run = Effect.fn("fibril.doctor")(function*(input: Input) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const checks: Array<Check> = [nodeCheck(input.nodeVersion)]

  const where = yield* Effect.result(
    Option.isSome(input.cwdFlag)
      ? Effect.map(
        Workspace.resolve(input.cwdFlag, input.environment),
        (dir): Workspace.Root => ({ dir, marker: undefined })
      )
      : Workspace.locate(input.environment.cwd, input.environment.home)
  )
  if (Result.isFailure(where)) {
    checks.push(check("workspace", "fail", where.failure.message))
    return checks
  }
  const root = where.success
  checks.push(check(
    "workspace",
    "ok",
    `${root.dir} (${
      Option.isSome(input.cwdFlag)
        ? "--cwd"
        : root.marker === undefined
        ? "no .fibril/ or .git above: the current directory"
        : `it holds ${root.marker}`
    })`
  ))

  const files = [
    path.join(input.environment.home, ".fibril", "config.toml"),
    path.join(root.dir, ".fibril", "config.toml")
  ]
  const found: Array<string> = []
  for (const file of files) if (yield* Effect.orElseSucceed(fs.exists(file), () => false)) found.push(file)
  const setVariables = Object.keys(input.environment.env).filter((name) => name.startsWith("FIBRIL_")).sort()
  const sources = `${found.length === 0 ? "no config file" : found.join(", ")}${
    setVariables.length === 0 ? "" : `; environment: ${setVariables.join(", ")}`
  }`
  const loaded = yield* Effect.result(FibrilConfig.load({
    cwd: root.dir,
    home: input.environment.home,
    env: input.environment.env,
    ...(input.strict ? {} : { strict: false })
  }))
  if (Result.isFailure(loaded)) {
    checks.push(check("config", "fail", `${sources}: ${redactText(loaded.failure.message)}`))
  } else {
    const { warnings, clamped, trust } = loaded.success
    const notes = [
      ...warnings,
      // What the workspace's own config widens (trusted), or what of it is ignored (not trusted).
      ...(trust === undefined ? [] : [Trust.describe(trust).replace(/^config: /, "")]),
      ...clamped.map((c) => `${c.key} = ${JSON.stringify(c.given)} is clamped to ${JSON.stringify(c.used)}`)
    ]
    checks.push(
      check("config", notes.length > 0 ? "warn" : "ok", `${sources}${notes.length > 0 ? `: ${notes.join("; ")}` : ""}`)
    )
  }

  const settings = Result.isSuccess(loaded) ? loaded.success.settings : FibrilConfig.defaults
  const selection = yield* Effect.result(ModelSelection.select({
    model: input.model,
    baseUrl: input.baseUrl,
    env: input.environment.env,
    settings,
    cwd: root.dir,
    invocationDir: input.environment.cwd
  }))
  if (Result.isFailure(selection)) {
    checks.push(check("model", "fail", selection.failure.problem.replace(/\n\s*/g, " ")))
    checks.push(check("endpoint", "skip", "not checked without a model"))
  } else {
    // The endpoint first: when it cannot be reached, that is the problem to report, and the
    // model cannot be resolved against it anyway.
    const endpoint = selection.success.kind === "openai"
      ? yield* endpointCheck(selection.success)
      : check("endpoint", "skip", "none: a scripted model needs no network")
    // Then the model as `fibril run` builds it, the id it starts on resolved (an id the
    // endpoint does not list, a script that does not load): the same error a run stops on.
    const built = endpoint.status === "fail"
      ? Result.succeed(undefined)
      : yield* Effect.result(ModelSelection.probe(selection.success))
    checks.push(
      Result.isFailure(built)
        ? check("model", "fail", redactText(built.failure.message).replace(/\n\s*/g, " "))
        : selection.success.kind === "scripted"
        ? check("model", "ok", `scripted model ${selection.success.file} (a valid script)`)
        : check("model", "ok", `${selection.success.model}; OPENAI_API_KEY is set (not shown)`)
    )
    checks.push(endpoint)
  }

  const sandbox = yield* Effect.flatMap(Sandbox.currentHost, (host) => Sandbox.probe(settings.sandbox, host))
  checks.push(
    sandbox.available
      ? check("sandbox", "ok", `bubblewrap (${sandbox.path}): shell commands are confined to what each role may do`)
      : check(
        "sandbox",
        "warn",
        `none (${sandbox.reason}): read-only roles get no shell, roles that may write run it unconfined. ` +
          "Install bubblewrap (apt-get install bubblewrap) to confine it."
      )
  )
  if (sandbox.available) {
    const bounds = Sandbox.describeBounds(settings.sandbox, sandbox, process.getuid?.() === 0)
    checks.push(check("bounds", bounds.enforced ? "ok" : "warn", bounds.text))
  }

  checks.push(...(yield* mcpChecks(root.dir, input.environment.home, settings.sandbox, sandbox.available)))
  checks.push(yield* storeCheck(root.dir))
  const fromEnv = input.environment.env["FIBRIL_CLUSTER_URL"]
  const clusterUrl = fromEnv !== undefined && fromEnv !== "" ? fromEnv : settings.cluster.url
  checks.push(
    clusterUrl === undefined || clusterUrl === ""
      ? check(
        "cluster",
        "skip",
        "not configured (agents run in this process; --cluster, FIBRIL_CLUSTER_URL or [cluster] url for cluster mode: docs/cluster.md)"
      )
      : check(
        "cluster",
        "skip",
        `${redactUrl(clusterUrl)} (not connected to here: \`fibril cluster migrate\` checks it and creates the tables)`
      )
  )
  return checks
})

const mark: Record<Status, string> = { ok: "✓", warn: "!", fail: "✗", skip: "-" }

/** Prints the checks (or their JSON); 0 when none failed, 1 otherwise. */
export const report = Effect.fn("fibril.doctor.report")(
  function*(checks: ReadonlyArray<Check>, json: boolean, output: Output.Output) {
    const failed = checks.filter((c) => c.status === "fail").length
    const warned = checks.filter((c) => c.status === "warn").length
    if (json) {
      yield* output.line(JSON.stringify({ ok: failed === 0, checks }))
    } else {
      for (const c of checks) {
        // A detail over several lines (a config error listing each unknown key) stays under its check.
        const [first, ...rest] = c.detail.split("\n")
        yield* output.line(`${mark[c.status]} ${c.name.padEnd(9)} ${first}`)
        for (const line of rest) yield* output.line(`${" ".repeat(12)}${line.trim()}`)
      }
      yield* output.line("")
      yield* output.line(
        failed === 0
          ? `No problem found${warned > 0 ? ` (${warned} warning${warned === 1 ? "" : "s"})` : ""}.`
          : `${failed} problem${failed === 1 ? "" : "s"} found${
            warned > 0 ? `, ${warned} warning${warned === 1 ? "" : "s"}` : ""
          }.`
      )
    }
    return failed === 0 ? 0 : 1
  }
)
