/**
 * `node bench/install-startup.ts [N]`: `fibril --help` start-up from a global install against a
 * project install of the same tarballs, medians of N fresh processes each (default 9), side by
 * side with their ratio (goal: within 1.2x).
 *
 * A global install used to give each @fibril package its own copy of `effect` (five), which
 * doubled the start-up (1.57 s against 0.77 s) besides breaking `Redacted`. Both installs are
 * made here as the README makes them (`npm run tarballs`, then `npm install -g` of the CLI's
 * tarball, or `npm install` of every tarball in a project), with no network: npm's registry
 * is packages/cli/test/local-registry.ts. Not a timed test: the numbers go to
 * docs/performance.md.
 */
import { execFileSync, spawnSync } from "node:child_process"
import { median, withInstalls } from "./installs.ts"

const runs = Number(process.argv[2] ?? 9)

await withInstalls({ global: true }, ({ env, globalBin, prefix, project, projectBin }) => {
  const time = (fibril: string) => {
    const started = process.hrtime.bigint()
    const result = spawnSync(fibril, ["--help"], { cwd: project, env, stdio: "ignore" })
    if (result.status !== 0) throw new Error(`${fibril} --help: exit ${result.status}`)
    return Number(process.hrtime.bigint() - started) / 1e6
  }
  const installs = { global: globalBin!, project: projectBin }
  time(installs.global) // the first process of each pays for the disk cache
  time(installs.project)
  const samples = { global: [] as Array<number>, project: [] as Array<number> }
  // Interleaved, each first in turn, so that a busy machine slows both alike.
  for (let i = 0; i < runs; i++) {
    const order = i % 2 === 0 ? (["global", "project"] as const) : (["project", "global"] as const)
    for (const which of order) samples[which].push(time(installs[which]))
  }
  const global = median(samples.global)
  const local = median(samples.project)
  const copies = execFileSync("find", [prefix!, "-path", "*/node_modules/effect/package.json"], { encoding: "utf8" })
    .trim().split("\n").filter((line) => line !== "").length
  console.log(`fibril --help start-up, medians of ${runs} fresh processes (node ${process.version})`)
  console.log(
    `  global install ${global.toFixed(0)} ms | project install ${local.toFixed(0)} ms | ratio ${
      (global / local).toFixed(2)
    }x (goal <= 1.2x) | effect copies in the global install: ${copies}`
  )
})
