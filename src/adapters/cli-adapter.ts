/**
 * Transition only, until the two-way sessions (src/adapters/two-way/) replace the per-line state machines of
 * acp-client.ts, codex-app-server.ts and pi-rpc.ts: the `LineState` those still take, built over a `LineIo`.
 */
import type { DriverTurn, LineIo } from './driver.js';
import type { OversizedLine } from '../sandbox/line-queue.js';

export type { WireAnswer } from './driver.js';

/** Per-turn state the legacy two-way mappers take. */
export interface LineState {
  readonly turn: number;
  readonly resumeSessionId: string | undefined;
  readonly fork: boolean;
  readonly attemptId: string | undefined;
  /** Free space for the mapper to carry facts between lines of one turn. */
  readonly scratch: Record<string, unknown>;
  readonly send: (line: string) => void;
  readonly notes: string[];
  followUps: number;
  usageEvents: number;
  readonly output: { unknownLines: number; unknownReported: number; tooLargeLines: number; tooLargeReported: number; largest: OversizedLine | undefined };
}

/** A fresh `LineState` for one turn. */
export function lineStateFor(turn: DriverTurn, io: LineIo): LineState {
  return {
    turn: turn.turn,
    resumeSessionId: turn.resumeSessionId,
    fork: turn.fork,
    attemptId: turn.attemptId,
    scratch: {},
    send: io.send,
    notes: [],
    followUps: 0,
    usageEvents: 0,
    output: { unknownLines: 0, unknownReported: 0, tooLargeLines: 0, tooLargeReported: 0, largest: undefined },
  };
}
