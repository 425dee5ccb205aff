/**
 * Helpers shared by the built-in tools: turning file-system errors into model-readable
 * `ToolFailure`s, and reading text. Kept here so every tool words "not found" the same way.
 */
import type * as PlatformError from "effect/PlatformError"
import { ToolFailure } from "../ToolRegistry.ts"

/** A short reason for a file-system error: the common cases in words, the rest verbatim. */
export const describe = (error: PlatformError.PlatformError): string => {
  switch (error.reason._tag) {
    case "NotFound":
      return "no such file or directory"
    case "PermissionDenied":
      return "permission denied"
    default:
      return error.message
  }
}

/** `ToolFailure` for `tool` about the path the model gave (not the resolved one it never saw). */
export const fsFailure = (tool: string, given: string) => (error: PlatformError.PlatformError) =>
  new ToolFailure({ tool, reason: `"${given}": ${describe(error)}` })

/** Does the file start like a binary (a NUL byte in its first 8 KiB, as git and grep decide)? */
export const looksBinary = (bytes: Uint8Array): boolean => bytes.subarray(0, 8192).includes(0)

const utf8 = new TextDecoder("utf-8")

/** Bytes as UTF-8 text (invalid sequences become U+FFFD rather than failing). */
export const decodeUtf8 = (bytes: Uint8Array): string => utf8.decode(bytes)

/** Lines of a text, without the empty "line" after a final newline; `\r\n` is one break. */
export const splitLines = (text: string): Array<string> => {
  if (text === "") return []
  const lines = text.split("\n")
  if (lines[lines.length - 1] === "") lines.pop()
  return lines.map((line) => line.endsWith("\r") ? line.slice(0, -1) : line)
}

/** "1 match" / "2 matches". */
export const plural = (n: number, one: string, many = `${one}s`): string => `${n} ${n === 1 ? one : many}`
