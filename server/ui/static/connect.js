// The Connect protocol over fetch, JSON only: what the web UI needs and nothing more.
//
// Unary: POST /<service>/<Method>, content-type application/json; an error answers a non-200
// status with {code, message, details}. Server streaming: content-type application/connect+json,
// the request and every response message in an envelope (1 flags byte, 4-byte big-endian length);
// the last envelope has flag 0x02 and holds {error?, metadata?}. A stream that ends without it was
// cut (a server restart, a dropped connection) and is reported as UNAVAILABLE, so callers retry.
//
// The credential goes in the Authorization header only, never in a URL.

/** An error of a call: `code` as Connect names it ("not_found"), `reason` from the ErrorDetail. */
export class RpcError extends Error {
  /**
   * @param {string} code
   * @param {string} message
   * @param {unknown[]} [details]
   */
  constructor(code, message, details = []) {
    super(message === "" ? code : message);
    this.name = "RpcError";
    this.code = code;
    this.details = details;
    /** @type {string} the ErrorDetail's reason without its prefix ("FILE_NOT_FOUND"), or "". */
    this.reason = reasonOf(details);
  }
}

const DETAIL_TYPE = "agentworkspace.v1.ErrorDetail";
const END_STREAM = 0x02;
const COMPRESSED = 0x01;

/** @param {unknown[]} details */
function reasonOf(details) {
  for (const d of Array.isArray(details) ? details : []) {
    const debug = d && typeof d === "object" && d.type === DETAIL_TYPE ? d.debug : undefined;
    if (debug && typeof debug.reason === "string") return debug.reason.replace(/^ERROR_REASON_/, "");
  }
  return "";
}

/** The Connect code of an HTTP status without a Connect error body. */
function codeOfStatus(status) {
  switch (status) {
    case 400: return "invalid_argument";
    case 401: return "unauthenticated";
    case 403: return "permission_denied";
    case 404: return "unimplemented";
    case 408: return "deadline_exceeded";
    case 429: case 502: case 503: case 504: return "unavailable";
    default: return "unknown";
  }
}

/** @param {unknown} body @param {number} status */
function errorFromJson(body, status) {
  if (body && typeof body === "object" && typeof body.code === "string") {
    return new RpcError(body.code, typeof body.message === "string" ? body.message : "", Array.isArray(body.details) ? body.details : []);
  }
  return new RpcError(codeOfStatus(status), `HTTP ${status}`);
}

/** A fetch failure (connection refused, reset) as the error a retry loop expects. */
function networkError(err) {
  if (err && err.name === "AbortError") return err;
  return new RpcError("unavailable", err instanceof Error ? err.message : String(err));
}

/** Frames one message: flags byte, 4-byte big-endian length, the bytes. */
export function envelope(flags, bytes) {
  const out = new Uint8Array(5 + bytes.byteLength);
  out[0] = flags;
  new DataView(out.buffer).setUint32(1, bytes.byteLength, false);
  out.set(bytes, 5);
  return out;
}

/**
 * Reads envelopes from a byte stream, however its chunks split them.
 * @param {ReadableStream<Uint8Array>} stream
 * @returns {AsyncGenerator<{flags: number, data: Uint8Array}>}
 */
export async function* readEnvelopes(stream) {
  const reader = stream.getReader();
  let buf = new Uint8Array(0);
  try {
    for (;;) {
      while (buf.byteLength >= 5) {
        const length = new DataView(buf.buffer, buf.byteOffset, 5).getUint32(1, false);
        if (buf.byteLength < 5 + length) break;
        yield { flags: buf[0], data: buf.slice(5, 5 + length) };
        buf = buf.subarray(5 + length);
      }
      const { done, value } = await reader.read();
      if (done) break;
      const next = new Uint8Array(buf.byteLength + value.byteLength);
      next.set(buf, 0);
      next.set(value, buf.byteLength);
      buf = next;
    }
    if (buf.byteLength > 0) throw new RpcError("unavailable", "the stream ended in the middle of a message");
  } finally {
    reader.releaseLock();
    await stream.cancel().catch(() => undefined);
  }
}

/**
 * A client for one server and one credential.
 * @param {{baseUrl?: string, token?: string, fetch?: typeof fetch}} options
 */
export function createClient({ baseUrl = "", token = "", fetch: fetchImpl = globalThis.fetch.bind(globalThis) } = {}) {
  const headersOf = (contentType, extra) => {
    const h = new Headers(extra);
    h.set("content-type", contentType);
    h.set("connect-protocol-version", "1");
    if (token !== "") h.set("authorization", `Bearer ${token}`);
    return h;
  };
  const url = (service, method) => `${baseUrl}/${service}/${method}`;

  return {
    /**
     * One unary call; resolves to the response message as JSON, rejects with RpcError.
     * @param {string} service @param {string} method @param {object} request
     * @param {{signal?: AbortSignal, headers?: Record<string, string>}} [options]
     */
    async unary(service, method, request, options = {}) {
      let res;
      try {
        res = await fetchImpl(url(service, method), {
          method: "POST",
          headers: headersOf("application/json", options.headers),
          body: JSON.stringify(request),
          signal: options.signal,
          credentials: "omit",
          cache: "no-store",
        });
      } catch (err) {
        throw networkError(err);
      }
      const text = await res.text().catch((err) => { throw networkError(err); });
      let body;
      try {
        body = text === "" ? {} : JSON.parse(text);
      } catch {
        throw new RpcError(codeOfStatus(res.status), `HTTP ${res.status}: not JSON`);
      }
      if (res.status !== 200) throw errorFromJson(body, res.status);
      return body;
    },

    /**
     * One server-streaming call: yields each response message as JSON; ends when the server ends
     * the stream, throws RpcError for its error (UNAVAILABLE for a stream cut without an end).
     * @param {string} service @param {string} method @param {object} request
     * @param {{signal?: AbortSignal, headers?: Record<string, string>}} [options]
     */
    async *stream(service, method, request, options = {}) {
      let res;
      try {
        res = await fetchImpl(url(service, method), {
          method: "POST",
          headers: headersOf("application/connect+json", options.headers),
          body: envelope(0, new TextEncoder().encode(JSON.stringify(request))),
          signal: options.signal,
          credentials: "omit",
          cache: "no-store",
        });
      } catch (err) {
        throw networkError(err);
      }
      if (res.status !== 200 || res.body === null) {
        const text = await res.text().catch(() => "");
        let body;
        try { body = JSON.parse(text); } catch { body = undefined; }
        throw errorFromJson(body, res.status);
      }
      const decoder = new TextDecoder();
      try {
        for await (const { flags, data } of readEnvelopes(res.body)) {
          if (flags & COMPRESSED) throw new RpcError("internal", "compressed message, but none was asked for");
          const json = data.byteLength === 0 ? {} : JSON.parse(decoder.decode(data));
          if (flags & END_STREAM) {
            if (json.error) throw errorFromJson(json.error, 200);
            return;
          }
          yield json;
        }
      } catch (err) {
        if (err instanceof RpcError) throw err;
        throw networkError(err);
      }
      throw new RpcError("unavailable", "the stream ended without its end-of-stream message");
    },
  };
}
