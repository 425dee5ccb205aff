/**
 * What each config key accepts: the allowed range of every integer key (a value outside it is
 * clamped, not rejected, and the change is kept so that `fibril config` can show it) and, as
 * error messages say it, what the other keys take.
 */

/** A value that was outside its allowed range and was replaced. */
export interface Clamped {
  /** Dotted TOML path, e.g. `"agent.api_timeout_secs"`. */
  readonly key: string
  readonly given: number
  readonly used: number
}

/** Allowed range of every integer key; out-of-range values are clamped, not rejected. */
export const bounds = {
  "agent.max_steps": [1, 1000],
  "agent.api_timeout_secs": [1, 1800],
  "agent.max_retries": [0, 10],
  "agent.retry_base_ms": [10, 60_000],
  "agent.retry_max_ms": [100, 600_000],
  "subagents.max_concurrent": [1, 20],
  "subagents.max_depth": [0, 5],
  "subagents.heartbeat_timeout_secs": [30, 3600],
  "subagents.max_steps": [1, 1000],
  "subagents.max_tokens": [1, Number.MAX_SAFE_INTEGER],
  "subagents.max_wall_secs": [1, 86_400],
  "subagents.tree_max_tokens": [1, Number.MAX_SAFE_INTEGER],
  "subagents.max_result_chars": [256, 1_048_576],
  "subagents.process_memory_mb": [64, 65_536],
  "tools.shell_timeout_secs": [1, 3600],
  "tools.max_output_chars": [1000, 1_000_000],
  "sandbox.tmp_size_mb": [1, 65_536],
  "sandbox.max_processes": [16, 65_536],
  "sandbox.memory_mb": [64, 1_048_576],
  "permissions.ask_timeout_secs": [1, 86_400],
  "permissions.fan_out_max_agents": [1, 1000],
  "rate_limit.initial_concurrency": [1, 1000],
  "rate_limit.max_concurrency": [1, 1000]
} as const satisfies Record<string, readonly [number, number]>

export type IntKey = keyof typeof bounds

/**
 * Clamps `given` into the range of `key`, then raises it to `atLeast`; records the
 * key in `log` when the value used differs from the value given.
 */
export const clampInto =
  (log: Array<Clamped>) => (key: IntKey, given: number, atLeast = Number.NEGATIVE_INFINITY): number => {
    const [min, max] = bounds[key]
    const used = Math.max(atLeast, Math.min(max, Math.max(min, given)))
    if (used !== given) log.push({ key, given, used })
    return used
  }

export const describeBounds = (key: IntKey): string => {
  const [min, max] = bounds[key]
  return max === Number.MAX_SAFE_INTEGER
    ? `an integer >= ${min} (smaller values are clamped)`
    : `an integer; values outside ${min}..${max} are clamped`
}

export const sandboxModes = ["read-only", "workspace-write", "off"] as const
export const sandboxModesAccepted = sandboxModes.map((mode) => `"${mode}"`).join(" | ")

/** What the keys that are not integers accept, as error messages say it. */
export const accepts = {
  string: "a string",
  boolean: "true or false",
  admission: `"reject" | "queue"`,
  models: `a table of role name = model id strings ("role=model,role=model" in the environment)`,
  isolation: `a table of role name = "worktree" or "process" ("role=worktree" in the environment)`,
  deny: "an array of tool names (comma-separated in the environment)",
  ask: "an array of tool names and postures (comma-separated in the environment)",
  usd: "a number of US dollars",
  prices: `a table of model id = US dollars per million tokens ("model=0.3,model=3" in the environment)`,
  writablePaths: "an array of paths, absolute or relative to the workspace (comma-separated in the environment)",
  bwrapPath: "a string: the bubblewrap binary, a name on PATH or a path"
} as const
