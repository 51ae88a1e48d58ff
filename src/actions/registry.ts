/** The action registry: built-in and custom action implementations by name. */
import type { ActionDefinition } from './types.js';

/** Holds action implementations; the catalog refers to them by implementation key. */
export class ActionRegistry {
  private readonly actions = new Map<string, ActionDefinition>();

  /** Adds an action; registering the same name twice is a programming error. */
  register<P>(action: ActionDefinition<P>): this {
    if (this.actions.has(action.name)) throw new Error(`action "${action.name}" is already registered`);
    this.actions.set(action.name, action as unknown as ActionDefinition);
    return this;
  }

  /** The action with this name, or undefined. */
  get(name: string): ActionDefinition | undefined {
    return this.actions.get(name);
  }

  /** Whether an action with this name is registered. */
  has(name: string): boolean {
    return this.actions.has(name);
  }

  /** All actions, sorted by name so listings are deterministic. */
  list(): ActionDefinition[] {
    return [...this.actions.values()].sort((a, b) => a.name.localeCompare(b.name));
  }

  /** Registered names, sorted. */
  names(): string[] {
    return this.list().map((a) => a.name);
  }
}
