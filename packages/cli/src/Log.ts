/**
 * The CLI's logger: one line on stderr per log event, whatever the event holds. Effect's
 * default logger prints a structured argument over several lines (a provider's error message
 * with its blank lines, for instance), which breaks a log read line by line; here newlines
 * become ` ⏎ ` and arguments are written `key: value`.
 *
 *   [12:04:31.202] WARN cannot list the models of https://…/v1; accepting any model id (reason: NetworkError, message: … ⏎ Check your network connection …)
 */
import * as Cause from "effect/Cause"
import * as Logger from "effect/Logger"
import * as References from "effect/References"
import { oneLine } from "./TreeView.ts"

const show = (value: unknown): string => {
  if (typeof value === "string") return value
  if (value instanceof Error) return value.message
  if (typeof value === "object" && value !== null && !Array.isArray(value)) {
    const entries = Object.entries(value)
    return `(${entries.map(([key, v]) => `${key}: ${typeof v === "string" ? v : JSON.stringify(v)}`).join(", ")})`
  }
  return JSON.stringify(value) ?? String(value)
}

/** One log event as one line (no trailing newline). */
export const format = (options: Logger.Options<unknown>): string => {
  const parts = Array.isArray(options.message) ? options.message : [options.message]
  const time = options.date.toISOString().slice(11, 23)
  const cause = Cause.hasFails(options.cause) || Cause.hasDies(options.cause) ? ` ${Cause.pretty(options.cause)}` : ""
  // Annotations (`Effect.annotateLogs`) follow the message, like a structured argument.
  const annotations = options.fiber === undefined ? {} : options.fiber.getRef(References.CurrentLogAnnotations)
  const annotated = Object.keys(annotations).length === 0 ? "" : ` ${show(annotations)}`
  return oneLine(`[${time}] ${options.logLevel.toUpperCase()} ${parts.map(show).join(" ")}${annotated}${cause}`)
}

/** The logger, writing to stderr. */
export const layer = Logger.layer([Logger.withConsoleError(Logger.make(format))])
