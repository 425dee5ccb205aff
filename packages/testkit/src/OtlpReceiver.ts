/**
 * OtlpReceiver — an OTLP/HTTP traces endpoint on 127.0.0.1 for tests: it accepts the JSON
 * bodies an exporter POSTs to `/v1/traces` (Effect's `OtlpTracer` with `layerJson`, `fibril
 * --otlp`) and keeps their spans, flattened, with their attributes as plain values. Closed with
 * its scope.
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as Http from "node:http"

/** One span as received: ids, name, kind and attributes (OTLP's typed values unwrapped). */
export interface ReceivedSpan {
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId: string | undefined
  readonly name: string
  readonly kind: number
  readonly attributes: Readonly<Record<string, unknown>>
  /** The failure's message, for a span that ended in one. */
  readonly error: string | undefined
}

interface OtlpValue {
  readonly stringValue?: string
  readonly boolValue?: boolean
  readonly intValue?: string | number
  readonly doubleValue?: number
  readonly arrayValue?: { readonly values?: ReadonlyArray<OtlpValue> }
}

const valueOf = (value: OtlpValue): unknown =>
  value.stringValue !== undefined
    ? value.stringValue
    : value.boolValue !== undefined
    ? value.boolValue
    : value.intValue !== undefined
    ? Number(value.intValue)
    : value.doubleValue !== undefined
    ? value.doubleValue
    : value.arrayValue !== undefined
    ? (value.arrayValue.values ?? []).map(valueOf)
    : undefined

interface OtlpBody {
  readonly resourceSpans?: ReadonlyArray<{
    readonly scopeSpans?: ReadonlyArray<{
      readonly spans?: ReadonlyArray<{
        readonly traceId: string
        readonly spanId: string
        readonly parentSpanId?: string
        readonly name: string
        readonly kind: number
        readonly attributes?: ReadonlyArray<{ readonly key: string; readonly value: OtlpValue }>
        readonly status?: { readonly code?: number; readonly message?: string }
      }>
    }>
  }>
}

/** The spans of one OTLP/JSON traces body. */
export const spansOf = (body: string): ReadonlyArray<ReceivedSpan> =>
  ((JSON.parse(body) as OtlpBody).resourceSpans ?? []).flatMap((resource) =>
    (resource.scopeSpans ?? []).flatMap((scope) =>
      (scope.spans ?? []).map((span) => ({
        traceId: span.traceId,
        spanId: span.spanId,
        parentSpanId: span.parentSpanId === undefined || span.parentSpanId === "" ? undefined : span.parentSpanId,
        name: span.name,
        kind: span.kind,
        attributes: Object.fromEntries((span.attributes ?? []).map((a) => [a.key, valueOf(a.value)])),
        error: span.status?.code === 2 ? span.status.message ?? "" : undefined
      }))
    )
  )

export interface OtlpReceiver {
  /** The traces endpoint: `http://127.0.0.1:<port>/v1/traces`. */
  readonly url: string
  /** Every span received so far, in the order they came. */
  readonly spans: () => ReadonlyArray<ReceivedSpan>
}

/** A receiver listening on a free port of 127.0.0.1 until the scope closes. */
export const make: Effect.Effect<OtlpReceiver, never, Scope.Scope> = Effect.gen(function*() {
  const received: Array<ReceivedSpan> = []
  const server = yield* Effect.acquireRelease(
    Effect.callback<Http.Server>((resume) => {
      const listening = Http.createServer((request, response) => {
        let body = ""
        request.on("data", (chunk) => (body += String(chunk)))
        request.on("end", () => {
          if (request.url === "/v1/traces") received.push(...spansOf(body))
          response.writeHead(200, { "content-type": "application/json" }).end("{}")
        })
      })
      listening.listen(0, "127.0.0.1", () => resume(Effect.succeed(listening)))
    }),
    (closing) => Effect.callback<void>((resume) => void closing.close(() => resume(Effect.void)))
  )
  const port = (server.address() as { readonly port: number }).port
  return { url: `http://127.0.0.1:${port}/v1/traces`, spans: () => received }
})
