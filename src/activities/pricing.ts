/** Cost of a turn from the harness's price table (USD per million tokens). */
import type { Usage } from '../adapters/types.js';
import type { Prices } from '../catalog/schema.js';

export function turnPriceUsd(prices: Prices, usage: Usage): number {
  const perToken = (perMillion: number) => perMillion / 1_000_000;
  return (
    usage.input * perToken(prices.input) +
    usage.output * perToken(prices.output) +
    usage.cacheRead * perToken(prices.cacheRead) +
    usage.cacheWrite * perToken(prices.cacheWrite)
  );
}
