/** The per-run egress gateway: the sandbox's one door to its model vendor and allowlist (docs/network.md). */
export { openGateway, GatewayStartError, type Gateway, type GatewayOptions } from './gateway.js';
export { defaultLimits, type GatewayLimits } from './bounds.js';
export { createMeter, maxMeteredJsonBytes, type Meter, type Metered } from './meter.js';
export { createLoopback, type Loopback, type LoopbackData, type LoopbackOptions } from './loopback.js';
