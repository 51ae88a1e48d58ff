/**
 * AES-256-GCM payload encryption for Temporal history. Each payload is serialised whole (metadata and data) and
 * encrypted with the current key; the key id travels in the encrypted payload's metadata, so payloads written
 * under an older key still decode as long as that key is configured (rotation by key id).
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import type { Payload, PayloadCodec } from '@temporalio/common';
import { METADATA_ENCODING_KEY } from '@temporalio/common';
import proto from '@temporalio/proto';

/** The `encoding` metadata of an encrypted payload. */
export const ENCRYPTED_ENCODING = 'binary/encrypted';
/** Metadata key naming the key a payload was encrypted with. */
export const KEY_ID_METADATA = 'encryption-key-id';
/** Metadata key naming the cipher (so a later codec can change it without guessing). */
export const CIPHER_METADATA = 'encryption-cipher';
export const CIPHER = 'AES-256-GCM';

const IV_BYTES = 12;
const TAG_BYTES = 16;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Raised when a payload cannot be decrypted: unknown key id, wrong key or tampered data. The message says which. */
export class PayloadDecryptionError extends Error {
  override readonly name = 'PayloadDecryptionError';
}

export interface EncryptionKeys {
  /** Key id → 32-byte key. */
  readonly keys: ReadonlyMap<string, Uint8Array>;
  /** The key new payloads are encrypted with; must be in `keys`. */
  readonly currentKeyId: string;
}

/** A `PayloadCodec` that encrypts every payload with AES-256-GCM under the current key id. */
export class AesGcmPayloadCodec implements PayloadCodec {
  private readonly keys: ReadonlyMap<string, Uint8Array>;
  readonly currentKeyId: string;

  constructor(options: EncryptionKeys) {
    for (const [id, key] of options.keys) {
      if (key.length !== 32) throw new Error(`payload key "${id}" is ${key.length} bytes; AES-256 needs exactly 32`);
    }
    if (!options.keys.has(options.currentKeyId)) throw new Error(`the current payload key id "${options.currentKeyId}" is not among the configured keys (${[...options.keys.keys()].join(', ') || 'none'})`);
    this.keys = options.keys;
    this.currentKeyId = options.currentKeyId;
  }

  /** The configured key ids (never the keys). */
  get keyIds(): string[] {
    return [...this.keys.keys()];
  }

  async encode(payloads: Payload[]): Promise<Payload[]> {
    const key = this.keys.get(this.currentKeyId)!;
    return payloads.map((payload) => {
      const iv = randomBytes(IV_BYTES);
      const cipher = createCipheriv('aes-256-gcm', key, iv);
      const plain = proto.temporal.api.common.v1.Payload.encode(payload).finish();
      const data = Buffer.concat([iv, cipher.update(plain), cipher.final(), cipher.getAuthTag()]);
      return {
        metadata: {
          [METADATA_ENCODING_KEY]: encoder.encode(ENCRYPTED_ENCODING),
          [KEY_ID_METADATA]: encoder.encode(this.currentKeyId),
          [CIPHER_METADATA]: encoder.encode(CIPHER),
        },
        data,
      };
    });
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => {
      // Payloads written before encryption was switched on (or by a worker without it) pass through.
      if (!isEncrypted(payload)) return payload;
      const keyId = payloadKeyId(payload) ?? '';
      const key = this.keys.get(keyId);
      if (!key) throw new PayloadDecryptionError(`payload was encrypted with key id "${keyId}", which is not configured here (configured: ${this.keyIds.join(', ')}); add it to DURABLE_HARNESS_PAYLOAD_KEYS`);
      const data = Buffer.from(payload.data ?? new Uint8Array());
      if (data.length < IV_BYTES + TAG_BYTES) throw new PayloadDecryptionError(`encrypted payload (key id "${keyId}") is truncated`);
      const decipher = createDecipheriv('aes-256-gcm', key, data.subarray(0, IV_BYTES));
      decipher.setAuthTag(data.subarray(data.length - TAG_BYTES));
      let plain: Buffer;
      try {
        plain = Buffer.concat([decipher.update(data.subarray(IV_BYTES, data.length - TAG_BYTES)), decipher.final()]);
      } catch {
        throw new PayloadDecryptionError(`encrypted payload does not authenticate under key id "${keyId}": wrong key for that id, or the data was altered`);
      }
      return proto.temporal.api.common.v1.Payload.decode(plain);
    });
  }
}

/** Whether a payload is one this codec encrypted. */
export function isEncrypted(payload: Payload): boolean {
  const encoding = payload.metadata?.[METADATA_ENCODING_KEY];
  return encoding !== undefined && encoding !== null && decoder.decode(encoding) === ENCRYPTED_ENCODING;
}

/** The key id an encrypted payload names, if any. */
export function payloadKeyId(payload: Payload): string | undefined {
  const raw = payload.metadata?.[KEY_ID_METADATA];
  return raw ? decoder.decode(raw) : undefined;
}
