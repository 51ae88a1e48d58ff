/**
 * Payload keys from the environment of the worker, the client or the codec server:
 *
 *   DURABLE_HARNESS_PAYLOAD_KEYS       "ID:KEY,ID:KEY" — KEY is 32 bytes as base64 (44 chars) or hex (64 chars)
 *   DURABLE_HARNESS_PAYLOAD_KEYS_FILE  a file with the same list (one or more per line), e.g. a mounted secret
 *   DURABLE_HARNESS_PAYLOAD_KEY_ID     the key new payloads use (default: the first listed)
 *
 * Rotation: put the new key first (or name it in DURABLE_HARNESS_PAYLOAD_KEY_ID) and keep the old ones listed
 * until no open history needs them.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { DataConverter } from '@temporalio/common';
import { AesGcmPayloadCodec } from './aes-gcm-codec.js';

type Env = Readonly<Record<string, string | undefined>>;

export const payloadKeysEnv = 'DURABLE_HARNESS_PAYLOAD_KEYS';
export const payloadKeysFileEnv = 'DURABLE_HARNESS_PAYLOAD_KEYS_FILE';
export const payloadKeyIdEnv = 'DURABLE_HARNESS_PAYLOAD_KEY_ID';

/** Raised for a key list that cannot be used; the message names the variable and the entry, never a key. */
export class PayloadKeyConfigError extends Error {
  override readonly name = 'PayloadKeyConfigError';
}

const keyIdPattern = /^[A-Za-z0-9._-]{1,64}$/;

function parseKey(id: string, text: string, source: string): Uint8Array {
  const value = text.trim();
  let key: Buffer | undefined;
  if (/^[0-9a-fA-F]{64}$/.test(value)) key = Buffer.from(value, 'hex');
  else if (/^[A-Za-z0-9+/_-]{43}=?$/.test(value)) key = Buffer.from(value, value.includes('-') || value.includes('_') ? 'base64url' : 'base64');
  if (!key || key.length !== 32) throw new PayloadKeyConfigError(`${source}: key "${id}" is not 32 bytes as base64 (44 characters) or hex (64 characters); make one with \`openssl rand -base64 32\``);
  return key;
}

/** Parses "ID:KEY" entries separated by commas, whitespace or newlines. */
export function parsePayloadKeys(text: string, source = payloadKeysEnv): Map<string, Uint8Array> {
  const keys = new Map<string, Uint8Array>();
  for (const entry of text.split(/[\s,]+/).filter(Boolean)) {
    const colon = entry.indexOf(':');
    if (colon <= 0) throw new PayloadKeyConfigError(`${source}: entries look like ID:KEY (e.g. 2025-06:$(openssl rand -base64 32)); one has no key id`);
    const id = entry.slice(0, colon);
    if (!keyIdPattern.test(id)) throw new PayloadKeyConfigError(`${source}: key id "${id}" may use only letters, digits, ".", "_" and "-"`);
    if (keys.has(id)) throw new PayloadKeyConfigError(`${source}: key id "${id}" is listed twice`);
    keys.set(id, parseKey(id, entry.slice(colon + 1), source));
  }
  return keys;
}

/** The payload codec the environment asks for, or undefined when no keys are configured (encryption off). */
export function payloadCodecFromEnvironment(env: Env = process.env): AesGcmPayloadCodec | undefined {
  const parts: { text: string; source: string }[] = [];
  if (env[payloadKeysEnv]?.trim()) parts.push({ text: env[payloadKeysEnv]!, source: payloadKeysEnv });
  const file = env[payloadKeysFileEnv]?.trim();
  if (file) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (e) {
      throw new PayloadKeyConfigError(`${payloadKeysFileEnv}: cannot read ${file} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
    }
    parts.push({ text, source: `${payloadKeysFileEnv} (${file})` });
  }
  if (parts.length === 0) {
    if (env[payloadKeyIdEnv]?.trim()) throw new PayloadKeyConfigError(`${payloadKeyIdEnv} is set but no keys are: set ${payloadKeysEnv} or ${payloadKeysFileEnv}`);
    return undefined;
  }
  const keys = new Map<string, Uint8Array>();
  for (const { text, source } of parts) {
    for (const [id, key] of parsePayloadKeys(text, source)) {
      if (keys.has(id)) throw new PayloadKeyConfigError(`${source}: key id "${id}" is listed twice`);
      keys.set(id, key);
    }
  }
  if (keys.size === 0) throw new PayloadKeyConfigError(`${parts.map((p) => p.source).join(' and ')} lists no keys`);
  const currentKeyId = env[payloadKeyIdEnv]?.trim() || keys.keys().next().value!;
  if (!keys.has(currentKeyId)) throw new PayloadKeyConfigError(`${payloadKeyIdEnv}="${currentKeyId}" is not among the configured key ids (${[...keys.keys()].join(', ')})`);
  return new AesGcmPayloadCodec({ keys, currentKeyId });
}

/** The data converter for workers and clients: encrypted payloads when keys are configured, Temporal's default otherwise. */
export function dataConverterFromEnvironment(env: Env = process.env): DataConverter {
  const codec = payloadCodecFromEnvironment(env);
  return codec ? { payloadCodecs: [codec] } : {};
}

/** A fresh random key as base64 (for docs, tests and `durable-harness keygen`-like use). */
export function generatePayloadKey(): string {
  return randomBytes(32).toString('base64');
}
