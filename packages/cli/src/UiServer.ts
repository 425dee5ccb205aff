/**
 * The HTTP server of `fibril ui` (and `fibril run --ui`): on 127.0.0.1 only, on a port the OS
 * picks, every request checked against a random token (in the printed URL, `?token=`, or an
 * `Authorization: Bearer` header); without it, 401 and nothing else.
 *
 * Routes: `/` the page (ui.html, one self-contained file: no CDN, no network); `/events` the
 * tree as Server-Sent Events, a snapshot each time it changes; `/agent?id=` one agent's detail;
 * `POST /cancel?id=`; `POST /answer?id=<question>&decision=allow|deny[&reason=][&always=true]`; `/agui` the run's AG-UI events as SSE (only where a run is attached).
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as Console from "effect/Console"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import { randomBytes, timingSafeEqual } from "node:crypto"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { fileURLToPath } from "node:url"
import type { UiData } from "./UiData.ts"

export interface Options {
  readonly data: UiData
  /** The AG-UI events of the run this server belongs to (`fibril run --ui`), each a JSON object. */
  readonly agui?: Stream.Stream<object> | undefined
  /** How often the store is read for the live tree (default 250 ms). */
  readonly poll?: Duration.Input | undefined
}

export interface Serving {
  /** The page's URL, token included: what `fibril ui` prints. */
  readonly url: string
  readonly port: number
  readonly token: string
}

/** The only address it listens on: not reachable from another machine, nor a container's bridge. */
export const host = "127.0.0.1"

export const pagePath = fileURLToPath(new URL("./ui.html", import.meta.url))

const sameToken = (given: string | null, token: string): boolean => {
  if (given === null) return false
  const a = Buffer.from(given)
  const b = Buffer.from(token)
  return a.length === b.length && timingSafeEqual(a, b)
}

const tokenOf = (request: HttpServerRequest.HttpServerRequest, url: URL): string | null => {
  const bearer = request.headers["authorization"]
  if (bearer !== undefined && bearer.startsWith("Bearer ")) return bearer.slice("Bearer ".length)
  return url.searchParams.get("token")
}

/** Server-Sent Events: one `data:` line per JSON value. */
const sse = (values: Stream.Stream<unknown>) =>
  HttpServerResponse.stream(
    values.pipe(
      Stream.map((value) => `data: ${JSON.stringify(value)}\n\n`),
      Stream.encodeText
    ),
    { contentType: "text/event-stream", headers: { "cache-control": "no-store" } }
  )

const json = (value: unknown, status = 200) =>
  HttpServerResponse.text(JSON.stringify(value), { status, contentType: "application/json" })

const unauthorized = HttpServerResponse.text(
  "401: this Fibril page needs the token of the URL `fibril ui` printed (?token=… or Authorization: Bearer …)\n",
  { status: 401 }
)

/** Serves the page until the scope closes; the URL carries a fresh 192-bit token. */
export const serve = Effect.fn("fibril.ui.serve")(function*(options: Options) {
  const fs = yield* FileSystem.FileSystem
  const page = yield* fs.readFileString(pagePath)
  const token = randomBytes(24).toString("base64url")
  const server = http.createServer()
  const { serve: handle } = yield* NodeHttpServer.make(() => server, { host, port: 0 })
  const port = (server.address() as AddressInfo).port
  const poll = options.poll ?? "250 millis"

  // The tree as it changes: read every `poll`, sent when it differs from the last one sent.
  const tree = Stream.fromEffectSchedule(options.data.snapshot, Schedule.spaced(poll)).pipe(
    Stream.changesWith((a, b) => JSON.stringify(a.agents) === JSON.stringify(b.agents))
  )

  yield* handle(Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const url = new URL(request.url, `http://${host}`)
    if (!sameToken(tokenOf(request, url), token)) return unauthorized
    const id = url.searchParams.get("id") ?? ""
    switch (`${request.method} ${url.pathname}`) {
      case "GET /":
        return HttpServerResponse.text(page, {
          contentType: "text/html; charset=utf-8",
          // The page loads nothing from anywhere else; the browser is told so.
          headers: {
            "content-security-policy":
              "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:"
          }
        })
      case "GET /events":
        return sse(tree)
      case "GET /agent": {
        const detail = yield* options.data.detail(id)
        return Option.isSome(detail) ? json(detail.value) : json({ error: `no agent "${id}" is recorded` }, 404)
      }
      case "POST /answer": {
        // A person's answer to a waiting question (`ask` rules): allow, or deny with a reason the model reads.
        const decision = url.searchParams.get("decision")
        if (decision !== "allow" && decision !== "deny") {
          return json({ error: `decision must be allow or deny, not ${JSON.stringify(decision)}` }, 400)
        }
        const reason = url.searchParams.get("reason")
        // `always=true` with allow: the tool runs unasked in the asking agent's tree from now on.
        const always = decision === "allow" && url.searchParams.get("always") === "true"
        const sent = yield* options.data.answer(id, {
          decision,
          by: "fibril ui",
          ...(reason === null || reason === "" ? {} : { reason }),
          ...(always ? { always } : {})
        })
        return sent ? json({ answered: id }) : json({ error: `no question "${id}" waits for an answer` }, 404)
      }
      case "POST /cancel": {
        const after = yield* options.data.cancel(id)
        return Option.isSome(after) ? json(after.value) : json({ error: `no agent "${id}" is recorded` }, 404)
      }
      // An AG-UI client (HttpAgent) POSTs its RunAgentInput; the run is this process's, so its body is not read.
      case "GET /agui":
      case "POST /agui":
        return options.agui === undefined
          ? json({ error: "no run is attached to this page: AG-UI events come with fibril run --ui" }, 404)
          : sse(options.agui)
      default:
        return json({ error: `no route ${request.method} ${url.pathname}` }, 404)
    }
  }))
  return { url: `http://${host}:${port}/?token=${token}`, port, token } satisfies Serving
})

/** What `fibril ui` and `fibril run --ui` print: the URL, token included, on stderr (stdout stays the run's). */
export const announce = (serving: Serving) =>
  Console.error(`fibril ui: ${serving.url}  (127.0.0.1 only; the token in the URL is the key)`)
