import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Exit, FileSystem, Layer, Option, Path, Random, Result, Schema, Scope, Stream } from "effect"
import { ChildProcess, ChildProcessSpawner } from "effect/process"
import { TestClock } from "effect/testing"
import { fileURLToPath } from "node:url"
import { SubAgentRecord } from "../src/SubAgentRecord.ts"
import * as SubAgentStore from "../src/SubAgentStore.ts"

const day = 24 * 60 * 60 * 1000

const sample = (agentId: string, overrides: Partial<SubAgentRecord> = {}): SubAgentRecord => ({
  agent_id: agentId,
  depth: 1,
  role: "worker",
  model: "fake-model",
  description: `agent ${agentId}`,
  objective: "do the thing",
  status: "running",
  detached: false,
  fork_context: false,
  session_boot_id: "boot-1",
  created_at: 0,
  steps: 0,
  tool_calls: 0,
  tokens: { input: 0, output: 0, cached: 0 },
  transcript_handle: `${agentId}.jsonl`,
  ...overrides
})

type StoreLayer = Layer.Layer<SubAgentStore.SubAgentStore, SubAgentStore.StoreError, FileSystem.FileSystem | Path.Path>

/** Builds a store in a scope of its own; `close` closes it (and so runs the final flush). */
const open = Effect.fnUntraced(function*(layer: StoreLayer) {
  const scope = yield* Scope.make()
  const context = yield* Layer.buildWithScope(layer, scope)
  return { store: Context.get(context, SubAgentStore.SubAgentStore), close: Scope.close(scope, Exit.void) }
})

/** Runs `f` on a store over `options` and closes it. */
const withStore = <A, E, R>(
  options: SubAgentStore.FileOptions,
  f: (store: SubAgentStore.SubAgentStore["Service"]) => Effect.Effect<A, E, R>
) =>
  Effect.flatMap(Layer.build(SubAgentStore.layerFile(options)), (context) =>
    f(Context.get(context, SubAgentStore.SubAgentStore))).pipe(Effect.scoped)

/** A fresh state dir plus helpers to look at it. */
const sandbox = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const dir = yield* fs.makeTempDirectoryScoped()
  const recordsPath = path.join(dir, SubAgentStore.recordsFileName)
  const transcriptPath = (handle: string) => path.join(dir, SubAgentStore.transcriptsDirName, handle)
  const rawFile = Effect.map(fs.readFileString(recordsPath), (text): { version: unknown; records: Array<Record<string, unknown>> } => JSON.parse(text))
  const listDir = Effect.map(fs.readDirectory(dir), (names) => [...names].sort())
  return { fs, path, dir, recordsPath, transcriptPath, rawFile, listDir }
})

/** A FileSystem that counts renames: every write of the records file ends with exactly one. */
const countingRenames = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  let renames = 0
  const layer = Layer.succeed(FileSystem.FileSystem, {
    ...fs,
    rename: (from: string, to: string) => Effect.andThen(Effect.sync(() => renames++), fs.rename(from, to))
  })
  return { layer, renames: () => renames }
})

/** Prefixes keys so generated unknown fields never collide with the schema's fields. */
const future = (fields: Readonly<Record<string, Schema.Json>>): Record<string, unknown> =>
  Object.fromEntries(Object.entries(fields).map(([key, value]) => [`x_future_${key}`, value]))

const writeRecordsFile = (fs: FileSystem.FileSystem, file: string, records: ReadonlyArray<unknown>) =>
  fs.writeFileString(file, JSON.stringify({ version: 1, records }))

const failsWithStoreError = <A>(effect: Effect.Effect<A, SubAgentStore.StoreError>) =>
  Effect.map(Effect.result(effect), (result) => Result.isFailure(result) && result.failure._tag === "StoreError")

const never = Number.POSITIVE_INFINITY

