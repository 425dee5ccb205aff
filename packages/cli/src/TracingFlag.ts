/**
 * Where spans go: `--otlp URL`, or the standard `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, for
 * `fibril run` and `fibril worker`; what they record: `[telemetry] capture_content`. The
 * exporter (Tracing.ts, with effect's HTTP and observability modules) is loaded only when spans
 * go somewhere.
 */
import type * as FibrilConfig from "@fibril/core/FibrilConfig"
import { Flag } from "effect/cli"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"

export const otlp = Flag.String("otlp").pipe(
  Flag.withDescription(
    "Export traces to this OTLP/HTTP endpoint (…/v1/traces; default OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)"
  ),
  Flag.optional
)

/** The exporter for the flag's endpoint, else the environment's; none when neither names one. */
export const layer = (
  flag: Option.Option<string>,
  env: Readonly<Record<string, string | undefined>>,
  settings: FibrilConfig.Settings
): Layer.Layer<never> =>
  Option.match(Option.orElse(flag, () => Option.fromNullishOr(env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"])), {
    onNone: () => Layer.empty,
    onSome: (endpoint) =>
      Layer.unwrap(
        Effect.map(
          Effect.promise(() => import("./Tracing.ts")),
          (Tracing) => Tracing.layer(endpoint, settings.telemetry.captureContent)
        )
      )
  })
