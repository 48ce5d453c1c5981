/**
 * A baseline for section (a): the least a Node HTTP/2 server can do for a unary gRPC call. It
 * answers every request on its raw `stream` event (no compat request and response objects) with
 * the gRPC health check's SERVING response and status 0, nothing decoded, nothing checked (a
 * Connect JSON request, `content-type: application/json`, gets `{}` with status 200). Run as
 * a child process (`node bench/bare-grpc.ts`): it prints its port on stdout, then answers each
 * line on stdin with its CPU time so far (`{"user":µs,"system":µs}`), so a client can take the
 * server's CPU per call as it does of the real server.
 */
import http2 from "node:http2";
import { createInterface } from "node:readline";

// The envelope of a HealthCheckResponse { status: SERVING }: field 1, varint 1.
const SERVING = Buffer.from([0, 0, 0, 0, 2, 0x08, 0x01]);

const EMPTY_JSON = Buffer.from("{}");

const server = http2.createServer();
server.on("stream", (stream, headers) => {
  stream.on("data", () => undefined);
  stream.on("end", () => {
    if (headers["content-type"] === "application/json") {
      stream.respond({ ":status": 200, "content-type": "application/json" });
      stream.end(EMPTY_JSON);
      return;
    }
    stream.respond({ ":status": 200, "content-type": "application/grpc+proto" }, { waitForTrailers: true });
    stream.once("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
    stream.end(SERVING);
  });
});
server.listen(0, "127.0.0.1", () => process.stdout.write(`${JSON.stringify({ port: (server.address() as { port: number }).port })}\n`));
createInterface({ input: process.stdin })
  .on("line", () => process.stdout.write(`${JSON.stringify(process.cpuUsage())}\n`))
  .on("close", () => process.exit(0));
