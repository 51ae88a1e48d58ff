/** Payload encryption: the AES-GCM codec, its keys, and the codec server the Temporal UI decrypts through. */
export * from './aes-gcm-codec.js';
export * from './keys.js';
export * from './codec-server.js';
export * from './codec-auth.js';
