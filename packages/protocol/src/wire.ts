// The zod-free part of the protocol, for the guest agent bundle (kept small: it is parsed
// at every sandbox start).
export * from './errors.js';
export * from './guest.js';
export * from './frames.js';
export * from './credit.js';
export type { FileStat, FileType, ProcessInfo, ProcessOutput, WatchChange, WatchEvent } from './api.js';
export * from './terminals.js';
export * from './tar-check.js';
export type { DirExistsPolicy, DirUploadResult } from './api.js';
export * from './dir-place.js';
