/**
 * The gateway's refusals in each vendor's own error shape, so a CLI shows the reason to its user instead of a parse
 * error. Every message starts with `durable-harness:` so it is clear who refused.
 */
import type { VendorApi } from '../contracts/network.js';

const statusNames: Record<number, string> = {
  400: 'INVALID_ARGUMENT',
  401: 'UNAUTHENTICATED',
  403: 'PERMISSION_DENIED',
  404: 'NOT_FOUND',
  407: 'UNAUTHENTICATED',
  413: 'INVALID_ARGUMENT',
  429: 'RESOURCE_EXHAUSTED',
  502: 'UNAVAILABLE',
};

const anthropicTypes: Record<number, string> = {
  401: 'authentication_error',
  403: 'permission_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
};

/** The JSON body of a refusal with `status` for a client of `api`. */
export function vendorError(api: VendorApi, status: number, reason: string): string {
  const message = `durable-harness: ${reason}`;
  switch (api) {
    case 'anthropic-messages':
      return JSON.stringify({ type: 'error', error: { type: anthropicTypes[status] ?? 'api_error', message } });
    case 'gemini':
      return JSON.stringify({ error: { code: status, message, status: statusNames[status] ?? 'UNKNOWN' } });
    case 'openai-responses':
    case 'openai-chat':
    case 'any':
      return JSON.stringify({ error: { message, type: status === 403 ? 'permission_denied' : 'invalid_request_error', code: `durable_harness_${status}` } });
  }
}
