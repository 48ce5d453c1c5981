/**
 * Secrets out of audit summaries. A command line is the most useful thing an audit record holds
 * and the likeliest to carry a credential (`curl -H "Authorization: Bearer …"`, `git clone
 * https://user:token@host/…`, `export GITHUB_TOKEN=ghp_…`), so every string of a summary goes
 * through `redact` before it becomes a span attribute: credentials the server itself knows (API
 * keys, git tokens) wherever they appear, then the shapes credentials take. Each secret becomes
 * `[REDACTED]`; the text around it stays, so the record still says what ran.
 *
 * The patterns are anchored and bounded (no nested quantifiers), and only the head of the input is
 * scanned (what is kept is shorter still), so a hostile 4 MiB command costs what a 4 KiB one does.
 */

/** What a secret is replaced with. */
export const REDACTED = "[REDACTED]";

/** Most characters of one summary string; longer ones are cut and marked. */
export const MAX_SUMMARY_CHARS = 1024;

/** Characters looked at: four times what is kept (a longer input's rest could never be shown anyway). */
const SCAN_CHARS = 4 * MAX_SUMMARY_CHARS;
/** When the input was cut, this much of the end of what was scanned is dropped: a secret cut in two there is not recognisable. */
const CUT_MARGIN = 512;

/** Credential shapes, each replaced whole, or, with a group, from that group on. */
const SHAPES: ReadonlyArray<[RegExp, (match: string, ...groups: string[]) => string]> = [
  // PEM private keys, including the body.
  [/-----BEGIN[A-Z ]{0,40}PRIVATE KEY-----[\s\S]{0,16384}?(?:-----END[A-Z ]{0,40}PRIVATE KEY-----|$)/g, () => REDACTED],
  // Userinfo in URLs: scheme://user:password@host, scheme://token@host.
  [/\b([a-z][a-z0-9+.-]{0,30}:\/\/)[^\s/@'"`]{1,512}@/gi, (_m, scheme) => `${scheme}${REDACTED}@`],
  // HTTP authorization headers and their schemes, quoted or not.
  [/\b((?:proxy-)?authorization\s*[:=]\s*)(?:(?:bearer|basic|token|digest|negotiate)\s+)?[^\s'"`]{1,4096}/gi, (_m, name) => `${name}${REDACTED}`],
  [/\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,4096}/gi, (_m, scheme) => `${scheme} ${REDACTED}`],
  // name=value and name: value where the name says secret (PASSWORD=, api_key:, --token=, GITHUB_TOKEN=).
  // Anchored on the keyword (a name's prefix needs no look), so the scan stays linear.
  [
    /((?:passw(?:or)?d|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|credentials?|auth)[A-Za-z0-9_.-]{0,64}\s*[=:]\s*)(?:"[^"]{0,4096}"|'[^']{0,4096}'|[^\s'"`;&|]{1,4096})/gi,
    (_m, name) => `${name}${REDACTED}`,
  ],
  // The same names as separate options: --password X, --api-token X (-p is too ambiguous to guess).
  [/(--?(?:[A-Za-z0-9]{1,16}-){0,3}(?:password|passwd|secret|token|api-?key|access-?key)[A-Za-z0-9-]{0,32}\s+)(?:"[^"]{0,4096}"|'[^']{0,4096}'|[^\s'"`;&|-][^\s'"`;&|]{0,4095})/gi, (_m, name) => `${name}${REDACTED}`],
  // curl -u user:password / --user user:password.
  [/((?:^|\s)(?:-u|--user)\s*)(?:"[^"]{0,4096}"|'[^']{0,4096}'|[^\s'"`;&|]{1,4096})/g, (_m, flag) => `${flag}${REDACTED}`],
  // Well-known token shapes (bounded by what is not alphanumeric, so `_` next to one still counts).
  [/(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{30,255}|github_pat_[A-Za-z0-9_]{30,255})/g, () => REDACTED],
  [/(?<![A-Za-z0-9])glpat-[A-Za-z0-9_-]{20,64}/g, () => REDACTED],
  [/(?<![A-Za-z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA)[A-Z0-9]{16}/g, () => REDACTED],
  [/(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9-]{10,255}/g, () => REDACTED],
  [/(?<![A-Za-z0-9])sk-(?:proj-|ant-|live-)?[A-Za-z0-9_-]{20,255}/g, () => REDACTED],
  [/(?<![A-Za-z0-9])[sr]k_(?:live|test)_[A-Za-z0-9]{16,255}/g, () => REDACTED],
  [/(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{35}/g, () => REDACTED],
  [/(?<![A-Za-z0-9])npm_[A-Za-z0-9]{36}/g, () => REDACTED],
  [/(?<![A-Za-z0-9])awst_[A-Za-z0-9_-]{20,255}/g, () => REDACTED],
  // JSON Web Tokens.
  [/(?<![A-Za-z0-9])eyJ[A-Za-z0-9_-]{5,4096}\.eyJ[A-Za-z0-9_-]{5,8192}\.[A-Za-z0-9_-]{0,4096}/g, () => REDACTED],
];

/** Removes secrets from text; see the module comment. */
export class Redactor {
  readonly #known: string[];

  /** `known`: secrets the server holds (API keys, git tokens), replaced wherever they appear. */
  constructor(known: Iterable<string> = []) {
    // Longest first, so a key containing another is replaced whole; very short ones would only
    // mangle ordinary text.
    this.#known = [...new Set(known)].filter((k) => k.length >= 8).sort((a, b) => b.length - a.length);
  }

  /** `text` without secrets, cut to `max` characters (with a marker saying how many were cut). */
  redact(text: string, max = MAX_SUMMARY_CHARS): string {
    if (text === "") return text;
    const cut = text.length > SCAN_CHARS;
    let out = cut ? text.slice(0, SCAN_CHARS) : text;
    for (const k of this.#known) if (out.includes(k)) out = out.split(k).join(REDACTED);
    for (const [re, replace] of SHAPES) out = out.replace(re, replace as (m: string, ...g: string[]) => string);
    if (cut) out = out.slice(0, Math.max(0, out.length - CUT_MARGIN));
    if (out.length <= max && !cut) return out;
    const kept = out.slice(0, max);
    return `${kept}…[${text.length - kept.length} more characters]`;
  }
}
