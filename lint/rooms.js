// The rooms of src/ and their order: a room imports only the rooms below it (earlier in this list), never one above.
// The words every room shares live at the bottom, in src/contracts. Files directly in src/ are the room `worker`.
import path from 'node:path';

export const rooms = [
  'contracts', // the run's vocabulary: usage, prices and cost, money, failure types, permissions, run and turn words, prompts, text refs
  'ledger', // accounting rows and their stores (SQLite, PostgreSQL)
  'blobs', // the content-addressed blob store
  'envelope', // the next-step envelope: parse and validate
  'permissions', // permission policy, gate and approval broker
  'operators', // operator identities, keys and signed decisions
  'codec', // payload encryption and the codec server
  'sandbox', // local and Docker sandboxes: executors, fs, containment
  'git', // a run's repository: mirrors, checkouts, the deliverable commit (hostile work trees)
  'gateway', // the per-run egress gateway: the sandbox's one door to its vendor and allowlist
  'adapters', // harness drivers and the turn engine
  'actions', // turn-end actions run in the sandbox
  'catalog', // the catalog file: schema, loading, watching
  'spec', // a run's frozen spec and policy
  'credentials', // credential grants and redaction
  'workflows', // the deterministic run loop (Temporal workflow code)
  'temporal', // Temporal server and connection helpers
  'observability', // metrics, traces, logs
  'activities', // the activities the workflow schedules
  'worker', // src/*.ts: the worker's composition root
  'client', // starting and watching runs from a service
  'cli', // the command line
];

/** Type-only imports that may point up: workflow code names its activities' types to proxy them (nothing runs). */
const typeImportsUp = { workflows: ['activities'] };

const rank = new Map(rooms.map((room, i) => [room, i]));

function roomOf(file, srcDir) {
  const rel = path.relative(srcDir, file);
  if (rel.startsWith('..') || path.isAbsolute(rel)) return undefined;
  const parts = rel.split(path.sep);
  return parts.length === 1 ? 'worker' : parts[0];
}

const orderRule = {
  meta: {
    type: 'problem',
    docs: { description: 'src/ rooms import only the rooms below them (lint/rooms.js)' },
    schema: [],
  },
  create(context) {
    const srcDir = path.join(context.cwd, 'src');
    const from = roomOf(context.filename, srcDir);
    if (from === undefined) return {};
    if (!rank.has(from)) {
      return {
        Program(node) {
          context.report({ node, message: `src/${from} is not in the room order: add it to lint/rooms.js where it belongs.` });
        },
      };
    }
    const check = (node, source, typeOnly) => {
      if (typeof source !== 'string' || !source.startsWith('.')) return;
      const to = roomOf(path.resolve(path.dirname(context.filename), source), srcDir);
      if (to === undefined || to === from) return;
      if (!rank.has(to)) {
        context.report({ node, message: `src/${to} is not in the room order: add it to lint/rooms.js where it belongs.` });
        return;
      }
      if (rank.get(to) < rank.get(from)) return;
      if (typeOnly && typeImportsUp[from]?.includes(to)) return;
      context.report({
        node,
        message:
          `src/${from} must not import src/${to}: ${to} is a room above ${from} (lint/rooms.js). ` +
          'Move the shared word down to src/contracts, or the code that needs it up.',
      });
    };
    const typeOnly = (node) =>
      node.importKind === 'type' ||
      node.exportKind === 'type' ||
      (node.specifiers?.length > 0 && node.specifiers.every((s) => s.importKind === 'type' || s.exportKind === 'type'));
    return {
      ImportDeclaration: (node) => check(node, node.source.value, typeOnly(node)),
      ExportNamedDeclaration: (node) => node.source && check(node, node.source.value, typeOnly(node)),
      ExportAllDeclaration: (node) => check(node, node.source.value, node.exportKind === 'type'),
      ImportExpression: (node) => node.source.type === 'Literal' && check(node, node.source.value, false),
      TSImportType: (node) => {
        const value = node.argument?.literal?.value ?? node.argument?.value;
        check(node, value, true);
      },
    };
  },
};

export const roomsPlugin = { rules: { order: orderRule } };
