/**
 * An MCP server's `notifications/progress` for a call, handed to whoever made the call.
 *
 * effect's McpClient neither asks for progress nor passes notifications on, so both ends are
 * added around it, per connection: its transport gives each `tools/call` made with a
 * `CurrentProgress` a `progressToken` (the request's own id, unique on the connection), and
 * the server's stdout is read on its way to the client, a line at a time, for progress
 * notifications, which go to the callback of their token while its call runs. Only stdio
 * servers: over HTTP the notifications arrive inside the client's own response streams.
 */
import type * as McpClient from "effect/ai/McpClient"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import { ChildProcessSpawner } from "effect/process"
import * as Stream from "effect/Stream"
import type { ToolProgress } from "../AgentEvents.ts"

/** Where the progress of the calls made in this context goes (none: no token is sent). */
export const CurrentProgress = Context.Reference<((update: ToolProgress) => void) | undefined>(
  "@fibril/core/McpProgress",
  { defaultValue: () => undefined }
)

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** The update a `notifications/progress` line carries, with its token; undefined for any other line. */
export const parseProgress = (
  line: string
): { readonly token: unknown; readonly update: ToolProgress } | undefined => {
  if (!line.includes("notifications/progress")) return undefined
  let message: unknown
  try {
    message = JSON.parse(line)
  } catch {
    return undefined
  }
  if (!isRecord(message) || message.method !== "notifications/progress" || !isRecord(message.params)) return undefined
  const { progress, progressToken, total, message: text } = message.params
  if (typeof progress !== "number") return undefined
  return {
    token: progressToken,
    update: {
      progress,
      ...(typeof total === "number" ? { total } : {}),
      ...(typeof text === "string" ? { message: text } : {})
    }
  }
}

/** One connection's progress routing: its transport's side and its process's side. */
export const makeRouter = () => {
  const listeners = new Map<unknown, (update: ToolProgress) => void>()

  const deliver = (line: string) => {
    const found = parseProgress(line)
    if (found !== undefined) listeners.get(found.token)?.(found.update)
  }

  /** `transport`, sending a progress token with each tool call that has a `CurrentProgress`. */
  const transport = (inner: McpClient.Transport): McpClient.Transport => ({
    ...inner,
    request: (message, tool) =>
      message.method !== "tools/call" ? inner.request(message, tool) : Effect.flatMap(
        Effect.service(CurrentProgress),
        (report) => {
          if (report === undefined) return inner.request(message, tool)
          const params = isRecord(message.params) ? message.params : {}
          const meta = isRecord(params._meta) ? params._meta : {}
          return Effect.suspend(() => {
            listeners.set(message.id, report)
            return inner.request(
              { ...message, params: { ...params, _meta: { ...meta, progressToken: message.id } } },
              tool
            )
          }).pipe(Effect.ensuring(Effect.sync(() => listeners.delete(message.id))))
        }
      )
  })

  /** `spawner`, whose processes' stdout is read for progress on its way to the client. */
  const spawner = (
    inner: ChildProcessSpawner.ChildProcessSpawner["Service"]
  ): ChildProcessSpawner.ChildProcessSpawner["Service"] =>
    ChildProcessSpawner.make((command) =>
      Effect.map(inner.spawn(command), (handle) => {
        const decoder = new TextDecoder()
        // The line not ended yet, in pieces: a long result is not copied again per chunk.
        let pending: Array<string> = []
        const scan = (bytes: Uint8Array) => {
          const text = decoder.decode(bytes, { stream: true })
          let start = 0
          let end: number
          while ((end = text.indexOf("\n", start)) >= 0) {
            pending.push(text.slice(start, end))
            deliver(pending.join(""))
            pending = []
            start = end + 1
          }
          if (start < text.length) pending.push(text.slice(start))
        }
        return ChildProcessSpawner.makeHandle({
          ...handle,
          stdout: Stream.tap(handle.stdout, (bytes) => Effect.sync(() => scan(bytes)))
        })
      })
    )

  return { transport, spawner }
}
