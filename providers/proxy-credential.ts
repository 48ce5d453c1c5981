/**
 * The credential a workspace handle's proxy endpoint asks for (a local workspace's loopback port,
 * a container's egress socket), and the proxy URL its commands get it in. The URL's userinfo is
 * what curl, git, npm and pip send as Proxy-Authorization. The credential lives in the commands'
 * environment and nowhere else: no log line, error, span or audit record holds it.
 */
import { randomBytes } from "node:crypto";
import type { ProxyCredential } from "./types.ts";

/** A new credential, one per workspace handle. */
export function newProxyCredential(): ProxyCredential {
  return { username: "aw", password: randomBytes(24).toString("base64url") };
}

/** The proxy URL on the loopback `port`, with `credential` in its userinfo when there is one. */
export function proxyUrlFor(port: number, credential?: ProxyCredential): string {
  return credential ? `http://${credential.username}:${credential.password}@127.0.0.1:${port}` : `http://127.0.0.1:${port}`;
}
