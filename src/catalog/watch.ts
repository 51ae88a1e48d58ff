/** A catalog read from a file and reloaded when the file changes; shared by the CLI worker and the activity worker. */
import { statSync } from 'node:fs';
import { loadCatalog } from './load.js';
import type { Catalog } from './schema.js';

/**
 * Loads `file` now (throwing if it is broken) and returns a source that reloads it when its mtime changes.
 * A broken edit keeps the last good catalog and is reported through `onError`.
 */
export function watchCatalogFile(file: string, onError: (error: Error) => void): () => Catalog {
  let current = loadCatalog(file);
  let mtime = statSync(file).mtimeMs;
  return () => {
    const now = statSync(file).mtimeMs;
    if (now !== mtime) {
      mtime = now;
      try {
        current = loadCatalog(file);
      } catch (e) {
        onError(e as Error);
      }
    }
    return current;
  };
}
