// A read-only agent's MCP server runs in the shell's read-only sandbox. Against the real
// @modelcontextprotocol/server-filesystem over stdio, serving the workspace: an explore child
// is not offered its write tools, a call by name is denied, a read reaches the parent; and the
// instance started for read-only agents, made to write inside its own allowed directory, fails
// with nothing on disk, while the writer's instance of the same server writes.
import { assert, describe, it } from "@effect/vitest"
import type { ScriptedModel } from "@fibril/testkit"
import { Effect, Stream } from "effect"
import type * as Prompt from "effect/ai/Prompt"
import { ChildProcess } from "effect/process"
import { spawnSync } from "node:child_process"
import * as nodeFs from "node:fs"
import { createRequire } from "node:module"
import * as net from "node:net"
import * as os from "node:os"
import * as nodePath from "node:path"
import { confinedSpawner, policyOf } from "../src/internal/mcpConfined.ts"
import type * as McpServers from "../src/McpServers.ts"
import * as McpTools from "../src/McpTools.ts"
import * as Permission from "../src/Permission.ts"
import * as Roles from "../src/Roles.ts"
import * as Sandbox from "../src/Sandbox.ts"
import * as Session from "../src/Session.ts"
import * as ToolRegistry from "../src/ToolRegistry.ts"
import * as Workspace from "../src/Workspace.ts"
import { provideNode, report, setup } from "./support.ts"

const serverBin = createRequire(import.meta.url).resolve("@modelcontextprotocol/server-filesystem/dist/index.js")

// Where bubblewrap cannot run, a read-only agent's server does not start at all (as its shell
// does not): there is nothing to check on disk.
const bwrap = spawnSync("bwrap", ["--ro-bind", "/", "/", "--unshare-all", "--", "true"]).status === 0

const filesystem = (root: string): McpServers.StdioServer => ({
  transport: "stdio",
  name: "fs",
  source: "test",
  timeoutSecs: 30,
  command: process.execPath,
  args: [serverBin, root],
  env: {}
})

/** The pids of the processes whose command line names `dir` (both instances serve it). */
const running = (dir: string): ReadonlyArray<string> =>
  spawnSync("pgrep", ["-f", dir], { encoding: "utf8" }).stdout.split("\n").filter((pid) => pid !== "")

/** Polls (bounded, 5 s) until no process names `dir`: a killed process takes a moment to go. */
const gone = (dir: string) =>
  Effect.promise(async () => {
    for (let i = 0; i < 100 && running(dir).length > 0; i++) await new Promise((r) => setTimeout(r, 50))
    return running(dir)
  })

const toolResults = (messages: ReadonlyArray<Prompt.Message>) =>
  messages.flatMap((message) =>
    message.role === "tool" ? message.content.filter((part) => part.type === "tool-result") : []
  )

/** The root delegates to an explore child, which tries a write by name and reads a file. */
const delegating = (root: string, offered: Array<string>): ScriptedModel.ScriptInput => ({
  rules: [
    {
      match: { depth: 0 },
      respond: (conversation) =>
        conversation.turn === 0
          ? {
            tool_calls: [{
              name: "task",
              args: { description: "read", prompt: "read notes.txt", subagent_type: "explore" }
            }]
          }
          : { text: "done" }
    },
    {
      respond: (conversation) => {
        if (conversation.turn > 0) {
          return { text: report(conversation.toolResults.map((result) => JSON.stringify(result.result)).join(" | ")) }
        }
        offered.push(...conversation.tools.filter((name) => name.startsWith("mcp__")))
        return {
          tool_calls: [
            { name: "mcp__fs__write_file", args: { path: nodePath.join(root, "child.txt"), content: "x" } },
            { name: "mcp__fs__read_text_file", args: { path: nodePath.join(root, "notes.txt") } }
          ]
        }
      }
    }
  ]
})

