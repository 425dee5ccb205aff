import { assert, describe, it } from "@effect/vitest"
import { Schema } from "effect"
import * as Secrets from "../src/Secrets.ts"

// Random URLs with credentials in the userinfo and in query parameters, among parameters that
// are not credentials, embedded in random text.
const Param = Schema.Struct({
  name: Schema.Literals(Secrets.credentialParams),
  upper: Schema.Boolean,
  hyphen: Schema.Boolean
})
const Url = Schema.Struct({
  scheme: Schema.Literals(["http", "https", "wss"]),
  user: Schema.optionalKey(Schema.Literals(["user", "me", ""])),
  secret: Schema.NonEmptyString,
  inUserinfo: Schema.Boolean,
  host: Schema.Literals(["api.example.com", "127.0.0.1:8080", "[::1]:3000"]),
  path: Schema.Literals(["", "/v1", "/v1/chat/completions", "/openai/deployments/x"]),
  params: Schema.Array(Param),
  plain: Schema.Array(Schema.Literals(["model=gpt", "page=2", "format=json"])),
  before: Schema.String,
  after: Schema.String
})

const utf8 = new TextEncoder()

/** "SECRET" and then the random text's bytes, percent-escaped as a URL would carry them. */
const secretOf = (random: string) =>
  `SECRET${Array.from(utf8.encode(random), (byte) => `%${byte.toString(16).padStart(2, "0")}`).join("")}`
const noSecret = (text: string) => text.replaceAll("SECRET", "")

describe("Secrets", () => {
  it.prop(
    "no credential survives redaction, wherever it sits in a URL and whatever text is around it",
    [Url],
    ([u]) => {
      const secret = secretOf(u.secret)
      const userinfo = u.inUserinfo ? `${u.user === undefined ? "" : `${u.user}:`}${secret}@` : ""
      const query = [
        ...u.params.map((p) => {
          const name = p.hyphen ? p.name.replaceAll("_", "-") : p.name
          return `${p.upper ? name.toUpperCase() : name}=${secret}`
        }),
        ...u.plain
      ]
      const url = `${u.scheme}://${userinfo}${u.host}${u.path}${query.length === 0 ? "" : `?${query.join("&")}`}`
      const redacted = Secrets.redactUrl(url)
      const text = Secrets.redactText(`${noSecret(u.before)} ${url}: ${noSecret(u.after)}`)
      for (const out of [redacted, text]) {
        assert.notInclude(out, secret)
        assert.include(out, u.host)
        for (const plain of u.plain) assert.include(out, plain)
      }
      assert.strictEqual(Secrets.hasCredentials(url), u.inUserinfo || u.params.length > 0)
    },
    { arbitrary: { runs: 300 } }
  )

  it("keeps the URL readable: only the secret parts become ***", () => {
    assert.strictEqual(
      Secrets.redactUrl("https://user:sk-live-123@api.example.com/v1?api_key=sk-live-123&model=x#frag"),
      "https://***@api.example.com/v1?api_key=***&model=x#frag"
    )
    assert.strictEqual(Secrets.redactUrl("https://api.example.com/v1"), "https://api.example.com/v1")
    assert.strictEqual(Secrets.redactUrl("http://h/?Token=abc;sig=def"), "http://h/?Token=***;sig=***")
    assert.strictEqual(
      Secrets.redactText(
        "Request cannot be constructed from a URL that includes credentials: http://u:KEY@127.0.0.1:1/v1/models (GET x)"
      ),
      "Request cannot be constructed from a URL that includes credentials: http://***@127.0.0.1:1/v1/models (GET x)"
    )
    assert.strictEqual(Secrets.redactText("no url here: user:pass@host"), "no url here: user:pass@host")
    assert.isTrue(Secrets.hasUserinfo("https://tok@github.com/x"))
    assert.isFalse(Secrets.hasUserinfo("https://github.com/x?a=b@c"))
  })
})
