/**
 * The ids of a run — workflow id, tenant, user, agent — and how a sub-agent's workflow id is made. Ids become
 * directory names (a file name holds 255 bytes), search attribute values and log fields, so every one is short and
 * printable; a sub-agent's id stays within the limit however deep the tree. Pure: used by the workflow and the client.
 */

/** The longest id of a run (workflow id, tenant id, user id, agent name), in characters. */
export const maxIdLength = 200;

/** Who names each id and what it may contain. */
const idRules = {
  workflowId: { pattern: /^[A-Za-z0-9][A-Za-z0-9._:-]*$/, allowed: 'a letter or digit, then letters, digits, ".", "_", ":" and "-"' },
  // Tenant and user ids name agent-user workspaces: the sandbox's directory-name rule (src/sandbox/workspace.ts).
  identity: { pattern: /^(?!\.\.?$)[A-Za-z0-9._@:+=,-]+$/, allowed: 'letters, digits and "." "_" "@" ":" "+" "=" "," "-" (not "." or "..")' },
  agent: { pattern: /^[a-z0-9][a-z0-9._-]*$/, allowed: 'lowercase letters, digits, ".", "_" and "-", as in the catalog' },
} as const;

/** What is wrong with `id` as a `kind` id, in words that follow its name (`tenantId: …`), or undefined when nothing is. */
export function idProblem(id: string, kind: keyof typeof idRules): string | undefined {
  const rule = idRules[kind];
  if (id.length === 0) return 'must not be empty';
  if (id.length > maxIdLength) return `${id.length} characters, over the limit of ${maxIdLength}: use a shorter id`;
  if (!rule.pattern.test(id)) return `${JSON.stringify(id.length > 60 ? `${id.slice(0, 60)}…` : id)} has characters an id may not have: use ${rule.allowed} (at most ${maxIdLength})`;
  return undefined;
}

/**
 * The workflow id of the sub-agent a run starts at `iteration`: `<parent>.sub-<iteration>` while that fits, else the
 * parent's opening, a hash of the whole parent id and `.sub-<iteration>` — never longer than `maxIdLength`, unique
 * (a parent's ids differ by iteration, different parents by the hash) and still readable from the root.
 */
export function subAgentWorkflowId(parentId: string, iteration: number): string {
  const plain = `${parentId}.sub-${iteration}`;
  if (plain.length <= maxIdLength) return plain;
  const tail = `=${shortHash(parentId)}.sub-${iteration}`;
  return `${parentId.slice(0, maxIdLength - tail.length)}${tail}`;
}

/** A 53-bit hash of `text` as 14 hex digits (cyrb53): deterministic, no Node built-ins (workflow code). */
function shortHash(text: string): string {
  let h1 = 0xdeadbeef;
  let h2 = 0x41c6ce57;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 2654435761);
    h2 = Math.imul(h2 ^ c, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return (4294967296 * (2097151 & h2) + (h1 >>> 0)).toString(16).padStart(14, '0');
}