describe.skipIf(!bwrap)("a read-only agent's MCP server (server-filesystem, bubblewrap)", () => {
  it.live(
    "explore is offered no write tool and is denied one by name; its read reaches the parent; its server cannot write",
    () =>
      Effect.gen(function*() {
        const root = nodeFs.realpathSync(nodeFs.mkdtempSync(nodePath.join(os.tmpdir(), "fibril-mcp-ro-")))
        nodeFs.writeFileSync(nodePath.join(root, "notes.txt"), "the secret word is heliotrope\n")
        const offered: Array<string> = []
        yield* Effect.addFinalizer(() => Effect.sync(() => nodeFs.rmSync(root, { recursive: true, force: true })))
        yield* Effect.scoped(Effect.gen(function*() {
          const { get } = yield* setup(delegating(root, offered), {}, { root, mcpServers: [filesystem(root)] })
          const session = get(Session.Session)
          const agent = yield* session.create()
          yield* session.prompt(agent.id, "go")

          // (a) The explore child saw the server's read tools only.
          assert.include(offered, "mcp__fs__read_text_file")
          assert.notInclude(offered, "mcp__fs__write_file")
          assert.notInclude(offered, "mcp__fs__edit_file")
          // (c) The parent got the child's report: the write denied by the rules, the read's content.
          const delegated = toolResults(yield* session.transcript(agent.id)).map((part) => JSON.stringify(part.result))
          assert.lengthOf(delegated, 1)
          assert.include(delegated[0]!, "heliotrope")
          assert.include(delegated[0]!, `permission denied for tool \\\\\\"mcp__fs__write_file\\\\\\"`)
          assert.isFalse(nodeFs.existsSync(nodePath.join(root, "child.txt")))

          // (b) The write tool driven directly, as a read-only agent: the call reaches the
          // server's read-only instance (the rules are not asked here), whose write fails in the
          // sandbox; as an agent that may write, the same call writes through its own instance.
          const registry = get(ToolRegistry.ToolRegistry)
          const permission = get(Permission.Permission)
          const write = registry.get("mcp__fs__write_file")
          assert.isTrue(write._tag === "Some")
          if (write._tag !== "Some") return
          const explore = Permission.effective(permission.root, Session.grantFor(0, 1, Roles.roles.explore))
          const call = (rules: Permission.Rules, file: string) =>
            write.value.handler({ path: nodePath.join(root, file), content: "written\n" }, {
              sessionId: undefined,
              callId: file,
              role: "test",
              depth: 1,
              rules
            }).pipe(Effect.result)
          const denied = yield* call(explore, "from-read-only.txt")
          // The server answers with an error result (`isError`): a failed call, its words kept.
          assert.isTrue(denied._tag === "Failure", "an isError result is a failed call")
          assert.match(denied._tag === "Failure" ? denied.failure.message : "", /server reported an error: .*EROFS/s)
          assert.isFalse(nodeFs.existsSync(nodePath.join(root, "from-read-only.txt")))
          const written = yield* call(permission.root, "from-writer.txt")
          assert.isTrue(written._tag === "Success")
          assert.strictEqual(nodeFs.readFileSync(nodePath.join(root, "from-writer.txt"), "utf8"), "written\n")
          // Two instances: the writer's and, in bubblewrap, the read-only agents'.
          const commands = running(root).map((pid) => nodeFs.readFileSync(`/proc/${pid}/cmdline`, "utf8"))
          assert.isTrue(commands.some((command) => command.startsWith("bwrap\0") || command.includes("/bwrap\0")))
          assert.lengthOf(commands.filter((command) => command.startsWith(`${process.execPath}\0`)), 2)
        }))
        // The runtime's scope closed: both instances (the sandbox and all) are gone.
        assert.deepStrictEqual(yield* gone(root), [])
      }).pipe(provideNode),
    30_000
  )
})

