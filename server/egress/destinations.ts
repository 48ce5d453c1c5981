/**
 * The egress allowlist (issue 16): which destinations a workspace's commands may reach through the
 * server's proxy. Two checks, both required:
 *
 * 1. The destination as the client named it (host and port) must match one of the agent type's
 *    rules: a host name (`registry.npmjs.org`), a wildcard (`*.example.org`: any name below it, not
 *    the name itself), each with optional ports (`:8443`; default 443 and 80), or an explicit CIDR
 *    range (`203.0.113.0/24`) for a destination written as an IP address. An IP address never
 *    matches a name rule, and a name never matches a CIDR rule.
 * 2. The address the proxy will actually connect to (after the proxy's own DNS resolution; nothing
 *    resolves it again) must not be special: loopback, link-local (the cloud metadata address
 *    included), private and shared ranges, unspecified, multicast, broadcast and documentation
 *    ranges, and the IPv4-mapped IPv6 forms of all of them, unless the server's operator lists the
 *    address (AGENT_WORKSPACE_EGRESS_PRIVATE_ALLOW); and never the server's own listening
 *    addresses and ports.
 *
 * Address ranges are checked with Node's `net.BlockList`, which understands IPv4-mapped IPv6 forms.
 */
import { BlockList, isIP } from "node:net";
import { DomainError } from "../../core/errors.ts";

/** Ports a rule without ports allows. */
export const DEFAULT_PORTS: readonly number[] = [443, 80];

/** One allowlist entry, parsed. */
export interface EgressRule {
  /** The entry as written, for refusal messages. */
  text: string;
  kind: "host" | "wildcard" | "cidr";
  /** Lower-case host name; for a wildcard the suffix after "*." ; for a CIDR the network address. */
  host: string;
  /** Prefix length of a CIDR rule. */
  prefix: number;
  ports: readonly number[];
}

/** Why a destination is refused: the text of the 403 body and the log line. */
export interface Refusal {
  /** "not_allowlisted", "special_address", "server_address", "unresolvable". */
  reason: string;
  /** One line for the agent: the destination and the rule. */
  message: string;
}

const HOST_NAME = /^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/;

function invalid(field: string, message: string): DomainError {
  return new DomainError("INVALID_ARGUMENT", message, { metadata: { field } });
}

/**
 * `address/prefix`, the prefix in decimal digits and within the address family's bits ("10.0.0.0/"
 * or "/0x10" are not ranges); a bare address is its own range only when `bare` allows it.
 */
export function parseCidr(text: string, bare: boolean): { address: string; prefix: number } | undefined {
  const [address, prefix, extra] = text.split("/");
  const family = isIP(address);
  if (family === 0 || extra !== undefined) return undefined;
  const max = family === 4 ? 32 : 128;
  if (prefix === undefined) return bare ? { address, prefix: max } : undefined;
  return /^\d{1,3}$/.test(prefix) && Number(prefix) <= max ? { address, prefix: Number(prefix) } : undefined;
}

/** Parses `host[:port[,port…]]`, `*.suffix[:ports]` or `address/prefix[:ports]` (IPv6 in brackets). */
export function parseRule(text: string, field: string): EgressRule {
  const entry = text.trim().toLowerCase();
  let target = entry;
  let portText = "";
  const bracket = /^\[([0-9a-f:.]+)\](\/\d{1,3})?(?::([0-9,]+))?$/.exec(entry);
  if (bracket) {
    target = `${bracket[1]}${bracket[2] ?? ""}`;
    portText = bracket[3] ?? "";
  } else if (entry.split(":").length === 2) {
    [target, portText] = entry.split(":");
  } else if (entry.includes(":")) {
    throw invalid(field, `${field} '${text.slice(0, 100)}': write an IPv6 range in brackets, as [2001:db8::]/32:443`);
  }
  const ports = portText === "" ? DEFAULT_PORTS : portText.split(",").map((p) => Number(p));
  if (ports.some((p) => !Number.isInteger(p) || p < 1 || p > 65535)) throw invalid(field, `${field} '${text.slice(0, 100)}': ports are 1-65535`);
  if (target.includes("/")) {
    const range = parseCidr(target, false);
    if (!range) throw invalid(field, `${field} '${text.slice(0, 100)}' is not a CIDR range (address/prefix)`);
    return { text: text.trim(), kind: "cidr", host: range.address, prefix: range.prefix, ports };
  }
  if (isIP(target) !== 0) throw invalid(field, `${field} '${text.slice(0, 100)}': an address is written as a CIDR range (${target}/${isIP(target) === 4 ? 32 : 128})`);
  if (target.startsWith("*.")) {
    const suffix = target.slice(2);
    if (!HOST_NAME.test(suffix) || !suffix.includes(".")) throw invalid(field, `${field} '${text.slice(0, 100)}': a wildcard is *. and a domain of at least two labels`);
    return { text: text.trim(), kind: "wildcard", host: suffix, prefix: 0, ports };
  }
  if (!HOST_NAME.test(target)) throw invalid(field, `${field} '${text.slice(0, 100)}' is not a host name, *.domain or address/prefix`);
  return { text: text.trim(), kind: "host", host: target, prefix: 0, ports };
}

