/** Texts that travel through workflow history inline when small and by reference when large. Pure: safe in workflows. */

/** A text kept in the blob store (content-addressed), passed by reference instead of by value. */
export interface BlobRef {
  /** sha256 (hex) of the text: its key in the blob store. */
  readonly blob: string;
  /** Its size in UTF-8 bytes. */
  readonly bytes: number;
  /** Its opening characters, for status views and the Temporal UI. */
  readonly preview: string;
}

/** A text inline when small, by reference when large (claim check). */
export type TextRef = string | BlobRef;

/** How many characters a preview keeps. */
export const PREVIEW_CHARS = 200;

export function isBlobRef(text: TextRef | undefined): text is BlobRef {
  return typeof text === 'object' && text !== null && typeof text.blob === 'string';
}

/** A short, readable form of a text: the text itself when short, else its opening with the full size. */
export function previewOf(text: TextRef, max = PREVIEW_CHARS): string {
  if (isBlobRef(text)) return `${text.preview}… (${text.bytes} bytes in all)`;
  return text.length > max ? `${text.slice(0, max)}… (${text.length} characters in all)` : text;
}
