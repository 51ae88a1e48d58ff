/** `storeText`: a large text (a chat reply) into the blob store. */
import type { TextRef } from '../blobs/index.js';
import type { Deps } from './deps.js';

/** Stores the text when it is long and returns its reference (the text itself when short). */
export async function storeText(deps: Deps, input: { text: string }): Promise<TextRef> {
  return deps.checked(input.text);
}
