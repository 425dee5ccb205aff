// Static text assets (role prompts, long tool descriptions) live in `.md` files beside the
// code. They are read once, when the module that owns them is loaded, the way a bundler
// would inline an imported text file; a missing asset is a packaging bug and fails loudly.
import { readFileSync } from "node:fs"

/** Reads a UTF-8 text asset relative to the calling module (`import.meta.url`). */
export const text = (relative: string, base: string): string => readFileSync(new URL(relative, base), "utf8").trimEnd()
