/**
 * `npm run figures`: the shape of the source, as the architecture review measured it — files
 * and lines of `packages/*\/src`, the median, p90 and largest file (lines include comments and
 * blank lines; p90 is the value at rank round(0.9·(n−1))), files over 600 and over 1,000
 * lines, and functions over 200 code lines (oxlint's `max-lines-per-function`, blank lines and
 * comments skipped; a wrapper and its generator can count separately). Per package too.
 */
import { execFileSync } from "node:child_process"
import { readdirSync, readFileSync, statSync } from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("..", import.meta.url))

const sources = (dir: string): Array<string> =>
  readdirSync(dir).flatMap((name) => {
    const full = path.join(dir, name)
    if (statSync(full).isDirectory()) return sources(full)
    return name.endsWith(".ts") && !name.endsWith(".d.ts") ? [full] : []
  })

const lines = (file: string) => {
  const text = readFileSync(file, "utf8")
  return text.endsWith("\n") ? text.split("\n").length - 1 : text.split("\n").length
}

const shape = (sizes: ReadonlyArray<number>) => {
  const sorted = [...sizes].sort((a, b) => a - b)
  const middle = sorted.length / 2
  const median = sorted.length % 2 === 1
    ? sorted[Math.floor(middle)]!
    : (sorted[middle - 1]! + sorted[middle]!) / 2
  return {
    files: sorted.length,
    lines: sorted.reduce((sum, size) => sum + size, 0),
    median,
    p90: sorted[Math.round(0.9 * (sorted.length - 1))]!,
    max: sorted.at(-1)!,
    over600: sorted.filter((size) => size > 600).length,
    over1000: sorted.filter((size) => size > 1000).length
  }
}

const packages = readdirSync(path.join(root, "packages"))
const byPackage = packages.map((name) => {
  const files = sources(path.join(root, "packages", name, "src"))
  return { name, files: files.map((file) => ({ file: path.relative(root, file), lines: lines(file) })) }
})
const all = byPackage.flatMap((p) => p.files)

console.log("source files (packages/*/src):", JSON.stringify(shape(all.map((f) => f.lines))))
for (const p of byPackage) console.log(`  ${p.name}:`, JSON.stringify(shape(p.files.map((f) => f.lines))))
console.log("largest files:")
for (const f of [...all].sort((a, b) => b.lines - a.lines).slice(0, 8)) console.log(`  ${f.lines}  ${f.file}`)

// Functions over 200 code lines, by oxlint's own count.
const config = JSON.stringify({
  rules: { "max-lines-per-function": ["error", { max: 200, skipBlankLines: true, skipComments: true }] }
})
const configFile = path.join(root, "node_modules", ".cache", "figures.oxlintrc.json")
execFileSync("mkdir", ["-p", path.dirname(configFile)])
execFileSync("sh", ["-c", `cat > '${configFile}'`], { input: config })
let report = ""
try {
  report = execFileSync(
    path.join(root, "node_modules", ".bin", "oxlint"),
    ["-c", configFile, "--format", "unix", ...packages.map((name) => `packages/${name}/src`)],
    { cwd: root, encoding: "utf8" }
  )
} catch (error) {
  report = String((error as { stdout?: string }).stdout ?? "")
}
const long = report.split("\n").filter((line) => line.includes("max-lines-per-function"))
console.log(`functions over 200 code lines: ${long.length}`)
for (const line of long) console.log(`  ${line.replace(/ \[Error\/.*$/, "")}`)
