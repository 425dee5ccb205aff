/** @fibril/cli — the `fibril` command as a library (for tests and embedding). */
export * as Cli from "./Cli.ts"
export * as Demo from "./Demo.ts"
export * as TreeView from "./TreeView.ts"
