/** Money as operators read it: US dollars rounded to micro-dollars, so float noise never reaches a result. */

/** Rounds a USD amount to 6 decimals (micro-dollars); `0.00018899999999999999` → `0.000189`. */
export function roundUsd(usd: number): number {
  if (!Number.isFinite(usd)) return usd;
  return Math.round(usd * 1e6) / 1e6;
}