/** Special ranges no destination may resolve to unless the operator lists the address. */
const SPECIAL_V4: Array<[string, number]> = [
  ["0.0.0.0", 8],
  ["10.0.0.0", 8],
  ["100.64.0.0", 10],
  ["127.0.0.0", 8],
  ["169.254.0.0", 16],
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.0.2.0", 24],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15],
  ["198.51.100.0", 24],
  ["203.0.113.0", 24],
  ["224.0.0.0", 4],
  ["240.0.0.0", 4],
];
const SPECIAL_V6: Array<[string, number]> = [
  ["::", 128],
  ["::1", 128],
  ["64:ff9b::", 96],
  ["100::", 64],
  ["2001:db8::", 32],
  ["fc00::", 7],
  ["fe80::", 10],
  ["ff00::", 8],
];

function blockListOf(v4: Array<[string, number]>, v6: Array<[string, number]>): BlockList {
  const list = new BlockList();
  for (const [a, p] of v4) list.addSubnet(a, p, "ipv4");
  for (const [a, p] of v6) list.addSubnet(a, p, "ipv6");
  return list;
}

const SPECIAL = blockListOf(SPECIAL_V4, SPECIAL_V6);
const LOOPBACK = blockListOf([["127.0.0.0", 8]], [["::1", 128]]);

/** `address` as BlockList checks it: family, and IPv4-mapped IPv6 unwrapped to IPv4. */
function normalized(address: string): { address: string; family: "ipv4" | "ipv6" } {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return { address: mapped[1], family: "ipv4" };
  const hexMapped = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(address);
  if (hexMapped) {
    const hi = Number.parseInt(hexMapped[1], 16);
    const lo = Number.parseInt(hexMapped[2], 16);
    return { address: `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`, family: "ipv4" };
  }
  return { address, family: isIP(address) === 6 ? "ipv6" : "ipv4" };
}

function contains(list: BlockList, address: string): boolean {
  const n = normalized(address);
  return list.check(n.address, n.family);
}

/** True when `address` lies in a range no destination may use by default. */
export function isSpecialAddress(address: string): boolean {
  return contains(SPECIAL, address);
}

/** What the server's operator configures for every workspace. */
export interface EgressServerPolicy {
  /** Special addresses the operator allows anyway ("127.0.0.1/32", "10.1.2.0/24"). */
  privateAllow: string[];
  /**
   * The server's own listening endpoints, always refused (a wildcard bind expanded by the caller
   * into the host's interface addresses; any loopback address counts for a loopback one).
   */
  ownEndpoints: Array<{ address: string; port: number }>;
}

/** One workspace's allowlist, with the server's rules around it. */
export class EgressPolicy {
  readonly rules: readonly EgressRule[];
  readonly #ruleList = new Map<EgressRule, BlockList>();
  readonly #privateAllow: BlockList;
  readonly #own: Array<{ address: string; port: number }>;

  constructor(rules: EgressRule[], server: EgressServerPolicy) {
    this.rules = rules;
    for (const r of rules) {
      if (r.kind !== "cidr") continue;
      const list = new BlockList();
      list.addSubnet(r.host, r.prefix, isIP(r.host) === 4 ? "ipv4" : "ipv6");
      this.#ruleList.set(r, list);
    }
    this.#privateAllow = new BlockList();
    for (const cidr of server.privateAllow) {
      const [address, prefix] = cidr.split("/");
      this.#privateAllow.addSubnet(address, Number(prefix), isIP(address) === 6 ? "ipv6" : "ipv4");
    }
    this.#own = server.ownEndpoints;
  }

  /**
   * The rule that lets a client ask for `host:port` (the name as written in CONNECT or the URL,
   * lower-cased; an address literal in its canonical form), or the refusal.
   */
  matchName(host: string, port: number): EgressRule | Refusal {
    const name = host.toLowerCase().replace(/\.$/, "");
    const literal = isIP(name) !== 0;
    for (const r of this.rules) {
      if (!r.ports.includes(port)) continue;
      if (r.kind === "cidr" ? literal && contains(this.#ruleList.get(r) as BlockList, name) : !literal && (r.kind === "host" ? name === r.host : name.endsWith(`.${r.host}`))) return r;
    }
    const shown = literal && name.includes(":") ? `[${name}]` : name;
    return { reason: "not_allowlisted", message: `${shown}:${port} is not on this workspace's egress allowlist (rules: ${this.rules.map((r) => r.text).join(", ") || "none"})` };
  }

  /** Refuses an address the proxy is about to connect to, or undefined when it may. */
  checkAddress(host: string, address: string, port: number): Refusal | undefined {
    const n = normalized(address);
    const loopback = (a: string) => contains(LOOPBACK, a);
    if (this.#own.some((o) => o.port === port && (normalized(o.address).address === n.address || (loopback(o.address) && loopback(address))))) {
      return { reason: "server_address", message: `${host}:${port} resolves to ${address}, this server's own address: never reachable through the proxy` };
    }
    if (isSpecialAddress(address) && !this.#privateAllow.check(n.address, n.family)) {
      return { reason: "special_address", message: `${host}:${port} resolves to ${address}, a loopback, link-local, private or reserved address the server's operator did not allow` };
    }
    return undefined;
  }
}
