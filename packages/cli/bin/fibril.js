#!/usr/bin/env node
// The `fibril` executable: the bundled build in bundle/ (`npm run build`, scripts/bundle.ts;
// `npm install` and `npm pack` make it: a few files load faster than dist/'s hundreds). A file of its own so that npm can link it before the build exists, and so that
// an older Node is told what to install instead of failing on a module it lacks.
const [major, minor] = process.versions.node.split(".").map(Number)
if (major < 22 || (major === 22 && minor < 19)) {
  process.stderr.write(
    `fibril: this is Node ${process.version}; fibril needs Node >= 22.19. ` +
      "Install a newer Node, or put one first on PATH.\n"
  )
  process.exit(2)
}
// `fibril --version` answers before anything is loaded (the CLI, Effect and the core take
// most of a second to import on a slow machine; this takes Node's own start-up).
if (process.argv.length === 3 && process.argv[2] === "--version") {
  const { readFileSync } = await import("node:fs")
  const { version } = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"))
  process.stdout.write(`fibril v${version}\n`)
} else {
  await import("../bundle/bin.js")
}
