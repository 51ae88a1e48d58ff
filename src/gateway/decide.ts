/**
 * The gateway's decisions, pure: is this Host header the forwarder's, does this model call carry the run's
 * placeholder (and nothing else), may this proxy request go where it asks. No I/O; gateway.ts acts on the answers.
 */
import { timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { AllowRule } from '../contracts/network.js';

/** A refusal: the HTTP status, the record's rule (`refused:<reason>`) and a message for the sandbox (no secret in it). */
export interface Refusal {
  readonly status: number;
  readonly rule: `refused:${string}`;
  readonly message: string;
}

const loopbackHost = /^(127\.0\.0\.1|localhost)(:\d{1,5})?$/i;

/** Origin-form requests come from the sandbox's forwarder: their Host names its loopback port, nothing else. */
export function checkHostHeader(host: string | undefined): Refusal | undefined {
  if (host !== undefined && loopbackHost.test(host)) return undefined;
  return { status: 403, rule: 'refused:host-header', message: 'the Host header must name the sandbox loopback (127.0.0.1 or localhost); requests for other hosts go through the proxy form' };
}

/** Where a model call may carry its key: each vendor's own header or query form. */
const keyHeaders = ['x-api-key', 'x-goog-api-key'] as const;

/** Whether `a` equals `b`, in time that does not depend on where they differ. */
export function sameSecret(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/**
 * Checks a model call's credentials: every key form present must hold `placeholder`, and at least one must be
 * present. On success, the headers and path to send upstream, with the placeholder swapped for `key` in the same
 * places (removed when there is no key to swap in).
 */
export function swapKey(
  headers: IncomingHttpHeaders,
  path: string,
  placeholder: string,
  key: string | undefined,
): { readonly headers: Record<string, string>; readonly path: string } | Refusal {
  let found = 0;
  let other = false;
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    out[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  for (const name of keyHeaders) {
    const value = out[name];
    if (value === undefined) continue;
    if (sameSecret(value.trim(), placeholder)) {
      found += 1;
      if (key === undefined) delete out[name];
      else out[name] = key;
    } else other = true;
  }
  const auth = out.authorization;
  if (auth !== undefined) {
    const bearer = /^Bearer\s+(.+)$/i.exec(auth.trim());
    if (bearer && sameSecret(bearer[1]!.trim(), placeholder)) {
      found += 1;
      if (key === undefined) delete out.authorization;
      else out.authorization = `Bearer ${key}`;
    } else other = true;
  }
  const query = swapQueryKey(path, placeholder, key);
  found += query.found;
  other ||= query.other;
  if (other) return { status: 401, rule: 'refused:wrong-key', message: 'the request carries a key that is not this run\'s: only the key the sandbox was given is accepted' };
  if (found === 0) return { status: 401, rule: 'refused:no-credential', message: 'the request carries no key: send the key the sandbox was given (x-api-key, Authorization: Bearer, x-goog-api-key or ?key=)' };
  return { headers: out, path: query.path };
}

/** The `key` query parameter, checked and swapped in place; the rest of the query is left byte for byte. */
function swapQueryKey(path: string, placeholder: string, key: string | undefined): { path: string; found: number; other: boolean } {
  const q = path.indexOf('?');
  if (q < 0) return { path, found: 0, other: false };
  let found = 0;
  let other = false;
  const params = path.slice(q + 1).split('&');
  const kept: string[] = [];
  for (const param of params) {
    if (!param.startsWith('key=')) {
      kept.push(param);
      continue;
    }
    let value: string;
    try {
      value = decodeURIComponent(param.slice(4).replace(/\+/g, ' '));
    } catch {
      other = true;
      continue;
    }
    if (sameSecret(value, placeholder)) {
      found += 1;
      if (key !== undefined) kept.push(`key=${encodeURIComponent(key)}`);
    } else other = true;
  }
  const query = kept.join('&');
  return { path: query ? `${path.slice(0, q)}?${query}` : path.slice(0, q), found, other };
}

/** Whether a proxy request (absolute-form or CONNECT) carries `Proxy-Authorization: Basic dh:<placeholder>`. */
export function checkProxyCredential(value: string | undefined, placeholder: string): Refusal | undefined {
  const basic = value === undefined ? null : /^Basic\s+([A-Za-z0-9+/=]+)$/i.exec(value.trim());
  if (basic) {
    const decoded = Buffer.from(basic[1]!, 'base64').toString('utf8');
    if (sameSecret(decoded, `dh:${placeholder}`)) return undefined;
    return { status: 407, rule: 'refused:wrong-key', message: 'the proxy credential is not this run\'s' };
  }
  return { status: 407, rule: 'refused:no-credential', message: 'a proxy request needs Proxy-Authorization with the credential in HTTPS_PROXY' };
}

/** The allowlist rule for `host:port`, hosts compared case-insensitively and exactly (no suffix match). */
export function findRule(allowlist: readonly AllowRule[], host: string, port: number): AllowRule | undefined {
  const h = host.toLowerCase().replace(/^\[(.*)\]$/, '$1');
  return allowlist.find((r) => r.port === port && r.host.toLowerCase() === h);
}

/** The rule's record name. */
export function ruleName(rule: AllowRule): string {
  return `allowlist:${rule.host.toLowerCase()}:${rule.port}`;
}

/** A plain-HTTP forward to `host:port` with `method`: the rule that allows it, or the refusal. */
export function decideHttp(allowlist: readonly AllowRule[], host: string, port: number, method: string): AllowRule | Refusal {
  const rule = findRule(allowlist, host, port);
  if (!rule) return { status: 403, rule: 'refused:not-allowlisted', message: `${host}:${port} is not on this run's allowlist` };
  if (rule.methods && !rule.methods.some((m) => m.toUpperCase() === method.toUpperCase())) {
    return { status: 403, rule: 'refused:method', message: `${method} is not allowed to ${host}:${port} (allowed: ${rule.methods.join(', ')})` };
  }
  return rule;
}

/** A CONNECT tunnel to `host:port`: only a rule with no `methods` allows one (a tunnel hides its methods). */
export function decideConnect(allowlist: readonly AllowRule[], host: string, port: number): AllowRule | Refusal {
  const rule = findRule(allowlist, host, port);
  if (!rule) return { status: 403, rule: 'refused:not-allowlisted', message: `${host}:${port} is not on this run's allowlist` };
  if (rule.methods) return { status: 403, rule: 'refused:method', message: `${host}:${port} is allowed for ${rule.methods.join(', ')} only, which a tunnel cannot check: use plain http` };
  return rule;
}

/** `host:port` of a CONNECT target, or undefined when it is not one. */
export function parseAuthority(authority: string): { host: string; port: number } | undefined {
  const m = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/.exec(authority);
  if (!m) return undefined;
  const port = Number(m[2]);
  return port > 0 && port < 65536 ? { host: m[1]!, port } : undefined;
}

/** Whether a path has dot segments (`/v1/../x`, encoded or not): refused rather than normalised. */
export function hasDotSegments(path: string): boolean {
  const p = path.split('?')[0]!;
  let decoded: string;
  try {
    decoded = decodeURIComponent(p);
  } catch {
    return true;
  }
  return decoded.split('/').some((s) => s === '..' || s === '.') || decoded.includes('\\');
}

/** Hop-by-hop headers (RFC 9110 §7.6.1) and the proxy's own: never passed on, either way. */
export function endToEnd(headers: Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  const drop = new Set(['connection', 'keep-alive', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'host']);
  const listed = headers.connection;
  for (const name of (Array.isArray(listed) ? listed.join(',') : (listed ?? '')).split(',')) drop.add(name.trim().toLowerCase());
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    const lower = name.toLowerCase();
    if (value === undefined || drop.has(lower) || lower.startsWith('proxy-')) continue;
    out[lower] = value;
  }
  return out;
}
