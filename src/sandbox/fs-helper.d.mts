/** Types of fs-helper.mjs (plain JavaScript so the same text runs inside sandbox images). */

export type WorkspaceFsErrorCode =
  | 'PathEscape'
  | 'SymlinkRefused'
  | 'NotFound'
  | 'NotADirectory'
  | 'IsADirectory'
  | 'NotAFile'
  | 'Exists'
  | 'PermissionDenied'
  | 'Io';

export class WorkspaceFsError extends Error {
  constructor(code: WorkspaceFsErrorCode, message: string);
  readonly code: WorkspaceFsErrorCode;
}

export type EntryType = 'file' | 'directory' | 'symlink' | 'other';

/** An open workspace root. */
export interface OpenWorkspace {
  readonly fd: number;
  readonly real: string;
  readonly uid: number;
  readonly gid: number;
  close(): void;
}

export function pathParts(rel: string): string[];
export function openWorkspace(root: string): OpenWorkspace;
export function statAt(ws: OpenWorkspace, rel: string): { type: EntryType; size: number } | undefined;
export function readAt(ws: OpenWorkspace, rel: string, maxBytes: number, offset?: number): { data: Buffer; size: number };
export function writeAt(ws: OpenWorkspace, rel: string, data: string | Uint8Array, options?: { createParents?: boolean; mode?: number }): { bytes: number };
export function listAt(ws: OpenWorkspace, rel: string): { name: string; type: EntryType }[];
export function mkdirAt(ws: OpenWorkspace, rel: string, options?: { recursive?: boolean }): void;
export function renameAt(ws: OpenWorkspace, rel: string, newName: string): void;
export function handle(root: string, request: Record<string, unknown>): unknown;
export function serve(root: string): void;
