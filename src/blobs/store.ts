/** The blob store: texts stored once by content hash, so workflow history carries a reference, not the text. */
import { createHash } from 'node:crypto';
import type { BlobRecord, Ledger } from '../ledger/types.js';
import { PREVIEW_CHARS, isBlobRef, type BlobRef, type TextRef } from '../contracts/text-ref.js';

/** Content-addressed storage for large texts. `put` is idempotent: the same text always gets the same key. */
export interface BlobStore {
  put(content: string, kind?: BlobRecord['kind']): Promise<string>;
  /** The text stored under `hash`; throws BlobMissingError when there is none. */
  get(hash: string): Promise<string>;
}

/** A reference names a blob the store does not have (a different ledger, or one that lost data). */
export class BlobMissingError extends Error {
  override readonly name = 'BlobMissingError';
  readonly code = 'BlobMissing' as const;
}

export function sha256(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

/** The default blob store: a table of the run ledger, so texts live beside the runs that made them. */
export class LedgerBlobStore implements BlobStore {
  constructor(private readonly ledger: Ledger) {}

  async put(content: string, kind: BlobRecord['kind'] = 'text'): Promise<string> {
    const hash = sha256(content);
    await this.ledger.putBlob({ hash, kind, content });
    return hash;
  }

  async get(hash: string): Promise<string> {
    const content = await this.ledger.getBlob(hash);
    if (content === undefined) throw new BlobMissingError(`blob ${hash} is not in the ledger: was the ledger replaced while runs were in flight?`);
    return content;
  }
}

/** Keeps `text` inline when it has at most `limit` characters; otherwise stores it and returns a reference. */
export async function claimCheck(store: BlobStore, text: string, limit: number): Promise<TextRef> {
  if (text.length <= limit) return text;
  const blob = await store.put(text);
  return { blob, bytes: Buffer.byteLength(text, 'utf8'), preview: text.slice(0, PREVIEW_CHARS) } satisfies BlobRef;
}

/** The text a reference stands for. */
export async function resolveText(store: BlobStore, text: TextRef): Promise<string> {
  return isBlobRef(text) ? store.get(text.blob) : text;
}
