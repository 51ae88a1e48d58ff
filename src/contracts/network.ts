/**
 * The words of a sandbox's network: its policy, the egress gateway's allowlist, and what the gateway records about
 * every request and every model call it meters (docs/network.md). Pure data: the gateway (src/gateway) writes these,
 * the ledger keeps them, `status` and `durable-harness network RUN` read them.
 */
import type { Usage } from './usage.js';

/**
 * What a sandbox may reach. `none`: nothing but its own loopback. `vendor`: only the harness's model API, through the
 * run's egress gateway. `allowlist`: the vendor plus declared destinations. `open`: unconfined (development only).
 */
export type NetworkPolicy = 'none' | 'vendor' | 'allowlist' | 'open';

export const networkPolicies: readonly NetworkPolicy[] = ['none', 'vendor', 'allowlist', 'open'];

/** Whether a policy's traffic goes through the run's egress gateway. */
export function usesGateway(policy: NetworkPolicy): boolean {
  return policy === 'vendor' || policy === 'allowlist';
}

/** The vendor API a CLI speaks (what the gateway meters on the wire). `any`: told apart by the response's shape. */
export type VendorApi = 'anthropic-messages' | 'openai-responses' | 'openai-chat' | 'gemini' | 'any';

/**
 * One allowlisted destination besides the vendor. `methods`: the HTTP methods allowed, checked on plain-HTTP requests
 * the gateway forwards; a tunnel (CONNECT, e.g. HTTPS) carries methods the gateway cannot see, so a rule with
 * `methods` allows no tunnel.
 */
export interface AllowRule {
  readonly host: string;
  readonly port: number;
  readonly methods?: readonly string[];
}

/** How the gateway handled one request from the sandbox. */
export type NetworkDecision = 'allowed' | 'refused';

/** One request through the gateway (the audit row). Never holds a key, a placeholder or a query string. */
export interface NetworkRecord {
  /** Epoch ms the request arrived. */
  readonly at: number;
  /** `model`: a call of the vendor's API; `connect`: a CONNECT tunnel; `http`: a plain-HTTP forward. */
  readonly kind: 'model' | 'connect' | 'http';
  readonly method: string;
  /** `host:port` the request was for. */
  readonly destination: string;
  /** The path without its query (`''` for a tunnel). */
  readonly path: string;
  /** HTTP status answered (the vendor's, or the gateway's refusal); 0 when the connection ended first. */
  readonly status: number;
  readonly bytesIn: number;
  readonly bytesOut: number;
  readonly decision: NetworkDecision;
  /** The rule that decided: `vendor`, `allowlist:<host>:<port>`, or `refused:<reason>` (e.g. `refused:not-allowlisted`). */
  readonly rule: string;
  readonly durationMs: number;
  /** Requests of this kind refused and not recorded one by one since the last record (rate cap); absent = 0. */
  readonly suppressed?: number;
}

/** One model call as the gateway metered it from the vendor's response. */
export interface ModelCall {
  readonly at: number;
  readonly api: VendorApi;
  /** The model the vendor says served the call, when its response names one. */
  readonly model?: string;
  /** Usage, normalised as in contracts/usage.ts; `undefined` fields: the response did not say. */
  readonly usage: Usage;
  readonly status: number;
  readonly streamed: boolean;
  readonly durationMs: number;
  /** Time from the request's arrival to the first response byte passed back. */
  readonly firstByteMs?: number;
}
