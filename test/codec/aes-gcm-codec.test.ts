/** The payload codec on its own: encryption, rotation by key id, clear errors, keys from the environment. */
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import {
  AesGcmPayloadCodec,
  KEY_ID_METADATA,
  PayloadDecryptionError,
  dataConverterFromEnvironment,
  generatePayloadKey,
  payloadCodecFromEnvironment,
  payloadKeyId,
} from '../../src/codec/index.js';

const key = (b64: string) => Buffer.from(b64, 'base64');
const k1 = generatePayloadKey();
const k2 = generatePayloadKey();
const secret = 'the task text: rotate the prod database password';
const payload = (value: unknown): Payload => defaultPayloadConverter.toPayload(value)!;
const text = (p: Payload) => Buffer.from(p.data ?? []).toString('utf8') + Object.values(p.metadata ?? {}).map((v) => Buffer.from(v ?? []).toString('utf8')).join('');

describe('AesGcmPayloadCodec', () => {
  const codec = new AesGcmPayloadCodec({ keys: new Map([['k1', key(k1)]]), currentKeyId: 'k1' });

  it('hides the payload and its metadata, names the key id, and round-trips exactly', async () => {
    const original = payload({ task: secret, n: 1 });
    const [encrypted] = await codec.encode([original]);
    expect(text(encrypted!)).not.toContain('rotate the prod');
    expect(text(encrypted!)).not.toContain('json/plain');
    expect(payloadKeyId(encrypted!)).toBe('k1');
    expect(Buffer.from(encrypted!.metadata!.encoding!).toString()).toBe('binary/encrypted');
    const [decoded] = await codec.decode([encrypted!]);
    expect(defaultPayloadConverter.fromPayload(decoded!)).toEqual({ task: secret, n: 1 });
  });

  it('uses a fresh nonce per payload: the same value encrypts differently', async () => {
    const [a, b] = await codec.encode([payload(secret), payload(secret)]);
    expect(Buffer.from(a!.data!).equals(Buffer.from(b!.data!))).toBe(false);
  });

  it('passes payloads that were never encrypted through', async () => {
    const plain = payload('written before encryption was on');
    expect(await codec.decode([plain])).toEqual([plain]);
  });

  it('rotation: new payloads use the current key, old ones decode with any configured key', async () => {
    const [old] = await codec.encode([payload('under k1')]);
    const rotated = new AesGcmPayloadCodec({ keys: new Map([['k2', key(k2)], ['k1', key(k1)]]), currentKeyId: 'k2' });
    const [fresh] = await rotated.encode([payload('under k2')]);
    expect(payloadKeyId(fresh!)).toBe('k2');
    const decoded = await rotated.decode([old!, fresh!]);
    expect(decoded.map((p) => defaultPayloadConverter.fromPayload(p))).toEqual(['under k1', 'under k2']);
    // The old codec cannot read what the new key wrote, and says which key is missing.
    await expect(codec.decode([fresh!])).rejects.toThrow(/key id "k2", which is not configured here \(configured: k1\)/);
  });

  it('refuses a wrong key under the same id and altered data', async () => {
    const [encrypted] = await codec.encode([payload(secret)]);
    const impostor = new AesGcmPayloadCodec({ keys: new Map([['k1', key(k2)]]), currentKeyId: 'k1' });
    await expect(impostor.decode([encrypted!])).rejects.toThrow(PayloadDecryptionError);
    const data = Buffer.from(encrypted!.data!);
    data[20] = data[20]! ^ 1;
    await expect(codec.decode([{ ...encrypted!, data }])).rejects.toThrow(/does not authenticate under key id "k1"/);
    const renamed = { ...encrypted!, metadata: { ...encrypted!.metadata, [KEY_ID_METADATA]: Buffer.from('k9') } };
    await expect(codec.decode([renamed])).rejects.toThrow(/key id "k9"/);
  });

  it('rejects keys that are not 32 bytes and a current id without a key', () => {
    expect(() => new AesGcmPayloadCodec({ keys: new Map([['short', Buffer.alloc(16)]]), currentKeyId: 'short' })).toThrow(/16 bytes; AES-256 needs exactly 32/);
    expect(() => new AesGcmPayloadCodec({ keys: new Map([['k1', key(k1)]]), currentKeyId: 'k2' })).toThrow(/"k2" is not among the configured keys \(k1\)/);
  });
});

describe('keys from the environment', () => {
  it('is off without keys', () => {
    expect(payloadCodecFromEnvironment({})).toBeUndefined();
    expect(dataConverterFromEnvironment({})).toEqual({});
  });

  it('reads ID:KEY lists (base64 or hex), the first is current unless DURABLE_HARNESS_PAYLOAD_KEY_ID says otherwise', async () => {
    const hex = Buffer.from(k2, 'base64').toString('hex');
    const codec = payloadCodecFromEnvironment({ DURABLE_HARNESS_PAYLOAD_KEYS: `2025-06:${k1}, 2025-01:${hex}` })!;
    expect(codec.keyIds).toEqual(['2025-06', '2025-01']);
    expect(codec.currentKeyId).toBe('2025-06');
    const older = payloadCodecFromEnvironment({ DURABLE_HARNESS_PAYLOAD_KEYS: `2025-06:${k1},2025-01:${hex}`, DURABLE_HARNESS_PAYLOAD_KEY_ID: '2025-01' })!;
    expect(older.currentKeyId).toBe('2025-01');
    // Same key bytes whichever way they were written.
    const [p] = await older.encode([payload('x')]);
    expect(await codec.decode([p!])).toHaveLength(1);
  });

  it('reads a key file (a mounted secret) beside the variable', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-keys-'));
    const file = path.join(dir, 'keys');
    writeFileSync(file, `new:${k2}\nold:${k1}\n`);
    const codec = payloadCodecFromEnvironment({ DURABLE_HARNESS_PAYLOAD_KEYS_FILE: file })!;
    expect(codec.keyIds).toEqual(['new', 'old']);
    expect(() => payloadCodecFromEnvironment({ DURABLE_HARNESS_PAYLOAD_KEYS_FILE: path.join(dir, 'missing') })).toThrow(/cannot read .*missing \(ENOENT\)/);
  });

  it('says what is wrong without printing a key', () => {
    const bad = (env: Record<string, string>) => {
      try {
        payloadCodecFromEnvironment(env);
      } catch (e) {
        expect((e as Error).message).not.toContain(k1);
        return (e as Error).message;
      }
      throw new Error('expected an error');
    };
    expect(bad({ DURABLE_HARNESS_PAYLOAD_KEYS: k1 })).toMatch(/entries look like ID:KEY/);
    expect(bad({ DURABLE_HARNESS_PAYLOAD_KEYS: `a:${k1.slice(0, 20)}` })).toMatch(/key "a" is not 32 bytes/);
    expect(bad({ DURABLE_HARNESS_PAYLOAD_KEYS: `a b:${k1}` })).toMatch(/entries look like ID:KEY/);
    expect(bad({ DURABLE_HARNESS_PAYLOAD_KEYS: `a:${k1},a:${k2}` })).toMatch(/"a" is listed twice/);
    expect(bad({ DURABLE_HARNESS_PAYLOAD_KEYS: `a:${k1}`, DURABLE_HARNESS_PAYLOAD_KEY_ID: 'b' })).toMatch(/"b" is not among the configured key ids \(a\)/);
    expect(bad({ DURABLE_HARNESS_PAYLOAD_KEY_ID: 'b' })).toMatch(/no keys are/);
  });
});
