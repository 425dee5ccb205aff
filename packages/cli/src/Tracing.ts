/**
 * `--otlp URL` (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT): spans exported with Effect's own OTLP
 * exporter. An endpoint that cannot be reached, or that refuses the spans, is reported once
 * (a warning on stderr naming the endpoint, its credentials hidden) and from then on the
 * spans are dropped at once: the run neither slows down (the exporter would retry each batch
 * for seconds, also at exit) nor says nothing.
 */
import * as GenAiTrace from "@fibril/core/GenAiTrace"
import { redactUrl } from "@fibril/core/Secrets"
import * as Effect from "effect/Effect"
import * as FetchHttpClient from "effect/http/FetchHttpClient"
import * as HttpClient from "effect/http/HttpClient"
import * as HttpClientResponse from "effect/http/HttpClientResponse"
import * as Layer from "effect/Layer"
import * as OtlpSerialization from "effect/observability/OtlpSerialization"
import * as OtlpTracer from "effect/observability/OtlpTracer"

/** The warning for an endpoint that failed, with why. */
export const unreachable = (url: string, why: string) =>
  `traces cannot be exported to ${redactUrl(url)} (${why}); the run goes on without them`

/** The HTTP client of the exporter: after the first failure, every request is answered as if accepted. */
const client = (url: string) =>
  Layer.effect(
    HttpClient.HttpClient,
    Effect.gen(function*() {
      const base = yield* HttpClient.HttpClient
      let failed = false
      const accepted = (request: Parameters<typeof HttpClientResponse.fromWeb>[0]) =>
        HttpClientResponse.fromWeb(request, new Response(null, { status: 200 }))
      const giveUp = (request: Parameters<typeof HttpClientResponse.fromWeb>[0], why: string) =>
        Effect.as(failed ? Effect.void : Effect.logWarning(unreachable(url, why)), accepted(request)).pipe(
          Effect.ensuring(Effect.sync(() => void (failed = true)))
        )
      return HttpClient.transform(base, (response, request) =>
        failed
          ? Effect.succeed(accepted(request))
          : response.pipe(
            Effect.flatMap((answer) =>
              answer.status >= 400 ? giveUp(request, `it answered HTTP ${answer.status}`) : Effect.succeed(answer)
            ),
            Effect.catch((error) =>
              giveUp(request, error.reason._tag === "TransportError" ? "unreachable" : error.message)
            )
          ))
    })
  ).pipe(Layer.provide(FetchHttpClient.layer))

/** Span export to `url`; with `captureContent`, the spans record prompts, answers and tool data (GenAiTrace). */
export const layer = (url: string, captureContent = false) =>
  OtlpTracer.layer({ url, resource: { serviceName: "fibril" }, shutdownTimeout: "2 seconds" }).pipe(
    Layer.provide(OtlpSerialization.layerJson),
    Layer.provide(client(url)),
    Layer.merge(Layer.succeed(GenAiTrace.CaptureContent, captureContent))
  )