/** `a` as it comes back from JSON: the generators produce -0 (a valid Int), and JSON has no negative zero. */
const viaJson = <A>(a: A): A => JSON.parse(JSON.stringify(a))

describe("SubAgentStore", () => {
  describe("properties", () => {
    it.effect.prop("any record round-trips through the file store", [SubAgentRecord], ([record]) =>
      Effect.gen(function*() {
        const { dir } = yield* sandbox
        // No eviction: generated records may be terminal with any finished_at.
        const options = { dir, evictAfterMs: never }
        yield* withStore(options, (store) => Effect.andThen(store.put(record), store.flush))
        const [got, all] = yield* withStore(options, (store) => Effect.all([store.get(record.agent_id), store.all]))
        assert.deepStrictEqual(Option.getOrUndefined(got), viaJson(record))
        assert.deepStrictEqual(all, [viaJson(record)])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)), { arbitrary: { runs: 50 } })

    it.effect.prop(
      "unknown fields survive a rewrite",
      [SubAgentRecord, Schema.Record(Schema.String, Schema.Json)],
      ([record, extra]) =>
        Effect.gen(function*() {
          const { fs, recordsPath, dir, rawFile } = yield* sandbox
          const unknown = future(extra)
          yield* writeRecordsFile(fs, recordsPath, [{ ...record, ...unknown }])
          const options = { dir, evictAfterMs: never }
          const updated = { ...record, steps: record.steps + 1, objective: `${record.objective}!` }
          yield* withStore(options, (store) =>
            Effect.gen(function*() {
              assert.deepStrictEqual(store.warnings, [])
              // The service hands out known fields only.
              assert.deepStrictEqual(Option.getOrUndefined(yield* store.get(record.agent_id)), viaJson(record))
              yield* store.put(updated)
              yield* store.flush
            }))
          const file = yield* rawFile
          assert.deepStrictEqual(file.records, [viaJson({ ...updated, ...unknown })])
        }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)),
      { arbitrary: { runs: 50 } }
    )
  })

  describe("records file", () => {
    it.effect("missing file: empty store, no file until something is written", () =>
      Effect.gen(function*() {
        const { dir, fs, recordsPath } = yield* sandbox
        yield* withStore({ dir }, (store) =>
          Effect.gen(function*() {
            assert.deepStrictEqual(yield* store.all, [])
            assert.deepStrictEqual(store.warnings, [])
            assert.isTrue(Option.isNone(yield* store.get("nope")))
          }))
        assert.isFalse(yield* fs.exists(recordsPath))
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("a known field set and then removed is gone from the file, unknown fields stay", () =>
      Effect.gen(function*() {
        const { fs, recordsPath, dir, rawFile } = yield* sandbox
        const record = sample("a", { reason: "was here" })
        const nested = { x_future_plan: { steps: [1, 2, { deep: null }] }, __proto__x: 1 }
        // `__proto__` as an own JSON key must stay a plain field, not become a prototype.
        const raw = `{"version":1,"records":[${
          JSON.stringify({ ...record, ...nested }).slice(0, -1)
        },"__proto__":{"polluted":true}}]}`
        yield* fs.writeFileString(recordsPath, raw)
        yield* withStore({ dir }, (store) => {
          const { reason: _reason, ...withoutReason } = record
          // A view with an extra runtime field: the store keeps only schema fields from a put.
          return Effect.andThen(store.put({ ...withoutReason, ...{ from_prior_session: true } }), store.flush)
        })
        const [written] = (yield* rawFile).records
        assert.isDefined(written)
        assert.isFalse("reason" in written!)
        assert.isFalse("from_prior_session" in written!)
        assert.deepStrictEqual(written!["x_future_plan"], nested.x_future_plan)
        assert.deepStrictEqual(Object.getOwnPropertyDescriptor(written, "__proto__")?.value, { polluted: true })
        assert.strictEqual(Object.getPrototypeOf(written), Object.prototype)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("coalescing: 1000 puts cause a handful of writes; closing the scope writes the last state", () =>
      Effect.gen(function*() {
        const { dir, recordsPath, fs, rawFile } = yield* sandbox
        const counting = yield* countingRenames
        const { store, close } = yield* open(SubAgentStore.layerFile({ dir }).pipe(Layer.provide(counting.layer)))
        const update = (i: number) => sample(`agent_${i % 100}`, { steps: i })

        // A burst with no time passing: nothing is written yet.
        for (let i = 0; i < 1000; i++) yield* store.put(update(i))
        assert.strictEqual(counting.renames(), 0)
        assert.isFalse(yield* fs.exists(recordsPath))
        yield* TestClock.adjust("50 millis")
        yield* store.flush // waits for the writer's write, if it is still in flight
        assert.strictEqual(counting.renames(), 1)

        // A burst spread over 100 ms (10 ms between groups of 100): at most one write per 50 ms.
        for (let i = 0; i < 1000; i++) {
          yield* store.put(update(i + 1000))
          if (i % 100 === 99) yield* TestClock.adjust("10 millis")
        }
        yield* store.flush
        const afterBurst = counting.renames()
        assert.isAtLeast(afterBurst, 2)
        assert.isAtMost(afterBurst, 4)
        const flushed = yield* rawFile
        assert.strictEqual(flushed.records.length, 100)
        assert.deepStrictEqual(flushed.records.find((r) => r["agent_id"] === "agent_99")?.["steps"], 1999)

        // Clean: a flush with nothing pending writes nothing.
        yield* store.flush
        assert.strictEqual(counting.renames(), afterBurst)

        // Put, then close at once (no time passes, no explicit flush): the finalizer writes it.
        yield* store.put(sample("last", { status: "completed", finished_at: 1 }))
        yield* close
        assert.strictEqual(counting.renames(), afterBurst + 1)
        const closed = yield* rawFile
        assert.strictEqual(closed.records.length, 101)
        assert.deepStrictEqual(closed.records.at(-1)?.["agent_id"], "last")
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("garbage or a wrong shape is moved aside, never overwritten; the next write starts a fresh file", () =>
      Effect.gen(function*() {
        const { dir, fs, recordsPath, listDir, rawFile, path } = yield* sandbox
        const garbage = new Uint8Array([0x7b, 0xff, 0xfe, 0x00, 0x22, 0x0a, 0x80, 0x41])
        const cases: ReadonlyArray<Uint8Array> = [
          garbage,
          new TextEncoder().encode(`{"version":1,"records":[{"agent_id":`), // truncated
          new TextEncoder().encode(`{"version":2,"records":[]}`),
          new TextEncoder().encode(`[1,2,3]`),
          new TextEncoder().encode(`{"version":1,"records":{}}`)
        ]
        for (const [i, bytes] of cases.entries()) {
          yield* TestClock.setTime(1000 + i)
          yield* fs.writeFile(recordsPath, bytes)
          const aside = path.join(dir, `${SubAgentStore.recordsFileName}.corrupt-${1000 + i}`)
          yield* withStore({ dir }, (store) =>
            Effect.gen(function*() {
              assert.deepStrictEqual(yield* store.all, [])
              assert.strictEqual(store.warnings.length, 1)
              assert.include(store.warnings[0], "moved it aside")
              assert.include(store.warnings[0], aside)
              assert.isFalse(yield* fs.exists(recordsPath))
              assert.deepStrictEqual(yield* fs.readFile(aside), bytes)
              yield* store.put(sample(`fresh-${i}`))
              yield* store.flush
            }))
          const fresh = yield* rawFile
          assert.deepStrictEqual(fresh, { version: 1, records: [{ ...sample(`fresh-${i}`) }] })
        }
        assert.deepStrictEqual(
          (yield* listDir).filter((name) => name.includes(".corrupt-")).length,
          cases.length
        )
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("an invalid record is dropped with a warning, the rest is kept, the original is copied aside", () =>
      Effect.gen(function*() {
        const { dir, fs, recordsPath, rawFile, path } = yield* sandbox
        yield* TestClock.setTime(5000)
        const good = sample("good")
        yield* writeRecordsFile(fs, recordsPath, [good, { ...sample("bad"), steps: "many" }, 42])
        const original = yield* fs.readFile(recordsPath)
        yield* withStore({ dir }, (store) =>
          Effect.gen(function*() {
            assert.deepStrictEqual(yield* store.all, [good])
            assert.strictEqual(store.warnings.length, 1)
            assert.include(store.warnings[0], "dropped 2 invalid record(s)")
            assert.include(store.warnings[0], `"bad"`)
            assert.deepStrictEqual(yield* fs.readFile(path.join(dir, `${SubAgentStore.recordsFileName}.corrupt-5000`)), original)
          }))
        // The file is rewritten without them (closing flushed), so the next load is clean.
        assert.deepStrictEqual((yield* rawFile).records, [{ ...good }])
        yield* withStore({ dir }, (store) => Effect.sync(() => assert.deepStrictEqual(store.warnings, [])))
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("a failed write is a StoreError and stays pending; an unreadable records file fails the layer", () =>
      Effect.gen(function*() {
        const { dir, fs, path } = yield* sandbox
        // The state dir does not exist at load (fine: empty store); then a file takes its place.
        const state = path.join(dir, "state")
        const { store, close } = yield* open(SubAgentStore.layerFile({ dir: state }))
        yield* fs.writeFileString(state, "")
        yield* store.put(sample("a"))
        assert.strictEqual((yield* Effect.flip(store.flush))._tag, "StoreError")
        // Still dirty: the next flush tries again rather than reporting success.
        assert.strictEqual((yield* Effect.flip(store.flush))._tag, "StoreError")
        assert.isTrue(Option.isSome(yield* store.get("a")))
        yield* close // the final flush fails too: logged, not raised

        const unreadable = path.join(dir, "unreadable")
        yield* fs.makeDirectory(path.join(unreadable, SubAgentStore.recordsFileName), { recursive: true })
        const error = yield* Effect.flip(open(SubAgentStore.layerFile({ dir: unreadable })))
        assert.strictEqual(error._tag, "StoreError")
        assert.strictEqual(
          error.message,
          `sub-agent store: ${path.join(unreadable, SubAgentStore.recordsFileName)}: readFile failed (BadResource)`
        )
        assert.deepStrictEqual(yield* fs.readDirectory(unreadable), [SubAgentStore.recordsFileName])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("temp files of killed writes are ignored; those older than this process are removed", () =>
      Effect.gen(function*() {
        const { dir, fs, path, recordsPath, listDir } = yield* sandbox
        const good = sample("good")
        yield* writeRecordsFile(fs, recordsPath, [good])
        const stale = path.join(dir, `${SubAgentStore.recordsFileName}.tmp-stale`)
        const recent = path.join(dir, `${SubAgentStore.recordsFileName}.tmp-recent`)
        yield* fs.writeFileString(stale, `{"version":1,"rec`)
        yield* fs.utimes(stale, new Date("2000-01-01"), new Date("2000-01-01"))
        yield* fs.writeFileString(recent, `garbage`)
        yield* withStore({ dir }, (store) =>
          Effect.gen(function*() {
            assert.deepStrictEqual(yield* store.all, [good])
            assert.deepStrictEqual(store.warnings, [])
          }))
        assert.deepStrictEqual(yield* listDir, [SubAgentStore.recordsFileName, path.basename(recent)])
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
  })

  describe("eviction", () => {
    it.effect("by age: terminal records past evictAfterMs go, with their transcripts; live ones never", () =>
      Effect.gen(function*() {
        const { dir, fs, transcriptPath, rawFile } = yield* sandbox
        const now = 100 * day
        yield* TestClock.setTime(now)
        const records = [
          sample("old-done", { status: "completed", finished_at: now - 8 * day }),
          sample("old-cancelled", { status: "cancelled", finished_at: now - 7 * day - 1 }),
          sample("recent-failed", { status: "failed", finished_at: now - 1 * day }),
          sample("ancient-running", { status: "running", created_at: 0 }),
          sample("ancient-pending", { status: "pending", created_at: 0, finished_at: 0 })
        ]
        yield* withStore({ dir }, (store) =>
          Effect.gen(function*() {
            for (const record of records) {
              yield* store.put(record)
              yield* store.appendTranscript(record.transcript_handle, [{ role: "user", content: record.agent_id }])
            }
            // Eviction runs on write.
            yield* store.flush
            assert.deepStrictEqual(
              (yield* store.all).map((r) => r.agent_id),
              ["recent-failed", "ancient-running", "ancient-pending"]
            )
            assert.deepStrictEqual(yield* store.readTranscript("old-done.jsonl"), [])
          }))
        assert.isFalse(yield* fs.exists(transcriptPath("old-done.jsonl")))
        assert.isFalse(yield* fs.exists(transcriptPath("old-cancelled.jsonl")))
        assert.isTrue(yield* fs.exists(transcriptPath("recent-failed.jsonl")))
        assert.deepStrictEqual((yield* rawFile).records.map((r) => r["agent_id"]), ["recent-failed", "ancient-running", "ancient-pending"])

        // Eviction also runs at load: 7 days later the failed one has aged out too.
        yield* TestClock.adjust(7 * day)
        yield* withStore({ dir }, (store) =>
          Effect.map(store.all, (all) => assert.deepStrictEqual(all.map((r) => r.agent_id), ["ancient-running", "ancient-pending"]))
        )
        assert.isFalse(yield* fs.exists(transcriptPath("recent-failed.jsonl")))
        assert.isTrue(yield* fs.exists(transcriptPath("ancient-running.jsonl")))
        assert.strictEqual((yield* rawFile).records.length, 2)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("by count: beyond maxRecords the oldest terminal records go; running ones stay even over the cap", () =>
      Effect.gen(function*() {
        const { dir, fs, transcriptPath } = yield* sandbox
        yield* TestClock.setTime(1000)
        yield* withStore({ dir, maxRecords: 5 }, (store) =>
          Effect.gen(function*() {
            for (const i of [1, 2, 3]) yield* store.put(sample(`run-${i}`, { status: "running" }))
            // Put newest-first, so "oldest" has to come from finished_at and not from insertion order.
            for (const i of [6, 5, 4, 3, 2, 1]) {
              yield* store.put(sample(`done-${i}`, { status: "completed", finished_at: i }))
              yield* store.appendTranscript(`done-${i}.jsonl`, [i])
            }
            yield* store.flush
            assert.deepStrictEqual(
              (yield* store.all).map((r) => r.agent_id).sort(),
              ["done-5", "done-6", "run-1", "run-2", "run-3"]
            )
            assert.isFalse(yield* fs.exists(transcriptPath("done-1.jsonl")))
            assert.isTrue(yield* fs.exists(transcriptPath("done-6.jsonl")))
          }))
        yield* withStore({ dir, maxRecords: 2 }, (store) =>
          Effect.gen(function*() {
            // At load: only terminal records can go; three running ones stay over a cap of 2.
            assert.deepStrictEqual((yield* store.all).map((r) => r.agent_id).sort(), ["run-1", "run-2", "run-3"])
          }))
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

    it.effect("the memory store evicts the same way", () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(30 * day)
        const store = yield* SubAgentStore.makeMemory({ maxRecords: 3 })
        yield* store.put(sample("aged", { status: "interrupted", finished_at: 1 }))
        yield* store.appendTranscript("aged.jsonl", ["hello"])
        for (const i of [1, 2, 3]) yield* store.put(sample(`done-${i}`, { status: "completed", finished_at: 29 * day + i }))
        yield* store.put(sample("live", { status: "running" }))
        // Eviction happens on the (coalesced) write, driven by the clock like the file store's.
        assert.strictEqual((yield* store.all).length, 5)
        yield* TestClock.adjust("50 millis")
        yield* store.flush
        assert.deepStrictEqual((yield* store.all).map((r) => r.agent_id).sort(), ["done-2", "done-3", "live"])
        assert.deepStrictEqual(yield* store.readTranscript("aged.jsonl"), [])
      }))
  })

  const backends: ReadonlyArray<{ readonly name: string; readonly layer: (dir: string) => StoreLayer }> = [
    { name: "file", layer: (dir) => SubAgentStore.layerFile({ dir }) },
    { name: "memory", layer: () => SubAgentStore.layerMemory }
  ]

  describe("transcripts", () => {
    for (const backend of backends) {
      it.effect(`${backend.name}: append and read round-trip; unknown handles read as empty; bad handles refused`, () =>
        Effect.gen(function*() {
          const { dir } = yield* sandbox
          const { store } = yield* open(backend.layer(dir))
          const first = [{ role: "user", content: "hi\nthere" }, "text", 42, null, [1, { a: true }]]
          const second = [{ role: "assistant", content: "é ✓ 😀" }]
          yield* store.appendTranscript("agent_x.jsonl", first)
          yield* store.appendTranscript("agent_x.jsonl", [])
          yield* store.appendTranscript("agent_x.jsonl", second)
          assert.deepStrictEqual(yield* store.readTranscript("agent_x.jsonl"), [...first, ...second])
          assert.deepStrictEqual(yield* store.readTranscript("agent_y.jsonl"), [])

          for (const handle of ["../escape.jsonl", "a/b.jsonl", "..", "", "x\\y"]) {
            assert.isTrue(yield* failsWithStoreError(store.appendTranscript(handle, [1])), handle)
            assert.isTrue(yield* failsWithStoreError(store.readTranscript(handle)), handle)
          }
          // Not JSON: a StoreError, nothing written.
          assert.isTrue(yield* failsWithStoreError(store.appendTranscript("agent_x.jsonl", [1n])))
          assert.isTrue(yield* failsWithStoreError(store.appendTranscript("agent_x.jsonl", [undefined])))
          assert.strictEqual((yield* store.readTranscript("agent_x.jsonl")).length, first.length + second.length)
        }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))

      it.effect(`${backend.name}: concurrent appends to one handle keep every line whole`, () =>
        Effect.gen(function*() {
          const { dir } = yield* sandbox
          const { store } = yield* open(backend.layer(dir))
          const big = "x".repeat(20_000)
          yield* Effect.forEach(
            Array.from({ length: 20 }, (_, i) => i),
            (i) =>
              Effect.all([
                store.appendTranscript("shared.jsonl", Array.from({ length: 10 }, (_, j) => ({ i, j, big }))),
                store.appendTranscript(`own-${i}.jsonl`, [i])
              ], { concurrency: 2 }),
            { concurrency: "unbounded" }
          )
          const shared = yield* store.readTranscript("shared.jsonl")
          assert.strictEqual(shared.length, 200)
          assert.deepStrictEqual(yield* store.readTranscript("own-7.jsonl"), [7])
        }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
    }

    it.effect("file: a truncated last line is ignored, a bad line in the middle is an error, the next append cuts the partial line", () =>
      Effect.gen(function*() {
        const { dir, fs, transcriptPath, path } = yield* sandbox
        yield* fs.makeDirectory(path.dirname(transcriptPath("a.jsonl")), { recursive: true })
        yield* fs.writeFileString(transcriptPath("a.jsonl"), `{"n":1}\n{"n":2}\n{"n":3,"text":"cut he`)
        yield* fs.writeFileString(transcriptPath("b.jsonl"), `{"n":1}\n{"n":2\n{"n":3}\n`)
        yield* fs.writeFileString(transcriptPath("c.jsonl"), `{"n":1}\n\n{"n":2}\nnot json\n\n`)
        const { store } = yield* open(SubAgentStore.layerFile({ dir }))
        assert.deepStrictEqual(yield* store.readTranscript("a.jsonl"), [{ n: 1 }, { n: 2 }])
        const bad = yield* Effect.flip(store.readTranscript("b.jsonl"))
        assert.include(bad.message, "line 2")
        // Blank lines are skipped; a bad final line is ignored even if a newline follows it.
        assert.deepStrictEqual(yield* store.readTranscript("c.jsonl"), [{ n: 1 }, { n: 2 }])

        yield* store.appendTranscript("a.jsonl", [{ n: 4 }])
        assert.deepStrictEqual(yield* store.readTranscript("a.jsonl"), [{ n: 1 }, { n: 2 }, { n: 4 }])
        assert.strictEqual(yield* fs.readFileString(transcriptPath("a.jsonl")), `{"n":1}\n{"n":2}\n{"n":4}\n`)
      }).pipe(Effect.scoped, Effect.provide(NodeServices.layer)))
  })

  describe("crash safety", () => {
    const fixture = fileURLToPath(new URL("./fixtures/store-writer.ts", import.meta.url))
    const runs = 25

    /** Starts the writer on `dir`, waits for its first write, SIGKILLs it 20-200 ms later. */
    const killMidWrite = Effect.fnUntraced(function*(dir: string) {
      const spawner = yield* ChildProcessSpawner.ChildProcessSpawner
      const handle = yield* spawner.spawn(ChildProcess.make(process.execPath, [fixture, dir]))
      const first = yield* handle.stdout.pipe(Stream.decodeText(), Stream.splitLines, Stream.runHead)
      assert.deepStrictEqual(first, Option.some("ready"), "the writer did not start")
      yield* Effect.sleep(yield* Random.nextIntBetween(20, 200))
      yield* handle.kill({ killSignal: "SIGKILL" })
      return yield* Effect.exit(handle.exitCode)
    }, Effect.scoped)

    it.live(`a writer SIGKILLed at a random moment leaves a complete, valid file (${runs} runs)`, () =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const path = yield* Path.Path
        const decodeFile = Schema.decodeUnknownEffect(Schema.fromJsonString(Schema.Struct({
          version: Schema.Literal(1),
          records: Schema.Array(SubAgentRecord)
        })))
        const outcomes = yield* Effect.forEach(Array.from({ length: runs }, (_, i) => i), () =>
          Effect.gen(function*() {
            const dir = yield* fs.makeTempDirectoryScoped()
            yield* killMidWrite(dir)
            const file = yield* decodeFile(yield* fs.readFileString(path.join(dir, SubAgentStore.recordsFileName)))
            // The store itself loads it without a warning.
            const loaded = yield* withStore({ dir }, (store) => Effect.map(store.all, (all) => ({ all, warnings: store.warnings })))
            assert.deepStrictEqual(loaded.warnings, [])
            assert.strictEqual(loaded.all.length, file.records.length)
            const temps = (yield* fs.readDirectory(dir)).filter((name) => name.includes(".tmp-")).length
            return { puts: Math.max(...file.records.map((r) => r.steps)), temps }
          }).pipe(Effect.scoped), { concurrency: 5 })
        // The kills landed while writes were happening, not before the first one.
        assert.isTrue(outcomes.some((o) => o.puts > 0))
        yield* Effect.logInfo(
          `crash runs: max put index ${Math.max(...outcomes.map((o) => o.puts))}, temp files left in ${
            outcomes.filter((o) => o.temps > 0).length
          }/${runs} dirs`
        )
      }).pipe(Effect.provide(NodeServices.layer)), 30_000)
  })
})
