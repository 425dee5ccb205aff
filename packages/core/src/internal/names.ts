/**
 * Session names: a short human name for an agent (`amber-heron`), accepted by every agent
 * tool in place of its id. Derived from the id, so a record read back (or migrated from an
 * older version) always gets the same name; the manager adds `-2`, `-3` to a name already
 * used by another of its agents.
 */
const adjectives = [
  "amber",
  "ashen",
  "azure",
  "bold",
  "brisk",
  "calm",
  "clever",
  "coral",
  "crisp",
  "dapper",
  "deft",
  "eager",
  "early",
  "fair",
  "fleet",
  "gentle",
  "gilded",
  "glad",
  "golden",
  "grand",
  "hardy",
  "hazel",
  "honest",
  "ivory",
  "jade",
  "jolly",
  "keen",
  "kind",
  "lively",
  "lucid",
  "mellow",
  "merry",
  "misty",
  "modest",
  "nimble",
  "noble",
  "olive",
  "patient",
  "plucky",
  "proud",
  "quick",
  "quiet",
  "rapid",
  "ready",
  "rosy",
  "rustic",
  "sage",
  "scarlet",
  "silent",
  "silver",
  "sleek",
  "snowy",
  "solid",
  "steady",
  "sunny",
  "swift",
  "tawny",
  "tidy",
  "topaz",
  "true",
  "vivid",
  "warm",
  "wise",
  "zesty"
] as const

const nouns = [
  "alder",
  "badger",
  "beacon",
  "birch",
  "bison",
  "brook",
  "cedar",
  "comet",
  "condor",
  "crane",
  "delta",
  "dune",
  "eagle",
  "ember",
  "falcon",
  "fern",
  "finch",
  "fjord",
  "fox",
  "gecko",
  "glade",
  "grove",
  "harbor",
  "hare",
  "hawk",
  "heron",
  "ibis",
  "iris",
  "jay",
  "kestrel",
  "lark",
  "lemur",
  "lynx",
  "maple",
  "marten",
  "meadow",
  "mesa",
  "moose",
  "newt",
  "oak",
  "orca",
  "osprey",
  "otter",
  "owl",
  "panda",
  "pine",
  "plover",
  "quail",
  "raven",
  "reef",
  "ridge",
  "robin",
  "sparrow",
  "spruce",
  "stoat",
  "swan",
  "tern",
  "thrush",
  "tundra",
  "vale",
  "walrus",
  "willow",
  "wren",
  "yak"
] as const

/** FNV-1a over the UTF-16 code units: stable across processes and versions. */
const hash = (text: string): number => {
  let h = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return h >>> 0
}

/** The name an agent id maps to, e.g. `agent_k3x91` -> `swift-heron`. */
export const fromId = (agentId: string): string => {
  const h = hash(agentId)
  return `${adjectives[h % adjectives.length]}-${nouns[(h >>> 8) % nouns.length]}`
}

/** `fromId(agentId)`, or it with the first free `-n` suffix when `taken` says it is used. */
export const unique = (agentId: string, taken: (name: string) => boolean): string => {
  const base = fromId(agentId)
  if (!taken(base)) return base
  for (let n = 2;; n++) {
    const name = `${base}-${n}`
    if (!taken(name)) return name
  }
}
