/**
 * Secrets — credentials written into URLs never reach output, records or spans.
 *
 * An API key usually travels in a header, where nothing prints it; but users also write one
 * into a URL (`https://user:KEY@host/v1`, `…/v1?api_key=KEY`), and URLs are printed: in
 * errors, logs, `fibril config`, `--json` events, records. Every such boundary passes the URL
 * (or the message around it) through this module: `redactUrl` for a URL, `redactText` for
 * free text that may contain URLs (an error message quoting the URL it failed on). Both
 * keep the text as it was, only the secret parts become `***`, so the output still says
 * which host and path were meant. See docs/security.md, "Secrets".
 *
 * @example
 * Secrets.redactUrl("https://me:sk-123@api.example.com/v1?api_key=sk-123&x=1")
 * // "https://***@api.example.com/v1?api_key=***&x=1"
 */

/** What a secret is replaced by. */
export const mask = "***"

/** Query parameters whose values are credentials (names compared case-insensitively, `-` = `_`). */
export const credentialParams: ReadonlyArray<string> = [
  "key",
  "api_key",
  "apikey",
  "token",
  "access_token",
  "refresh_token",
  "id_token",
  "auth",
  "authorization",
  "secret",
  "client_secret",
  "password",
  "passwd",
  "pwd",
  "sig",
  "signature",
  "x_api_key",
  "code"
]

const params = new Set(credentialParams)

// scheme://userinfo@ — userinfo is everything up to the last "@" before the host ends.
const userinfo = /^([a-z][a-z0-9+.-]*:\/\/)[^/?#\s]*@/i
// ?name=value or &name=value (also ; as a separator); the value ends at & # ; or whitespace.
const query = /([?&;])([^=&#;\s]+)=([^&#;\s]*)/g
// A URL inside text: a scheme (not glued to a longer one), "://", then anything up to
// whitespace or a quote.
const urlInText = /(?<![a-z0-9+.-])[a-z][a-z0-9+.-]*:\/\/[^\s"'<>`]+/gi

const isCredential = (name: string): boolean => {
  let decoded = name
  try {
    decoded = decodeURIComponent(name)
  } catch {
    // A malformed escape: compare the name as written.
  }
  return params.has(decoded.toLowerCase().replaceAll("-", "_"))
}

/** `url` with its userinfo and the values of credential query parameters replaced by `***`. */
export const redactUrl = (url: string): string =>
  url
    .replace(userinfo, `$1${mask}@`)
    .replace(query, (whole, separator: string, name: string, value: string) =>
      isCredential(name) && value !== "" ? `${separator}${name}=${mask}` : whole)

/** `text` with every URL in it redacted by {@link redactUrl}. */
export const redactText = (text: string): string => text.replace(urlInText, redactUrl)

/** Does `url` carry credentials that {@link redactUrl} would hide? */
export const hasCredentials = (url: string): boolean => redactUrl(url) !== url

/** Does `url` have userinfo (`user:password@`)? fetch refuses to send such a URL. */
export const hasUserinfo = (url: string): boolean => userinfo.test(url)
