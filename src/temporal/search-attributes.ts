/** Registers the run search attributes on a namespace, once; safe to call on every start. */
import type { Connection } from '@temporalio/client';
import proto from '@temporalio/proto';

const { temporal } = proto;
type IndexedValueType = proto.temporal.api.enums.v1.IndexedValueType;
import { allSearchAttributes } from '../workflows/search-attributes.js';

const indexedType = {
  KEYWORD: temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
  DOUBLE: temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_DOUBLE,
  INT: temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_INT,
} as const;

export async function ensureSearchAttributes(connection: Connection, namespace: string): Promise<void> {
  const existing = await connection.operatorService.listSearchAttributes({ namespace });
  const known = new Set(Object.keys(existing.customAttributes ?? {}));
  const missing = allSearchAttributes.filter((key) => !known.has(key.name));
  if (missing.length === 0) return;
  const searchAttributes: Record<string, IndexedValueType> = {};
  for (const key of missing) searchAttributes[key.name] = indexedType[key.type as keyof typeof indexedType];
  try {
    await connection.operatorService.addSearchAttributes({ namespace, searchAttributes });
  } catch (err) {
    // Another worker may have registered them at the same moment.
    if (!/already exists/i.test(String(err))) throw err;
  }
}
