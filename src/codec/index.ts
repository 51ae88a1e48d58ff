export * from './aes-gcm-codec.js';
export * from './keys.js';
export * from './codec-server.js';
export * from './codec-auth.js';