describe.skipIf(!bwrap)("the sandbox of a read-only agent's MCP server", () => {
  // What the server's process can reach, started by the very spawner its MCP client uses.
  const python = [
    "import socket, sys, errno",
    "t = sys.argv[1]",
    "try:",
    "  if t == 'write':",
    "    open(sys.argv[2], 'w').write('x')",
    "    print('written')",
    "    sys.exit(0)",
    "  s = socket.socket(socket.AF_UNIX) if t.startswith('/') else socket.socket()",
    "  s.connect(t if t.startswith('/') else ('127.0.0.1', int(t)))",
    "  sys.stdout.write(s.recv(100).decode())",
    "except OSError as e:",
    "  print(errno.errorcode.get(e.errno, str(e.errno)))"
  ].join("\n")

  it.live(
    "host TCP is reachable (an API client's network), a host daemon's Unix socket and the workspace are not",
    () =>
      Effect.gen(function*() {
        const dir = nodeFs.realpathSync(nodeFs.mkdtempSync(nodePath.join(os.tmpdir(), "fibril-mcp-net-")))
        const root = nodePath.join(dir, "ws")
        nodeFs.mkdirSync(root)
        const socketPath = nodePath.join(dir, "host.sock")
        const tcp = net.createServer((socket) => socket.end("tcp-hello\n"))
        const unix = net.createServer((socket) => socket.end("unix-hello\n"))
        yield* Effect.acquireRelease(
          Effect.promise(() =>
            Promise.all([
              new Promise<void>((resolve) => tcp.listen(0, "127.0.0.1", resolve)),
              new Promise<void>((resolve) => unix.listen(socketPath, resolve))
            ])
          ),
          () =>
            Effect.promise(() => Promise.all([new Promise((r) => tcp.close(r)), new Promise((r) => unix.close(r))]))
              .pipe(
                Effect.andThen(Effect.sync(() => nodeFs.rmSync(dir, { recursive: true, force: true })))
              )
        )
        const address = tcp.address()
        const port = typeof address === "object" && address !== null ? address.port : 0
        const sandbox = yield* Sandbox.make(Sandbox.defaults, yield* Sandbox.currentHost).pipe(
          Effect.provide(Workspace.layer(root))
        )
        const spawner = confinedSpawner(
          sandbox,
          policyOf(Sandbox.defaults, {
            transport: "stdio",
            name: "fs",
            source: "test",
            timeoutSecs: 30,
            command: "/usr/bin/python3",
            args: [],
            env: {}
          })
        )
        const run = (...args: ReadonlyArray<string>) =>
          Effect.scoped(Effect.gen(function*() {
            const handle = yield* spawner.spawn(
              ChildProcess.make("/usr/bin/python3", ["-c", python, ...args], { stdin: "ignore", stderr: "ignore" })
            )
            const [out] = yield* Effect.all([Stream.mkString(Stream.decodeText(handle.stdout)), handle.exitCode], {
              concurrency: "unbounded"
            })
            return out
          }))
        assert.strictEqual(yield* run(String(port)), "tcp-hello\n")
        assert.strictEqual(yield* run(socketPath), "EPERM\n")
        assert.strictEqual(yield* run("write", nodePath.join(root, "w.txt")), "EROFS\n")
        assert.isFalse(nodeFs.existsSync(nodePath.join(root, "w.txt")))
      }).pipe(provideNode),
    30_000
  )
})

describe.skipIf(!bwrap)("several sandboxes in one process", () => {
  // The shell's sandbox and the MCP servers' (and doctor's probes) each launch processes whose
  // cgroups, where this host lets Fibril make them, live in the host's one tree.
  it.live("launch side by side: each launch's cgroup has a name of its own", () =>
    Effect.gen(function*() {
      const root = nodeFs.realpathSync(nodeFs.mkdtempSync(nodePath.join(os.tmpdir(), "fibril-sandboxes-")))
      yield* Effect.addFinalizer(() => Effect.sync(() => nodeFs.rmSync(root, { recursive: true, force: true })))
      const made = Sandbox.make(Sandbox.defaults, yield* Sandbox.currentHost).pipe(
        Effect.provide(Workspace.layer(root))
      )
      const [first, second] = [yield* made, yield* made]
      const run = (sandbox: Sandbox.Sandbox["Service"]) =>
        Effect.scoped(Effect.gen(function*() {
          const policy = sandbox.policy("explore", "test", { _tag: "none" })
          const launch = yield* sandbox.launch(policy, "sleep 0.2; echo ran", { stdin: "ignore", stderr: "ignore" })
          const { handle } = yield* sandbox.spawn(launch)
          const [out] = yield* Effect.all([Stream.mkString(Stream.decodeText(handle.stdout)), handle.exitCode], {
            concurrency: "unbounded"
          })
          return out
        }))
      assert.deepStrictEqual(yield* Effect.all([run(first), run(second)], { concurrency: 2 }), ["ran\n", "ran\n"])
    }).pipe(provideNode))
})

