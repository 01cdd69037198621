export * from './errors.js';
export * from './api.js';
export * from './guest.js';
export * from './frames.js';
export * from './credit.js';
export * from './templates.js';
export * from './validation.js';
export * from './tools.js';
