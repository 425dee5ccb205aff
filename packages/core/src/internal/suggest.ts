/**
 * "Did you mean …?": the closest of some candidates to a misspelt name, by edit distance
 * (insertions, deletions, substitutions and swaps of neighbours, case-insensitive).
 */

/** Optimal string alignment distance between `a` and `b`, ignoring case. */
export const distance = (a: string, b: string): number => {
  const s = a.toLowerCase()
  const t = b.toLowerCase()
  const rows: Array<Array<number>> = []
  for (let i = 0; i <= s.length; i++) {
    const row: Array<number> = [i]
    for (let j = 1; j <= t.length; j++) {
      if (i === 0) {
        row.push(j)
        continue
      }
      const above = rows[i - 1]!
      const cost = s[i - 1] === t[j - 1] ? 0 : 1
      let best = Math.min(above[j]! + 1, row[j - 1]! + 1, above[j - 1]! + cost)
      if (i > 1 && j > 1 && s[i - 1] === t[j - 2] && s[i - 2] === t[j - 1]) {
        best = Math.min(best, rows[i - 2]![j - 2]! + 1)
      }
      row.push(best)
    }
    rows.push(row)
  }
  return rows[s.length]![t.length]!
}

/**
 * The candidate closest to `name`, if it is close enough to be a likely typo: at most a
 * third of the name's length away (and at least 1, at most 3 edits); failing that, one the
 * name is a prefix of, or that is a prefix of the name (`shell_timeout` -> `shell_timeout_secs`).
 */
export const nearest = (name: string, candidates: Iterable<string>): string | undefined => {
  const limit = Math.min(3, Math.max(1, Math.floor(name.length / 3)))
  const lower = name.toLowerCase()
  let best: string | undefined
  let bestDistance = Number.POSITIVE_INFINITY
  let prefixed: string | undefined
  for (const candidate of candidates) {
    const d = distance(name, candidate)
    if (d < bestDistance) {
      best = candidate
      bestDistance = d
    }
    const other = candidate.toLowerCase()
    const shorter = Math.min(lower.length, other.length)
    if (shorter >= 4 && (other.startsWith(lower) || lower.startsWith(other))) {
      if (
        prefixed === undefined || Math.abs(candidate.length - name.length) < Math.abs(prefixed.length - name.length)
      ) {
        prefixed = candidate
      }
    }
  }
  return bestDistance <= limit ? best : prefixed
}