describe("a read-only agent's MCP server where no sandbox works", () => {
  it.live(
    "is not started: its calls say why, while an agent that may write uses the server as before",
    () =>
      Effect.gen(function*() {
        const root = nodeFs.realpathSync(nodeFs.mkdtempSync(nodePath.join(os.tmpdir(), "fibril-mcp-nosb-")))
        nodeFs.writeFileSync(nodePath.join(root, "notes.txt"), "plain\n")
        yield* Effect.addFinalizer(() => Effect.sync(() => nodeFs.rmSync(root, { recursive: true, force: true })))
        yield* Effect.scoped(Effect.gen(function*() {
          const { get } = yield* setup({ rules: [] }, {}, {
            root,
            mcpServers: [filesystem(root)],
            sandbox: { bwrapPath: "/nonexistent/fibril-test/bwrap" }
          })
          const registry = get(ToolRegistry.ToolRegistry)
          const permission = get(Permission.Permission)
          // A writer needs the server first: it lists the tools through its own instance.
          yield* registry.prepare(permission.root)
          const read = registry.get("mcp__fs__read_text_file")
          assert.isTrue(read._tag === "Some")
          if (read._tag !== "Some") return
          const explore = Permission.effective(permission.root, Session.grantFor(0, 1, Roles.roles.explore))
          const call = (rules: Permission.Rules) =>
            read.value.handler({ path: nodePath.join(root, "notes.txt") }, {
              sessionId: undefined,
              callId: "c",
              role: "test",
              depth: 1,
              rules
            }).pipe(Effect.result)
          const refused = yield* call(explore)
          assert.isTrue(refused._tag === "Failure")
          if (refused._tag === "Failure") {
            assert.include(refused.failure.message, "only inside the read-only sandbox, and none works here")
            assert.include(refused.failure.message, "/nonexistent/fibril-test/bwrap")
          }
          const answered = yield* call(permission.root)
          assert.isTrue(answered._tag === "Success" && String(answered.success).includes("plain"))
        }))
      }).pipe(provideNode),
    30_000
  )
})

describe.skipIf(!bwrap)("McpTools.probeReadOnly (fibril doctor)", () => {
  it.live(
    "a server that writes as it starts: its writer's instance starts, its read-only instance fails and writes nothing",
    () =>
      Effect.gen(function*() {
        const root = nodeFs.realpathSync(nodeFs.mkdtempSync(nodePath.join(os.tmpdir(), "fibril-mcp-probe-")))
        yield* Effect.addFinalizer(() => Effect.sync(() => nodeFs.rmSync(root, { recursive: true, force: true })))
        const marker = nodePath.join(root, "started.log")
        // It logs its start into the workspace, then serves.
        const logging: McpServers.StdioServer = {
          ...filesystem(root),
          name: "logging",
          command: "/bin/sh",
          args: ["-c", `echo started >> ${marker} && exec ${process.execPath} ${serverBin} ${root}`]
        }
        const probes = Effect.all([McpTools.probe(logging), McpTools.probeReadOnly(logging)])
        const [writer, readOnly] = yield* probes.pipe(Effect.provide(Workspace.layer(root)))
        assert.strictEqual(writer._tag, "Ready")
        assert.strictEqual(readOnly._tag, "Unavailable", JSON.stringify(readOnly))
        // Once: by the writer's instance; the sandboxed one could not write it.
        assert.strictEqual(nodeFs.readFileSync(marker, "utf8"), "started\n")
        // A server that only reads starts in the sandbox as well.
        const plain = yield* McpTools.probeReadOnly(filesystem(root)).pipe(Effect.provide(Workspace.layer(root)))
        assert.strictEqual(plain._tag, "Ready", JSON.stringify(plain))
        if (plain._tag === "Ready") assert.include(plain.tools, "read_text_file")
      }).pipe(provideNode),
    30_000
  )
})
