import type { ESLint } from 'eslint';
/** The rooms of src/, bottom first. */
export const rooms: readonly string[];
/** The `rooms/order` rule. */
export const roomsPlugin: ESLint.Plugin;
