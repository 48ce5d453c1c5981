/**
 * Raw HTTP for tests that speak to the server the way curl or a browser would: one HTTP/1.1 POST
 * on a fresh connection, and the Connect protocol's JSON error body.
 */
import http from "node:http";
import { fromBinary } from "@bufbuild/protobuf";
import { ErrorDetailSchema, type ErrorReason } from "../../gen/agentworkspace/v1/errors_pb.js";

/** A raw response. */
export interface RawResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
  httpVersion: string;
}

/** One HTTP/1.1 POST on a fresh connection, with optional extra headers. */
export function post(baseUrl: string, route: string, body: string, contentType = "application/json", headers: Record<string, string> = {}): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${baseUrl}${route}`,
      { method: "POST", agent: false, headers: { "content-type": contentType, "content-length": Buffer.byteLength(body), ...headers } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString("utf8"), httpVersion: res.httpVersion }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

/** A Connect protocol error body. */
export interface ConnectErrorBody {
  code: string;
  message: string;
  details?: Array<{ type: string; value: string }>;
}

/** The ErrorReason carried by a Connect JSON error body. */
export function reasonOf(body: ConnectErrorBody): ErrorReason | undefined {
  const detail = body.details?.find((d) => d.type === "agentworkspace.v1.ErrorDetail");
  if (!detail) return undefined;
  const b64 = detail.value.replace(/-/g, "+").replace(/_/g, "/");
  return fromBinary(ErrorDetailSchema, Buffer.from(b64, "base64")).reason;
}
