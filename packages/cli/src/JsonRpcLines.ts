/**
 * JsonRpcLines — the line layer in front of `fibril mcp`'s JSON-RPC server (both the embedded
 * and the cluster one: `Mcp.serve` puts it on stdin).
 *
 * Effect's NDJSON framing decodes a whole read at once: one malformed line throws away every
 * other line of the same read, a line over 16 MiB throws the buffer away, and JSON nested
 * 100,000 deep parses but overflows the stack when re-encoded; none of them gets an answer,
 * and a client waiting on one of those requests waits forever. So lines are split here
 * first, on bytes, each checked on its own, and what cannot be served is answered here:
 *
 * - a line over {@link maxLineBytes}: `-32600` (Invalid Request), `id: null` (it is not kept,
 *   so its id is unknown); the bytes are dropped as they arrive, never buffered;
 * - a line nested deeper than {@link maxDepth}: `-32600`, with its `id` when the top level
 *   holds one (read without parsing the rest);
 * - a line that is not JSON: `-32700` (Parse error), `id: null`, as JSON-RPC 2.0 says.
 *
 * Every other line goes on to the server, unchanged, so the other requests of the same read
 * are served.
 */
import * as Effect from "effect/Effect"
import * as Stdio from "effect/Stdio"
import * as Stream from "effect/Stream"

/** `stdio` with its stdin replaced (what reads it: the guard below, the Tasks extension's intercept). */
export const withStdin = (stdio: Stdio.Stdio, stdin: Stdio.Stdio["stdin"]) =>
  Stdio.make({
    args: stdio.args,
    stdinIsTerminal: stdio.stdinIsTerminal,
    stdoutIsTerminal: stdio.stdoutIsTerminal,
    stderrIsTerminal: stdio.stderrIsTerminal,
    stdout: (options) => stdio.stdout(options),
    stderr: (options) => stdio.stderr(options),
    stdin
  })

/** The longest line served, in bytes (Effect's own framing limit). */
export const maxLineBytes = 16 * 1024 * 1024

/** The deepest nesting served; MCP messages (tool arguments included) need far less. */
export const maxDepth = 128

export const PARSE_ERROR = -32700
export const INVALID_REQUEST = -32600

type Id = string | number | null

/** A JSON-RPC error response, as one line. */
export const errorLine = (id: Id, code: number, message: string): string =>
  `${JSON.stringify({ jsonrpc: "2.0", id, error: { code, message } })}\n`

/** The nesting depth of a JSON text, strings skipped; stops counting past `limit`. */
export const depthOf = (text: string, limit = Number.POSITIVE_INFINITY): number => {
  let depth = 0
  let deepest = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 92) i++
      else if (c === 34) inString = false
    } else if (c === 34) inString = true
    else if (c === 123 || c === 91) {
      if (++depth > deepest) deepest = depth
      if (deepest > limit) return deepest
    } else if (c === 125 || c === 93) depth--
  }
  return deepest
}

const idValue = /^(?:"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)/

/** The `id` of a top-level object, read by scanning (the text may be too deep to parse); null when none. */
export const idOf = (text: string): Id => {
  let depth = 0
  let i = 0
  while (i < text.length) {
    const c = text[i]
    if (c === "\"") {
      let end = i + 1
      while (end < text.length && text[end] !== "\"") end += text[end] === "\\" ? 2 : 1
      const raw = text.slice(i, end + 1)
      i = end + 1
      if (depth !== 1) continue
      while (i < text.length && /\s/.test(text[i]!)) i++
      if (text[i] !== ":") continue
      i++
      if (raw !== "\"id\"") continue
      while (i < text.length && /\s/.test(text[i]!)) i++
      const match = idValue.exec(text.slice(i, i + 1024))
      if (match === null) return null
      try {
        const id: unknown = JSON.parse(match[0])
        return typeof id === "string" || typeof id === "number" ? id : null
      } catch {
        return null
      }
    }
    if (c === "{" || c === "[") depth++
    else if (c === "}" || c === "]") depth--
    i++
  }
  return null
}

/** What one read gives: the lines for the server (each ending in `\n`) and the answers already made. */
export interface Split {
  readonly lines: string
  readonly replies: ReadonlyArray<string>
}

const decoder = new TextDecoder()

/** The answer to one complete line, or `undefined` when it goes on to the server. */
const check = (text: string): string | undefined => {
  if (depthOf(text, maxDepth) > maxDepth) {
    return errorLine(idOf(text), INVALID_REQUEST, `Invalid Request: nested deeper than ${maxDepth} levels`)
  }
  try {
    JSON.parse(text)
    return undefined
  } catch (error) {
    return errorLine(null, PARSE_ERROR, `Parse error: ${error instanceof Error ? error.message : String(error)}`)
  }
}

/**
 * A splitter keeping the unfinished line between reads. Not shared: one per input stream.
 */
export const make = (options: { readonly maxLineBytes?: number } = {}) => {
  const limit = options.maxLineBytes ?? maxLineBytes
  let parts: Array<Uint8Array> = []
  let size = 0
  // The current line is over the limit: its bytes are dropped until its newline.
  let oversized = false
  const tooLarge = () =>
    errorLine(null, INVALID_REQUEST, `Invalid Request: a message over ${limit} bytes (the limit) was dropped`)
  return {
    push: (chunk: Uint8Array): Split => {
      let lines = ""
      const replies: Array<string> = []
      let start = 0
      while (start <= chunk.length) {
        const newline = chunk.indexOf(10, start)
        const piece = chunk.subarray(start, newline === -1 ? chunk.length : newline)
        if (!oversized && size + piece.length > limit) {
          oversized = true
          parts = []
          size = 0
        }
        if (!oversized && piece.length > 0) {
          // A piece kept for the next read is copied: the read's buffer may be reused.
          parts.push(newline === -1 ? piece.slice() : piece)
          size += piece.length
        }
        if (newline === -1) break
        start = newline + 1
        if (oversized) {
          replies.push(tooLarge())
          oversized = false
          continue
        }
        const bytes = parts.length === 1 ? parts[0]! : Buffer.concat(parts)
        parts = []
        size = 0
        const text = decoder.decode(bytes).replace(/\r$/, "")
        if (text.trim() === "") continue
        const answer = check(text)
        if (answer === undefined) lines += `${text}\n`
        else replies.push(answer)
      }
      return { lines, replies }
    }
  }
}

const encoder = new TextEncoder()

/**
 * `stdin` split into checked lines for the server; what cannot be served is answered
 * through `reply` (one JSON-RPC line each) as its read is processed.
 */
export const guard = <E, R, R2>(
  stdin: Stream.Stream<Uint8Array, E, R>,
  reply: (line: string) => Effect.Effect<void, never, R2>
): Stream.Stream<Uint8Array, E, R | R2> =>
  Stream.suspend(() => {
    const splitter = make()
    return stdin.pipe(
      Stream.mapEffect((chunk) => {
        const split = splitter.push(chunk)
        return Effect.as(Effect.forEach(split.replies, reply, { discard: true }), encoder.encode(split.lines))
      }),
      Stream.filter((bytes) => bytes.length > 0)
    )
  })
